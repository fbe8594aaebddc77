"""Kernel call paths and their first divergence, as Cypher over a Magneton DB.

Paper §4.3 (Algorithm 2): to explain why two matched regions cost different energy,
compare only the paths that lead to kernels — Python frames (entry first), then the aten
dispatch chain, then device kernels — and find the first element where they differ.
Everything that does not reach a kernel is dropped before comparing: operators in
`BOOKKEEPING_OPS` (allocations, views) and operators that launched nothing, and
bookkeeping elements inside a chain. Otherwise the first "difference" would be an
`aten::empty` or a view that changes no kernel — the noise the paper warns about.

Frames of the two runs' own scripts compare by function name only (`py:<script>:main`):
`a.py` and `b.py` are different files with different line numbers, and a difference in
*what* the script line calls shows up one element later, as a different callee frame or
dispatch op. Library frames compare by file, line and function.

`DIVERGENCE_QUERY` computes, for every pair of kernel paths of the two regions, the length
of their common prefix — in Cypher (`list_filter` over `range`, Kùzu lambdas) — so users can
run the same query on saved profiles with `magneton query` (docs/diagnosis.md shows it).
Kùzu refuses `ORDER BY` inside `WITH` without `LIMIT`, so frames are ordered by collecting
zero-padded `depth|key` strings and sorting the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from magneton.model.vocab import DATA_MOVING_OPS, IGNORED_OPS  # noqa: F401  (DATA_MOVING_OPS: re-export)

if TYPE_CHECKING:
    from .db import ProfileDB

_FRAME_KEY = (
    "CASE WHEN {f}.file = {r}.script THEN 'py:<script>:' + {f}.function "
    "ELSE 'py:' + {f}.file + ':' + CAST({f}.line AS STRING) + ':' + {f}.function END"
)


def _side(o: str, r: str, c: str, f: str, p: str, cp: str, run: str, ops: str, carry: str) -> str:
    return f"""MATCH ({r}:Run {{name: ${run}}}), ({o}:Operator)
WHERE {o}.run = {r}.name AND {o}.idx IN ${ops} AND NOT list_contains(bk, {o}.name)
  AND EXISTS {{ MATCH ({o})-[:LAUNCHED]->(:Kernel) }}
OPTIONAL MATCH ({o})-[:ON_STACK]->(:CallStack)-[{c}:HAS_FRAME]->({f}:Frame)
WITH bk, {carry}{r}, {o},
     collect(lpad(CAST({c}.depth AS STRING), 4, '0') + '|' + {_FRAME_KEY.format(f=f, r=r)}) AS keyed_{o}
OPTIONAL MATCH ({o})-[l_{o}:LAUNCHED]->(k_{o}:Kernel)
WITH bk, {carry}{o}, keyed_{o},
     collect(lpad(CAST(l_{o}.launch_order AS STRING), 4, '0') + '|' + k_{o}.name) AS dev_{o}
WITH bk, {carry}{o},
     list_transform(list_sort(coalesce(keyed_{o}, [])), x -> substring(x, 6, size(x) - 5)) AS frames_{o},
     list_transform(list_filter(list_sort(coalesce(dev_{o}, [])), x -> NOT x CONTAINS '|aten::'),
                    x -> 'k:' + substring(x, 6, size(x) - 5)) AS devk_{o}
UNWIND {o}.call_paths AS {cp}
WITH DISTINCT bk, {carry}{o},
     frames_{o}
     + list_transform(list_filter(string_split({cp}, ' > '), x -> NOT list_contains(bk, x)),
                      x -> 'at:' + x)
     + devk_{o} AS {p}
"""


DIVERGENCE_QUERY = (
    "WITH $bookkeeping AS bk\n"
    + _side("oa", "ra", "ca", "fa", "pa", "cpa", "run_a", "ops_a", "")
    + _side("ob", "rb", "cb", "fb", "pb", "cpb", "run_b", "ops_b", "oa, pa, ")
    + """WITH oa, ob, pa, pb, CASE WHEN size(pa) < size(pb) THEN size(pa) ELSE size(pb) END AS n
WITH oa, ob, pa, pb, n, list_filter(range(1, n), i -> pa[i] <> pb[i]) AS diff
RETURN oa.idx AS op_a, ob.idx AS op_b, pa AS path_a, pb AS path_b,
       CASE WHEN size(diff) = 0 THEN n ELSE diff[1] - 1 END AS common
