"""Where the two sides of a finding stop doing the same thing (paper §4.3, FindDeviationPoint).

Input: a finding's two regions. The pairwise common prefixes of their kernel paths come
from Cypher (`graphdb.paths.DIVERGENCE_QUERY`); this module picks the deviation point:

1. Paths that occur identically on both sides are set aside: they reach the same kernels
   the same way and cannot explain an energy difference.
2. Among the remaining pairs, the one with the longest common prefix is the deviation —
   the latest point up to which both sides agree (ties: both paths continue past it,
   then earliest operators). Its first differing element sets the level: a Python frame
   (`python`), an aten op of the dispatch chain (`dispatch`) or a device kernel (`kernel`).
3. If one side has no unmatched path, the other side ran extra kernels (`b` or `a` is
   {"kind": "none"}: redundant work). If neither has one, the same kernels ran the same
   way and the difference is in their arguments (shapes, dtypes, contiguity, scalar
   arguments) or outside the kernels (thread count, busy-waiting): level `kernel`.

Below Python (levels `dispatch` and `kernel`) the divergence also carries the first
operand property (device, dtype, shape, layout) in which its twin operators differ
(`Divergence.prop`): dispatch follows the operands as well as the knobs, so a
channels-last weight or a column-major input that adds a layout copy is explained by
the same walk back as a kernel-argument divergence.

The result is a `Divergence` of model/diagnosis.py whose elements are `PathElement`s;
`Divergence.to_json()` (documented in docs/diagnosis.md) writes:

    {"level": "python" | "dispatch" | "kernel",
     "ops": {"a": idx, "b": idx},                 # the diverging operator pair
     "a": {...}, "b": {...},                       # first differing element per side
     "site": {"a": frame, "b": frame},             # last Python frame both agree on
     "common_prefix": [element, ...],              # what both sides share, entry first
     "identical_paths": n}                         # kernel paths found on both sides

Elements are {"kind": "frame", "file", "line", "function", "code"}, {"kind": "op", "name"},
{"kind": "kernel", "name"}, {"kind": "args", "op", "diff": {...}} or {"kind": "none"}.
"""

from __future__ import annotations

import linecache
from dataclasses import replace
from typing import Any

from magneton.graphdb.paths import PathPair, RegionPaths, kernel_paths, region_paths
from magneton.model import (
    Divergence,
    Finding,
    FrameRecord,
    OperandProperty,
    OpRecord,
    PathElement,
    Profile,
    TensorRecord,
)

from ..source.argflow import layout
from ..source.index import source_index

LEVEL_OF_PREFIX = {"py": "python", "at": "dispatch", "k": "kernel"}


def frame_element(fr: FrameRecord) -> PathElement:
    # linecache, not a parse: showing a line must not cost a libcst pass over the file
    code = linecache.getline(fr.file, fr.line).strip() if fr.file else ""
    return PathElement("frame", file=fr.file, line=fr.line, function=fr.function, code=code)


def _element(path: tuple[str, ...], i: int, op: OpRecord | None, prof: Profile) -> PathElement:
    """Path element i (frames resolved to file/line/code)."""
    if i >= len(path):
        return PathElement("none")
    el = path[i]
    prefix, _, rest = el.partition(":")
    if prefix == "py" and op is not None and i < len(op.frames):
        return frame_element(prof.frames[op.frames[i]])
    if prefix == "at":
        return PathElement("op", name=rest)
    if prefix == "k":
        return PathElement("kernel", name=rest)
    return PathElement("frame", function=rest.rsplit(":", 1)[-1], file="", line=0)


def _level(pair: PathPair) -> str:
    for path in (pair.path_a, pair.path_b):
        if pair.common < len(path):
            return LEVEL_OF_PREFIX.get(path[pair.common].split(":", 1)[0], "kernel")
    return "kernel"


def _site(op: OpRecord | None, prof: Profile, common: int) -> PathElement | None:
    """The last Python frame inside the common prefix (where the two sides chose)."""
    if op is None or not op.frames:
        return None
    i = min(common, len(op.frames)) - 1
    if i < 0:
        return None
    return frame_element(prof.frames[op.frames[i]])


