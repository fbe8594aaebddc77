"""Argument ports: when the two sides make the same call with different arguments, carry
the efficient side's arguments over to the wasteful side's call.

A redundant copy is often one argument away from gone: `F.conv2d(F.pad(x, p), w)` writes a
padded copy that `F.conv2d(x, w, padding=1)` never makes. Replacing the wasteful
statement with the efficient one would also fix it, but it throws away whatever else the
user wrote on that statement (comments, line breaks, other arguments' spelling) and the
summary cannot say *what* changed. Here the two calls are compared on the libcst tree —
same callee, then positional arguments by position and keywords by name — and the patch
rewrites only the arguments that differ, in the wasteful call's own formatting.

The port is offered only when it is the *whole* difference: the wasteful statements with
that one call's arguments replaced must parse to the same Python as the efficient
statements (compared as `ast` dumps, so formatting and comments never count). That rules
out a call whose arguments agree while the code around it does not — porting
`padding=1` to a call whose input was already padded on the line above would pad twice.
Different callees (`torch.tensor` vs `torch.as_tensor`) are never an argument port: the
caller falls back to porting the efficient side's statements.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..source.index import Span, source_index
from .edits import Block

_EMPTY = cst.Module(body=[])


def node_code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def _shape(node: cst.CSTNode) -> str:
    """What a node means as Python, blind to formatting and comments: its `ast` dump."""
    code = node_code(node).strip()
    try:
        if isinstance(node, cst.BaseExpression):
            # in parentheses: an argument may span lines inside its call's parentheses
            return ast.dump(ast.parse(f"({code}\n)", mode="eval"))
        return ast.dump(ast.parse(code))
    except SyntaxError:  # a fragment ast cannot read alone: compare its text
        return " ".join(code.split())


def _same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return _shape(a) == _shape(b)


@dataclass(frozen=True)
class ArgChange:
    """One argument that differs: a keyword by name, a positional one by its index."""

    kind: str  # "added" | "removed" | "changed"
    name: str  # keyword name, or "#0", "#1", ... for positional arguments
    old: str | None  # the wasteful side's text (None when added)
    new: str | None  # the efficient side's text (None when removed)

    def text(self) -> str:
        if self.name.startswith("#"):
            where = f"argument {self.name[1:]}"
            if self.kind == "added":
                return f"add {where} `{self.new}`"
            if self.kind == "removed":
                return f"drop {where} `{self.old}`"
            return f"{where} `{self.old}` -> `{self.new}`"
        if self.kind == "added":
            return f"add `{self.name}={self.new}`"
        if self.kind == "removed":
            return f"drop `{self.name}={self.old}`"
        return f"`{self.name}={self.old}` -> `{self.name}={self.new}`"


@dataclass
class CallDiff:
    """Two calls to the same callee that differ only in their arguments."""

    callee: str
    wasteful: cst.Call
    efficient: cst.Call
    changes: list[ArgChange]

    def summary(self) -> str:
        return "; ".join(c.text() for c in self.changes)


def _positional(args: Sequence[cst.Arg]) -> list[cst.Arg]:
    return [a for a in args if a.keyword is None]


def _keywords(args: Sequence[cst.Arg]) -> dict[str, cst.Arg]:
    return {a.keyword.value: a for a in args if a.keyword is not None}


def _arg_text(a: cst.Arg) -> str:
    star = a.star if isinstance(a.star, str) else ""
    return star + node_code(a.value).strip()


def compare_calls(w: cst.Call, e: cst.Call) -> CallDiff | None:
    """How two calls' arguments differ, or None when the callees differ or nothing does.
    Positional arguments (and `*args`) compare by position, keywords by name, so
    `f(x, a=1, b=2)` and `f(x, b=2, a=1)` are the same call."""
    if not _same(w.func, e.func):
        return None
    changes: list[ArgChange] = []
    pw, pe = _positional(w.args), _positional(e.args)
    for i in range(max(len(pw), len(pe))):
        a = pw[i] if i < len(pw) else None
        b = pe[i] if i < len(pe) else None
        if a is not None and b is not None:
            if a.star != b.star or not _same(a.value, b.value):
                changes.append(ArgChange("changed", f"#{i}", _arg_text(a), _arg_text(b)))
        elif b is not None:
            changes.append(ArgChange("added", f"#{i}", None, _arg_text(b)))
        elif a is not None:
            changes.append(ArgChange("removed", f"#{i}", _arg_text(a), None))
    kw, ke = _keywords(w.args), _keywords(e.args)
    for name, b in ke.items():
        a = kw.get(name)
        if a is None:
            changes.append(ArgChange("added", name, None, node_code(b.value).strip()))
        elif not _same(a.value, b.value):
            changes.append(
                ArgChange("changed", name, node_code(a.value).strip(), node_code(b.value).strip())
            )
    for name, a in kw.items():
        if name not in ke:
            changes.append(ArgChange("removed", name, node_code(a.value).strip(), None))
    if not changes:
        return None
    return CallDiff(node_code(w.func).strip(), w, e, changes)


def _calls(nodes: Sequence[cst.CSTNode]) -> list[cst.Call]:
    """Every call under `nodes`, innermost first (post-order)."""
    out: list[cst.Call] = []

    def visit(n: cst.CSTNode) -> None:
        for c in n.children:
            visit(c)
        if isinstance(n, cst.Call):
            out.append(n)

    for n in nodes:
        visit(n)
    return out


class _SwapNode(cst.CSTTransformer):
    """Replaces one node, found by identity, with another."""

    def __init__(self, target: cst.CSTNode, replacement: cst.CSTNode):
        super().__init__()
        self.target, self.replacement = target, replacement

    def on_leave(self, original_node, updated_node):
        return self.replacement if original_node is self.target else updated_node


def argument_port(
    wasteful: Sequence[cst.CSTNode], efficient: Sequence[cst.CSTNode]
) -> CallDiff | None:
    """The call of the wasteful statements whose arguments, replaced by those of the
    same callee's call on the efficient side, make the two sides the same Python — the
    innermost such call (the smallest edit) — or None when no single call's arguments
    account for the whole difference."""
    if len(wasteful) != len(efficient) or not wasteful:
        return None
    want = [_shape(s) for s in efficient]
    if [_shape(s) for s in wasteful] == want:
        return None  # nothing differs: no port (and never a no-op one)
    # callees parsed once: a whole function body holds many calls on each side
    e_calls = [(c, _shape(c.func)) for c in _calls(efficient)]
    for cw in _calls(wasteful):
        callee = _shape(cw.func)
        for ce, e_callee in e_calls:
            diff = compare_calls(cw, ce) if e_callee == callee else None
            if diff is None:
                continue
            swap = _SwapNode(cw, cw.with_changes(args=ce.args))
            # visiting a statement with a node-for-node swap returns a node, never a
            # removal or a flattened sequence
            if [_shape(cast(cst.CSTNode, s.visit(swap))) for s in wasteful] == want:
                return diff
    return None


def merge_args(w: cst.Call, e: cst.Call) -> list[cst.Arg]:
    """The efficient call's arguments, written in the wasteful call's style: an argument
    both sides pass alike keeps the wasteful side's node (its comments and spacing), a
    changed one keeps its keyword and spacing with the efficient value, an added one is
    the efficient node; separators follow the wasteful call's (its first comma), and a
    trailing comma stays if the wasteful call had one."""
    pw, kw = _positional(w.args), _keywords(w.args)
    out: list[cst.Arg] = []
    ours: list[bool] = []  # the node is the wasteful side's (keeps its own separator)
    pos = 0
    for b in e.args:
        if b.keyword is None:
            a = pw[pos] if pos < len(pw) else None
            pos += 1
        else:
            a = kw.get(b.keyword.value)
        if a is None:
            out.append(b)
        elif a.star == b.star and _same(a.value, b.value):
            out.append(a)
        else:
            out.append(a.with_changes(value=b.value, star=b.star))
        ours.append(a is not None)
    sep = _separator(w)
    # a trailing comma (a call written one argument per line) stays
    last = w.args[-1].comma if w.args else cst.MaybeSentinel.DEFAULT
    for i, a in enumerate(out):
        if i == len(out) - 1:
            out[i] = a.with_changes(comma=last)
        elif not (ours[i] and isinstance(a.comma, cst.Comma)):
            out[i] = a.with_changes(comma=sep)
    return out


def _separator(w: cst.Call) -> cst.Comma:
    """The wasteful call's argument separator, without the comment it may carry (a new
    argument must not inherit `# zero border` from the argument it follows)."""
    comma = next((a.comma for a in w.args[:-1] if isinstance(a.comma, cst.Comma)), None)
    if comma is None:
        return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    ws = comma.whitespace_after
    if isinstance(ws, cst.ParenthesizedWhitespace):
        ws = ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    return comma.with_changes(whitespace_after=ws)


class _PortAt(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, span: Span, efficient: cst.Call):
        super().__init__()
        self.span, self.efficient = span, efficient
        self.done = False

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if self.done or Span.of(self.get_metadata(PositionProvider, original_node)) != self.span:
            return updated_node
        self.done = True
        return updated_node.with_changes(args=merge_args(updated_node, self.efficient))


def port_arguments(text: str, call_span: Span, efficient: cst.Call) -> str | None:
    """`text` with the arguments of the call at `call_span` replaced by `efficient`'s
    (`merge_args`); None when no call sits exactly there."""
    t = _PortAt(call_span, efficient)
    new = MetadataWrapper(cst.parse_module(text)).visit(t)
    return new.code if t.done else None


def counterpart_block(wasteful: Block, file: str) -> Block | None:
    """The statements of the efficient script `file` that stand where the wasteful block
    stands: in the function of the same name, the statements the two function bodies'
    alignment (difflib over the statements' `ast` dumps) pairs with the block one for
    one. This is the efficient side's code when it recorded nothing there: a call that
    did no work (`x.to(torch.float32)` on a float32 tensor returns it as it is) issues
    no operator, so no frame points at it. A block that is the whole of a stretch the
    alignment replaces pairs with the whole of its replacement, whatever its length.
    None for a block nested in a compound statement, one that covers part of a
    replaced stretch (which of its statements pair is unknown), or a function name the
    file does not define exactly once."""
    idx = source_index(file)
    if idx is None or wasteful.body is not wasteful.fn.body:
        return None
    name = wasteful.fn.name.value
    fns = [f for f in idx.functions if f.name.value == name]
    if len(fns) != 1 or not isinstance(fns[0].body, cst.IndentedBlock):
        return None
    fn = fns[0]
    sw = [_shape(st) for st in wasteful.body.body]
    se = [_shape(st) for st in fn.body.body]
    ops = difflib.SequenceMatcher(a=sw, b=se, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if not (i1 <= wasteful.start and wasteful.end <= i2):
            continue
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            start = j1 + wasteful.start - i1
            return Block(idx, fn, fn.body, start, start + wasteful.end - wasteful.start)
        if tag == "replace" and (wasteful.start, wasteful.end) == (i1, i2):
            # the block is the whole of a rewritten stretch (two statements where the
            # efficient side has one): that stretch is its counterpart, whatever its length
            return Block(idx, fn, fn.body, j1, j2)
        return None
    return None
