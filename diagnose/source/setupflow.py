"""The last hop of the backward walk for an operand property set before the measured
region: through the source of `setup()` (and the module-level constants it reads), side by
side, to the statement where the two programs set the operand differently.

argflow.py walks the recorded dataflow back from a diverging operand to a *source* — a
parameter, buffer or entry input — whose property was set before the region ran. For the
properties a single keyword sets (`memory_format=`, `dtype=`) a search for that keyword
finds the user's value. Many are set by code no keyword names: a transposed view kept
(`from_pretrained(kernel.T)` vs `kernel.T.contiguous()`), a helper's argument
(`collate(..., pad_to_multiple_of=256)`), a constant (`PAD = 64`). This module is the
general step: a static libcst slice of `setup()` from the returned value that becomes the
source (`return model, ids` → `ids`, or the model for a parameter) back through the
statements that assign or mutate the names it reads, then the module-level assignments
of the names left (constants). The two sides' slices are aligned statement by statement
(`difflib`, whitespace ignored); the first statement that differs is where the property
was set differently, and within it the smallest differing expression is the value to
port (`kernel.T` → `kernel.T.contiguous()`, `256` → `8`). A statement present on one side
only becomes an insertion after the statement it follows on the other side.

Static rather than a traced re-run of setup(): setup() can load checkpoints or data for
minutes, and the slice only needs the text; measured on the case suite it parses in
milliseconds. What it cannot see (a property set inside a helper both sides call
identically, with different global state) leaves the origins to the other steps.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import libcst as cst

from magneton.model import Profile

from .dataflow import Origin
from .index import SourceIndex, real_path, source_index


@dataclass
class Unit:
    """One statement of a slice (a module-level assignment, a statement of setup())."""

    node: cst.CSTNode
    top: bool  # module level (a constant) rather than inside setup()
    text: str  # whitespace-normalized code: what the two sides compare

    @classmethod
    def of(cls, idx: SourceIndex, node: cst.CSTNode, top: bool) -> Unit:
        # the comment lines above a statement are not what it does
        bare = node.with_changes(leading_lines=()) if hasattr(node, "leading_lines") else node
        return cls(node, top, " ".join(idx.module.code_for_node(bare).replace('"', "'").split()))


def _is_load_name(idx: SourceIndex, n: cst.Name) -> bool:
    p = idx.parent(n)
    if isinstance(p, cst.Attribute) and p.attr is n:
        return False
    if isinstance(p, cst.Arg) and p.keyword is n:
        return False
    return not isinstance(p, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias))


def _reads(idx: SourceIndex, node: cst.CSTNode) -> set[str]:
    return {n.value for n in idx.nodes_of(cst.Name, node) if _is_load_name(idx, n)}


def _base(node: cst.CSTNode) -> str | None:
    """`model` for `model`, `model.weight`, `ids[i, :n]`, `model.to(...)`."""
    while isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else None


def _targets(t: cst.CSTNode) -> set[str]:
    if isinstance(t, (cst.Tuple, cst.List)):
        return set().union(*(_targets(e.value) for e in t.elements)) if t.elements else set()
    b = _base(t)
    return {b} if b else set()


def _writes(idx: SourceIndex, stmt: cst.CSTNode) -> set[str]:
    """Names a statement assigns or may mutate: assignment targets (a subscript or
    attribute target mutates its base), and for an expression statement — which exists
    for its side effects (`model.eval()`, `nn.init.zeros_(model.bias)`) — its receiver
    and arguments. A compound statement (for, with, if) writes every target inside."""
    out: set[str] = set()
    for n in idx.walk(stmt):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                out |= _targets(t.target)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            out |= _targets(n.target)
        elif isinstance(n, (cst.For, cst.CompFor)):
            out |= _targets(n.target)
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            out |= _targets(n.asname.name)
        elif isinstance(n, cst.Expr) and isinstance(n.value, cst.Call):
            call = n.value
            out |= {b for b in [_base(call.func)] + [_base(a.value) for a in call.args] if b}
    return out


def _setup_function(idx: SourceIndex, name: str) -> cst.FunctionDef | None:
    for stmt in idx.module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def _returned(fn: cst.FunctionDef) -> tuple[cst.SimpleStatementLine, list[cst.BaseExpression]]:
    """setup()'s last top-level `return` and its returned elements."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else []
    for stmt in reversed(body):
        if isinstance(stmt, cst.SimpleStatementLine):
            ret = next((s for s in stmt.body if isinstance(s, cst.Return)), None)
            if ret is not None and ret.value is not None:
                v = ret.value
                elems = [e.value for e in v.elements] if isinstance(v, cst.Tuple) else [v]
                return stmt, elems
    raise LookupError(f"{fn.name.value}() has no return statement")