def _prefix(
    pair: PathPair, op_a: OpRecord, op_b: OpRecord, pa: Profile, pb: Profile
) -> list[PathElement]:
    out = []
    for i in range(pair.common):
        el = pair.path_a[i]
        prefix, _, rest = el.partition(":")
        if prefix == "py":
            fa = pa.frames[op_a.frames[i]] if i < len(op_a.frames) else None
            fb = pb.frames[op_b.frames[i]] if i < len(op_b.frames) else None
            out.append(
                PathElement(
                    "frame",
                    function=fa.function if fa else rest.rsplit(":", 1)[-1],
                    a=f"{fa.file}:{fa.line}" if fa else "",
                    b=f"{fb.file}:{fb.line}" if fb else "",
                )
            )
        elif prefix == "at":
            out.append(PathElement("op", name=rest))
        else:
            out.append(PathElement("kernel", name=rest))
    return out


def _tensor_props(t: TensorRecord) -> dict[str, Any]:
    return {"device": t.device, "dtype": t.dtype, "shape": list(t.shape), "strides": layout(t)}


def operand_property(
    oa: OpRecord, pa: Profile, ob: OpRecord, pb: Profile
) -> OperandProperty | None:
    """The first operand of two twin operators whose recorded tensor differs in device,
    dtype, shape or memory layout (checked in that order: a dtype difference explains a
    stride difference, not the other way round): the inputs in order, then — when the
    inputs agree — the outputs (the operator set the property from an argument, a
    conversion's `dtype=`). Operands without a recorded tensor (imported traces) compare
    by the operator's recorded dtype lists."""
    for output, ia_list, ib_list in (
        (False, oa.inputs, ob.inputs),
        (True, oa.outputs, ob.outputs),
    ):
        for i, (ia, ib) in enumerate(zip(ia_list, ib_list, strict=False)):
            if not (0 <= ia < len(pa.tensors) and 0 <= ib < len(pb.tensors)):
                continue
            ta, tb = pa.tensors[ia], pb.tensors[ib]
            va, vb = _tensor_props(ta), _tensor_props(tb)
            for name in ("device", "dtype", "shape", "strides"):
                if va[name] != vb[name]:
                    values = {"a": va[name], "b": vb[name]}
                    if name == "strides":
                        values = {"a": list(ta.stride), "b": list(tb.stride)}
                    return OperandProperty(name=name, operand=i, values=values, output=output)
    for output, da, db in (
        (False, oa.input_dtypes, ob.input_dtypes),
        (True, oa.output_dtypes, ob.output_dtypes),
    ):
        for i, (x, y) in enumerate(zip(da, db, strict=False)):
            if x and y and x != y:
                return OperandProperty(name="dtype", operand=i, values={"a": x, "b": y},
                                       output=output)  # fmt: skip
    return None


def _arg_diff(oa: OpRecord, ob: OpRecord) -> dict:
    diff = {}
    for name in (
        "input_shapes",
        "input_dtypes",
        "input_contiguous",
        "scalar_args",
        "output_shapes",
    ):
        va, vb = getattr(oa, name), getattr(ob, name)
        if va != vb:
            diff[name] = {"a": va, "b": vb}
    return diff


