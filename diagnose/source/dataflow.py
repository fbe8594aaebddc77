"""Backward data-flow with libcst: from a key variable to the line a user can change.

Paper §4.3: once the key variable is known (the branch condition or call target that made
the two programs reach different kernels, or the global knob that steered native
dispatch), Magneton follows its value backwards — assignment chains inside a function,
`self.x` across a class's methods, parameters to the caller's arguments (from the recorded
call stacks), settings objects' attributes to the keyword argument that built them, module
level flags and environment variables — and stops at a literal in the user's code or at a
library default (then it says where to override it).

Parsed source (`SourceIndex`), whose code a file is, and literal helpers live in
`source/index.py`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst

from magneton.knowledge.base import Knob
from magneton.model import KeyVariableInfo, OriginInfo

from .index import (
    NOT_LITERAL,
    SourceIndex,
    Span,
    dotted_name,
    is_library_file,
    is_literal,
    literal_value,
    params,
    same_value,
    source_index,
)

# --------------------------------------------------------------------------------------
# Backward data-flow
# --------------------------------------------------------------------------------------

MAX_HOPS = 24


@dataclass
class Hop:
    """One step of the backward slice: where the followed expression lives and why."""

    file: str
    line: int
    code: str  # the statement on that line
    expr: str  # the expression followed
    note: str
    values: dict[str, str] = field(default_factory=dict)  # side -> observed value (re-run)

    def to_json(self) -> dict:
        d = {"file": self.file, "line": self.line, "code": self.code, "expr": self.expr}
        d["note"] = self.note
        if self.values:
            d["values"] = dict(self.values)
        return d


@dataclass
class Origin:
    """Where the key variable's value is set — what a user edits to change it."""

    kind: str  # "config" | "api-argument" | "global-flag" | "env" | "code"
    variable: str
    file: str | None = None
    line: int | None = None
    code: str | None = None  # the statement
    value: str | None = None  # source text of the value (a literal when patchable)
    span: Span | None = None  # the value node: what a patch replaces
    library_default: bool = False  # the value is a library default (file/line point there)
    insert: dict | None = None  # where to add `keyword=value` when the user never set it
    env_var: str | None = None
    # the user's name that carries the value to `variable` (`ATTN` in
    # `ATTN = "sdpa"` ... `BertConfig(attn_implementation=ATTN)`): file/line/span point
    # at its assignment, which is what the patch edits
    assigned_to: str | None = None
    # kind "command-line": the argparse option that set the value, and where its
    # `add_argument(..., default=LITERAL)` default is ({"file", "line", "span", "value"})
    option: str | None = None
    option_default: dict | None = None
    note: str = ""

    def info(self) -> OriginInfo:
        """The part a finding's root cause carries (no spans, no patch anchors)."""
        return OriginInfo(
            kind=self.kind,
            variable=self.variable,
            file=self.file,
            line=self.line,
            code=self.code,
            value=self.value,
            library_default=self.library_default,
            env_var=self.env_var,
            assigned_to=self.assigned_to,
            option=self.option,
            note=self.note,
        )


@dataclass
class DataFlow:
    hops: list[Hop] = field(default_factory=list)
    terminal: str = ""  # what stopped the walk: "config-attribute", "knob", "literal", ...
    attribute: str | None = None  # config attribute / keyword name reached
    knob_name: str | None = None  # dotted global flag reached (e.g. torch.backends...)
    unresolved: str = ""


@dataclass
class KeyVariable:
    """The variable whose value made the two sides differ (diagnose/cause/keyvar.py finds
    it), and where each side's value came from (this module's backward walk)."""

    kind: str  # "call-target" | "branch" | "knob" | "code" | "args" | "unknown"
    expr: str | None = None
    file: str | None = None
    line: int | None = None
    values: dict[str, str] = field(default_factory=dict)
    knob: Knob | None = None
    flow: DataFlow | None = None
    origins: dict[str, Origin | None] = field(default_factory=dict)
    rerun: dict = field(default_factory=dict)
    note: str = ""

    def info(self) -> KeyVariableInfo:
        """The part of the key variable that a finding's root cause carries."""
        return KeyVariableInfo(
            kind=self.kind,
            expr=self.expr,
            file=self.file,
            line=self.line,
            values=self.values,
            knob=self.knob.key if self.knob is not None else None,
            rerun=self.rerun,
            note=self.note,
        )


@dataclass
class SideContext:
    """What the walk needs to know about one side once it leaves shared library code."""

    script: str
    files: list[str]  # user files to search for settings
    frames: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, function)
    observed: str | None = None  # the key variable's value on this side (re-run)