def _body(fn: cst.FunctionDef) -> list[cst.CSTNode]:
    return list(fn.body.body) if isinstance(fn.body, cst.IndentedBlock) else []


def _backward(idx: SourceIndex, stmts: list[cst.CSTNode], wanted: set[str]) -> list[Unit]:
    """The statements of `stmts` (one function body, in order) that write a wanted
    name, latest first; `wanted` grows by what they read. Earlier statements may write
    the same name too (`model = model.to(...)` after its build), so names stay wanted."""
    units = []
    for stmt in reversed(stmts):
        if _writes(idx, stmt) & wanted:
            units.append(Unit.of(idx, stmt, top=False))
            wanted |= _reads(idx, stmt)
    return units


def _constants(idx: SourceIndex, wanted: set[str]) -> list[Unit]:
    """Module-level assignments of wanted names (constants), latest first."""
    units = []
    for stmt in reversed(idx.module.body):
        simple = isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(s, (cst.Assign, cst.AnnAssign)) for s in stmt.body
        )
        if simple and _writes(idx, stmt) & wanted:
            units.append(Unit.of(idx, stmt, top=True))
            wanted |= _reads(idx, stmt)
    return units


def _params(fn: cst.FunctionDef) -> list[cst.Param]:
    ps = fn.params
    return [*ps.posonly_params, *ps.params, *ps.kwonly_params]


def _argument(call: cst.Call, fn: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
    """The argument a call passes for parameter `name` of `fn` (keyword or position)."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    names = [p.name.value for p in [*fn.params.posonly_params, *fn.params.params]]
    if name in names and names.index(name) < len(positional):
        return positional[names.index(name)].value
    return None


def setup_slice(idx: SourceIndex, setup: str, positions: list[int] | None) -> list[Unit]:
    """The statements that compute setup()'s returned elements at `positions` (all when
    None), in execution order: module-level constants first, then setup()'s statements,
    then its return."""
    fn = _setup_function(idx, setup)
    if fn is None:
        return []
    try:
        ret, elems = _returned(fn)
    except LookupError:
        return []
    chosen = [e for i, e in enumerate(elems) if positions is None or i in positions]
    wanted: set[str] = set().union(*(_reads(idx, e) for e in chosen)) if chosen else set()
    units = _backward(idx, [s for s in _body(fn) if s is not ret], wanted)
    wanted -= {p.name.value for p in _params(fn)}
    units += _constants(idx, wanted)
    units.reverse()
    units.append(Unit.of(idx, ret, top=False))
    return units


def _top_statement(fn: cst.FunctionDef, idx: SourceIndex, line: int) -> cst.CSTNode | None:
    return next((s for s in _body(fn) if idx.span(s).contains_line(line)), None)


def call_slice(idx: SourceIndex, lines: list[int]) -> list[Unit]:
    """The statements that compute what the statement at `lines[-1]` reads, where
    `lines` are an operator's user frames in one script, outermost first (`main` calling
    `collate`, which calls `torch.full`): backward through the innermost function, then
    a parameter still wanted becomes the argument its caller passed at the next frame
    out (that call statement joins the slice), and so on; then module-level constants."""
    units: list[Unit] = []
    wanted: set[str] = set()
    fn_prev: cst.FunctionDef | None = None
    for line in reversed(lines):
        fn = idx.function_at(line)
        stmt = _top_statement(fn, idx, line) if fn is not None else None
        if fn is None or stmt is None:
            break
        if fn_prev is None:
            wanted = _reads(idx, stmt)
        else:
            # a parameter of the callee is what this call passes for it
            calls = [c for c in idx.nodes_of(cst.Call, stmt) if _callee(c) == fn_prev.name.value]
            args = [
                a for c in calls for p in _params(fn_prev)
                if p.name.value in wanted and (a := _argument(c, fn_prev, p.name.value))
            ]  # fmt: skip
            wanted -= {p.name.value for p in _params(fn_prev)}  # globals stay wanted
            wanted |= set().union(*(_reads(idx, a) for a in args)) if args else set()
            if not calls:
                break
        units.append(Unit.of(idx, stmt, top=False))
        before = _body(fn)[: _body(fn).index(stmt)]
        units += _backward(idx, before, wanted)
        fn_prev = fn
    if fn_prev is not None:
        wanted -= {p.name.value for p in _params(fn_prev)}
    units += _constants(idx, wanted)
    units.reverse()
    return units


def _callee(call: cst.Call) -> str:
    f = call.func
    return (
        f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else ""
    )


def _meaningful(node: cst.CSTNode, idx: SourceIndex) -> list[cst.CSTNode]:
    """A node's children that carry code (not whitespace, commas or parentheses)."""
    return [c for c in node.children if _text(idx, c).strip() not in ("", ",", "(", ")", ".", "=")]