def find_divergence(
    db, finding: Finding, run_a: str, run_b: str, prof_a: Profile, prof_b: Profile
) -> Divergence | None:
    """The deviation point of one finding, or None when neither region launched a kernel."""
    ops_a, ops_b = list(finding.region_a.ops), list(finding.region_b.ops)
    rp = region_paths(db, run_a, run_b, ops_a, ops_b)
    pairs = rp.pairs
    if not pairs and (ops_a or ops_b):
        # one region computes nothing the other side needed (or launched no kernel): its
        # paths are all extra; compare them with the whole other run to find where the
        # two programs part ways
        if not _launches(db, run_b, ops_b):
            return _one_sided(
                db, run_a, run_b, ops_a, list(range(len(prof_b.ops))), "a", prof_a, prof_b
            )
        if not _launches(db, run_a, ops_a):
            return _one_sided(
                db, run_a, run_b, list(range(len(prof_a.ops))), ops_b, "b", prof_a, prof_b
            )
    paths_a: dict[tuple[str, ...], int] = {}
    paths_b: dict[tuple[str, ...], int] = {}
    for p in pairs:
        paths_a.setdefault(p.path_a, p.op_a)
        paths_b.setdefault(p.path_b, p.op_b)
    if not paths_a and not paths_b:
        return None
    shared = set(paths_a) & set(paths_b)
    only_a = {p for p in paths_a if p not in shared}
    only_b = {p for p in paths_b if p not in shared}
    if only_a and only_b:
        cands = [p for p in pairs if p.path_a in only_a and p.path_b in only_b]
        best = max(
            cands,
            key=lambda p: (
                p.common,
                p.common < len(p.path_a) and p.common < len(p.path_b),
                -p.op_a,
                -p.op_b,
            ),
        )
        return _build(best, prof_a, prof_b, len(shared))
    if only_a or only_b:
        # one side ran kernel paths the other never did: redundant work on that side
        extra_side = "a" if only_a else "b"
        extra = only_a if only_a else only_b
        cands = [p for p in pairs if (p.path_a if extra_side == "a" else p.path_b) in extra]
        best = max(cands, key=lambda p: (p.common, -p.op_a, -p.op_b))
        d = _build(best, prof_a, prof_b, len(shared))
        if extra_side == "a":
            d.b = PathElement("none")
        else:
            d.a = PathElement("none")
        return d
    return _args_divergence(rp, prof_a, prof_b, len(shared))


def _args_divergence(
    rp: RegionPaths, prof_a: Profile, prof_b: Profile, n_shared: int
) -> Divergence:
    """Identical kernel paths on both sides: the first twin operator pair whose arguments
    differ (or, when none does, the first pair: same kernels, same arguments)."""
    # twin operators: the k-th operator of a path on side a pairs with the k-th on side b (several
    # operators share a path when one line issues them, e.g. the muls of one GELU line)
    # the longest path first: an operator with several paths (one per kernel it launched)
    # is named by its deepest, as the pairs rank them
    shared = sorted((p for p in rp.ops_a if p in rp.ops_b), key=lambda p: (-len(p), p))
    zipped = [
        PathPair(oa_i, ob_i, path, path, len(path))
        for path in shared
        for oa_i, ob_i in zip(rp.ops_a[path], rp.ops_b[path], strict=False)
    ]
    twins = [PathPair(rp.ops_a[p][0], rp.ops_b[p][0], p, p, len(p)) for p in shared]
    first = None
    prop = None
    for p in sorted(zipped, key=lambda p: (p.op_a, p.op_b)):
        oa, ob = prof_a.ops[p.op_a], prof_b.ops[p.op_b]
        diff = _arg_diff(oa, ob)
        prop = operand_property(oa, prof_a, ob, prof_b)
        if (
            prop is not None
            and prop.name == "strides"
            and not prop.output
            and "input_strides" not in diff
        ):
            # same shapes, dtypes and contiguity flags can still hide a layout change
            diff["input_strides"] = {"a": prop.values["a"], "b": prop.values["b"]}
        if diff:
            first = (p, diff)
            break
    if first is None:
        p = min(twins, key=lambda p: (p.op_a, p.op_b))
        oa, ob = prof_a.ops[p.op_a], prof_b.ops[p.op_b]
        kern = p.path_a[-1].split(":", 1)[-1] if p.path_a else oa.name
        return Divergence(
            level="kernel",
            op_a=p.op_a,
            op_b=p.op_b,
            a=PathElement("args", op=oa.name, kernel=kern, diff={}),
            b=PathElement("args", op=oa.name, kernel=kern, diff={}),
            site_a=_site(oa, prof_a, len(oa.frames)),
            site_b=_site(ob, prof_b, len(ob.frames)),
            common_prefix=_prefix(p, oa, ob, prof_a, prof_b),
            identical_paths=n_shared,
            common=p.common,
            path_a=p.path_a,
            path_b=p.path_b,
        )
    p, diff = first
    oa, ob = prof_a.ops[p.op_a], prof_b.ops[p.op_b]
    kern = p.path_a[-1].split(":", 1)[-1] if p.path_a else oa.name
    return Divergence(
        level="kernel",
        op_a=p.op_a,
        op_b=p.op_b,
        a=PathElement("args", op=oa.name, kernel=kern, diff={k: v["a"] for k, v in diff.items()}),
        b=PathElement("args", op=ob.name, kernel=kern, diff={k: v["b"] for k, v in diff.items()}),
        site_a=_site(oa, prof_a, len(oa.frames)),
        site_b=_site(ob, prof_b, len(ob.frames)),
        common_prefix=_prefix(p, oa, ob, prof_a, prof_b),
        identical_paths=n_shared,
        common=p.common,
        path_a=p.path_a,
        path_b=p.path_b,
        prop=prop,
    )


