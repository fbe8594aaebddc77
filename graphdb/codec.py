"""The Arrow codec of a run: a `Profile` as COPY-ready Arrow tables (one per node and rel
table, in load order) and the checks a profile passes before any write and after every
load.

- Every table of a run is built, and every index checked (`_check_profile`), before the
  first write, so a malformed profile fails without touching the DB.
- The rels are flattened by numpy and keyed by Arrow `take`: a Python loop over 10k
  operators' inputs, frames and kernels cost ~0.15 s of every save.
- An operator's Python stack is one `ON_STACK` rel to a `CallStack` its run shares
  (`distinct_stacks`), not a rel per frame: deleting a run deletes rels one by one, and
  134k of them made `record --replace` cost 2.6x a save and `rm` 1.8x. Run checksums still
  hash the rel per frame of schema v4 (`digest_layout`), so old checksums verify.
- `_check_plausible` names a wild number read back from damaged pages (`time_s`
  9.5e+62) instead of diffing garbage; its bounds are what no real recording reaches.
- A few node rows are written by `UNWIND ... CREATE` (`_create_statement`, under
  `_SMALL_ROWS`): a COPY costs 40-60 ms however small.
- Tables are built, read and handed to `COPY` by graphdb/arrowio.py, never by
  `pa.array`/`from_pydict`/`to_numpy` or an Arrow `COPY` parameter: those import pandas
  (0.32-0.44 s of a trivial `magneton record`).
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa

from magneton.model import Profile, RunInfo, stored_config

from . import arrowio
from . import schema as S

# Operator properties holding JSON text (nested lists Kùzu would need fixed-depth types for).
_JSON_OP_COLUMNS = ("input_shapes", "output_shapes")
# node tables of at most this many rows are written by UNWIND/CREATE instead of COPY
_SMALL_ROWS = 512


def _uids(run: str, n: int) -> list[str]:
    return [f"{run}/{i}" for i in range(n)]


def _check_profile(p: Profile) -> None:
    """Dense indices and in-range references, so a bad profile fails before any write
    (a negative index would otherwise silently point at the last node)."""
    sizes = {w: len(getattr(p, w)) for w in ("ops", "tensors", "modules", "frames", "kernels")}
    for what in sizes:
        idx = [it.idx for it in getattr(p, what)]
        if idx != list(range(len(idx))):
            i = next(i for i, x in enumerate(idx) if x != i)
            raise ValueError(f"{what}[{i}].idx is {idx[i]}: indices must be dense 0..n-1")

    def check(what: str, field_: str, lists: list[list[int]], target: str, lo: int = 0) -> None:
        flat = [x for xs in lists for x in xs]
        n = sizes[target]
        if flat and (min(flat) < lo or max(flat) >= n):  # rare: find the culprit for the message
            i = next(i for i, xs in enumerate(lists) if xs and (min(xs) < lo or max(xs) >= n))
            raise ValueError(f"{what}[{i}].{field_} = {lists[i]} is out of range for {n} {target}")

    ops = p.ops
    check("ops", "inputs", [o.inputs for o in ops], "tensors")
    check("ops", "outputs", [o.outputs for o in ops], "tensors")
    check("ops", "frames", [o.frames for o in ops], "frames")
    check("ops", "kernels", [o.kernels for o in ops], "kernels")
    check("ops", "module_idx", [[o.module_idx] for o in ops], "modules", lo=-1)
    check("tensors", "producer", [[t.producer] for t in p.tensors], "ops", lo=-1)
    # outputs are not stored as rels but rebuilt from Tensor.producer/out_index
    tensors = p.tensors
    for o in ops:
        for k, t in enumerate(o.outputs):
            if tensors[t].producer != o.idx or tensors[t].out_index != k:
                raise ValueError(
                    f"ops[{o.idx}].outputs[{k}] = tensor {t}, whose producer/out_index is "
                    f"{tensors[t].producer}/{tensors[t].out_index}, not {o.idx}/{k}"
                )
    made = sum(len(o.outputs) for o in ops)
    if made != sum(t.producer >= 0 for t in tensors):
        raise ValueError(f"{made} operator outputs, but a different number of produced tensors")
    check("modules", "parent", [[m.parent] for m in p.modules], "modules", lo=-1)


def check_structure(p: Profile) -> None:
    """ValueError naming the first index of `p` that is not dense or points out of range
    (a shard or an import checks what it read with it before anything is stored)."""
    _check_profile(p)


# Bounds no real recording reaches: per-call figures of one entry call.
_MAX_TIME_S = 1e6
_MAX_ENERGY_J = 1e9


def _check_plausible(p: Profile) -> None:
    """Numbers a recording can produce (finite, within bounds): the check
    that turns a damaged page into one error line instead of a report of garbage."""
    r = p.run
    runs = [("run.time_s", r.time_s, _MAX_TIME_S), ("run.energy_j", r.energy_j, _MAX_ENERGY_J)]
    for what, v, hi in runs:
        if not abs(v) <= hi:  # also true for NaN
            raise ValueError(f"{what} = {v:g} is implausible")
    if p.ops:
        t = np.fromiter((o.time_s for o in p.ops), np.float64, len(p.ops))
        e = np.fromiter((o.energy_j for o in p.ops), np.float64, len(p.ops))
        for what, arr, hi in (("time_s", t, _MAX_TIME_S), ("energy_j", e, _MAX_ENERGY_J)):
            bad = np.flatnonzero(~(np.abs(arr) <= hi))  # NaN compares false
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"ops[{i}].{what} = {arr[i]:g} is implausible")


def _group(n: int, owner: np.ndarray, pos: np.ndarray, value: np.ndarray) -> list[list[int]]:
    """Per owner 0..n-1, its values ordered by pos (rel rows → OpRecord lists)."""
    if len(owner) == 0:
        return [[] for _ in range(n)]
    order = np.lexsort((pos, owner))
    vals = value[order].tolist()
    ends = np.cumsum(np.bincount(owner, minlength=n)).tolist()
    starts = [0, *ends[:-1]]
    return [vals[a:b] for a, b in zip(starts, ends, strict=True)]


def _f64_blob(values: list[float]) -> bytes:
    return np.asarray(values, dtype="<f8").tobytes()


def blobs_as_lists(table: pa.Table) -> pa.Table:
    """`table` with every BLOB column read as the float64 lists it holds (its DOUBLE[]
    layout before schema v4): loads decode with it, and run checksums hash it, so the
    checksum of a run saved as DOUBLE[] still verifies after `magneton migrate`."""
    for i, f in enumerate(table.schema):
        if pa.types.is_binary(f.type):
            table = table.set_column(i, f.name, _blobs_to_lists(table.column(i)))
    return table


def _blobs_to_lists(col: pa.ChunkedArray) -> pa.ListArray:
    arr = arrowio.as_array(col)
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4) if n else None
    if offsets is None or offsets[-1] == offsets[0]:
        values = np.empty(0, "<f8")
    else:
        values = np.frombuffer(arr.buffers()[2], "<f8", (offsets[-1] - offsets[0]) // 8, offsets[0])
    starts = (offsets - offsets[0]) // 8 if offsets is not None else np.zeros(1, np.int32)
    return pa.ListArray.from_arrays(
        arrowio.array(starts.astype(np.int32), pa.int32()), arrowio.array(values, pa.float64())
    )


def conform(col: pa.ChunkedArray, typ: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A column read from the DB as the type the current schema stores: a cast, except
    DOUBLE[] read from a DB of schema v3 where v4 stores BLOBs (`magneton migrate`)."""
    if pa.types.is_binary(typ) and pa.types.is_list(col.type):
        return arrowio.array([_f64_blob(v or []) for v in col.to_pylist()], pa.binary())
    return col.cast(typ)