def _text(idx: SourceIndex, node: cst.CSTNode) -> str:
    """A node's source; for a node libcst cannot print alone (an annotation, whose
    `:` depends on its parent) the source of its children."""
    try:
        return idx.code(node)
    except SyntaxError:  # libcst's CSTCodegenError (not exported) is one
        return "".join(_text(idx, c) for c in node.children)


def smallest_difference(
    a: cst.CSTNode, ia: SourceIndex, b: cst.CSTNode, ib: SourceIndex
) -> tuple[cst.CSTNode, cst.CSTNode]:
    """The innermost pair of corresponding nodes that still holds every difference
    between `a` and `b`: descend while exactly one child differs. A dotted name
    (`torch.float64`) stays whole; a node whose child count differs (an extra call,
    an extra keyword) is the difference itself."""
    while type(a) is type(b):
        ca, cb = _meaningful(a, ia), _meaningful(b, ib)
        if len(ca) != len(cb):
            break
        differ = [i for i in range(len(ca)) if _text(ia, ca[i]) != _text(ib, cb[i])]
        if len(differ) != 1:
            break
        na, nb = ca[differ[0]], cb[differ[0]]
        if isinstance(a, cst.Attribute) and na is a.attr:
            break
        a, b = na, nb
    # a patch replaces an expression: climb to the nearest one on each side, but not
    # past the statement (several parts of it differ: the statement is the difference)
    stmt = (cst.BaseStatement, cst.BaseSmallStatement)
    while not (isinstance(a, cst.BaseExpression) and isinstance(b, cst.BaseExpression)):
        if isinstance(a, stmt) or isinstance(b, stmt):
            break
        pa = a if isinstance(a, cst.BaseExpression) else ia.parent(a)
        pb = b if isinstance(b, cst.BaseExpression) else ib.parent(b)
        if pa is None or pb is None:
            break  # the module itself: nothing above it to climb to
        a, b = pa, pb
    return a, b


def _variable(idx: SourceIndex, node: cst.CSTNode) -> str:
    """What the differing value sets: the keyword it is passed as, else the name it is
    assigned to, else its own text."""
    if isinstance(node, cst.SimpleStatementLine):
        a = next((s for s in node.body if isinstance(s, cst.Assign)), None)
        if a is not None and len(a.targets) == 1:
            return idx.code(a.targets[0].target).strip()
    for anc in [node, *idx.ancestors(node)]:
        p = idx.parent(anc)
        if isinstance(p, cst.Arg) and p.value is anc and p.keyword is not None:
            return p.keyword.value
        if isinstance(p, cst.Assign) and p.value is anc and len(p.targets) == 1:
            t = p.targets[0].target
            return idx.code(t).strip()
        if isinstance(anc, cst.SimpleStatementLine):
            break
    return idx.code(node).strip()


def _value_origin(idx: SourceIndex, node: cst.CSTNode, variable: str) -> Origin:
    line = idx.line_of(node)
    return Origin(
        kind="api-argument",
        variable=variable,
        file=idx.path,
        line=line,
        code=idx.line_text(line),
        value=idx.code(node).strip(),
        span=idx.span(node),
        note="the statement of setup() that differs between the two sides",
    )


def _statement_origin(idx: SourceIndex, unit: Unit) -> Origin:
    """The side that runs a statement the other lacks: that statement (no span: it is
    not a value to port, and deleting it is not a mechanical fix of this step)."""
    o = _value_origin(idx, unit.node, _variable(idx, unit.node))
    o.value = idx.code(unit.node).strip()
    o.span = None
    return o


def _inserted(have: Unit, hidx: SourceIndex, after: Unit | None, lidx: SourceIndex) -> Origin:
    """The side lacking `have`'s statement: where it belongs (after `after`, the last
    statement both slices share before it)."""
    code = hidx.code(have.node).strip()
    line = lidx.span(after.node).end_line if after is not None else None
    anchor = after is not None and after.top == have.top
    return Origin(
        kind="api-argument",
        variable=_variable(hidx, have.node),
        file=lidx.path,
        line=lidx.line_of(after.node) if after is not None else None,
        code=lidx.line_text(lidx.line_of(after.node)) if after is not None else None,
        value="(not run)",
        library_default=True,
        insert=(
            {
                "file": lidx.path,
                "line": lidx.line_of(after.node),
                "end_line": line,
                "statement": code,
            }
            if anchor and after is not None and "\n" not in code
            else None
        ),  # fmt: skip
        note=f"`{code}` is not run here; the other side runs it at this point",
    )