ORDER BY common DESC, op_a, op_b"""
)
"""Parameters: run_a, run_b (run names), ops_a, ops_b (op idx lists), bookkeeping (names).
Rows: one per pair of kernel paths; `common` = elements shared before the first
difference. Path elements are prefixed `py:` (frame), `at:` (aten op), `k:` (device kernel).
"""

KERNEL_PATHS_QUERY = (
    "WITH $bookkeeping AS bk\n"
    + _side("o", "r", "c", "f", "p", "cp", "run", "ops", "")
    + "RETURN o.idx AS op, p AS path ORDER BY op"
)
"""One side only: the kernel paths of the given operators (parameters run, ops, bookkeeping)."""


@dataclass(frozen=True)
class PathPair:
    op_a: int
    op_b: int
    path_a: tuple[str, ...]
    path_b: tuple[str, ...]
    common: int

    @property
    def identical(self) -> bool:
        return self.path_a == self.path_b


def bookkeeping() -> list[str]:
    return sorted(IGNORED_OPS)


@dataclass
class RegionPaths:
    """The kernel paths of two regions: every pair of *distinct* paths (`pairs`, each with
    the first operator of each side that took it and their common-prefix length, the
    longest prefix first) and, per side, the operators that took each path."""

    pairs: list[PathPair]
    ops_a: dict[tuple[str, ...], list[int]]
    ops_b: dict[tuple[str, ...], list[int]]


def _ops_by_path(paths: dict[int, list[tuple[str, ...]]]) -> dict[tuple[str, ...], list[int]]:
    out: dict[tuple[str, ...], list[int]] = {}
    for op in sorted(paths):
        for p in paths[op]:
            out.setdefault(p, []).append(op)
    return out


def region_paths(
    db: ProfileDB, run_a: str, run_b: str, ops_a: list[int], ops_b: list[int]
) -> RegionPaths:
    """The two regions' kernel paths, compared path by path.

    Each side's paths come from `KERNEL_PATHS_QUERY`; the pairwise prefix comparison is
    done here rather than with `DIVERGENCE_QUERY`: Kùzu 0.11.3 corrupts its heap on that
    query's cross product when both regions have many operators (seen on a 12-layer vs
    16-op `addmm` region pair: "double free or corruption"). Pairs are of distinct paths,
    not of operators: every choice made from them (the longest common prefix, then the
    earliest operators) is the same either way, and a `generate()` region repeats a few
    hundred paths over thousands of operators, whose operator cross product took 7 GB and
    half an hour of a diagnosis.
    """
    if not ops_a or not ops_b:
        return RegionPaths([], {}, {})
    by_a = _ops_by_path(kernel_paths(db, run_a, ops_a))
    by_b = _ops_by_path(kernel_paths(db, run_b, ops_b))
    pairs = []
    for pa, oa in by_a.items():
        for pb, ob in by_b.items():
            n = min(len(pa), len(pb))
            common = next((i for i in range(n) if pa[i] != pb[i]), n)
            pairs.append(PathPair(oa[0], ob[0], pa, pb, common))
    pairs.sort(key=lambda r: (-r.common, r.op_a, r.op_b, r.path_a, r.path_b))
    return RegionPaths(pairs, by_a, by_b)


# The rows `kernel_paths` assembles in Python: plain columns, no lambdas or list functions
_OPS_QUERY = """MATCH (o:Operator) WHERE o.run = $run AND o.idx IN $ops
  AND EXISTS { MATCH (o)-[:LAUNCHED]->(:Kernel) }
RETURN o.idx, o.name, o.call_paths"""
_FRAMES_QUERY = """MATCH (o:Operator)-[:ON_STACK]->(:CallStack)-[c:HAS_FRAME]->(f:Frame)
WHERE o.run = $run AND o.idx IN $ops
RETURN o.idx, c.depth, f.file, f.line, f.function"""
_KERNELS_QUERY = """MATCH (o:Operator)-[l:LAUNCHED]->(k:Kernel)
WHERE o.run = $run AND o.idx IN $ops
RETURN o.idx, l.launch_order, k.name"""


def kernel_paths(db: ProfileDB, run: str, ops: list[int]) -> dict[int, list[tuple[str, ...]]]:
    """op idx → its kernel paths (ops that launched nothing are absent): the same paths
    `KERNEL_PATHS_QUERY` describes, assembled here from three plain row queries.

    Why not that query: on runs of a few thousand operators both engines got its nested
    list functions wrong — Kùzu 0.11.3 returned undecodable bytes at ~600 operators and
    aborted at ~1,000 (a segfault in `magneton diff` on a BERT encoder); LadybugDB 0.22
    returned empty frame keys for a few operators of a 3,000-operator run
    (tests/test_query_contained.py runs this at that size). Plain rows are read
    correctly by both, and the Python is linear in the rows.
    """
    if not ops:
        return {}
    params = {"run": run, "ops": [int(i) for i in ops]}
    bk = set(bookkeeping())
    rows = db.query("MATCH (r:Run {name: $run}) RETURN r.script", {"run": run}).rows
    script = rows[0][0] if rows else None
    chains: dict[int, list[str]] = {}
    for idx, name, call_paths in db.query(_OPS_QUERY, params).rows:
        if name not in bk:
            chains[int(idx)] = list(call_paths or [])
    frames: dict[int, list[tuple[int, str]]] = {i: [] for i in chains}
    for idx, depth, file, line, function in db.query(_FRAMES_QUERY, params).rows:
        if idx in frames:
            own = file == script
            key = f"py:<script>:{function}" if own else f"py:{file}:{line}:{function}"
            frames[idx].append((depth, key))
    kernels: dict[int, list[tuple[int, str]]] = {i: [] for i in chains}
    for idx, order, name in db.query(_KERNELS_QUERY, params).rows:
        if idx in kernels and not name.startswith("aten::"):
            kernels[idx].append((order, "k:" + name))
    out: dict[int, list[tuple[str, ...]]] = {}
    for idx in sorted(chains):
        head = [k for _, k in sorted(frames[idx])]
        tail = [k for _, k in sorted(kernels[idx])]
        paths = {
            tuple(head + ["at:" + x for x in cp.split(" > ") if x not in bk] + tail)
            for cp in chains[idx]
        }
        if paths:  # an operator without a recorded dispatch chain has no path
            out[idx] = sorted(paths)
    return out
