"""Backward data-flow through the recorded operator graph: from an operand whose property
differs between the two sides (a kernel-argument divergence, divergence.py) to where
that side's value of the property was set.

The graph is the run's FLOWS edges (tensor -> consuming operator, operator -> produced
tensor), read from the loaded `Profile` (`OpRecord.inputs`, `TensorRecord.producer`) —
the same edges graphdb stores, without a query per hop. From the operand's tensor the
walk steps to its producer; if one of the producer's inputs carries the same value of the
property (an elementwise op keeps its input's layout and dtype, a conv's output takes the
layout of its weight), the property was passed through and the walk continues from that
input; otherwise the producer set it (a `.contiguous()`, a `.to(...)`, a permute, a
conversion) and the walk stops there. A tensor with no producer is a source: a parameter,
a buffer or an entry input, whose property was set before the measured region — in
`setup()` or where the model was built — and the walk continues into the source
(`setup_origin`) with the libcst slicer of dataflow.py: the keyword that sets the
property (`memory_format=`, `dtype=`, `device=`) in the user's code. Where no keyword
names it (a transposed view kept, a helper's argument, a statement one side lacks),
setupflow.py compares the two sides' source from where this walk stopped.

Two sides are walked separately: the side whose value is the library's default usually
reaches a source whose code never mentions the property, and that absence is itself the
finding (the efficient side sets it, the wasteful one does not).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from magneton.model import OperandProperty, Profile, TensorRecord
from magneton.model.vocab import IGNORED_OPS

from .dataflow import Origin, find_attribute_origin
from .index import SourceIndex, source_index

MAX_HOPS = 256

# the keyword a user passes to set each property (`x.to(memory_format=...)`, ...)
KEYWORD = {"strides": "memory_format", "dtype": "dtype", "device": "device"}


def layout(t: TensorRecord) -> tuple[int, ...]:
    """A tensor's memory format as the order of its dimensions from outermost to innermost
    in memory (NCHW contiguous: (0, 1, 2, 3); channels-last: (0, 2, 3, 1)); size-1
    dimensions are left out, their stride carries no layout."""
    dims = [d for d in range(len(t.stride)) if d < len(t.shape) and t.shape[d] != 1]
    return tuple(sorted(dims, key=lambda d: (-t.stride[d], d)))


def _value(t: TensorRecord, name: str) -> Any:
    if name == "strides":
        return layout(t)
    if name == "shape":
        return tuple(t.shape)
    return getattr(t, name)


def trace_property(
    p: Profile, op: int, operand: int, name: str, output: bool = False
) -> dict[str, Any]:
    """Where the value of property `name` of operand `operand` of operator `op` (an
    output with `output`) was set: {"tensor", "kind", "name", "op", "hops"}: kind "op"
    with the operator that set it, or the source tensor's kind ("param", "buffer",
    "input", "constant"); {} when the operand's tensor was not recorded."""
    ops = p.ops[op].outputs if output else p.ops[op].inputs
    if not (0 <= operand < len(ops) and 0 <= ops[operand] < len(p.tensors)):
        return {}
    t = p.tensors[ops[operand]]
    want = _value(t, name)
    hops = 0
    while t.producer >= 0 and hops < MAX_HOPS:
        prod = p.ops[t.producer]
        same = [
            p.tensors[i]
            for i in prod.inputs
            if 0 <= i < len(p.tensors) and _value(p.tensors[i], name) == want
        ]
        if not same:
            return {"tensor": t.idx, "kind": "op", "name": prod.name, "op": prod.idx, "hops": hops}
        # prefer a source among the carriers (a weight over an activation), then the first
        t = next((s for s in same if s.producer < 0), same[0])
        hops += 1
    return {"tensor": t.idx, "kind": t.kind, "name": t.name, "op": None, "hops": hops}


def trace_both(prop: OperandProperty, op_a: int, op_b: int, pa: Profile, pb: Profile) -> None:
    """Fill `prop.set_by` for both sides."""
    prop.set_by = {
        "a": trace_property(pa, op_a, prop.operand, prop.name, prop.output),
        "b": trace_property(pb, op_b, prop.operand, prop.name, prop.output),
    }


def observed(prop: OperandProperty, side: str, p: Profile) -> str | None:
    """The user-visible value of the property on one side (`channels_last`, `float64`,
    `cuda:0`), as the user would write it after `torch.`."""
    set_by = prop.set_by.get(side) or {}
    t = p.tensors[set_by["tensor"]] if "tensor" in set_by else None
    if t is None:  # not recorded: the operator's recorded dtype is all there is
        v = prop.values.get(side)
        return str(v).replace("torch.", "") if prop.name == "dtype" and v else None
    if prop.name == "strides":
        order = layout(t)
        if len(t.shape) == 4 and order and order[-1] == 1:
            return "channels_last"
        if len(t.shape) == 5 and order and order[-1] == 1:
            return "channels_last_3d"
        return "contiguous_format" if t.contiguous else None
    if prop.name == "dtype":
        return t.dtype.replace("torch.", "")
    if prop.name == "device":
        return t.device
    return None


def setup_origin(
    prop: OperandProperty, side: str, p: Profile, files: list[str], config: dict[str, str]
) -> Origin | None:
    """Continue the walk into the source code: the keyword in the user's code that set
    the property to this side's value (None when the code never sets it — the default)."""
    keyword = KEYWORD.get(prop.name)
    if keyword is None:
        return None
    seen = observed(prop, side, p)
    origin = find_attribute_origin(keyword, files, seen, config)
    if origin is None or origin.value is None:
        return None
    # a keyword that sets some other value (a `.to(memory_format=...)` elsewhere) is not
    # this side's: only a value naming what the side observed counts
    if seen is not None and origin.value.rsplit(".", 1)[-1].strip("'\"") != seen:
        return None
    return origin