def _profile_tables(p: Profile) -> list[tuple[S.Table, pa.Table]]:
    """Every table of one run as COPY-ready Arrow, in load order (nodes, then rels)."""
    run = p.run.name
    uids = _RunUids(
        op=_uids(run, len(p.ops)),
        tensor=_uids(run, len(p.tensors)),
        module=_uids(run, len(p.modules)),
        frame=_uids(run, len(p.frames)),
        kernel=_uids(run, len(p.kernels)),
    )
    stacks = distinct_stacks([o.frames for o in p.ops])
    return [
        *_node_tables(p, uids),
        stack_node_table(run, len(stacks[1])),
        *_config_and_power_tables(p),
        *_rel_tables(p, uids, stacks),
    ]


@dataclass(frozen=True)
class _RunUids:
    """The uid of every node of one run, per node table, in idx order."""

    op: list[str]
    tensor: list[str]
    module: list[str]
    frame: list[str]
    kernel: list[str]


def _arrow_table(spec: S.Table, columns: dict[str, Any]) -> tuple[S.Table, pa.Table]:
    return spec, arrowio.table(columns, S.arrow_schema(spec))


def _node_table(
    spec: S.NodeTable, run: str, items: list, uids: list[str], **special: list
) -> tuple[S.Table, pa.Table]:
    """One node table: the record fields named by the spec's columns, `special` as given."""
    names = [c.name for c in spec.columns[2:] if c.name not in special]
    # one C-level attrgetter per item instead of a getattr per cell (3x faster)
    cols: dict[str, list] = {"uid": uids, "run": [run] * len(uids)}
    if items and names:
        get = operator.attrgetter(*names)
        rows = [get(it) for it in items]
        columns = list(zip(*rows, strict=True)) if len(names) > 1 else [rows]
        cols.update(zip(names, (list(c) for c in columns), strict=True))
    else:
        cols.update({n: [] for n in names})
    cols.update(special)
    return _arrow_table(spec, {c.name: cols[c.name] for c in spec.columns})


