"""Reading user and library source with libcst: parsed files, whose code it is, literals.

`SourceIndex` is a parsed file with libcst metadata (PositionProvider, ParentNodeProvider,
ScopeProvider, QualifiedNameProvider), cached per file, shared by the data-flow, key-variable
and patch code. Nodes are always located by *position*, never by matching source text — two
statements can read alike, and a user's formatting must not change what Magneton finds.
Library files only pay for positions; scopes and qualified names are resolved on first use
because they cost as much as parsing.

`is_user_file` / `is_library_file` decide whose code a frame is (only the user's code gets
patched), and the literal helpers say when a walk has reached a value a user wrote.
"""

from __future__ import annotations

import os
import site
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

import libcst as cst
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    ScopeProvider,
)

from .text import Undecodable, note_undecodable, read_source

N = TypeVar("N", bound=cst.CSTNode)  # the node type `nodes_of` looks for


@dataclass(frozen=True)
class Span:
    """A node's source range: 1-based lines, 0-based columns, end exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int

    @classmethod
    def of(cls, r: CodeRange) -> Span:
        return cls(r.start.line, r.start.column, r.end.line, r.end.column)

    def contains_line(self, line: int) -> bool:
        return self.line <= line <= self.end_line

    def to_json(self) -> list[int]:
        return [self.line, self.col, self.end_line, self.end_col]


class SourceIndex:
    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.lines = text.splitlines()
        self.module = cst.parse_module(text)
        # unsafe_skip_copy: we never mutate the tree, and the deep copy doubled parse time
        self.wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        self.positions = self.wrapper.resolve(PositionProvider)
        self._parents = None
        self._scopes = None
        self._qnames: dict[int, set[QualifiedName]] | None = None
        self._functions: list[cst.FunctionDef] | None = None

    # ---- lazily resolved metadata -----------------------------------------------------

    @property
    def parents(self):
        if self._parents is None:
            self._parents = self.wrapper.resolve(ParentNodeProvider)
        return self._parents

    @property
    def scopes(self):
        if self._scopes is None:
            self._scopes = self.wrapper.resolve(ScopeProvider)
        return self._scopes

    def qualified_names(self, node: cst.CSTNode) -> set[str]:
        """Fully qualified names of an expression (import aliases resolved)."""
        if self._qnames is None:
            collector = _QNameCollector()
            self.wrapper.visit(collector)
            self._qnames = collector.names
        names: set[QualifiedName] = self._qnames.get(id(node), set())
        return {q.name for q in names}

    # ---- positions ---------------------------------------------------------------------

    def span(self, node: cst.CSTNode) -> Span:
        return Span.of(self.positions[node])

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def line_text(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    def walk(self, node: cst.CSTNode | None = None) -> Iterator[cst.CSTNode]:
        """Every node under `node` (default: the module), pre-order."""
        stack = [node or self.module]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))

    def nodes_of(self, kind: type[N], within: cst.CSTNode | None = None) -> Iterator[N]:
        return (n for n in self.walk(within) if isinstance(n, kind))

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parent(node)
        while p is not None:
            yield p
            p = self.parent(p)

    def enclosing(self, node: cst.CSTNode, kind: type) -> cst.CSTNode | None:
        for a in self.ancestors(node):
            if isinstance(a, kind):
                return a
        return None

    @property
    def functions(self) -> list[cst.FunctionDef]:
        """Every function definition in the file, pre-order. Found by one walk and kept:
        a diagnosis asks `function_at` hundreds of times of one large library file (an HF
        modeling file), and a walk per question was most of a diagnosis's own time."""
        if self._functions is None:
            self._functions = list(self.nodes_of(cst.FunctionDef))
        return self._functions

    def function_at(self, line: int, name: str | None = None) -> cst.FunctionDef | None:
        """The innermost function whose body spans `line` (optionally with this name: a
        code object's name, or a qualified name as JAX's frames give it, whose last part
        is the `def`'s: `main.<locals>.train_step`)."""
        best = None
        short = name.rsplit(".", 1)[-1] if name else None
        for fn in self.functions:
            sp = self.span(fn)
            if sp.contains_line(line) and (short is None or fn.name.value == short):
                if best is None or self.span(best).line <= sp.line:
                    best = fn
        return best

    def function_by_firstline(self, firstline: int) -> cst.FunctionDef | None:
        """The function whose `def` (or first decorator) is on `firstline` (co_firstlineno)."""
        for fn in self.functions:
            sp = self.span(fn)
            def_line = self.line_of(fn.name)
            if firstline in (sp.line, def_line):
                return fn
        return None

    def statement_at(self, line: int, within: cst.CSTNode | None = None) -> cst.CSTNode | None:
        """The innermost simple statement line or compound statement starting at/spanning line."""
        best = None
        for n in self.walk(within):
            if isinstance(n, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                sp = self.span(n)
                if sp.contains_line(line):
                    if best is None or sp.line >= self.span(best).line:
                        best = n
        if isinstance(best, cst.BaseCompoundStatement):
            # a line inside a compound statement's *header* (e.g. an `if` test) → the header
            return best
        return best

    def calls_on_line(self, line: int, within: cst.CSTNode | None = None) -> list[cst.Call]:
        """Calls whose source range covers `line`, innermost (shortest) first."""
        out = [c for c in self.nodes_of(cst.Call, within) if self.span(c).contains_line(line)]
        out.sort(key=lambda c: (self.span(c).end_line - self.span(c).line, -self.span(c).line))
        return out

    def class_of(self, fn: cst.FunctionDef) -> cst.ClassDef | None:
        p = self.parent(fn)
        # a method's parent chain: FunctionDef -> IndentedBlock -> ClassDef
        while p is not None and not isinstance(p, (cst.ClassDef, cst.FunctionDef, cst.Module)):
            p = self.parent(p)
        return p if isinstance(p, cst.ClassDef) else None

    def methods(self, cls: cst.ClassDef) -> list[cst.FunctionDef]:
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
        return [s for s in body if isinstance(s, cst.FunctionDef)]

    def class_named(self, name: str) -> cst.ClassDef | None:
        for c in self.nodes_of(cst.ClassDef):
            if c.name.value == name:
                return c
        return None


class _QNameCollector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def __init__(self):
        super().__init__()
        self.names: dict[int, set[QualifiedName]] = {}

    def _record(self, node: cst.CSTNode) -> None:
        try:
            q = self.get_metadata(QualifiedNameProvider, node, set())
        except Exception:  # names libcst cannot resolve (star imports, dynamic code)
            q = set()
        if q:
            self.names[id(node)] = set(q)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._record(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._record(node)


@lru_cache(maxsize=64)
def _cached(path: str, mtime_ns: int, size: int) -> SourceIndex:
    return SourceIndex(path, read_source(path))


def source_index(path: str | os.PathLike) -> SourceIndex | None:
    """Parsed source of `path`, or None when it is missing, not decodable in the
    encoding it declares (noted in `undecodable_sources`) or not parseable Python."""
    p = str(path)
    try:
        st = os.stat(p)
        return _cached(p, st.st_mtime_ns, st.st_size)
    except Undecodable as e:
        note_undecodable(p, str(e))
        return None
    except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
        return None


# --------------------------------------------------------------------------------------
# Whose code is it?
# --------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def real_path(path: str) -> str:
    """`os.path.realpath`, remembered for the process: a diagnosis asks it of every frame
    of every operator in a region (1.08 M `lstat` calls, 14 of the 80 CPU s of a
    15k-operator diff under cProfile), for a few hundred distinct files that do not move
    while it runs."""
    return os.path.realpath(path)


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(os.path.realpath(p))
    for p in site.getsitepackages() + [site.getusersitepackages()]:
        roots.add(os.path.realpath(p))
    return tuple(sorted(roots, key=len, reverse=True))


def is_library_file(path: str) -> bool:
    """Installed library or stdlib code (site-packages, the interpreter's lib dir)."""
    if not path or path.startswith("<"):
        return True
    real = real_path(path)
    if "site-packages" in real.split(os.sep) or "dist-packages" in real.split(os.sep):
        return True
    return any(real.startswith(r + os.sep) for r in _library_roots())


def is_user_file(path: str, script: str) -> bool:
    """The recorded script or a module next to it that is not installed library code."""
    if not path or not script or is_library_file(path):
        return False
    real, script = real_path(path), real_path(script)
    return real == script or real.startswith(os.path.dirname(script) + os.sep)


def user_files(script: str) -> list[str]:
    """The script plus the sibling modules it imports (where a user's settings live)."""
    if not script or not os.path.isfile(script):
        return []
    out = [os.path.realpath(script)]
    idx = source_index(script)
    if idx is None:
        return out
    root = os.path.dirname(out[0])
    for node in idx.walk():
        names: list[str] = []
        if isinstance(node, cst.Import):
            names = [_dotted(a.name) for a in node.names]
        elif isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
            names = [_dotted(node.module)]
        for name in names:
            cand = os.path.join(root, *name.split(".")) + ".py"
            if os.path.isfile(cand) and os.path.realpath(cand) not in out:
                out.append(os.path.realpath(cand))
    return out


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def dotted_name(node: cst.BaseExpression) -> str:
    """`a.b.c` for Name/Attribute chains, "" otherwise."""
    return _dotted(node)


def literal_value(node: cst.BaseExpression) -> object:
    """The Python value of a literal node, or the sentinel `NOT_LITERAL`."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        v = node.evaluated_value
        return v if v is not None else NOT_LITERAL
    if isinstance(node, cst.Integer):
        return node.evaluated_value
    if isinstance(node, cst.Float):
        return node.evaluated_value
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_value(node.expression)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    return NOT_LITERAL


class _NotLiteral:
    def __repr__(self) -> str:
        return "NOT_LITERAL"


NOT_LITERAL = _NotLiteral()


def is_literal(node: cst.BaseExpression) -> bool:
    return literal_value(node) is not NOT_LITERAL


def same_value(literal_code: str | None, observed: str | None) -> bool:
    """Does a literal's source text denote the observed value (repr or str form)?"""
    if literal_code is None or observed is None:
        return False
    try:
        node = cst.parse_expression(literal_code)
    except cst.ParserSyntaxError:
        return False
    v = literal_value(node)
    if v is NOT_LITERAL:
        return False
    return observed in (repr(v), str(v))


def params(fn: cst.FunctionDef) -> list[cst.Param]:
    """Every parameter of `fn`: positional-only, ordinary, keyword-only, `*args`, `**kw`."""
    p = fn.params
    out = list(p.posonly_params) + list(p.params) + list(p.kwonly_params)
    if isinstance(p.star_arg, cst.Param):
        out.append(p.star_arg)
    if p.star_kwarg is not None:
        out.append(p.star_kwarg)
    return out