def _assigned_name(stmt: cst.CSTNode) -> str | None:
    """`model` for `model = model.to(...)` (a simple statement line with one name target)."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        s = stmt.body[0]
        if isinstance(s, cst.Assign) and len(s.targets) == 1:
            t = s.targets[0].target
            if isinstance(t, cst.Name):
                return t.value
    return None


def _statement_at(idx: SourceIndex, line: int) -> cst.SimpleStatementLine | None:
    for n in idx.walk():
        if isinstance(n, cst.SimpleStatementLine) and idx.line_of(n) == line:
            return n
    return None


def absent_origin(efficient: Origin, script: str) -> Origin | None:
    """The wasteful side never sets the property: its origin is the library default, at
    the statement of its script where the efficient side's setting statement belongs —
    after the last assignment of the same name in the function of the same name
    (`model = make_model().eval()` in `setup()`, where the other side then runs
    `model = model.to(memory_format=torch.channels_last)`). `insert` carries that
    statement for the fix; None when the script has no such place."""
    eidx = source_index(efficient.file or "")
    widx = source_index(script)
    if eidx is None or widx is None or efficient.line is None:
        return None
    stmt = _statement_at(eidx, efficient.line)
    fn = eidx.function_at(efficient.line)
    name = _assigned_name(stmt) if stmt is not None else None
    if stmt is None or fn is None or name is None:
        return None
    wfn = next(
        (
            n
            for n in widx.walk()
            if isinstance(n, cst.FunctionDef) and n.name.value == fn.name.value
        ),
        None,
    )
    if wfn is None:
        return None
    assigns = [
        n
        for n in widx.walk(wfn)
        if isinstance(n, cst.SimpleStatementLine) and _assigned_name(n) == name
    ]
    if not assigns:
        return None
    at = max(assigns, key=widx.line_of)
    line = widx.line_of(at)
    return Origin(
        kind=efficient.kind,
        variable=efficient.variable,
        file=widx.path,
        line=line,
        code=widx.line_text(line),
        value=None,
        library_default=True,
        insert={
            "file": widx.path,
            "line": line,
            "end_line": widx.span(at).end_line,
            "statement": eidx.code(stmt).strip(),
        },
        note=(
            f"{efficient.variable} is never set here (the library default); the efficient "
            f"side sets it right after its `{name}` is built"
        ),
    )


GRAD_MODE = "torch.is_grad_enabled"


def observed_config(p: Profile) -> dict[str, str]:
    """The run's config snapshot, with the grad mode its operators ran in.

    The snapshot is taken outside the measured call, so it reads grad mode on even when
    the entry runs under `torch.no_grad()` / `torch.inference_mode()`. What costs is
    whether autograd recorded the operators, which the recorder saw per operator (an
    autograd sequence number, `OpRecord.seq >= 0`): that is the knob's value ("False"
    too when grad mode was on but nothing required grad — no graph either way). The
    whole run, not the finding's region, decides: a region of integer ops records no
    autograd under grad mode too, and must not read as a grad-mode difference."""
    seqs = [o.seq for o in p.ops if o.name not in IGNORED_OPS]
    if not seqs:
        return p.config
    return {**p.config, GRAD_MODE: str(any(s >= 0 for s in seqs))}


def _entry_def(script: str, entry: str) -> tuple[SourceIndex, cst.FunctionDef] | None:
    idx = source_index(script)
    if idx is None:
        return None
    fn = next(
        (s for s in idx.module.body if isinstance(s, cst.FunctionDef) and s.name.value == entry),
        None,
    )
    return (idx, fn) if fn is not None else None


def grad_mode_origins(kv: Any, sides: dict[str, Any]) -> None:
    """The grad-mode knob differs: the side that disables it does so with a context
    manager or decorator (`@torch.inference_mode()`, found by the knob's setter search);
    the side that never does has no statement to edit, so its origin becomes the entry
    function and the fix adds the efficient side's setter there as a decorator."""
    if kv is None or kv.knob is None or kv.knob.key != GRAD_MODE:
        return
    # the grad mode each side ran in (`observed_config`), also when the key variable is a
    # library's branch on `torch.is_grad_enabled()` whose own values are something else
    values = {n: s.config.get(GRAD_MODE) for n, s in sides.items()}
    for side, other in (("a", "b"), ("b", "a")):
        ow, oe = kv.origins.get(side), kv.origins.get(other)
        if ow is None or oe is None or not ow.library_default or oe.library_default:
            continue
        if ow.insert:  # done already: the key variable is shared by a site's findings
            continue
        setter = (oe.value or "").strip()
        found = _entry_def(sides[side].script, sides[side].entry)
        if not setter or found is None:
            continue
        idx, fn = found
        line = idx.line_of(fn)  # the first decorator's line, or the def's
        ow.file, ow.line, ow.code = idx.path, line, idx.line_text(line)
        ow.value = values[side]
        ow.insert = {
            "file": idx.path,
            "line": line,
            "end_line": line - 1,
            "statement": f"@{setter}()",
        }
        ow.note = f"{sides[side].entry}() runs with autograd on; the other side uses {setter}"
        # the efficient side's value is the grad mode its setter gives, not the setter
        oe.note = f"{setter}() ({oe.note})" if oe.note else f"{setter}()"
        oe.value = values[other]