@dataclass
class SliceContext:
    """Both sides of a finding, walked in lockstep through shared library code.

    `values` are what the key-variable re-run observed: (file, line, expr) → {side: repr}.
    They decide which operand of a call to follow (the one whose value differs between
    the two sides) so the walk follows the data that actually steered the dispatch.
    """

    sides: dict[str, SideContext]
    values: dict[tuple[str, int, str], dict[str, str]] = field(default_factory=dict)
    call_sites: dict[str, dict[tuple[str, int], tuple[str, int]]] = field(default_factory=dict)
    config_attributes: frozenset[str] = frozenset()  # knob attributes known to the KB
    knob_names: frozenset[str] = frozenset()  # global knobs known to the KB (dotted names)


_CONFIG_HINTS = ("config", "cfg", "hparams", "settings", "options", "opts", "args")


def _norm_attr(name: str) -> str:
    return name.lstrip("_")


def _is_config_base(node: cst.BaseExpression) -> bool:
    """`config`, `self.config`, `model.config`, `args` ... — an object of settings."""
    last = ""
    if isinstance(node, cst.Name):
        last = node.value
    elif isinstance(node, cst.Attribute):
        last = node.attr.value
    low = last.lower()
    return any(h in low for h in _CONFIG_HINTS)


def _first_param(fn: cst.FunctionDef) -> str | None:
    ps = fn.params.params or fn.params.posonly_params
    return ps[0].name.value if ps else None


def _assigned_value(idx: SourceIndex, target: cst.CSTNode) -> cst.BaseExpression | None:
    """The expression assigned to `target` by its enclosing assignment statement."""
    for anc in idx.ancestors(target):
        if isinstance(anc, cst.Assign):
            if len(anc.targets) == 1 and isinstance(anc.targets[0].target, (cst.Tuple, cst.List)):
                elements = anc.targets[0].target.elements
                if isinstance(anc.value, (cst.Tuple, cst.List)) and len(anc.value.elements) == len(
                    elements
                ):
                    for el, val in zip(elements, anc.value.elements, strict=True):
                        if el.value is target:
                            return val.value
            return anc.value
        if isinstance(anc, cst.AnnAssign):
            return anc.value
        if isinstance(anc, cst.AugAssign):
            return anc.value
        if isinstance(anc, (cst.For, cst.CompFor)):
            return anc.iter
        if isinstance(anc, (cst.WithItem,)):
            return anc.item
        if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return None
    return None


# One hop of the backward walk: where to continue (file, function, node) and why.
_Step = tuple[SourceIndex, "cst.FunctionDef | None", cst.BaseExpression, str]