def _launches(db, run: str, ops: list[int]) -> bool:
    return bool(ops) and bool(kernel_paths(db, run, ops))


def _one_sided(
    db,
    run_a: str,
    run_b: str,
    ops_a: list[int],
    ops_b: list[int],
    extra: str,
    pa: Profile,
    pb: Profile,
) -> Divergence | None:
    pairs = region_paths(db, run_a, run_b, ops_a, ops_b).pairs
    if not pairs:
        return None
    best = max(pairs, key=lambda p: (p.common, -(p.op_a if extra == "a" else p.op_b)))
    d = _build(best, pa, pb, 0)
    if extra == "a":
        d.b = PathElement("none")
    else:
        d.a = PathElement("none")
    if d.level == "kernel" and best.identical:
        # the same path exists elsewhere in the other run: more of the same work
        d.level = "dispatch"
    return d


def _same_function(file: str, line_a: int, line_b: int) -> bool:
    """Two lines of one file inside the same function definition (not just two methods
    called `forward` of different classes)."""
    idx = source_index(file)
    if idx is None:
        return False
    fa, fb = idx.function_at(line_a), idx.function_at(line_b)
    return fa is not None and fa is fb


def _build(p: PathPair, pa: Profile, pb: Profile, n_shared: int) -> Divergence:
    oa, ob = pa.ops[p.op_a], pb.ops[p.op_b]
    ea = _element(p.path_a, p.common, oa, pa)
    eb = _element(p.path_b, p.common, ob, pb)
    if (
        ea.kind == "frame"
        and eb.kind == "frame"
        and ea.file
        and ea.file == eb.file
        and ea.function == eb.function
        and _same_function(ea.file, ea.line or 0, eb.line or 0)
    ):
        # same function, different lines: the two sides took different branches *inside*
        # it, so that function (not its caller) is where the choice was made
        site = replace(ea, line=max(ea.line or 0, eb.line or 0), branch=True)
        return Divergence(
            level="python",
            op_a=p.op_a,
            op_b=p.op_b,
            a=ea,
            b=eb,
            site_a=site,
            site_b=replace(site),
            common_prefix=_prefix(p, oa, ob, pa, pb),
            identical_paths=n_shared,
            common=p.common,
            path_a=p.path_a,
            path_b=p.path_b,
        )
    level = _level(p)
    return Divergence(
        level=level,
        op_a=p.op_a,
        op_b=p.op_b,
        a=ea,
        b=eb,
        site_a=_site(oa, pa, p.common),
        site_b=_site(ob, pb, p.common),
        common_prefix=_prefix(p, oa, ob, pa, pb),
        identical_paths=n_shared,
        common=p.common,
        path_a=p.path_a,
        path_b=p.path_b,
        # below Python, dispatch follows the operands as well as the knobs: a
        # channels-last weight sends the same convolution through an extra layout copy
        prop=operand_property(oa, pa, ob, pb) if level != "python" else None,
    )