def _node_tables(p: Profile, uids: _RunUids) -> list[tuple[S.Table, pa.Table]]:
    run, ops = p.run.name, p.ops
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    return [
        _node_table(
            S.OPERATOR,
            run,
            ops,
            uids.op,
            input_shapes=[dumps(o.input_shapes) for o in ops],
            output_shapes=[dumps(o.output_shapes) for o in ops],
        ),
        _node_table(
            S.TENSOR,
            run,
            p.tensors,
            uids.tensor,
            stats=[_f64_blob(t.stats) for t in p.tensors],
            invariant=[_f64_blob(t.invariant) for t in p.tensors],
            quantiles=[_f64_blob(t.quantiles) for t in p.tensors],
        ),
        _node_table(S.MODULE, run, p.modules, uids.module),
        _node_table(S.FRAME, run, p.frames, uids.frame),
        _node_table(S.KERNEL, run, p.kernels, uids.kernel),
    ]


def _config_and_power_tables(p: Profile) -> list[tuple[S.Table, pa.Table]]:
    run = p.run.name
    cfg = list(stored_config(p).items())  # typed metadata (dist, energy) as config rows
    config = _arrow_table(
        S.CONFIG_ENTRY,
        {
            "uid": _uids(run, len(cfg)),
            "run": [run] * len(cfg),
            "idx": list(range(len(cfg))),
            "key": [k for k, _ in cfg],
            "value": [str(v) for _, v in cfg],
        },
    )
    series = _arrow_table(
        S.POWER_SERIES,
        {
            "uid": _uids(run, len(p.power)),
            "run": [run] * len(p.power),
            "idx": list(range(len(p.power))),
            "device": [s.device for s in p.power],
            "source": [s.source for s in p.power],
            "gap_start_ns": [[g[0] for g in s.gaps] for s in p.power],
            "gap_end_ns": [[g[1] for g in s.gaps] for s in p.power],
        },
    )
    sample: dict[str, list] = {c.name: [] for c in S.POWER_SAMPLE.columns}
    for si, s in enumerate(p.power):
        if len(s.t_ns) != len(s.watts):
            raise ValueError(f"power series {si}: {len(s.t_ns)} times, {len(s.watts)} watts")
        k = len(s.t_ns)
        sample["uid"] += [f"{run}/{si}/{i}" for i in range(k)]
        sample["run"] += [run] * k
        sample["series"] += [si] * k
        sample["idx"] += list(range(k))
        sample["device"] += [s.device] * k
        sample["source"] += [s.source] * k
        sample["t_ns"] += list(s.t_ns)
        sample["watts"] += list(s.watts)
    return [config, series, _arrow_table(S.POWER_SAMPLE, sample)]