class BackwardSlicer:
    """Follow a key variable back to the line a user can change (paper §4.3, Algorithm 2).

    Rules, in order: a literal stops the walk; a local name goes to its reaching
    assignment (ScopeProvider); a parameter goes to the caller's argument (recorded call
    stacks, or call sites captured by the re-run for constructors); `self.x` goes to the
    assignments of `x` in the class's methods; `container[key]` follows the key; a call
    follows the operand whose observed value differs between the sides (else the most
    setting-like one); an attribute of a settings object (`config.activation_function`)
    ends at the keyword argument or assignment that set it in the user's code; a dotted
    global flag ends at the knob search.
    """

    def __init__(self, ctx: SliceContext):
        self.ctx = ctx

    # ---- entry points ------------------------------------------------------------------

    def from_node(self, idx: SourceIndex, node: cst.BaseExpression, note: str) -> DataFlow:
        flow = DataFlow()
        fn = self._function_of(idx, node)
        self._walk(idx, fn, node, note, flow)
        return flow

    # ---- helpers ----------------------------------------------------------------------

    def _function_of(self, idx: SourceIndex, node: cst.CSTNode) -> cst.FunctionDef | None:
        fn = idx.enclosing(node, cst.FunctionDef)
        return fn if isinstance(fn, cst.FunctionDef) else None

    def _values(self, idx: SourceIndex, line: int, code: str) -> dict[str, str]:
        return dict(self.ctx.values.get((idx.path, line, code), {}))

    def _hop(self, flow: DataFlow, idx: SourceIndex, node: cst.CSTNode, note: str) -> None:
        line = idx.line_of(node)
        code = idx.code(node)
        flow.hops.append(
            Hop(
                file=idx.path,
                line=line,
                code=idx.line_text(line),
                expr=" ".join(code.split()),
                note=note,
                values=self._values(idx, line, code),
            )
        )

    def _walk(
        self,
        idx: SourceIndex,
        fn: cst.FunctionDef | None,
        node: cst.BaseExpression,
        note: str,
        flow: DataFlow,
    ) -> None:
        seen: set[tuple[str, Span]] = set()
        for _ in range(MAX_HOPS):
            # the whole range: a condition and its first operand start at the same place
            # (`torch.is_grad_enabled() and ...`), and stepping from one to the other is
            # no loop
            key = (idx.path, idx.span(node))
            if key in seen:
                flow.unresolved = "the data-flow loops back on itself"
                return
            seen.add(key)
            self._hop(flow, idx, node, note)
            if is_literal(node):
                test = _selecting_test(idx, node) if is_library_file(idx.path) else None
                if test is None:
                    flow.terminal = "literal"
                    return
                # A library's literal is no line a user can change: which literal the
                # variable got was decided by the branch it sits in (torch's
                # `elif torch.is_grad_enabled() and ...: why_not = "grad is enabled..."`),
                # so the walk continues through that branch's condition.
                node, note = test, "condition that chose this value"
                continue
            step = self._step(idx, fn, node, flow)
            if step is None:
                return
            idx, fn, node, note = step
        flow.unresolved = "the data-flow is longer than Magneton follows"

    def _step(
        self, idx: SourceIndex, fn: cst.FunctionDef | None, node: cst.BaseExpression, flow: DataFlow
    ) -> _Step | None:
        """One hop back from `node` to where its value comes from, or None when the walk
        ends here (`flow` then says how: a terminal, or why it is unresolved)."""
        if isinstance(node, cst.Name):
            step = self._resolve_name(idx, fn, node)
            if step is None:
                flow.terminal = "name"
                flow.unresolved = f"{node.value!r} is not assigned in code Magneton can read"
            return step
        if isinstance(node, cst.Attribute):
            return self._attribute_step(idx, fn, node, flow)
        if isinstance(node, cst.Subscript):
            return self._subscript_step(idx, fn, node, flow)
        if isinstance(node, cst.Call):
            nxt = self._pick_operand(idx, node)
            if nxt is None:
                flow.terminal = "call"
                flow.unresolved = f"the value is computed by {idx.code(node.func)}(...)"
                return None
            return idx, fn, nxt, f"argument of {idx.code(node.func)}(...)"
        if isinstance(node, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)):
            operands = [
                n
                for n in idx.walk(node)
                if isinstance(n, (cst.Name, cst.Attribute, cst.Subscript)) and not is_literal(n)
            ]
            operands = [n for n in operands if not self._inside_other(n, operands)]
            choice = self._choose(idx, operands)
            if choice is None:
                flow.unresolved = "the condition reads no variable"
                return None
            return idx, fn, choice, "operand of the condition"
        if isinstance(node, cst.IfExp):
            return idx, fn, node.test, "condition of the conditional expression"
        flow.unresolved = f"cannot follow a {type(node).__name__} expression"
        return None

    def _attribute_step(
        self, idx: SourceIndex, fn: cst.FunctionDef | None, node: cst.Attribute, flow: DataFlow
    ) -> _Step | None:
        attr = node.attr.value
        dotted = dotted_name(node)
        qnames = idx.qualified_names(node) if dotted else set()
        if any(q.startswith(("torch.", "os.environ")) for q in qnames):
            flow.terminal = "knob"
            flow.knob_name = sorted(qnames)[0]
            return None
        if fn is not None and isinstance(node.value, cst.Name):
            if node.value.value == _first_param(fn) and idx.class_of(fn) is not None:
                step = self._self_attribute(idx, fn, attr)
                if step is not None:
                    return step
        if _is_config_base(node.value) or _norm_attr(attr) in self.ctx.config_attributes:
            flow.terminal = "config-attribute"
            flow.attribute = attr
            return None
        # an attribute of some other object: its value comes from that object
        return idx, fn, node.value, f"object whose .{attr} is read"

    def _subscript_step(
        self, idx: SourceIndex, fn: cst.FunctionDef | None, node: cst.Subscript, flow: DataFlow
    ) -> _Step | None:
        el = node.slice[0].slice if node.slice else None
        if not isinstance(el, cst.Index):
            flow.unresolved = "a slice expression selects the value"
            return None
        key_text = literal_value(el.value)
        if isinstance(key_text, str) and key_text.isidentifier():
            # `group["foreach"]`, `kwargs["attn_implementation"]`: a setting stored under
            # its name; following the key would end at the string itself. It was set by
            # a keyword or dict entry of that name, as a config attribute is.
            flow.terminal = "config-attribute"
            flow.attribute = key_text
            return None
        return idx, fn, el.value, f"key looked up in {idx.code(node.value)}"

    @staticmethod
    def _inside_other(n: cst.CSTNode, others: Sequence[cst.CSTNode]) -> bool:
        return any(o is not n and any(c is n for c in _descendants(o)) for o in others)

    def _choose(
        self, idx: SourceIndex, cands: Sequence[cst.BaseExpression]
    ) -> cst.BaseExpression | None:
        """The operand whose observed values differ between sides; else the most
        setting-like one (known knob > config attribute > self attribute > parameter >
        local)."""
        if not cands:
            return None
        for c in cands:
            vals = self._values(idx, idx.line_of(c), idx.code(c))
            if len(set(vals.values())) > 1:
                return c
        return max(cands, key=lambda c: self._score(idx, c))

    def _score(self, idx: SourceIndex, node: cst.BaseExpression) -> int:
        if is_literal(node):
            return 0
        if isinstance(node, cst.Attribute) and idx.qualified_names(node) & self.ctx.knob_names:
            # a global knob the KB knows (`torch.is_grad_enabled` in
            # `torch.is_grad_enabled() and any(x.requires_grad ...)`): the one operand of
            # the condition that is a setting, whatever order the condition reads them in
            return 12
        if isinstance(node, cst.Attribute):
            if (
                _is_config_base(node.value)
                or _norm_attr(node.attr.value) in self.ctx.config_attributes
            ):
                return 10
            return 5
        if isinstance(node, cst.Name):
            fn = self._function_of(idx, node)
            if fn is not None:
                for p in params(fn):
                    if p.name.value == node.value:
                        return 4
            scope = idx.scopes.get(node)
            if scope is not None:
                for a in scope.assignments[node.value]:
                    if isinstance(
                        a.node, (cst.FunctionDef, cst.ClassDef, cst.Import, cst.ImportFrom)
                    ):
                        return -1
            return 3
        return 1

    def _pick_operand(self, idx: SourceIndex, call: cst.Call) -> cst.BaseExpression | None:
        cands = [a.value for a in call.args if not is_literal(a.value)]
        if isinstance(call.func, cst.Attribute):
            cands.append(call.func.value)  # the receiver of a method call
        return self._choose(idx, cands)

    def _resolve_name(self, idx: SourceIndex, fn: cst.FunctionDef | None, node: cst.Name):
        scope = idx.scopes.get(node)
        if scope is None:
            return None
        line = idx.line_of(node)
        best = None
        for a in scope.assignments[node.value]:
            target = a.node
            if isinstance(target, cst.Param):
                return self._parameter(idx, fn, target)
            if isinstance(target, (cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef)):
                continue
            if target not in idx.positions:
                continue
            tline = idx.line_of(target)
            in_same_fn = fn is not None and idx.enclosing(target, cst.FunctionDef) is fn
            if in_same_fn and tline > line:
                continue  # assigned after the use: not the reaching definition
            if best is None or tline > idx.line_of(best):
                best = target
        if best is None:
            return None
        value = _assigned_value(idx, best)
        if value is None:
            return None
        return idx, idx.enclosing(best, cst.FunctionDef), value, f"{node.value} assigned here"

    def _self_attribute(self, idx: SourceIndex, fn: cst.FunctionDef, attr: str):
        cls = idx.class_of(fn)
        if cls is None:
            return None
        found: list[tuple[int, cst.FunctionDef, cst.BaseExpression]] = []
        for m in idx.methods(cls):
            self_name = _first_param(m)
            if self_name is None:
                continue
            for n in idx.walk(m):
                targets: list[cst.BaseExpression]
                if isinstance(n, cst.Assign):
                    targets, assigned = [t.target for t in n.targets], n.value
                elif isinstance(n, cst.AnnAssign) and n.value is not None:
                    targets, assigned = [n.target], n.value
                else:
                    continue
                for t in targets:
                    if (
                        isinstance(t, cst.Attribute)
                        and t.attr.value == attr
                        and isinstance(t.value, cst.Name)
                        and t.value.value == self_name
                    ):
                        rank = 0 if m.name.value == "__init__" else 1
                        found.append((rank, m, assigned))
        if not found:
            return None
        found.sort(key=lambda f: (f[0], idx.line_of(f[2])))
        _, m, value = found[0]
        return idx, m, value, f"self.{attr} set in {cls.name.value}.{m.name.value}"

    def _parameter(self, idx: SourceIndex, fn: cst.FunctionDef | None, param: cst.Param):
        """A parameter's value is the caller's argument: find the caller's call site.
        A caller that only forwards (`return func(*args, **kwargs)`, what decorators
        such as torch.optim's `_disable_dynamo_if_unsupported` put between `step()` and
        `adam()`) is stepped over to the call that names the argument."""
        if fn is None:
            return None
        for cfile, cline in self._caller_sites(idx, fn):
            cidx = source_index(cfile)
            if cidx is None:
                return None
            arg = _argument_for(cidx, cline, fn, param)
            if arg is not None:
                return (
                    cidx,
                    cidx.enclosing(arg, cst.FunctionDef),
                    arg,
                    f"argument for parameter {param.name.value}",
                )
            if not _forwards_arguments(cidx, cline):
                return None
        return None

    def _caller_sites(self, idx: SourceIndex, fn: cst.FunctionDef) -> list[tuple[str, int]]:
        """Where `fn` was called from, innermost first: the recorded stack's outer
        frames, else the call site the re-run captured."""
        def_line = idx.line_of(fn)
        name = fn.name.value
        for side in self.ctx.sides.values():
            frames = side.frames
            for i in range(1, len(frames)):
                f, ln, fname = frames[i]
                if f == idx.path and fname == name and idx.function_at(ln, name) is fn:
                    return [(fr[0], fr[1]) for fr in reversed(frames[:i])]
        for sites in self.ctx.call_sites.values():
            hit = sites.get((idx.path, def_line)) or sites.get((idx.path, idx.span(fn).line))
            if hit:
                return [(hit[0], hit[1])]
        return []


