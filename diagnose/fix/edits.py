"""Fixes for diagnosed findings: a libcst edit of the user's code, emitted as a unified diff.

Three kinds of edit, all made on the parsed tree by *position* (never by text search, so a
second identical literal elsewhere in the file is never touched):

* `replace_value` — the origin literal of a config value, API argument or global flag
  becomes the efficient side's literal (taken verbatim from the efficient script when it
  has one, so quoting style and spelling match what provably ran).
* `add_keyword` — the setting was a library default: add `keyword=value` to the user's call
  that builds the settings object.
* `port_statements` — API misuse where both sides are user code: the efficient side's
  statements replace the wasteful side's at its call site, but only when that is
  mechanically sound (every name the ported code reads exists there, every name the
  replaced code defines and later code reads is defined again, missing imports are copied).
  Otherwise the caller gets None and shows guidance with the efficient snippet.

Diffs are relative to the script's directory with git's a/ b/ prefixes, so
`git apply --check` (inside or outside a repository) accepts them; nothing here writes a
file — `magneton export-patch --apply` is the only writer.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..source.index import SourceIndex, Span, params, source_index
from ..source.text import read_source


@dataclass
class Patch:
    file: str  # absolute path of the file the patch edits
    base_dir: str  # the diff's paths are relative to this directory
    original: str
    patched: str

    @property
    def relpath(self) -> str:
        return os.path.relpath(self.file, self.base_dir).replace(os.sep, "/")

    def diff(self) -> str:
        return unified_diff(self.relpath, self.original, self.patched)


def unified_diff(relpath: str, original: str, patched: str) -> str:
    """A git-style unified diff of one file (a/ and b/ prefixes, `diff --git` header)."""
    a = original.splitlines(keepends=True)
    b = patched.splitlines(keepends=True)
    body = list(difflib.unified_diff(a, b, fromfile=f"a/{relpath}", tofile=f"b/{relpath}", n=3))
    if not body:
        return ""
    out = [f"diff --git a/{relpath} b/{relpath}\n"]
    for line in body:
        if not line.endswith("\n"):
            # git's marker for a last line without newline
            line = line + "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


class _ReplaceAt(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, span: Span, make):
        super().__init__()
        self.span = span
        self.make = make
        self.done = False

    def on_leave(self, original_node, updated_node):
        if self.done or not isinstance(original_node, cst.BaseExpression):
            return updated_node
        try:
            pos = self.get_metadata(PositionProvider, original_node)
        except KeyError:
            return updated_node
        if Span.of(pos) == self.span:
            self.done = True
            return self.make(updated_node)
        return updated_node


def _transform(text: str, span: Span, make) -> str | None:
    module = cst.parse_module(text)
    t = _ReplaceAt(span, make)
    new = MetadataWrapper(module).visit(t)
    return new.code if t.done else None


def replace_value(file: str, span: Span, new_code: str) -> str | None:
    """The file's text with the expression at `span` replaced by `new_code`."""
    try:
        new_expr = cst.parse_expression(new_code)
    except cst.ParserSyntaxError:
        return None
    text = read_source(file)
    return _transform(text, span, lambda node: new_expr)