def _flat(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner index, position in the owner's list, value) of every list element."""
    lens = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    vals = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(lens.sum()))
    owner = np.repeat(np.arange(len(lists), dtype=np.int64), lens)
    pos = np.arange(len(vals), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return owner, pos, vals


def distinct_stacks(frames: list[list[int]]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Each operator's call-stack index (-1: no frame recorded) and the run's distinct
    stacks (frame indices, entry first) in order of first use: what `CallStack` stores."""
    ids: dict[tuple[int, ...], int] = {}
    of = np.fromiter(
        (ids.setdefault(tuple(f), len(ids)) if f else -1 for f in frames), np.int64, len(frames)
    )
    return of, list(ids)


def stack_node_table(run: str, n: int) -> tuple[S.Table, pa.Table]:
    return _arrow_table(
        S.CALL_STACK, {"uid": _uids(run, n), "run": [run] * n, "idx": list(range(n))}
    )


def stack_rel_tables(
    run: str, op_k: pa.Array, f_k: pa.Array, stacks: tuple[np.ndarray, list[tuple[int, ...]]]
) -> list[tuple[S.Table, pa.Table]]:
    """`ON_STACK` and `HAS_FRAME` of one run (`stacks` from `distinct_stacks`; `op_k`,
    `f_k`: the operator and frame uids in idx order)."""
    of, distinct = stacks
    s_k = arrowio.array(_uids(run, len(distinct)), pa.string())
    has = np.flatnonzero(of >= 0)
    owner, depth, fr = _flat(distinct)
    take = arrowio.take
    return [
        _arrow_table(S.ON_STACK, {"from": take(op_k, has), "to": take(s_k, of[has])}),
        _arrow_table(S.HAS_FRAME, {"from": take(s_k, owner), "to": take(f_k, fr), "depth": depth}),
    ]


def run_stack_tables(
    run: str, n_ops: int, n_frames: int, op: np.ndarray, depth: np.ndarray, frame: np.ndarray
) -> list[tuple[S.Table, pa.Table]]:
    """`CallStack`, `ON_STACK` and `HAS_FRAME` of one run of `n_ops` operators and
    `n_frames` frames from its rel rows per frame (operator idx, depth, frame idx), as a DB
    before schema v5 stored them (`magneton migrate`)."""
    stacks = distinct_stacks(_group(n_ops, op, depth, frame))
    op_k = arrowio.array(_uids(run, n_ops), pa.string())
    f_k = arrowio.array(_uids(run, n_frames), pa.string())
    return [stack_node_table(run, len(stacks[1])), *stack_rel_tables(run, op_k, f_k, stacks)]


def digest_layout(tables: list[tuple[S.Table, pa.Table]]) -> list[tuple[S.Table, pa.Table]]:
    """A run's tables as run checksums are taken over them: the call stacks as one
    `CALLED_FROM` row per operator and frame (in operator, then depth order, where
    `ON_STACK` is), as schema v4 stored them, so a run saved before v5 still verifies
    after `magneton migrate` (graphdb/schema.py)."""
    by_name = {spec.name: data for spec, data in tables}
    if S.ON_STACK.name not in by_name:
        return tables
    on, hf = by_name[S.ON_STACK.name], by_name[S.HAS_FRAME.name]
    out: list[tuple[S.Table, pa.Table]] = []
    for spec, data in tables:
        if spec.name == S.ON_STACK.name:
            out.append(_arrow_table(S.LEGACY_CALLED_FROM, _expand_stacks(on, hf)))
        elif spec.name not in (S.CALL_STACK.name, S.HAS_FRAME.name):
            out.append((spec, data))
    return out


def _stack_idx(uids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The idx of each `"<run>/<idx>"` uid."""
    return np.fromiter((int(u.rpartition("/")[2]) for u in uids.to_pylist()), np.int64, len(uids))


def _expand_stacks(on: pa.Table, hf: pa.Table) -> dict[str, Any]:
    """(operator, frame, depth) rows of `ON_STACK` joined with `HAS_FRAME`, in the order
    of `ON_STACK`'s rows and then depth."""
    stack = _stack_idx(hf.column("from"))
    depth = arrowio.int64s(hf.column("depth"))
    order = np.lexsort((depth, stack))
    n = int(stack.max()) + 1 if len(stack) else 0
    lens = np.bincount(stack, minlength=n)
    starts = np.cumsum(lens) - lens
    of = _stack_idx(on.column("to"))
    k = lens[of] if len(of) else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(len(of), dtype=np.int64), k)
    pos = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    row = order[starts[of][owner] + pos] if len(owner) else np.zeros(0, np.int64)
    return {
        "from": arrowio.take(arrowio.as_array(on.column("from")), owner),
        "to": arrowio.take(arrowio.as_array(hf.column("to")), row),
        "depth": depth[row],
    }


def _rel_tables(
    p: Profile, uids: _RunUids, stacks: tuple[np.ndarray, list[tuple[int, ...]]]
) -> list[tuple[S.Table, pa.Table]]:
    """The rels, flattened by numpy and keyed by Arrow `take` (C loops: a Python loop over
    10k operators' inputs, frames and kernels cost ~0.15 s of every save)."""
    ops, tensors = p.ops, p.tensors
    op_k, t_k, f_k, k_k, m_k = (
        arrowio.array(u, pa.string())
        for u in (uids.op, uids.tensor, uids.frame, uids.kernel, uids.module)
    )
    take = arrowio.take
    out: list[tuple[S.Table, pa.Table]] = []
    owner, arg, t_in = _flat([o.inputs for o in ops])
    src = np.fromiter((t.producer for t in tensors), np.int64, len(tensors))[t_in]
    made = src >= 0
    out.append(
        _arrow_table(
            S.FLOWS,
            {
                "from": take(op_k, src[made]),
                "to": take(op_k, owner[made]),
                "tensor": t_in[made],
                "arg": arg[made],
            },
        )
    )
    out.append(
        _arrow_table(S.INPUT, {"from": take(t_k, t_in), "to": take(op_k, owner), "arg": arg})
    )
    out += stack_rel_tables(p.run.name, op_k, f_k, stacks)
    owner, order, kern = _flat([o.kernels for o in ops])
    out.append(
        _arrow_table(
            S.LAUNCHED, {"from": take(op_k, owner), "to": take(k_k, kern), "launch_order": order}
        )
    )
    mod = np.fromiter((o.module_idx for o in ops), np.int64, len(ops))
    has = np.flatnonzero(mod >= 0)
    out.append(_arrow_table(S.IN_MODULE, {"from": take(op_k, has), "to": take(m_k, mod[has])}))
    parent = np.fromiter((m.parent for m in p.modules), np.int64, len(p.modules))
    kids = np.flatnonzero(parent >= 0)
    out.append(_arrow_table(S.CHILD_OF, {"from": take(m_k, kids), "to": take(m_k, parent[kids])}))
    return out


def _run_row(run: RunInfo, status: str, op_count: int, checksum: str = "") -> dict[str, Any]:
    """The Run node's properties of `run` (RunInfo plus its status, size and the
    checksum of the rows written with it, graphdb/integrity.py)."""
    row = {f.name: getattr(run, f.name) for f in fields(RunInfo)}
    row["status"] = status
    row["op_count"] = op_count
    row["checksum"] = checksum
    return row


def _run_table(run: RunInfo, status: str, op_count: int, checksum: str = "") -> pa.Table:
    row = _run_row(run, status, op_count, checksum)
    target = S.arrow_schema(S.RUN)
    return arrowio.table({f.name: [row.get(f.name)] for f in target}, target)


@contextmanager
def _copy_statement(table: str, data: pa.Table) -> Iterator[tuple[str, dict]]:
    """`COPY table FROM` a Parquet file of `data`, removed when the block ends
    (graphdb/arrowio.py: an Arrow table as the `$rows` parameter imports pandas)."""
    with arrowio.copy_file(data) as path:
        yield f"COPY {table} FROM {path}", {}


def _create_statement(spec: S.Table, data: pa.Table) -> tuple[str, dict]:
    """A few node rows by one `UNWIND ... CREATE`: 5-15 ms where a COPY costs 40-60 ms
    however small (measured for frames, kernels, config entries, power series)."""
    props = ", ".join(f"{c.name}: CAST(r.{c.name} AS {c.type})" for c in spec.columns)
    return f"UNWIND $rows AS r CREATE (:{spec.name} {{{props}}})", {"rows": data.to_pylist()}


def _rows_table(spec: S.Table, rows: list[dict] | pa.Table) -> pa.Table:
    """`bulk_insert`'s rows as a COPY-ready Arrow table of `spec` (property order, its
    types, missing properties null)."""
    target = S.arrow_schema(spec)
    if isinstance(rows, pa.Table):
        cols: dict[str, Any] = {}
        for f in target:
            if f.name in rows.column_names:
                cols[f.name] = rows.column(f.name)  # cast by arrowio.array
            else:
                cols[f.name] = pa.nulls(rows.num_rows, f.type)
        return arrowio.table(cols, target)
    return arrowio.table({f.name: [r.get(f.name) for r in rows] for f in target}, target)