def _selecting_test(idx: SourceIndex, node: cst.CSTNode) -> cst.BaseExpression | None:
    """The condition of the innermost `if`/`elif`/`else` whose block holds `node` (an
    assigned value), within its function; None when no branch encloses it."""
    child, parent = node, idx.parent(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, cst.If) and child is not parent.test:
            return parent.test
        if isinstance(parent, cst.Else):  # `else:` belongs to the `if` above it
            owner = idx.parent(parent)
            return owner.test if isinstance(owner, cst.If) else None
        child, parent = parent, idx.parent(parent)
    return None


def _descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = list(node.children)
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _forwards_arguments(cidx: SourceIndex, line: int) -> bool:
    """A call on `line` passes `*args`/`**kwargs` on: the caller only forwards."""
    return any(a.star for call in cidx.calls_on_line(line) for a in call.args)


def _argument_for(
    cidx: SourceIndex, line: int, fn: cst.FunctionDef, param: cst.Param
) -> cst.BaseExpression | None:
    """The argument expression passed for `param` by a call on `line` of the caller."""
    pname = param.name.value
    positional = list(fn.params.posonly_params) + list(fn.params.params)
    names = [p.name.value for p in positional]
    is_method = bool(names) and names[0] in ("self", "cls")
    for call in cidx.calls_on_line(line):
        callee = (
            call.func.attr.value
            if isinstance(call.func, cst.Attribute)
            else (call.func.value if isinstance(call.func, cst.Name) else "")
        )
        # module calls (`self.mlp(x)`) reach `forward`; constructors reach `__init__`
        if callee not in (fn.name.value,) and fn.name.value not in (
            "forward",
            "__init__",
            "__call__",
        ):
            continue
        for a in call.args:
            if a.keyword is not None and a.keyword.value == pname:
                return a.value
        pos = [a for a in call.args if a.keyword is None and not a.star]
        offset = 1 if is_method else 0
        if pname in names:
            i = names.index(pname) - offset
            if 0 <= i < len(pos):
                return pos[i].value
    return None


