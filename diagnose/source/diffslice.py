"""The differential slice: where the two programs differ, among the statements that decide
a finding's operators.

Every correct root cause is a difference between the two programs: a statement one side
runs and the other does not, a value written differently, or a command-line option given
differently. The key-variable re-run and the data-flow walk (keyvar.py, dataflow.py)
explain *how* a difference reaches a kernel, but they start from the divergence and can
stop short of the difference: at a statement both sides share (`y.contiguous(memory_format
=MEMORY_FORMAT)`, whose constant differs at the top of the file), at a settings dict
(`SETTINGS["attention"](q, k, v)`), at state set while the program runs (`with
sdpa_kernel(BACKENDS):`, `torch.set_default_dtype(...)` in setup()) or at `self`. This
module is the general check and fallback, static (libcst, milliseconds):

1. **Slice.** From the user lines of the finding's operators on each side (each
   operator's frames in the script, outermost first), backward through the statements
   that write what those lines read (setupflow.call_slice's walk), then through the entry's
   parameters into what setup() returned, then to a fixpoint over the module: constants,
   classes (dataclass/config fields) and user functions the slice names. Statements that
   change process state — a call or an attribute store on an imported module
   (`torch.set_default_dtype(...)`, `torch.autograd.set_detect_anomaly(...)`,
   `torch.backends.mkldnn.enabled = False`) — are read by every operator after them, so
   they join the slice of the function they run in; so does every `with` around an
   operator's line, since it is part of the statement that holds the line.
2. **Align** the two slices statement by statement (difflib over whitespace-normalised
   code, in execution order: module level, setup(), the rest), as setupflow does for
   setup() alone. The first block that differs is the root; within it the first
   statement that launched operators (a mask built, a tensor copied) rather than one that
   only names a value, and within a statement pair the smallest differing expression (the
   value to port, its variable the keyword, field, dict key or name it is stored in).
3. **Command line.** When the slices read alike and both runs are programs, the options
   the slice reads (`args.foreach`, also inside the user functions it calls) whose
   recorded values differ are the root (`--foreach 0` vs `1`).

None when neither the slice's code nor its options differ: then the programs do not
differ where this finding's operators are decided (library version, hardware, noise), and
the other steps' explanation stands.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from magneton.model import Profile

from .dataflow import Origin
from .index import SourceIndex, real_path, source_index
from .setupflow import (
    Unit,
    _argument,
    _body,
    _callee,
    _inserted,
    _params,
    _reads,
    _returned,
    _setup_function,
    _statement_origin,
    _top_statement,
    _user_lines,
    _writes,
    smallest_difference,
)

# execution phases of a script's statements: module level runs first, then setup(), then
# the entry and the functions it calls
_MODULE, _SETUP, _RUN = 0, 1, 2


@dataclass
class Difference:
    """The root the two slices give: the origins per side, the root-cause kind and the
    statement lines per side that differ anywhere in the slice (what another step's
    origin must fall on to agree)."""

    kind: str  # "config" | "api-argument" | "global-flag" | "command-line" | "code"
    origins: dict[str, Origin]
    differing: dict[str, set[int]] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)  # the file `differing` is about
    options: set[str] = field(default_factory=set)  # differing command-line options
    blocks: int = 1  # differing blocks in the aligned slices

    def sharper_than(self, kind: str, wasteful: str) -> bool:
        """Whether this root says more than another step's of kind `kind`: a value to port
        where the other only names the code (the programs differ in one place, by an
        expression a patch can replace); or the command-line option itself where the
        other stops at the line reading it (`foreach=bool(args.foreach)` reads alike in
        both programs: the option given is what differs, and what a user changes)."""
        if self.kind in ("command-line", "config-file"):
            return kind not in ("command-line", "config-file")
        o = self.origins.get(wasteful)
        return kind == "code" and self.blocks == 1 and o is not None and o.span is not None

    def agrees(self, origins: dict[str, Origin | None]) -> bool:
        """Whether another step's origins point where the programs differ, on either side
        (a side that never sets a value has its origin at the library's default)."""
        return any(self.agrees_with(s, origins.get(s)) for s in "ab")

    def agrees_with(self, side: str, origin: Origin | None) -> bool:
        """Whether another step's origin for `side` lies where the programs differ."""
        if origin is None:
            return False
        if origin.kind in ("command-line", "config-file"):
            return origin.option in self.options
        same_file = os.path.realpath(origin.file or "") == self.scripts.get(side)
        return same_file and origin.line in self.differing.get(side, set())


# --------------------------------------------------------------------------------------
# 1. The slice of one side
# --------------------------------------------------------------------------------------


def _imported(idx: SourceIndex) -> set[str]:
    """Names the module binds by import: calls on them reach library state."""
    out: set[str] = set()
    for n in idx.walk():
        if isinstance(n, (cst.Import, cst.ImportFrom)) and not isinstance(n.names, cst.ImportStar):
            for a in n.names:
                root: cst.BaseExpression = a.asname.name if a.asname is not None else a.name
                while isinstance(root, cst.Attribute):
                    root = root.value
                if isinstance(root, cst.Name):
                    out.add(root.value)
    return out


def _root_name(node: cst.CSTNode) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else None


def _sets_state(stmt: cst.CSTNode, modules: set[str]) -> bool:
    """A simple statement that calls into an imported module for its effect or assigns
    one of its attributes (process state every later operator reads)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for s in stmt.body:
        if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call):
            if _root_name(s.value.func) in modules:
                return True
        if isinstance(s, cst.Assign) and any(
            isinstance(t.target, cst.Attribute) and _root_name(t.target) in modules
            for t in s.targets
        ):
            return True
    return False


@dataclass
class _Slice:
    idx: SourceIndex
    modules: set[str]
    units: dict[int, tuple[int, Unit]] = field(default_factory=dict)  # id -> (phase, unit)
    wanted: set[str] = field(default_factory=set)

    def add(self, stmt: cst.CSTNode, phase: int) -> None:
        if id(stmt) not in self.units:
            self.units[id(stmt)] = (phase, Unit.of(self.idx, stmt, top=phase == _MODULE))
            self.wanted |= _reads(self.idx, stmt)

    def backward(self, stmts: list[cst.CSTNode], phase: int) -> None:
        """Statements of one body (in order) that write a wanted name or set state."""
        for stmt in reversed(stmts):
            if _writes(self.idx, stmt) & self.wanted or _sets_state(stmt, self.modules):
                self.add(stmt, phase)

    def ordered(self) -> list[Unit]:
        return [u for _, u in sorted(self.units.values(), key=lambda pu: (pu[0], self.line(pu[1])))]

    def line(self, u: Unit) -> int:
        return self.idx.line_of(u.node)


def _chain(s: _Slice, lines: list[int], setup: str) -> cst.FunctionDef | None:
    """One operator's user frames, innermost first: the statement holding each line and
    the statements before it that feed it; a callee's parameter becomes what its caller
    passed. Returns the outermost function reached."""
    fn_prev: cst.FunctionDef | None = None
    for line in reversed(lines):
        fn = s.idx.function_at(line)
        stmt = _top_statement(fn, s.idx, line) if fn is not None else None
        if fn is None or stmt is None:
            break
        phase = _SETUP if fn.name.value == setup else _RUN
        if fn_prev is not None:
            calls = [c for c in s.idx.nodes_of(cst.Call, stmt) if _callee(c) == fn_prev.name.value]
            for c in calls:
                for p in _params(fn_prev):
                    a = _argument(c, fn_prev, p.name.value)
                    if a is not None:
                        s.wanted |= _reads(s.idx, a)
        s.add(stmt, phase)
        s.backward(_body(fn)[: _body(fn).index(stmt)], phase)
        _enclosing_scopes(s, fn, phase)
        fn_prev = fn
    return fn_prev


def _enclosing_scopes(s: _Slice, fn: cst.FunctionDef, phase: int) -> None:
    """A nested function reads its enclosing functions' variables when it runs: a JAX
    `train_step` defined in `main()` calls the `grad_fn` that `main` chose from an
    option, and its frames (jit traces it) stop at `train_step`. The enclosing bodies'
    statements that write what the slice wants join it."""
    outer = s.idx.enclosing(fn, cst.FunctionDef)
    while isinstance(outer, cst.FunctionDef):
        s.backward(_body(outer), phase)
        outer = s.idx.enclosing(outer, cst.FunctionDef)


def _through_setup(s: _Slice, entry: cst.FunctionDef, setup: str) -> None:
    """The entry's parameters are setup()'s returned values, by position."""
    fn = _setup_function(s.idx, setup)
    if fn is None:
        return
    try:
        ret, elems = _returned(fn)
    except LookupError:
        return
    names = [p.name.value for p in _params(entry)]
    chosen = [e for n, e in zip(names, elems, strict=False) if n in s.wanted]
    if not chosen:
        return
    s.add(ret, _SETUP)
    s.wanted |= set().union(*(_reads(s.idx, e) for e in chosen))
    s.backward([st for st in _body(fn) if st is not ret], _SETUP)


def _module_closure(s: _Slice) -> None:
    """Module-level statements the slice needs, to a fixpoint: assignments of wanted
    names, classes and functions it names (their bodies read further names), and
    statements that set library state."""
    grew = True
    while grew:
        grew = False
        for stmt in s.idx.module.body:
            if id(stmt) in s.units:
                continue
            named = isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) and (
                stmt.name.value in s.wanted
            )
            simple = isinstance(stmt, cst.SimpleStatementLine) and (
                _writes(s.idx, stmt) & s.wanted or _sets_state(stmt, s.modules)
            )
            if named or simple:
                s.add(stmt, _MODULE)
                grew = True
        # a user function the slice calls runs in its own scope: its state calls count
        for top in s.idx.module.body:
            if isinstance(top, cst.FunctionDef) and id(top) in s.units:
                for inner in _body(top):
                    if id(inner) not in s.units and _sets_state(inner, s.modules):
                        s.add(inner, _RUN)
                        grew = True


def chains_of(p: Profile, ops: list[int]) -> set[tuple[int, ...]]:
    """The distinct user-line chains (outermost first) of operators `ops`; where none of
    them has a line of the script (a program's unit that runs inside library code, an HF
    `Trainer` step), the script's lines that entered the unit (`program.entered_from`)."""
    chains = {c for o in ops if (c := tuple(_user_lines(p, o)))}
    if chains or not ops:
        return chains
    from magneton.tracer.programs.program import ENTERED_KEY

    script = real_path(p.run.script or "")
    try:
        entered = json.loads(p.config.get(ENTERED_KEY) or "[]")
    except ValueError:
        return chains
    lines = tuple(int(ln) for f, ln, _ in entered if real_path(f) == script)
    return {lines} if lines else chains


def mirror_chains(
    have: SourceIndex, lack: SourceIndex, chains: set[tuple[int, ...]]
) -> set[tuple[int, ...]]:
    """The other side's chains carried over to a script whose region ran no operator
    (extra work with no counterpart): each line becomes the statement at the same place
    (same function name, same top-level statement index) in `lack`'s file."""
    out = set()
    for chain in chains:
        mapped = []
        for line in chain:
            fn = have.function_at(line)
            if fn is None:  # module level (`main()` under `if __name__ ...`): no twin needed
                continue
            stmt = _top_statement(fn, have, line)
            twin = _twin(have, lack, fn)
            if stmt is None or twin is None:
                break
            k = _body(fn).index(stmt)
            if k >= len(_body(twin)):
                break
            mapped.append(lack.line_of(_body(twin)[k]))
        if mapped:
            out.add(tuple(mapped))
    return out


def _scope_path(idx: SourceIndex, fn: cst.FunctionDef) -> tuple[str, ...]:
    """`fn`'s name with those of the functions and classes around it, outermost first."""
    around = [
        a.name.value for a in idx.ancestors(fn) if isinstance(a, (cst.FunctionDef, cst.ClassDef))
    ]
    return (*reversed(around), fn.name.value)


def _twin(have: SourceIndex, lack: SourceIndex, fn: cst.FunctionDef) -> cst.FunctionDef | None:
    """The function of `lack` at `fn`'s place: same name, inside the same functions and
    classes (a `train_step` nested in `main` has its twin nested in the other's `main`)."""
    path = _scope_path(have, fn)
    return next((g for g in lack.functions if _scope_path(lack, g) == path), None)


def side_slice(p: Profile, idx: SourceIndex, chains: set[tuple[int, ...]]) -> _Slice:
    """The statements of `p`'s script that decide what operators with these user-line
    chains do."""
    s = _Slice(idx, _imported(idx))
    setup, entry = p.run.setup or "setup", (p.run.entry or "main").split(".")[-1]
    outer = [fn for lines in sorted(chains) if (fn := _chain(s, list(lines), setup))]
    if any(fn.name.value == entry for fn in outer):
        _through_setup(s, _setup_function(idx, entry) or outer[0], setup)
    _module_closure(s)
    return s


# --------------------------------------------------------------------------------------
# 2. Aligning the two slices
# --------------------------------------------------------------------------------------


def _launched(p: Profile, idx: SourceIndex, u: Unit) -> bool:
    """Whether a recorded operator's user frame lies in the statement."""
    span = idx.span(u.node)
    script = real_path(p.run.script or "")
    return any(real_path(f.file) == script and span.contains_line(f.line) for f in p.frames)


def _pick(p: Profile, idx: SourceIndex, units: list[Unit]) -> int:
    """Index of the block's first statement that launched operators, else 0."""
    return next((k for k, u in enumerate(units) if _launched(p, idx, u)), 0)


def _differing_lines(idx: SourceIndex, units: list[Unit]) -> set[int]:
    out: set[int] = set()
    for u in units:
        sp = idx.span(u.node)
        out |= set(range(sp.line, sp.end_line + 1))
    return out


def _variable(idx: SourceIndex, node: cst.CSTNode) -> str:
    """What a differing value sets: the keyword it is passed as, the dict key or class
    field it is stored under, else the name it is assigned to, else its own text."""
    for anc in [node, *idx.ancestors(node)]:
        p = idx.parent(anc)
        if isinstance(p, cst.Arg) and p.value is anc and p.keyword is not None:
            return p.keyword.value
        if isinstance(p, cst.DictElement) and p.value is anc:
            key = idx.code(p.key).strip()
            holder = next((a for a in idx.ancestors(p) if isinstance(a, cst.Assign)), None)
            base = idx.code(holder.targets[0].target).strip() if holder is not None else ""
            return f"{base}[{key}]"
        if isinstance(p, (cst.Assign, cst.AnnAssign)) and p.value is anc:
            t = p.targets[0].target if isinstance(p, cst.Assign) else p.target
            return idx.code(t).strip()
        if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
    return idx.code(node).strip()


def _value_kind(ia: SourceIndex, na: cst.CSTNode, ib: SourceIndex, nb: cst.CSTNode) -> str:
    """Code when either side's expression calls something (`images.contiguous()` vs
    `images.contiguous(memory_format=...)`: a different computation, ported as code); else
    an API argument when passed as a call's keyword, configuration when stored in a
    constant, a dict entry or a class field."""
    if any(True for _ in ia.nodes_of(cst.Call, na)) or any(True for _ in ib.nodes_of(cst.Call, nb)):
        return "code"
    return "api-argument" if isinstance(ia.parent(na), cst.Arg) else "config"


def _value_origins(
    na: cst.CSTNode, ia: SourceIndex, nb: cst.CSTNode, ib: SourceIndex
) -> dict[str, Origin]:
    var = _variable(ia, na)
    kind = _value_kind(ia, na, ib, nb)
    out = {}
    for side, node, idx in (("a", na, ia), ("b", nb, ib)):
        line = idx.line_of(node)
        out[side] = Origin(
            kind=kind,
            variable=var,
            file=idx.path,
            line=line,
            code=idx.line_text(line),
            value=idx.code(node).strip(),
            span=idx.span(node),
            note="the first statement that differs between the two programs among those "
            "that decide this region's operators",
        )
    return out


def _inside_definitions(
    tag: str, blocks: dict[str, list[Unit]], idxs: dict[str, SourceIndex], before: dict
) -> tuple[str, dict[str, list[Unit]], dict]:
    """The first differing block inside two same-named definitions (`def make_optimizer`
    on both sides, differing in one statement of its body), descending while the block
    is one such pair: the root is the statement that differs, not the `def` line that
    holds it, whose "code" fix could only point at the whole function."""
    while tag == "replace" and len(blocks["a"]) == len(blocks["b"]) == 1:
        na, nb = blocks["a"][0].node, blocks["b"][0].node
        defs = (cst.FunctionDef, cst.ClassDef)
        if not (isinstance(na, defs) and type(na) is type(nb) and na.name.value == nb.name.value):
            break
        ua = [Unit.of(idxs["a"], st, top=False) for st in _def_body(na)]
        ub = [Unit.of(idxs["b"], st, top=False) for st in _def_body(nb)]
        sm = difflib.SequenceMatcher(None, [u.text for u in ua], [u.text for u in ub], False)
        ops = [o for o in sm.get_opcodes() if o[0] != "equal"]
        if not ops:
            break
        tag, i1, i2, j1, j2 = ops[0]
        blocks = {"a": ua[i1:i2], "b": ub[j1:j2]}
        before = {"a": ua[i1 - 1] if i1 else before["a"], "b": ub[j1 - 1] if j1 else before["b"]}
    return tag, blocks, before


def _def_body(node: cst.FunctionDef | cst.ClassDef) -> list[cst.CSTNode]:
    return list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []


def _block_root(
    tag: str, blocks: dict[str, list[Unit]], idxs: dict[str, SourceIndex], profs, before
) -> tuple[str, dict[str, Origin]]:
    """(kind, origins) of the first differing block of the two aligned slices."""
    tag, blocks, before = _inside_definitions(tag, blocks, idxs, before)
    ua, ub = blocks["a"], blocks["b"]
    if tag == "replace":
        ka, kb = _pick(profs["a"], idxs["a"], ua), _pick(profs["b"], idxs["b"], ub)
        if len(ua) == len(ub):
            ka = kb = min(ka, kb)
        ka, kb = min(ka, len(ua) - 1), min(kb, len(ub) - 1)
        na, nb = smallest_difference(ua[ka].node, idxs["a"], ub[kb].node, idxs["b"])
        if isinstance(na, cst.BaseExpression) and isinstance(nb, cst.BaseExpression):
            origins = _value_origins(na, idxs["a"], nb, idxs["b"])
            return origins["a"].kind, origins
        return "code", {
            "a": _statement_origin(idxs["a"], ua[ka]),
            "b": _statement_origin(idxs["b"], ub[kb]),
        }
    have = "a" if tag == "delete" else "b"
    lack = "b" if have == "a" else "a"
    k = _pick(profs[have], idxs[have], blocks[have])
    unit = blocks[have][k]
    origins = {
        have: _statement_origin(idxs[have], unit),
        lack: _inserted(unit, idxs[have], before[lack], idxs[lack]),
    }
    kind = "global-flag" if _sets_state(unit.node, _imported(idxs[have])) else "api-argument"
    return kind, origins


def _file_statements(idx: SourceIndex) -> set[str]:
    """The normalised text of every module-level statement and every function's
    top-level statement of a file."""
    out = {Unit.of(idx, st, top=True).text for st in idx.module.body}
    for fn in idx.functions:
        out |= {Unit.of(idx, st, top=False).text for st in _body(fn)}
    return out


def _blocks(
    op: tuple, units: dict[str, list[Unit]], there: dict[str, set[str]]
) -> tuple[str, dict[str, list[Unit]]] | None:
    """One differing block of the aligned slices without the statements the other file
    also holds (`def naive_attention` both files define, reached by one slice only: the
    code does not differ there, only what the two slices reached); its tag recomputed
    from what is left, None when nothing is."""
    _, i1, i2, j1, j2 = op
    blocks = {
        "a": [u for u in units["a"][i1:i2] if u.text not in there["b"]],
        "b": [u for u in units["b"][j1:j2] if u.text not in there["a"]],
    }
    if not blocks["a"] and not blocks["b"]:
        return None
    tag = "replace" if blocks["a"] and blocks["b"] else ("delete" if blocks["a"] else "insert")
    return tag, blocks


def _code_difference(profs: dict[str, Profile], slices: dict[str, _Slice]) -> Difference | None:
    units = {s: slices[s].ordered() for s in "ab"}
    idxs = {s: slices[s].idx for s in "ab"}
    sm = difflib.SequenceMatcher(
        None, [u.text for u in units["a"]], [u.text for u in units["b"]], False
    )
    there = {x: _file_statements(idxs[x]) for x in "ab"}
    found = [
        (o, b) for o in sm.get_opcodes() if o[0] != "equal" and (b := _blocks(o, units, there))
    ]
    if not found:
        return None
    (_, i1, _, j1, _), (tag, blocks) = found[0]
    before = {"a": units["a"][i1 - 1] if i1 else None, "b": units["b"][j1 - 1] if j1 else None}
    kind, origins = _block_root(tag, blocks, idxs, profs, before)
    differing = {
        x: set().union(*(_differing_lines(idxs[x], blk[x]) for _, (_, blk) in found)) for x in "ab"
    }
    scripts = {x: os.path.realpath(idxs[x].path) for x in "ab"}
    return Difference(
        kind=kind, origins=origins, differing=differing, scripts=scripts, blocks=len(found)
    )


# --------------------------------------------------------------------------------------
# 3. Command-line options
# --------------------------------------------------------------------------------------


def _attributes_read(s: _Slice) -> set[str]:
    out: set[str] = set()
    for _, u in s.units.values():
        for n in s.idx.nodes_of(cst.Attribute, u.node):
            if isinstance(n.value, cst.Name):
                out.add(n.attr.value)
    return out


def _option_lines(s: _Slice, dest: str) -> set[int]:
    """The lines of the slice that read `X.dest` (what passes the option on)."""
    return {
        s.idx.line_of(n)
        for _, u in s.units.values()
        for n in s.idx.nodes_of(cst.Attribute, u.node)
        if isinstance(n.value, cst.Name) and n.attr.value == dest
    }


def _is_parse(call: cst.Call) -> bool:
    """A command-line parse: argparse's `parse_args`/`parse_known_args`, HF's
    `parse_args_into_dataclasses`."""
    name = _callee(call)
    return name.startswith("parse_") and "args" in name


def _passed_whole(s: _Slice) -> set[int]:
    """The lines of the slice that hand a parse's whole result to a call
    (`Trainer(args=training_args)`, `build(args)`, `**vars(args)`): that call reads every
    option the parse holds. Empty when the slice only reads options one by one."""
    parsed: set[str] = set()
    for _, u in s.units.values():
        for a in s.idx.nodes_of(cst.Assign, u.node):
            if isinstance(a.value, cst.Call) and _is_parse(a.value):
                for t in a.targets:
                    parsed |= {n.value for n in s.idx.nodes_of(cst.Name, t.target)}
    lines: set[int] = set()
    for _, u in s.units.values():
        for c in s.idx.nodes_of(cst.Call, u.node):
            if _is_parse(c):
                continue
            for arg in c.args:
                v = arg.value
                if isinstance(v, cst.Call) and _callee(v) == "vars" and v.args:
                    v = v.args[0].value
                if isinstance(v, cst.Name) and v.value in parsed:
                    lines.add(s.idx.line_of(c))
    return lines


def _differing_dests(configs: dict[str, dict]) -> list[str]:
    """The options both runs' recorded parsers hold whose parsed values differ."""
    from magneton.tracer.programs import cmdline

    values = [
        {d: v for p in cmdline.parsers_of(configs[x]) for d, v in p.values.items()} for x in "ab"
    ]
    return sorted(d for d in values[0].keys() & values[1].keys() if values[0][d] != values[1][d])


def _parameter_dests(configs: dict[str, dict]) -> set[str]:
    """The dests both runs' recorded parsers pass as function parameters (click)."""
    from magneton.tracer.programs import cmdline

    dests = [
        {a.dest for p in cmdline.parsers_of(configs[x]) if p.library == "click" for a in p.actions}
        for x in "ab"
    ]
    return dests[0] & dests[1]


def _option_candidates(
    slices: dict[str, _Slice], configs: dict[str, dict]
) -> tuple[list[str], dict[str, set[int]]]:
    """The options that decide the slice, and per side the lines that pass a parse on
    whole: those read one by one (`args.foreach`) first; then, where both slices hand a
    parse's result to a call whole, the one option whose value differs between the runs
    (several differing: which one decides is not known, and none is named)."""
    read = sorted(_attributes_read(slices["a"]) & _attributes_read(slices["b"]))
    # a click or typer command hands its options to the command function as parameters
    read += sorted(
        d
        for d in _parameter_dests(configs)
        if d in slices["a"].wanted and d in slices["b"].wanted and d not in read
    )
    whole = {x: _passed_whole(slices[x]) for x in "ab"}
    if not (whole["a"] and whole["b"]):
        return read, whole
    differing = [d for d in _differing_dests(configs) if d not in read]
    return read + (differing if len(differing) == 1 else []), whole


def _option_difference(
    profs: dict[str, Profile], slices: dict[str, _Slice], configs: dict[str, dict]
) -> Difference | None:
    from magneton.tracer.programs.program import command_line_origin

    from .dataflow import _option_default

    dests, whole = _option_candidates(slices, configs)
    for dest in dests:
        ca, cb = command_line_origin(configs["a"], dest), command_line_origin(configs["b"], dest)
        if ca is None or cb is None or ca.value == cb.value:
            continue
        in_files = _file_difference(configs, ca, cb)
        if in_files is not None:
            return in_files
        origins = {}
        for s, clo in (("a", ca), ("b", cb)):
            sl = slices[s]
            passes = _option_lines(sl, dest) or whole[s]
            line = min(passes, default=clo.line) or None
            how = "given on the command line" if clo.given else "its default"
            origins[s] = Origin(
                kind="command-line",
                variable=dest,
                file=sl.idx.path,
                line=line,
                code=sl.idx.line_text(line) if line else None,
                value=clo.value,
                option=clo.option,
                option_default=_option_default(clo.file, clo.line) if clo.line else None,
                note=f"option {clo.option} ({how}: {clo.value}; {clo.defined()}), "
                f"read at line {line}",
            )
        # another step's origin on a line that passes the option on agrees with it
        differing = {x: _option_lines(slices[x], dest) or whole[x] for x in "ab"}
        scripts = {x: os.path.realpath(slices[x].idx.path) for x in "ab"}
        return Difference(
            kind="command-line",
            origins=origins,
            differing=differing,
            scripts=scripts,
            options={ca.option},
        )
    return None


def _file_difference(configs: dict[str, dict], ca: Any, cb: Any) -> Difference | None:
    """When the differing option names the config file each run read (`--config
    a.yaml` vs `--config b.yaml`, tracer/programs/configfiles.py), the root is the keys
    the two files set differently: origins of kind "config-file" at the key's line in
    each file. None when the option is not a recorded file, or the files agree."""
    from magneton.tracer.programs.configfiles import differing_keys, file_named, key_line

    fa, fb = file_named(configs["a"], ca.value), file_named(configs["b"], cb.value)
    if fa is None or fb is None:
        return None
    keys = differing_keys(fa.doc, fb.doc)
    if not keys:
        return None
    path, va, vb = keys[0]
    variable = ".".join(map(str, path))
    origins = {}
    for side, f, value, clo in (("a", fa, va, ca), ("b", fb, vb, cb)):
        where = key_line(f.path, path)
        line = where[0] if where else None
        origins[side] = Origin(
            kind="config-file",
            variable=variable,
            file=f.path,
            line=line,
            code=_line_of(f.path, line) if line else None,
            value=value if isinstance(value, str) else json.dumps(value),
            option=clo.option,
            note=f"key {variable} of {os.path.basename(f.path)} (the file {clo.option} "
            f"names; {len(keys)} key(s) differ between the two files)",
        )
    return Difference(
        kind="config-file",
        origins=origins,
        differing={s: {o.line} if o.line else set() for s, o in origins.items()},
        scripts={s: os.path.realpath(o.file or "") for s, o in origins.items()},
        options={ca.option},
    )


def _line_of(path: str, line: int) -> str | None:
    import linecache

    text = linecache.getline(path, line)
    return text.rstrip("\n") or None


def program_difference(
    pa: Profile, pb: Profile, ops_a: list[int], ops_b: list[int], configs: dict[str, dict]
) -> Difference | None:
    """Where the two programs differ among the statements (and options) that decide the
    operators `ops_a` / `ops_b`; None when they do not differ there."""
    ia, ib = source_index(pa.run.script or ""), source_index(pb.run.script or "")
    if ia is None or ib is None:
        return None
    profs = {"a": pa, "b": pb}
    ca, cb = chains_of(pa, ops_a), chains_of(pb, ops_b)
    ca, cb = (ca or mirror_chains(ib, ia, cb)), (cb or mirror_chains(ia, ib, ca))
    slices = {"a": side_slice(pa, ia, ca), "b": side_slice(pb, ib, cb)}
    if not slices["a"].units and not slices["b"].units:
        return None
    return _code_difference(profs, slices) or _option_difference(profs, slices, configs)