def add_keyword(file: str, call_span: Span, keyword: str, value_code: str) -> str | None:
    """The file's text with `keyword=value` appended to the call at `call_span`."""
    try:
        value = cst.parse_expression(value_code)
    except cst.ParserSyntaxError:
        return None
    text = read_source(file)

    def make(node):
        if not isinstance(node, cst.Call):
            return node
        args = list(node.args)
        if any(a.keyword is not None and a.keyword.value == keyword for a in args):
            return node
        if args:
            last = args[-1]
            if last.comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = last.with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
        args.append(
            cst.Arg(
                value=value,
                keyword=cst.Name(keyword),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
        )
        return node.with_changes(args=args)

    return _transform(text, call_span, make)


# --------------------------------------------------------------------------------------
# Porting the efficient side's statements (API misuse between two user scripts)
# --------------------------------------------------------------------------------------


@dataclass
class Block:
    """Consecutive statements of one block that produced a region's operators."""

    idx: SourceIndex
    fn: cst.FunctionDef
    body: cst.BaseSuite  # the block holding the statements
    start: int  # index of the first statement in body.body
    end: int  # one past the last

    @property
    def statements(self) -> list[cst.BaseStatement | cst.BaseSmallStatement]:
        # small statements when the block is a one-line body (`def f(): x = g(); return x`)
        return list(self.body.body[self.start : self.end])

    def code(self) -> str:
        return "".join(self.idx.code(s) for s in self.statements)

    def lines(self) -> tuple[int, int]:
        sts = self.statements
        return self.idx.span(sts[0]).line, self.idx.span(sts[-1]).end_line


def statement_block(file: str, lines: list[int]) -> Block | None:
    """The smallest run of sibling statements (inside one function) covering `lines`."""
    idx = source_index(file)
    if idx is None or not lines:
        return None
    fns = {id(f): f for f in (idx.function_at(ln) for ln in lines) if f is not None}
    if len(fns) != 1:
        return None
    fn = next(iter(fns.values()))
    body: cst.BaseSuite = fn.body
    while True:
        stmts = list(body.body)
        hit = [i for i, s in enumerate(stmts) if any(idx.span(s).contains_line(ln) for ln in lines)]
        if not hit:
            return None
        if len(hit) == 1 and isinstance(inner := stmts[hit[0]], cst.BaseCompoundStatement):
            header_lines = [ln for ln in lines if ln == idx.span(inner).line]
            if not header_lines and isinstance(inner.body, cst.IndentedBlock):
                body = inner.body  # all lines inside one compound statement: descend
                continue
        return Block(idx, fn, body, min(hit), max(hit) + 1)


def extend_to_end(block: Block, whole: bool = False) -> Block:
    """The block extended to the last statement of its suite (through the return), or
    with `whole` to the entire suite."""
    return Block(block.idx, block.fn, block.body, 0 if whole else block.start, len(block.body.body))


def _scope_names(block: Block) -> tuple[set[str], set[str], set[str]]:
    """(names read from the function's locals/params, names read from module scope,
    names the block assigns) for the block's statements."""
    idx = block.idx
    scopes = idx.scopes
    first, last = block.lines()
    fn_scope = scopes.get(block.fn.body.body[0]) if block.fn.body.body else None
    local_reads: set[str] = set()
    global_reads: set[str] = set()
    assigned: set[str] = set()
    for st in block.statements:
        for n in idx.walk(st):
            if not isinstance(n, cst.Name):
                continue
            scope = scopes.get(n)
            if scope is None:
                continue
            for acc in scope.accesses[n.value]:
                if acc.node is not n:
                    continue
                for ref in acc.referents:
                    rscope = getattr(ref, "scope", None)
                    if rscope is None or type(rscope).__name__ == "BuiltinScope":
                        continue
                    if type(rscope).__name__ == "GlobalScope":
                        global_reads.add(n.value)
                    elif rscope is fn_scope or rscope is scope:
                        node = getattr(ref, "node", None)
                        if node is not None and node in idx.positions:
                            if idx.line_of(node) < first or isinstance(node, cst.Param):
                                local_reads.add(n.value)
                        else:
                            local_reads.add(n.value)
        for n in idx.walk(st):
            targets: list[cst.BaseExpression] = []
            if isinstance(n, cst.Assign):
                targets = [t.target for t in n.targets]
            elif isinstance(n, (cst.AnnAssign, cst.AugAssign)):
                targets = [n.target]
            elif isinstance(n, cst.For):
                targets = [n.target]
            for t in targets:
                for m in idx.walk(t):
                    if isinstance(m, cst.Name) and not _is_attr_name(idx, m):
                        assigned.add(m.value)
    del last
    return local_reads, global_reads, assigned


def _is_attr_name(idx: SourceIndex, n: cst.Name) -> bool:
    p = idx.parent(n)
    return isinstance(p, cst.Attribute) and p.attr is n


def _available_before(block: Block) -> set[str]:
    """Names bound in the function before the block: parameters and earlier assignments."""
    idx = block.idx
    first, _ = block.lines()
    names = {p.name.value for p in params(block.fn)}
    scope = idx.scopes.get(block.fn.body.body[0]) if block.fn.body.body else None
    if scope is not None:
        for a in scope.assignments:
            node = getattr(a, "node", None)
            if node is not None and node in idx.positions and idx.line_of(node) < first:
                names.add(a.name)
    return names


def _module_names(idx: SourceIndex) -> set[str]:
    scope = idx.scopes.get(idx.module.body[0]) if idx.module.body else None
    if scope is None:
        return set()
    root = scope.globals if hasattr(scope, "globals") else scope
    return {a.name for a in root.assignments}


def _definition_code(block: Block, name: str) -> str | None:
    """Source of the last statement assigning `name` before the block (whitespace-free)."""
    idx = block.idx
    first, _ = block.lines()
    best = None
    for n in idx.walk(block.fn.body):
        if isinstance(n, cst.Assign) and idx.line_of(n) < first:
            for t in n.targets:
                if any(isinstance(m, cst.Name) and m.value == name for m in idx.walk(t.target)):
                    best = n
    if best is None:
        return None
    return "".join(idx.code(best).split())


def _read_after(block: Block, names: set[str]) -> set[str]:
    """Which of `names` the function reads after the block."""
    idx = block.idx
    _, last = block.lines()
    out = set()
    for n in idx.walk(block.fn.body):
        if isinstance(n, cst.Name) and n.value in names and idx.line_of(n) > last:
            if not _is_attr_name(idx, n):
                out.add(n.value)
    return out


def _module_binding(idx: SourceIndex, name: str) -> cst.SimpleStatementLine | None:
    """The module-level statement (import or assignment) that binds `name`."""
    for st in idx.module.body:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                aliases = small.names if not isinstance(small.names, cst.ImportStar) else []
                for al in aliases:
                    bound = (
                        al.asname.name.value
                        if al.asname is not None and isinstance(al.asname.name, cst.Name)
                        else _root_name(al.name)
                    )
                    if bound == name:
                        return st
            elif isinstance(small, cst.Assign):
                for t in small.targets:
                    if isinstance(t.target, cst.Name) and t.target.value == name:
                        return st
    return None


def _root_name(node: cst.BaseExpression) -> str:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else ""


@dataclass
class Port:
    text: str | None  # patched file text, None when not mechanically portable
    reason: str  # why not (or what was added)
    snippet: str  # the efficient side's statements


def port_statements(wasteful: Block, efficient: Block) -> Port:
    """Replace the wasteful block with the efficient one when that is sound."""
    snippet = efficient.code()
    why = _unsound_port(wasteful, efficient)
    if why:
        return Port(None, why, snippet)
    _, global_reads, _ = _scope_names(efficient)
    add_imports: list[cst.SimpleStatementLine] = []
    for name in sorted(global_reads - _module_names(wasteful.idx)):
        binding = _module_binding(efficient.idx, name)
        if binding is None:
            return Port(None, f"the efficient code needs module name {name!r}", snippet)
        if all(binding is not b for b in add_imports):
            add_imports.append(binding)
    # re-indent the efficient statements to the wasteful block's indentation by building
    # the new body from nodes (libcst carries indentation in the block, not the statements)
    new_body = (
        list(wasteful.body.body[: wasteful.start])
        + efficient.statements
        + list(wasteful.body.body[wasteful.end :])
    )
    swap = _Swap(wasteful.body, new_body, add_imports)
    new_module = wasteful.idx.module.visit(swap)
    if not swap.done:
        return Port(None, "the wasteful statements are not in an indented block", snippet)
    note = ""
    if add_imports:
        note = "added " + "; ".join(
            wasteful.idx.module.code_for_node(s).strip() for s in add_imports
        )
    return Port(new_module.code, note, snippet)


def unportable(wasteful: Block, efficient: Block) -> str:
    """Why the efficient block's code cannot stand in the wasteful block's place as it
    is ("" when it can): `_unsound_port`'s reasons, or a module name it reads that the
    wasteful module does not bind (edits that copy no imports need them all there)."""
    why = _unsound_port(wasteful, efficient)
    if why:
        return why
    _, global_reads, _ = _scope_names(efficient)
    missing = sorted(global_reads - _module_names(wasteful.idx))
    return f"the efficient code needs module name(s) {', '.join(missing)}" if missing else ""


def _unsound_port(wasteful: Block, efficient: Block) -> str:
    """Why the efficient block cannot replace the wasteful one ("" when it can): a name
    it reads is missing or means something else there, later code reads a name it does
    not define, or the two differ in whether they return."""
    local_reads, _, eff_assigned = _scope_names(efficient)
    _, _, waste_assigned = _scope_names(wasteful)
    missing_local = sorted(local_reads - _available_before(wasteful))
    if missing_local:
        return (
            f"the efficient code reads {', '.join(missing_local)}, which is not defined at "
            "the wasteful call site"
        )
    # Same name is not same value: a local the ported code reads must be a parameter of
    # both functions, or be assigned before the block by identical code on both sides.
    w_params = {p.name.value for p in params(wasteful.fn)}
    e_params = {p.name.value for p in params(efficient.fn)}
    for name in sorted(local_reads):
        if name in w_params and name in e_params:
            continue
        if _definition_code(efficient, name) is None or _definition_code(
            efficient, name
        ) != _definition_code(wasteful, name):
            return f"{name!r} is computed differently before the two call sites"
    lost = sorted(_read_after(wasteful, waste_assigned) - eff_assigned)
    if lost:
        return f"later code reads {', '.join(lost)}, which the efficient code does not define"
    w_ret = _ends_in_return(wasteful.statements[-1])
    e_ret = _ends_in_return(efficient.statements[-1])
    if e_ret and not w_ret and wasteful.end < len(wasteful.body.body):
        return "the efficient code returns where the wasteful code continues"
    if w_ret and not e_ret:
        return "the efficient code does not return the value the wasteful code returns"
    return ""


class _Swap(cst.CSTTransformer):
    """Puts `new_body` in place of the block `target`, and `add_imports` after the
    module's last import."""

    def __init__(
        self,
        target: cst.BaseSuite,
        new_body: list,
        add_imports: list[cst.SimpleStatementLine],
    ):
        super().__init__()
        self.target, self.new_body, self.add_imports = target, new_body, add_imports
        self.done = False

    def leave_IndentedBlock(self, original_node, updated_node):
        if original_node is self.target:
            self.done = True
            return updated_node.with_changes(body=self.new_body)
        return updated_node

    def leave_Module(self, original_node, updated_node):
        if not self.add_imports:
            return updated_node
        body = list(updated_node.body)
        last_import = -1
        for i, st in enumerate(body):
            if isinstance(st, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in st.body
            ):
                last_import = i
        for k, st in enumerate(self.add_imports):
            body.insert(last_import + 1 + k, st)
        return updated_node.with_changes(body=body)


def _ends_in_return(st: cst.BaseStatement | cst.BaseSmallStatement) -> bool:
    return isinstance(st, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Return) for s in st.body
    )


def make_patch(file: str, base_dir: str, patched_text: str | None) -> Patch | None:
    if patched_text is None:
        return None
    original = read_source(file)
    if patched_text == original:
        return None
    return Patch(file=file, base_dir=base_dir, original=original, patched=patched_text)