# --------------------------------------------------------------------------------------
# Origins in the user's code
# --------------------------------------------------------------------------------------


def _callee_name(call: cst.Call) -> str:
    f = call.func
    if isinstance(f, cst.Attribute):
        return f.attr.value
    if isinstance(f, cst.Name):
        return f.value
    return ""


def is_dotted_constant(node: cst.BaseExpression) -> bool:
    """`torch.float64`, `nn.GELU`: a dotted name a patch can swap for another."""
    return isinstance(node, cst.Attribute) and bool(dotted_name(node))


def _origin_rank(idx: SourceIndex, value: cst.BaseExpression, observed: str | None) -> tuple:
    vidx, vnode, _ = _follow_user_value(idx, value)
    lit = is_literal(vnode)
    code = vidx.code(vnode)
    seen = observed is not None and (
        same_value(code, observed) if lit else code.rsplit(".", 1)[-1] == observed
    )
    return (seen, lit or is_dotted_constant(vnode), idx.line_of(value))


def _follow_user_value(
    idx: SourceIndex, value: cst.BaseExpression, depth: int = 0
) -> tuple[SourceIndex, cst.BaseExpression, str | None]:
    """A user-code value that is a name → its module/function assignment (to a literal),
    or an environment read → the variable's name. Returns (index, node, env_var)."""
    if depth > 6 or is_literal(value):
        return idx, value, None
    env = _env_read(idx, value)
    if env is not None:
        return idx, value, env
    if isinstance(value, cst.Name):
        scope = idx.scopes.get(value)
        if scope is not None:
            targets = [
                a.node
                for a in scope[value.value]
                if isinstance(a.node, cst.Name) and a.node in idx.positions
            ]
            if targets:
                t = max(targets, key=idx.line_of)
                v = _assigned_value(idx, t)
                if v is not None:
                    return _follow_user_value(idx, v, depth + 1)
    if isinstance(value, cst.Comparison) or isinstance(value, cst.Call):
        for n in idx.walk(value):
            env = _env_read(idx, n) if isinstance(n, (cst.Call, cst.Subscript)) else None
            if env is not None:
                return idx, value, env
    return idx, value, None


