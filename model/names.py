"""Operator and kernel names as a person reads them: the one helper every view prints with.

A GPU trace names its kernels by their demangled C++ signatures, 1,500 characters for
one `elementwise_kernel<128, 2, gpu_kernel_impl<…lambda…>>(…)`. Printed whole, one name
filled a screen, a table cell folded into dozens of lines (a diff of two real traces
was 730 lines), and two names that differ only deep in their template arguments could
not be told apart anyway. Trace viewers (Nsight Systems, Perfetto, HTA) shorten them the
same way, and so does this module:

* **Argument lists fold** to `(…)`: `f(at::TensorIteratorBase&, …)` says which overload,
  not which kernel.
* **Template arguments keep one level**: `vectorized_elementwise_kernel<4,
  CUDAFunctor_add<…>, Array<…>>` still names the functor (what tells an add from a
  sigmoid) while everything nested deeper folds to `<…>`.
* **Long namespaces trim** to the last name: `at::native::(anonymous
  namespace)::CatArrayBatchedCopy` is `CatArrayBatchedCopy`. A single namespace stays
  (`aten::mm`, `c10d::allreduce_`): it says which library ran it, and op names are
  what users grep for.
* **Short names stay as they are** (`SHORT_ENOUGH`), so `aten::addmm` or `Memcpy DtoD
  (Device -> Device)` are never rewritten, and the result is capped at `MAX_CHARS`.

The full name is never lost: `--json` carries it, and `--full-names` (the CLI sets
`full_names(True)`) makes every view print names whole. `family` is the shortest form
(no template arguments, no argument list): what `diff` groups findings without a
cause by, so 20 regions whose largest difference is some `elementwise_kernel` read
as one row instead of 20. Torch-free, like the data model.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

SHORT_ENOUGH = 48  # names up to this long are printed as they are
MAX_CHARS = 100  # a shortened name is cut to this, with "…"
COLUMN_MAX = 44  # widest a name column of a table gets (CLI and TUI); cells end in "…"

_FULL: ContextVar[bool] = ContextVar("magneton_full_names", default=False)
_OPEN = {"<": ">", "(": ")", "{": "}", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}
# `a::b::c` → `c` (two or more qualifiers); a single `aten::` stays
_LONG_NS = re.compile(r"(?<![\w:])(?:[A-Za-z_~][\w~]*::){2,}(?=[A-Za-z_~{])")


@contextmanager
def full_names(on: bool = True) -> Iterator[None]:
    """Within the block, `short_name` returns names whole (`--full-names`)."""
    token = _FULL.set(on)
    try:
        yield
    finally:
        _FULL.reset(token)


def set_full_names(on: bool) -> None:
    """For the rest of this context (a CLI command's run), print names whole or not."""
    _FULL.set(on)


def names_are_full() -> bool:
    return _FULL.get()


def name_column() -> dict:
    """rich `Table.add_column` options of a column of names: capped at `COLUMN_MAX`
    with an ellipsis, or folded whole under `--full-names`."""
    if _FULL.get():
        return {"overflow": "fold"}
    return {"overflow": "ellipsis", "no_wrap": True, "max_width": COLUMN_MAX}


def add_full_names(parser: argparse.ArgumentParser) -> None:
    """The `--full-names` option of every command that prints names."""
    parser.add_argument(
        "--full-names",
        action="store_true",
        help="print operator and kernel names whole (default: C++ templates and argument "
        "lists folded, long namespaces trimmed, as trace viewers show them; --json always "
        "has them whole)",
    )


def _fold(s: str, keep_depth: int) -> str:
    """`s` with bracket groups folded: argument lists `(…)` always (unless empty), `{…}`
    always, template arguments `<…>` below `keep_depth` template levels. `->` and
    `operator<`-style tokens are text, not brackets."""
    out: list[str] = []
    stack: list[str] = []  # open brackets
    tdepth = 0  # template levels open
    folded_at: int | None = None  # stack depth where output is suppressed
    i = 0
    while i < len(s):
        c = s[i]
        if c == "-" and s.startswith("->", i):
            if folded_at is None:
                out.append("->")
            i += 2
            continue
        if s.startswith("operator", i) and folded_at is None:
            # operator(), operator<, operator<<: keep the token whole
            m = re.match(r"operator\s*(\(\)|<<=?|>>=?|<=?|>=?|\[\]|[^\w\s(]*)", s[i:])
            if m:
                out.append(m.group(0))
                i += m.end()
                continue
        if c in _OPEN and (c != "<" or _is_template_open(s, i)):
            stack.append(c)
            if c == "<":
                tdepth += 1
            if folded_at is None:
                fold = c in "({[" or tdepth > keep_depth
                if fold and c == "(" and s.startswith("()", i):
                    fold = False
                out.append(c)
                if fold:
                    out.append("…")
                    folded_at = len(stack)
            i += 1
            continue
        if c in _CLOSE and stack and stack[-1] == _CLOSE[c]:
            if folded_at is not None and len(stack) == folded_at:
                folded_at = None
            stack.pop()
            if c == ">":
                tdepth -= 1
            if folded_at is None:
                out.append(c)
            i += 1
            continue
        if folded_at is None:
            out.append(c)
        i += 1
    return "".join(out)


def _is_template_open(s: str, i: int) -> bool:
    """A `<` right after a name (`f<`), not a comparison (`a < b`)."""
    return i > 0 and (s[i - 1].isalnum() or s[i - 1] in "_>)")


def _prepare(s: str) -> str:
    """Before folding: drop `void `, anonymous namespaces and long namespace chains."""
    s = s.strip().removeprefix("void ")
    s = s.replace("(anonymous namespace)::", "")
    return _LONG_NS.sub("", s)


def _clean(s: str) -> str:
    """After folding: drop what is left of lambda scopes (`f(…)::{…}::operator()() const`
    → `f`), SFINAE wrappers, and spaces between closing brackets."""
    s = re.sub(r"(?:\(…\))?(?:::\{…\}(?:::operator\(\)\(\)(?: const)?)?)+", "", s)
    s = re.sub(r"^std::enable_if<[^>]*>::type ", "", s)
    s = re.sub(r"\s*>\s*>", ">>", s)  # `Array<char*, 3> >` → `Array<…>>`
    s = re.sub(r"\s*>\s*>", ">>", s)
    return re.sub(r"\s+", " ", s).strip()


def short_name(name: str, limit: int = MAX_CHARS) -> str:
    """The name as trace tools print it (module docstring); whole under `full_names`."""
    if _FULL.get() or len(name) <= SHORT_ENOUGH:
        return name
    s = _clean(_fold(_prepare(name), keep_depth=1))
    s = re.sub(r"(<…>)(?:\(…\))?::\{…\}", r"\1", s)  # lambdas inside a folded template
    return s if len(s) <= limit else s[: limit - 1] + "…"


def family(name: str) -> str:
    """The kernel or operator family: the name with no template arguments, no argument
    list and no long namespace (`vectorized_elementwise_kernel`, `Memcpy DtoD`,
    `ncclKernel_AllReduce_RING_LL_Sum_float`)."""
    s = _clean(_fold(_prepare(name), keep_depth=0))
    s = re.sub(r"<…>|\(…\)|\{…\}", "", s).strip()
    return s[: MAX_CHARS - 1] + "…" if len(s) > MAX_CHARS else s