def _source_positions(p: Profile, source: dict) -> list[int] | None:
    """Which of setup()'s returned elements a source tensor comes from: `args[i]...`
    for an entry input; for a parameter or buffer the elements that are not input
    tensors (the model); None when unknown (all elements)."""
    name = str(source.get("name") or "")
    if source.get("kind") == "input" and name.startswith("args["):
        return [int(name[5 : name.index("]")])]
    inputs = {
        int(t.name[5 : t.name.index("]")])
        for t in p.tensors
        if t.kind == "input" and t.name.startswith("args[")
    }
    if not inputs:
        return None
    n = max(inputs) + 1
    rest = [i for i in range(n + 1) if i not in inputs]
    return rest or None


def _user_lines(p: Profile, op: int) -> list[int]:
    """The lines of the run's script among an operator's frames, outermost first."""
    script = real_path(p.run.script or "")
    return [p.frames[i].line for i in p.ops[op].frames if real_path(p.frames[i].file) == script]


def _slice(p: Profile, idx: SourceIndex, source: dict) -> list[Unit]:
    """One side's slice: from the operator that set the property (kind "op": its user
    line), else from setup()'s returned element that became the source tensor."""
    kind = source.get("kind")
    if kind == "op" and source.get("op") is not None:
        lines = _user_lines(p, int(source["op"]))
        return call_slice(idx, lines) if lines else []
    if kind not in ("param", "buffer", "input"):
        return []  # a constant made inside the region: setup() did not make it
    return setup_slice(idx, p.run.setup or "setup", _source_positions(p, source))


def _module_texts(idx: SourceIndex) -> set[str]:
    return {Unit.of(idx, st, top=True).text for st in idx.module.body}


def _shared_constants_dropped(
    ua: list[Unit], ia: SourceIndex, ub: list[Unit], ib: SourceIndex
) -> tuple[list[Unit], list[Unit]]:
    """Both slices without the module-level statements that both files hold word for
    word: such a constant cannot be where the programs differ, even when only one
    side's slice reads it. Left in, the alignment pairs it with the other side's first
    statement (`scores = logits.permute(0, 2, 1)` against `BATCH, SEQ, VOCAB = 8, 256,
    4000`, which only the `reshape(-1, VOCAB)` side reads) and names it the root."""
    ta, tb = _module_texts(ia), _module_texts(ib)
    return (
        [u for u in ua if not (u.top and u.text in tb)],
        [u for u in ub if not (u.top and u.text in ta)],
    )


def setup_difference(
    pa: Profile, pb: Profile, sources: dict[str, dict]
) -> dict[str, Origin] | None:
    """Both sides' origins of a property where the backward walk over the recorded
    graph stopped (`sources[side]`, argflow's `set_by`): an operator inside the region,
    or a source set in setup(). The two sides' source slices from there are compared;
    the first statement where they differ is a value to port (both origins carry
    spans) or a statement one side lacks (that side's origin is where to insert it).
    None when the slices read alike."""
    ia, ib = source_index(pa.run.script or ""), source_index(pb.run.script or "")
    if ia is None or ib is None:
        return None
    ua, ub = _shared_constants_dropped(
        _slice(pa, ia, sources["a"]), ia, _slice(pb, ib, sources["b"]), ib
    )
    if not ua or not ub:
        return None
    sm = difflib.SequenceMatcher(None, [u.text for u in ua], [u.text for u in ub], False)
    op = next((o for o in sm.get_opcodes() if o[0] != "equal"), None)
    if op is None:
        return None
    tag, i1, i2, j1, j2 = op
    if tag == "replace":
        na, nb = smallest_difference(ua[i1].node, ia, ub[j1].node, ib)
        if not (isinstance(na, cst.BaseExpression) and isinstance(nb, cst.BaseExpression)):
            # whole statements differ: show both, no value to port
            return {"a": _statement_origin(ia, ua[i1]), "b": _statement_origin(ib, ub[j1])}
        var = _variable(ia, na)
        return {"a": _value_origin(ia, na, var), "b": _value_origin(ib, nb, var)}
    if tag == "insert":  # b runs a statement a does not
        have = _statement_origin(ib, ub[j1])
        return {"a": _inserted(ub[j1], ib, ua[i1 - 1] if i1 else None, ia), "b": have}
    have = _statement_origin(ia, ua[i1])
    return {"a": have, "b": _inserted(ua[i1], ia, ub[j1 - 1] if j1 else None, ib)}