def _assigned_name(
    value: cst.BaseExpression, vnode: cst.BaseExpression, env: str | None
) -> str | None:
    """The user's name `_follow_user_value` went through to reach `vnode` (`ATTN` for
    `ATTN = "sdpa"`), or None when the value was written in place or read from the
    environment."""
    if isinstance(value, cst.Name) and vnode is not value and not env:
        return value.value
    return None


def _env_read(idx: SourceIndex, node: cst.CSTNode) -> str | None:
    """`os.environ["X"]`, `os.environ.get("X")`, `os.getenv("X")` → "X"."""
    if isinstance(node, cst.Subscript):
        if "os.environ" in idx.qualified_names(node.value) and node.slice:
            el = node.slice[0].slice
            if isinstance(el, cst.Index):
                v = literal_value(el.value)
                if isinstance(v, str):
                    return v
    if isinstance(node, cst.Call) and node.args:
        q = idx.qualified_names(node.func)
        if q & {"os.environ.get", "os.getenv"}:
            v = literal_value(node.args[0].value)
            if isinstance(v, str):
                return v
    return None


_DTYPE_NAMES = frozenset(
    "float64 double float32 float float16 half bfloat16 int64 long int32 int int16 short "
    "int8 uint8 bool complex64 complex128".split()
)


def find_attribute_origin(
    attribute: str,
    files: list[str],
    observed: str | None,
    config: dict[str, str] | None = None,
) -> Origin | None:
    """Where a settings attribute got its value in the user's code.

    Candidates: a keyword argument of that name (`GPT2Config(activation_function=...)`,
    `_from_config(config, attn_implementation=...)`; leading underscores ignored because
    libraries store `attn_implementation` as `_attn_implementation`), an attribute
    assignment (`config.activation_function = ...`) or a dict entry. A literal equal to the
    observed value wins; then any literal; then the last one in the file. A value read
    from the program's command line (`args.x`) continues to its argparse option
    (`config`: the run's config snapshot, whose `program.*` keys hold the command line).
    """
    want = _norm_attr(attribute)
    best: tuple[tuple, SourceIndex, cst.BaseExpression, str, cst.CSTNode] | None = None
    for f in files:
        idx = source_index(f)
        if idx is None:
            continue
        for n in idx.walk():
            cands: list[tuple[cst.BaseExpression, str, cst.CSTNode]] = []
            if isinstance(n, cst.Call):
                for a in n.args:
                    if a.keyword is not None and _norm_attr(a.keyword.value) == want:
                        # a settings class built by the user (`GPT2Config(...)`) vs an API call
                        # taking the setting as an argument (`_from_config(..., x=...)`)
                        kind = "config" if _callee_name(n).endswith("Config") else "api-argument"
                        cands.append((a.value, kind, n))
                if want == "dtype" and _callee_name(n) == "to" and n.args and not n.args[0].keyword:
                    # `x.to(torch.float64)` / `model.to(DTYPE)`: the positional dtype form;
                    # only when it leads to a dtype name (`.to("cpu")` is a device)
                    vidx, v, _ = _follow_user_value(idx, n.args[0].value)
                    if vidx.code(v).rsplit(".", 1)[-1] in _DTYPE_NAMES:
                        cands.append((n.args[0].value, "api-argument", n))
            elif isinstance(n, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                for t in targets:
                    if (
                        isinstance(t, cst.Attribute)
                        and _norm_attr(t.attr.value) == want
                        and n.value is not None
                    ):
                        cands.append((n.value, "config", n))
            elif isinstance(n, cst.Dict):
                for el in n.elements:
                    if isinstance(el, cst.DictElement) and literal_value(el.key) == attribute:
                        cands.append((el.value, "config", n))
            for value, kind, holder in cands:
                rank = _origin_rank(idx, value, observed)
                if best is None or rank > best[0]:
                    best = (rank, idx, value, kind, holder)
    if best is None:
        return None
    _, idx, value, kind, holder = best
    vidx, vnode, env = _follow_user_value(idx, value)
    line = vidx.line_of(vnode)
    origin = Origin(
        kind="env" if env else kind,
        variable=holder_keyword(holder, want) or attribute,
        file=vidx.path,
        line=line,
        code=vidx.line_text(line),
        value=vidx.code(vnode),
        span=vidx.span(vnode) if is_literal(vnode) or is_dotted_constant(vnode) else None,
        env_var=env,
    )
    if isinstance(holder, cst.Call):
        how = "keyword argument" if holder_keyword(holder, want) else "argument"
        origin.note = f"{how} of {idx.code(holder.func)}(...)"
    origin.assigned_to = _assigned_name(value, vnode, env)
    if origin.assigned_to:
        # followed a name to its assignment: say which line passes it on, so the patch
        # (which edits the assignment) is not a surprise
        via = f"{origin.assigned_to}, passed at line {idx.line_of(value)}"
        origin.note = f"{via} ({origin.note})" if origin.note else via
    return command_line_step(origin, vnode, config)


def command_line_step(
    origin: Origin, vnode: cst.BaseExpression, config: dict[str, str] | None
) -> Origin:
    """One more hop of the backward walk: a value read from a parsed command line
    (`args.attn_implementation`) came from an argparse option. The origin keeps the line
    that passes it on (what the user reads in the program) and becomes kind
    "command-line": its value is what the run's recorded command line gave (or the
    option's default), `option` the flag, `option_default` the default literal a patch
    may edit. Without this hop both sides' origins read `args.attn_implementation`, and
    a fix would "change" it to itself."""
    from magneton.tracer.programs.program import command_line_origin

    if not config or not (isinstance(vnode, cst.Attribute) and isinstance(vnode.value, cst.Name)):
        return origin
    clo = command_line_origin(config, vnode.attr.value)
    if clo is None:
        return origin
    value = clo.value
    if not clo.given:
        try:  # the default's source: "'sdpa'" reads as sdpa, like a typed value
            lit = literal_value(cst.parse_expression(value))
        except cst.ParserSyntaxError:
            lit = NOT_LITERAL
        value = lit if isinstance(lit, str) else value
    origin.kind = "command-line"
    origin.value = value
    origin.span = None
    origin.option = clo.option
    origin.option_default = _option_default(clo.file, clo.line) if clo.line else None
    how = "given on the command line" if clo.given else "its default"
    origin.note = (
        f"{dotted_name(vnode) or vnode.attr.value} is option {clo.option} ({how}: {value}; "
        f"{clo.defined()})"
    )
    return origin


def _option_default(file: str, line: int) -> dict | None:
    """The literal `default=` of the `add_argument` call on `line` of `file`, if any."""
    idx = source_index(file)
    if idx is None:
        return None
    for n in idx.walk():
        if not (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "add_argument"
            and idx.line_of(n) == line
        ):
            continue
        for a in n.args:
            if a.keyword is not None and a.keyword.value == "default" and is_literal(a.value):
                return {
                    "file": idx.path,
                    "line": idx.line_of(a.value),
                    "span": idx.span(a.value),
                    "value": idx.code(a.value),
                }
    return None


def holder_keyword(holder: cst.CSTNode, want: str) -> str | None:
    """The keyword as the user spelled it in the call that carries the setting."""
    if isinstance(holder, cst.Call):
        for a in holder.args:
            if a.keyword is not None and _norm_attr(a.keyword.value) == want:
                return a.keyword.value
    return None


def find_library_default(
    attribute: str, class_name: str, class_file: str
) -> tuple[str, int, str] | None:
    """The default of a settings attribute in its class: a class-level annotated
    assignment (dataclass-style configs) or an `__init__` parameter default.
    Returns (file, line, value source)."""
    idx = source_index(class_file)
    if idx is None:
        return None
    cls = idx.class_named(class_name)
    if cls is None:
        return None
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for s in stmt.body:
                if (
                    isinstance(s, (cst.AnnAssign, cst.Assign))
                    and s.value is not None
                    and any(
                        isinstance(t, cst.Name) and t.value == attribute
                        for t in (
                            [s.target]
                            if isinstance(s, cst.AnnAssign)
                            else [x.target for x in s.targets]
                        )
                    )
                ):
                    return idx.path, idx.line_of(s), idx.code(s.value)
    for m in idx.methods(cls):
        if m.name.value != "__init__":
            continue
        for p in params(m):
            if p.name.value == attribute and p.default is not None:
                return idx.path, idx.line_of(p), idx.code(p.default)
    return None


def find_constructor_call(class_name: str, files: list[str]) -> tuple[SourceIndex, cst.Call] | None:
    """The user's call that builds `class_name` (e.g. `GPT2Config(...)`): where a missing
    keyword argument would be added."""
    for f in files:
        idx = source_index(f)
        if idx is None:
            continue
        for call in idx.nodes_of(cst.Call):
            if _callee_name(call) == class_name:
                return idx, call
    return None


def find_knob_origin(
    knob: Knob, files: list[str], observed: str | None, config: dict[str, str] | None = None
) -> Origin | None:
    """The statement in the user's code that sets a global knob.

    Matches attribute assignments to the knob's dotted targets (`torch.backends.mkldnn.
    enabled = False`, with import aliases resolved by QualifiedNameProvider), its setter
    calls (`torch.set_num_threads(1)`, `torch.backends.mkldnn.flags(enabled=False)`) and
    environment writes (`os.environ["OMP_NUM_THREADS"] = "1"`, `os.environ.setdefault`,
    `os.putenv`). Later statements win (they run last), a literal equal to the observed
    value wins over everything.
    """
    assign = set(knob.assign)
    calls = {c.qualname: c for c in knob.calls}
    env = set(knob.env)
    best: tuple[tuple, SourceIndex, cst.BaseExpression, str, str | None] | None = None

    def offer(idx: SourceIndex, value: cst.BaseExpression, kind: str, env_var: str | None):
        nonlocal best
        rank = _origin_rank(idx, value, observed)
        if best is None or rank > best[0]:
            best = (rank, idx, value, kind, env_var)

    for f in files:
        idx = source_index(f)
        if idx is None:
            continue
        for n in idx.walk():
            if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, cst.Attribute) and n.value is not None:
                        names = idx.qualified_names(t) | {dotted_name(t)}
                        if names & assign:
                            offer(idx, n.value, "global-flag", None)
                    elif isinstance(t, cst.Subscript) and n.value is not None and env:
                        if "os.environ" in idx.qualified_names(t.value) and t.slice:
                            el = t.slice[0].slice
                            if isinstance(el, cst.Index):
                                var = literal_value(el.value)
                                # env holds str names: only a str literal can be in it
                                if isinstance(var, str) and var in env:
                                    offer(idx, n.value, "env", var)
            elif isinstance(n, cst.Call):
                q = idx.qualified_names(n.func) | {dotted_name(n.func)}
                for name in q & set(calls):
                    setter = calls[name]
                    value = _call_argument(n, setter.arg)
                    if value is not None:
                        offer(idx, value, "global-flag", None)
                if env and q & {"os.environ.setdefault", "os.putenv"} and len(n.args) >= 2:
                    var = literal_value(n.args[0].value)
                    if var in env:
                        offer(idx, n.args[1].value, "env", var)
    if best is None:
        return None
    _, idx, value, kind, env_var = best
    vidx, vnode, env_read = _follow_user_value(idx, value)
    setter_line = idx.line_of(value)
    # when the setter reads a name (`enabled = USE_MKLDNN`), the literal to change is where
    # that name is assigned; point there and mention the setter
    line = vidx.line_of(vnode) if is_literal(vnode) else setter_line
    origin = Origin(
        kind="env" if (env_read or kind == "env") else kind,
        # an environment variable is what the user sets: name it, not the knob it feeds
        variable=env_read or env_var or knob.key,
        file=vidx.path,
        line=line,
        code=vidx.line_text(line),
        value=vidx.code(vnode),
        span=vidx.span(vnode) if is_literal(vnode) else None,
        env_var=env_read or env_var,
        assigned_to=_assigned_name(value, vnode, env_read),
        note="" if line == setter_line else f"read by the setter at line {setter_line}",
    )
    return command_line_step(origin, vnode, config)


def _call_argument(call: cst.Call, arg: int | str | None) -> cst.BaseExpression | None:
    if arg is None:
        return call.func
    if isinstance(arg, str):
        for a in call.args:
            if a.keyword is not None and a.keyword.value == arg:
                return a.value
        return None
    pos = [a for a in call.args if a.keyword is None and not a.star]
    return pos[arg].value if arg < len(pos) else None
