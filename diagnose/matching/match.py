"""Differential matching (paper §4.2, Algorithm 1): pair the subgraphs of two runs that
compute the same values from the same values.

Pipeline, and the failure each step prevents:

1. **Graphs.** Each run becomes a DAG with operators *and tensors* as nodes
   (a multi-output op such as `split` or `native_layer_norm` needs its outputs to be
   separate cut points), a virtual SRC feeding the entry's inputs and a virtual SINK fed
   by the final outputs (unconsumed tensors whose producer has no consumed output, so the
   unused `mean`/`rstd` of every layer norm do not count as program outputs).
   Parameters, buffers and everything computed from them alone (a weight's `.t()`, the
   causal mask, rotary tables from `arange`) are *side inputs*: they are left out of the
   dominance graph, because one path from SRC through a deep layer's weight would make
   SRC the only dominator of everything after it. Their ops are attached afterwards to
   the region of their earliest data-dependent consumer. When the entry has no tensor
   inputs (a `main()` that builds its own), every source and input-less op feeds SRC
   instead, which still works but matches more coarsely.
2. **Tensor pairs** from `equivalence.match_tensors` (bucketed, layout-invariant).
3. **Dominator trees** of both graphs, in one pass over execution order (a topological
   order, so each node's predecessors are final when it is reached; a profile whose
   order is not topological falls back to `networkx.immediate_dominators`). Starting from
   (SRC, SINK), the tensors on the dominator path from the exit up to the entry are
   aligned across runs with a maximum-weight increasing subsequence over equivalent pairs
   (order on the path disambiguates repeated values such as identical layers or zeros);
   aligned pairs are cut points and each segment between consecutive cuts is processed
   again. When a segment has no cut on its path (the exit op merges branches, e.g. a
   residual `add`), the exit ops' data inputs are paired and each pair opens a
   sub-segment — recursion until no finer cut exists.
4. **Local anchoring.** Inside each matched scope (the nearest anchored dominator on both
   sides correspond), the remaining equivalent pairs are aligned per equivalence class by
   execution order (q/k/v feeding one fused attention op are not on any dominator path).
   A tensor is only paired within its scope, so two zero tensors in different layers are
   never confused.
5. **Identity anchors.** An unpaired tensor whose value equals the partner of one of its
   producer's inputs (`clone`, `contiguous`, `.to()` of the same dtype, a view) maps to
   that same partner; the op then computes nothing the other run needs — a region with an
   *empty* counterpart (paper: redundant copies).
6. **Regions.** Each run is cut at every anchored tensor, source and side-input tensor;
   the connected pieces are paired through the anchors they produce (a piece producing
   anchors of several pieces of the other run merges with all of them), so regions
   partition the data-dependent ops of both runs and their energies add up. Pairs made
   only of aliasing ops (`view`, `t`, `permute`, `split`...) are merged into the pair that
   consumes them: they cost nothing and would only flood the list. A piece with no
   anchored output (dead code, an extra output only one run computes) joins the region
   that feeds it, so its energy shows up where it is spent.

Complexity: graph building, dominators and scopes are O(n); path alignments are
O(r log r) in the number r of candidate pairs on a path; each path segment is walked once
per pair of exits that opens it. Per-call indexes (a tensor's equivalents with their
distances, each op's component) are built once per `match_runs` call and never outlive
it, so nothing from one pair of runs can leak into the next.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from magneton.model import OpRecord, Profile, Region, TensorRecord, gc_paused
from magneton.model.vocab import FREE_OPS

from .equivalence import DEFAULT_TAU, TensorIndex, match_tensors, tolerance

SRC = -1
SINK = -2
_NONE: frozenset[int] = frozenset()  # no equivalents


# --------------------------------------------------------------------------------------
# Run graphs
# --------------------------------------------------------------------------------------


@dataclass
class RunGraph:
    """One run as a dominance-ready DAG.

    Node ids: op i → i; a tensor is the node of its producer when that op has exactly
    one output (an op and its only output dominate the same nodes, and halving the node
    count halves the dominator computation), else n_ops + j (sources, and the outputs of
    multi-output ops such as `split`, which must be separate cut points).
    """

    profile: Profile
    n_ops: int
    consumers: list[list[int]]
    data_ops: list[bool]
    data_tensors: list[bool]
    final: list[int]
    roots: list[int]  # tensors fed by SRC
    fallback_roots: bool
    idom: dict[int, int]
    order: list[int]  # per tensor: rank in execution order (sources first)
    nodes: int = 0

    node_of: list[int] = field(default_factory=list)  # tensor -> node
    tensor_at: dict[int, int] = field(default_factory=dict)  # node -> tensor it stands for
    children: dict[int, list[int]] = field(default_factory=dict)  # dominator tree
    final_set: frozenset[int] = frozenset()

    def tnode(self, t: int) -> int:
        return self.node_of[t]

    def tensor_of(self, v: int) -> int:
        """The tensor a node stands for, -1 for SRC, SINK and multi-output op nodes."""
        return self.tensor_at.get(v, -1)

    def producer(self, t: int) -> int:
        return self.profile.tensors[t].producer


def build_graph(p: Profile) -> RunGraph:
    n_ops, n_t = len(p.ops), len(p.tensors)
    tensors, ops = p.tensors, p.ops
    consumers: list[list[int]] = [[] for _ in range(n_t)]
    for op in ops:
        ins = op.inputs
        for t in dict.fromkeys(ins) if len(ins) > 1 else ins:
            consumers[t].append(op.idx)

    inputs = [t.idx for t in tensors if t.producer < 0 and t.kind == "input"]
    fallback = not inputs
    if fallback:
        roots = [t.idx for t in tensors if t.producer < 0 and t.kind in ("input", "constant")]
    else:
        roots = inputs

    # Reachability from SRC in one pass: execution order is a topological order of the
    # dataflow (a value is produced before it is consumed). Nodes are listed in that
    # order with their predecessors, which is all the dominator pass needs.
    data_tensors = [False] * n_t
    data_ops = [False] * n_ops
    node_of = [n_ops + t for t in range(n_t)]
    for op in ops:
        if len(op.outputs) == 1:
            node_of[op.outputs[0]] = op.idx
    for t in roots:
        data_tensors[t] = True
    topo: list[int] = [node_of[t] for t in roots]  # after SRC
    preds: dict[int, list[int]] = {v: [SRC] for v in topo}
    for op in ops:
        live = [node_of[t] for t in op.inputs if data_tensors[t]]
        if live:
            into = list(dict.fromkeys(live)) if len(live) > 1 else live
        elif not (fallback and not op.inputs):
            continue
        else:
            into = [SRC]
        data_ops[op.idx] = True
        _add_node(topo, preds, op.idx, into)
        for t in op.outputs:
            data_tensors[t] = True
            if node_of[t] != op.idx:
                _add_node(topo, preds, node_of[t], [op.idx])

    final = _final_outputs(ops, consumers, data_ops, data_tensors)
    if final:
        _add_node(topo, preds, SINK, list(dict.fromkeys(node_of[t] for t in final)))
    idom = _immediate_dominators(topo, preds)
    children: dict[int, list[int]] = defaultdict(list)
    for v, d in idom.items():
        if v != d:
            children[d].append(v)
    tensor_at = {node_of[t]: t for t in range(n_t) if data_tensors[t]}

    return RunGraph(
        profile=p,
        n_ops=n_ops,
        consumers=consumers,
        data_ops=data_ops,
        data_tensors=data_tensors,
        final=final,
        roots=roots,
        fallback_roots=fallback,
        idom=idom,
        order=_tensor_order(tensors),
        nodes=1 + len(preds),
        node_of=node_of,
        tensor_at=tensor_at,
        children=children,
        final_set=frozenset(final),
    )


def _final_outputs(
    ops: list[OpRecord],
    consumers: list[list[int]],
    data_ops: list[bool],
    data_tensors: list[bool],
) -> list[int]:
    """Final outputs: unconsumed data tensors whose producer has no consumed output (any
    unconsumed data tensor when no producer qualifies)."""
    final: list[int] = []
    for op in ops:
        outs = op.outputs
        if len(outs) == 1:
            if data_ops[op.idx] and not consumers[outs[0]]:
                final.append(outs[0])
        elif data_ops[op.idx] and outs and all(not consumers[t] for t in outs):
            final.extend(outs)
    if not final:
        final = [t for t in range(len(data_tensors)) if data_tensors[t] and not consumers[t]]
    return final


def _tensor_order(tensors: list[TensorRecord]) -> list[int]:
    """Each tensor's rank by (producer, out_index, idx)."""
    n_t = len(tensors)
    prods, outs = [t.producer for t in tensors], [t.out_index for t in tensors]
    keyed = sorted(zip(prods, outs, range(n_t), strict=True))
    order = [0] * n_t
    for r, (_, _, t) in enumerate(keyed):
        order[t] = r
    return order


def _add_node(topo: list[int], preds: dict[int, list[int]], v: int, into: list[int]) -> None:
    """Record node v with predecessors `into`; a node seen before (a tensor listed twice
    as an output) only gains predecessors, keeping its first position."""
    if v in preds:
        preds[v].extend(u for u in into if u not in preds[v])
    else:
        topo.append(v)
        preds[v] = into


def _immediate_dominators(topo: list[int], preds: dict[int, list[int]]) -> dict[int, int]:
    """Immediate dominator of every node but SRC (Cooper, Harvey & Kennedy's intersect).

    With the nodes in a topological order, every predecessor is final when a node is
    reached, so one pass suffices and each node's dominators precede it (walking up from
    the later of two nodes reaches their common dominator). A profile whose execution
    order is not topological (an edge to an earlier node) takes networkx's iterative
    algorithm instead, which gives the same unique answer on any graph.
    """
    rank = {SRC: -1}
    for k, v in enumerate(topo):
        rank[v] = k
    idom: dict[int, int] = {SRC: SRC}
    for v in topo:
        rv = rank[v]
        ps = preds[v]
        d = ps[0]
        if rank[d] >= rv:
            return _immediate_dominators_nx(preds)
        for u in ps[1:]:
            if rank[u] >= rv:
                return _immediate_dominators_nx(preds)
            while u != d:
                while rank[u] > rank[d]:
                    u = idom[u]
                while rank[d] > rank[u]:
                    d = idom[d]
        idom[v] = d
    del idom[SRC]
    return idom


def _immediate_dominators_nx(preds: dict[int, list[int]]) -> dict[int, int]:
    import networkx as nx  # here: the fallback is rare, and networkx costs 0.1 s to import

    g = nx.DiGraph()
    g.add_node(SRC)
    g.add_edges_from((u, v) for v, ps in preds.items() for u in ps)
    return nx.immediate_dominators(g, SRC)


# --------------------------------------------------------------------------------------
# Alignment: maximum-weight increasing subsequence over candidate pairs
# --------------------------------------------------------------------------------------


def align(pairs: list[tuple[int, int, float]]) -> list[int]:
    """Indices of a subset of `pairs` (i, j, bonus) strictly increasing in both i and j
    with the most pairs, ties broken by the largest bonus sum. O(r log r)."""
    if len(pairs) < 2:  # most calls (a value chain, a lone exit input): nothing to choose
        return list(range(len(pairs)))
    js = sorted({p[1] for p in pairs})
    rank = {j: k + 1 for k, j in enumerate(js)}
    size = len(js)
    # Fenwick tree of prefix maxima of (count, bonus sum) with the pair that reaches it,
    # as three flat lists: tuples and slices per step cost more than the search itself
    tree_c, tree_b, tree_q = [0] * (size + 1), [0.0] * (size + 1), [-1] * (size + 1)
    order = sorted(range(len(pairs)), key=lambda q: (pairs[q][0], -pairs[q][1]))
    parent = [-1] * len(pairs)
    end_c, end_b, end_q = 0, 0.0, -1
    for q in order:
        _, j, bonus = pairs[q]
        r = rank[j]
        c, b, prev = 0, 0.0, -1  # best chain ending in a column before r
        k = r - 1
        while k > 0:
            ck = tree_c[k]
            if ck > c or (ck == c and tree_b[k] > b):
                c, b, prev = ck, tree_b[k], tree_q[k]
            k -= k & -k
        parent[q] = prev
        c, b = c + 1, b + bonus
        k = r
        while k <= size:
            ck = tree_c[k]
            if c > ck or (c == ck and b > tree_b[k]):
                tree_c[k], tree_b[k], tree_q[k] = c, b, q
            k += k & -k
        if c > end_c or (c == end_c and b > end_b):
            end_c, end_b, end_q = c, b, q
    out = []
    q = end_q
    while q >= 0:
        out.append(q)
        q = parent[q]
    out.reverse()
    return out


# --------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------


@dataclass
class RegionPair:
    a: Region
    b: Region
    kind: str = "matched"  # "matched" | "empty-a" | "empty-b"


@dataclass
class MatchResult:
    pairs: list[RegionPair]
    anchors: list[tuple[int, int]]  # (tensor in a, tensor in b), one-to-one
    identity: list[tuple[str, int, int]]  # ("a"|"b", tensor, partner on the other side)
    unmatched_ops_a: list[int] = field(default_factory=list)
    unmatched_ops_b: list[int] = field(default_factory=list)
    inputs_a: list[int] = field(default_factory=list)
    inputs_b: list[int] = field(default_factory=list)
    inputs_matched: int = 0  # inputs of a with an equivalent input in b
    unmatched_inputs_a: list[int] = field(default_factory=list)
    unmatched_inputs_b: list[int] = field(default_factory=list)
    equivalent_pairs: int = 0
    fallback_roots: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)


class _UF:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        parent = self.parent
        p = parent.setdefault(x, x)
        if p == x:
            return x
        root = parent[p]
        if root == p:  # one step up (a compressed path): nothing to compress
            return p
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, x, y):
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[ry] = rx
        return rx


class _Matcher:
    def __init__(self, pa: Profile, pb: Profile, tau: float):
        self.pa, self.pb, self.tau = pa, pb, tau
        t0 = time.perf_counter()
        self.ga, self.gb = build_graph(pa), build_graph(pb)
        t1 = time.perf_counter()
        # Only data tensors can be anchored; parameters and what is computed from them
        # alone are side inputs (module doc), so they are not even indexed.
        self.ia = TensorIndex(t for t in pa.tensors if self.ga.data_tensors[t.idx])
        self.ib = TensorIndex(t for t in pb.tensors if self.gb.data_tensors[t.idx])
        self.eq = match_tensors(self.ia, self.ib, tau)  # a -> [(d, b)]
        self.eq_set = {a: {b for _, b in lst} for a, lst in self.eq.items()}
        self.eq_rev: dict[int, set[int]] = defaultdict(set)
        for a, lst in self.eq.items():
            for _, b in lst:
                self.eq_rev[b].add(a)
        t2 = time.perf_counter()
        self.timings = {"graphs_s": t1 - t0, "tensor_match_s": t2 - t1}
        self.a2b: dict[int, int] = {}
        self.b2a: dict[int, int] = {}
        self._bonus_cache: dict[tuple[int, int], float] = {}
        self._eq_dist: dict[int, dict[int, float]] = {}  # a -> {b: distance}, on demand
        self._tol: dict[tuple[str, str], float] = {}  # (dtype a, dtype b) -> tolerance

    # -- helpers -------------------------------------------------------------------

    def _bonus(self, a: int, b: int) -> float:
        """Tie-breaker among equally long alignments: same shape, same producing op,
        closer values (all < 1, so the number of aligned pairs always comes first)."""
        got = self._bonus_cache.get((a, b))
        if got is None:
            got = self._bonus_cache[(a, b)] = self._bonus_uncached(a, b)
        return got

    def _bonus_uncached(self, a: int, b: int) -> float:
        ta, tb = self.pa.tensors[a], self.pb.tensors[b]
        sa, sb = ta.shape, tb.shape
        bonus = 0.4 if sa == sb or list(sa) == list(sb) else 0.0
        pa_, pb_ = ta.producer, tb.producer
        if pa_ >= 0 and pb_ >= 0 and self.pa.ops[pa_].name == self.pb.ops[pb_].name:
            bonus += 0.4
        elif pa_ < 0 and pb_ < 0:
            bonus += 0.4
        dist = self._eq_dist.get(a)
        if dist is None:  # one pass over a's (possibly long) list, not one per b
            dist = self._eq_dist[a] = {}
            for d, x in self.eq.get(a, ()):
                dist.setdefault(x, d)
        d = dist.get(b, 0.0)
        dtypes = (ta.dtype, tb.dtype)
        tol = self._tol.get(dtypes)
        if tol is None:
            tol = self._tol[dtypes] = tolerance(self.tau, *dtypes)
        return bonus + 0.1 * (1.0 - min(1.0, d / tol if tol > 0 else 0.0))

    def _align(self, cand: list[tuple[int, int, int, int]]) -> list[int]:
        """`align` over candidates (i, j, tensor a, tensor b), bonus of (a, b): the
        tie-breaker is only computed when there are pairs to choose between."""
        if len(cand) < 2:
            return list(range(len(cand)))
        bonus = self._bonus
        return align([(i, j, bonus(a, b)) for i, j, a, b in cand])

    def _anchor(self, a: int, b: int) -> bool:
        if a in self.a2b or b in self.b2a:
            return False
        self.a2b[a] = b
        self.b2a[b] = a
        return True

    def _chain(self, g: RunGraph, x: int, e: int) -> list[int]:
        """Tensors strictly between entry node e and exit node x on x's dominator path."""
        out = []
        idom, tensor_at, order = g.idom, g.tensor_at, g.order
        v = idom.get(x, SRC)
        te = tensor_at.get(e, -1)
        lim = order[te] if te >= 0 else -1
        while v != e and v != SRC and v != SINK:
            t = tensor_at.get(v, -1)
            if t >= 0 and order[t] > lim:
                out.append(t)
            nv = idom.get(v, SRC)
            if nv == v:
                break
            v = nv
        out.reverse()
        return out

    def _exit_inputs(self, g: RunGraph, x: int, e: int) -> list[int]:
        if x == SINK:
            return list(dict.fromkeys(g.final))
        t = g.tensor_of(x)
        prod = g.producer(t)
        if prod < 0:
            return []
        etensor = g.tensor_of(e)
        order, data = g.order, g.data_tensors
        lim = order[etensor] if etensor >= 0 else -1
        return [
            y
            for y in dict.fromkeys(g.profile.ops[prod].inputs)
            if y != etensor and data[y] and order[y] > lim
        ]

    # -- Algorithm 1 ---------------------------------------------------------------

    def recurse(self) -> None:
        ga, gb = self.ga, self.gb
        seen: set[tuple[int, int, int, int]] = set()
        stack = [(SRC, SRC, SINK, SINK)]
        while stack:
            ea, eb, xa, xb = stack.pop()
            if (ea, eb, xa, xb) in seen:
                continue
            seen.add((ea, eb, xa, xb))
            ca, cb = self._chain(ga, xa, ea), self._chain(gb, xb, eb)
            pos_b = {t: k for k, t in enumerate(cb)}
            cand = []
            for i, a in enumerate(ca):
                for b in self.eq_set.get(a, ()):
                    j = pos_b.get(b)
                    if j is not None:
                        cand.append((i, j, a, b))
            cuts = []
            for q in self._align(cand):
                i, j = cand[q][:2]
                a, b = ca[i], cb[j]
                if self._anchor(a, b) or self.a2b.get(a) == b:
                    cuts.append((ga.tnode(a), gb.tnode(b)))
            points = [(ea, eb), *cuts, (xa, xb)]
            for (pa_, pb_), (qa, qb) in zip(points, points[1:], strict=False):
                if (pa_, pb_) == (qa, qb):
                    continue
                # descend: pair the exit ops' data inputs inside the segment
                # (aligned by execution order, so equal values computed in parallel,
                # e.g. three identical projections, are paired first with first)
                ins_a = sorted(self._exit_inputs(ga, qa, pa_), key=ga.order.__getitem__)
                ins_b = sorted(self._exit_inputs(gb, qb, pb_), key=gb.order.__getitem__)
                pos_in_b = {t: k for k, t in enumerate(ins_b)}
                cand_in = [
                    (i, pos_in_b[z], y, z)
                    for i, y in enumerate(ins_a)
                    for z in self.eq_set.get(y, ())
                    if z in pos_in_b
                ]
                for q in self._align(cand_in):
                    i, j = cand_in[q][:2]
                    last = self._align_value_chains(ins_a[i], ins_b[j], pa_, pb_)
                    if last is not None:
                        stack.append((pa_, pb_, ga.tnode(last[0]), gb.tnode(last[1])))

    def _value_chain(self, g: RunGraph, t: int, e: int, same) -> list[int]:
        """t and the tensors it copies/aliases, root first: walk up while the producer
        has exactly one data input holding the same value (view, expand, clone, a
        `cat` onto an empty cache...), never above the segment entry e."""
        te = g.tensor_of(e)
        lim = g.order[te] if te >= 0 else -1
        chain = [t]
        while len(chain) < 64:
            prod = g.producer(chain[-1])
            if prod < 0 or not g.data_ops[prod]:
                break
            ins = [
                x
                for x in dict.fromkeys(g.profile.ops[prod].inputs)
                if g.data_tensors[x] and g.order[x] > lim
            ]
            same_ins = [x for x in ins if same(x, chain[-1])]
            if len(same_ins) != 1:
                break
            chain.append(same_ins[0])
        chain.reverse()
        return chain

    def _align_value_chains(self, y: int, z: int, ea: int, eb: int) -> tuple[int, int] | None:
        """Anchor two equal-valued exit inputs *and* the copies/aliases they come from,
        aligned by order (so A's `cat → expand → view` meets B's `cat` at the `cat`, and
        the extra `expand → view` becomes an identity region). Returns the aligned pair
        closest to the exits."""
        eq_set, eq_rev = self.eq_set, self.eq_rev
        ca = self._value_chain(
            self.ga, y, ea, lambda u, v: not eq_set.get(u, _NONE).isdisjoint(eq_set.get(v, _NONE))
        )
        cb = self._value_chain(
            self.gb, z, eb, lambda u, v: not eq_rev.get(u, _NONE).isdisjoint(eq_rev.get(v, _NONE))
        )
        pos_b = {t: k for k, t in enumerate(cb)}
        cand = []
        for i, a in enumerate(ca):
            for b in eq_set.get(a, ()):
                j = pos_b.get(b)
                if j is not None:
                    cand.append((i, j, a, b))
        last = None
        for q in self._align(cand):
            i, j = cand[q][:2]
            a, b = ca[i], cb[j]
            if self._anchor(a, b) or self.a2b.get(a) == b:
                last = (a, b)
        return last

    def _scopes(self, g: RunGraph, anchored: dict[int, int]) -> dict[int, int]:
        """Per data tensor: the nearest strict dominator that is an anchored tensor
        (as a tensor idx), or -1 (SRC)."""
        scope: dict[int, int] = {}
        stack = [(SRC, -1)]
        while stack:
            v, cur = stack.pop()
            nxt = cur
            t = g.tensor_of(v)
            if t >= 0:
                scope[t] = cur
                if t in anchored:
                    nxt = t
            for c in g.children.get(v, ()):
                stack.append((c, nxt))
        return scope

    def local_anchors(self) -> None:
        ga, gb = self.ga, self.gb
        sa, sb = self._scopes(ga, self.a2b), self._scopes(gb, self.b2a)
        groups: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        for a, bs in self.eq_set.items():
            if a in self.a2b or a not in sa:
                continue
            scope_a = sa[a]
            want_b = -1 if scope_a < 0 else self.a2b.get(scope_a, -2)
            for b in bs:
                if b in self.b2a or b not in sb or sb[b] != want_b:
                    continue
                groups[(scope_a, want_b)].append((a, b))
        for cand in groups.values():
            if len(cand) == 1:
                self._anchor(*cand[0])
                continue
            # classes: connected components of the candidate pairs
            uf = _UF()
            for a, b in cand:
                uf.union(("a", a), ("b", b))
            by_class: dict = defaultdict(list)
            for a, b in cand:
                by_class[uf.find(("a", a))].append((a, b))
            for pairs in by_class.values():
                if len(pairs) == 1:
                    self._anchor(*pairs[0])
                    continue
                trip = [(ga.order[a], gb.order[b], self._bonus(a, b)) for a, b in pairs]
                for q in align(trip):
                    self._anchor(*pairs[q])

    def identity_anchors(self) -> list[tuple[str, int, int]]:
        out: list[tuple[str, int, int]] = []
        for side, g, fwd, eqs in (
            ("a", self.ga, self.a2b, self.eq_set),
            ("b", self.gb, self.b2a, self.eq_rev),
        ):
            extra: dict[int, int] = {}
            for op in g.profile.ops:
                if not g.data_ops[op.idx]:
                    continue
                partners = [q for x in op.inputs if (q := fwd.get(x, extra.get(x))) is not None]
                if not partners:
                    continue
                for y in op.outputs:
                    if y in fwd or y in extra:
                        continue
                    cands = eqs.get(y, ())
                    for p in partners:
                        if p in cands:
                            extra[y] = p
                            out.append((side, y, p))
                            break
            if side == "a":
                self.id_a = extra
            else:
                self.id_b = extra
        return out

    # -- regions -------------------------------------------------------------------

    def _components(self, g: RunGraph, cut: set[int]) -> tuple[_UF, list[int]]:
        """Union ops through non-cut tensors; attach side-input ops to their earliest
        data-dependent consumer. Returns (uf over op idx, list of data/attached ops)."""
        p = g.profile
        uf = _UF()
        for op in p.ops:
            if g.data_ops[op.idx]:
                uf.find(op.idx)
        for t, cons in enumerate(g.consumers):
            if t in cut or not g.data_tensors[t]:
                continue
            prod = p.tensors[t].producer
            members = [c for c in cons if g.data_ops[c]]
            if prod >= 0 and g.data_ops[prod]:
                members.append(prod)
            for c in members[1:]:
                uf.union(members[0], c)
        # side-input ops: earliest data consumer, transitively (reverse execution order)
        target: dict[int, int] = {}
        for op in reversed(p.ops):
            if g.data_ops[op.idx]:
                continue
            best = None
            for t in op.outputs:
                for c in g.consumers[t]:
                    cand = c if g.data_ops[c] else target.get(c)
                    if cand is not None and (best is None or cand < best):
                        best = cand
            if best is not None:
                target[op.idx] = best
        for o, tgt in target.items():
            uf.union(tgt, o)
        members = [op.idx for op in p.ops if g.data_ops[op.idx] or op.idx in target]
        return uf, members

    def regions(self) -> tuple[list[RegionPair], list[int], list[int]]:
        """Cut both runs at their anchored tensors into components, link components that
        produce partner anchors into groups, merge groups made only of aliasing ops into
        a neighbour, and turn the groups into region pairs (plus unmatched ops)."""
        fa = {**self.a2b, **self.id_a}
        fb = {**self.b2a, **self.id_b}
        sa, sb = self._side(self.ga, fa), self._side(self.gb, fb)
        groups = self._link_groups(sa, sb)
        return self._region_pairs(self._merge_free_groups(groups), fa, fb)

    def _side(self, g: RunGraph, fwd: dict[int, int]) -> _Side:
        cut = set(fwd) | {t.idx for t in g.profile.tensors if t.producer < 0}
        uf, members = self._components(g, cut)
        root = {o: uf.find(o) for o in list(uf.parent)}
        comps: dict[int, list[int]] = defaultdict(list)
        for o in members:
            comps[root[o]].append(o)
        return _Side(g=g, fwd=fwd, uf=uf, comps=comps, root=root)

    def _link_groups(self, sa: _Side, sb: _Side) -> dict:
        """Group key → (A ops, B ops): components linked through anchored pairs, except
        identity components (every anchored output maps onto a partner of an input);
        components with no anchored output join the group that feeds them."""
        ident_a = {c for c, ops in sa.comps.items() if sa.identity(ops)}
        ident_b = {c for c, ops in sb.comps.items() if sb.identity(ops)}
        link = _UF()
        for a, b in self.a2b.items():
            ca, cb = sa.comp_of(a), sb.comp_of(b)
            if ca is not None and cb is not None and ca not in ident_a and cb not in ident_b:
                link.union(("a", ca), ("b", cb))
        for side, s in (("a", sa), ("b", sb)):
            has_out = {s.comp_of(t) for t in s.fwd}
            for c, ops in sorted(s.comps.items(), key=lambda kv: min(kv[1])):
                feeder = None if c in has_out else s.feeder(c, ops)
                if feeder is not None:
                    link.union((side, feeder), (side, c))
        groups: dict = defaultdict(lambda: ([], []))
        for c, ops in sa.comps.items():
            groups[link.find(("a", c))][0].extend(ops)
        for c, ops in sb.comps.items():
            groups[link.find(("b", c))][1].extend(ops)
        return groups

    def _merge_free_groups(self, groups: dict) -> dict:
        """Merge pairs made only of aliasing ops into a neighbouring pair: preferably one
        that consumes their outputs on *both* sides (an alias pair `t | t` feeding a
        redundant copy on one side and the real consumer on the other must not turn the
        copy's empty-counterpart region into a matched one), else one that produces
        their inputs on both sides, else any neighbour with ops on both sides."""
        pa, pb = self.pa, self.pb
        state = _FreeMerge(
            group_of_a={o: k for k, (oa, _) in groups.items() for o in oa},
            group_of_b={o: k for k, (_, ob) in groups.items() for o in ob},
            sides={k: (bool(oa), bool(ob)) for k, (oa, ob) in groups.items()},
        )
        merge, sides = state.merge, state.sides
        last = {k: max(max(oa, default=-1), max(ob, default=-1)) for k, (oa, ob) in groups.items()}
        for k in sorted(groups, key=lambda k: -last[k]):
            oa, ob = groups[k]
            if not all(pa.ops[o].name in FREE_OPS for o in oa) or not all(
                pb.ops[o].name in FREE_OPS for o in ob
            ):
                continue
            target = self._merge_target(k, oa, ob, state)
            if target is not None:
                root = merge.union(target, merge.find(k))
                sa_, sb_ = sides[merge.find(target)], sides[k]
                sides[root] = (sa_[0] or sb_[0], sa_[1] or sb_[1])
        final_groups: dict = defaultdict(lambda: ([], []))
        for k, (oa, ob) in groups.items():
            r = merge.find(k)
            final_groups[r][0].extend(oa)
            final_groups[r][1].extend(ob)
        return final_groups

    def _merge_target(self, k, oa: list[int], ob: list[int], state: _FreeMerge):
        """The group an alias-only group `k` merges into: same module first (`x.view(...)`
        at the end of Conv1D stays with its addmm), then consumers before producers."""
        module = self.pa.ops[oa[0]].module if oa else self.pb.ops[ob[0]].module
        ranked = []
        every: list = []
        for rank_dir, down in enumerate((True, False)):
            na = state.neighbours(oa, self.ga, state.group_of_a, k, down)
            nb = state.neighbours(ob, self.gb, state.group_of_b, k, down)
            every += [*na, *nb]
            if oa and ob:
                both = {r: na[r] | nb[r] for r in na if r in nb}
            else:
                both = na or nb
            for order, (r, mods) in enumerate(both.items()):
                ranked.append((module not in mods, rank_dir, order, r))
            if any(not other_module for other_module, *_ in ranked):
                break  # a consumer in the same module ranks before every producer
        if ranked:
            return min(ranked, key=lambda x: x[:3])[3]
        sided = [x for x in every if all(state.sides[state.merge.find(x)])]
        return (sided or every or [None])[0]

    def _region_pairs(
        self, final_groups: dict, fa: dict[int, int], fb: dict[int, int]
    ) -> tuple[list[RegionPair], list[int], list[int]]:
        """Region pairs of the merged groups; a group without an anchored output is
        unmatched, one with ops on one side only pairs with an empty region."""
        pa, pb, ga, gb = self.pa, self.pb, self.ga, self.gb
        pairs: list[RegionPair] = []
        unmatched_a: list[int] = []
        unmatched_b: list[int] = []
        for oa, ob in final_groups.values():
            oa, ob = sorted(set(oa)), sorted(set(ob))
            ra = _region(pa, ga, oa, fa)
            rb = _region(pb, gb, ob, fb)
            if not oa and not ob:
                continue
            if fa.keys().isdisjoint(ra.outputs) and fb.keys().isdisjoint(rb.outputs):
                unmatched_a.extend(oa)
                unmatched_b.extend(ob)
                continue
            kind = "matched"
            if not ob:
                kind, rb = "empty-b", _mirrored(ra, fa)
            elif not oa:
                kind, ra = "empty-a", _mirrored(rb, fb)
            pairs.append(RegionPair(a=ra, b=rb, kind=kind))
        pairs.sort(key=lambda rp: (rp.a.ops[0] if rp.a.ops else -1, rp.b.ops[:1]))
        return pairs, sorted(unmatched_a), sorted(unmatched_b)


@dataclass
class _Side:
    """One run cut into components at its anchored tensors (for `_Matcher.regions`)."""

    g: RunGraph
    fwd: dict[int, int]  # anchored tensor -> partner (identity anchors included)
    uf: _UF
    comps: dict[int, list[int]]  # component root -> ops
    # op -> its component root, for every op in a component: the components are final
    # once built, and the region phase asks for the component of each tensor many times
    root: dict[int, int] = field(default_factory=dict)

    def comp_of(self, t: int) -> int | None:
        prod = self.g.profile.tensors[t].producer
        return self.root.get(prod) if prod >= 0 else None

    def identity(self, ops: list[int]) -> bool:
        """Every anchored output maps onto a partner of an anchored input."""
        prof, fwd = self.g.profile, self.fwd
        ins = {fwd[t] for o in ops for t in prof.ops[o].inputs if t in fwd}
        outs = [t for o in ops for t in prof.ops[o].outputs if t in fwd]
        return bool(outs) and all(fwd[t] in ins for t in outs)

    def feeder(self, c: int, ops: list[int]) -> int | None:
        """The first other component that produces an input of component `c`."""
        for o in sorted(ops):
            for t in self.g.profile.ops[o].inputs:
                fc = self.comp_of(t)
                if fc is not None and fc != c:
                    return fc
        return None


@dataclass
class _FreeMerge:
    """State of merging alias-only groups: which group each op is in, the merges made so
    far, and whether each merged group has ops on side A / side B."""

    group_of_a: dict
    group_of_b: dict
    sides: dict
    merge: _UF = field(default_factory=lambda: _UF())

    def neighbours(self, ops: list[int], g: RunGraph, gof: dict, k, down: bool) -> dict:
        """Neighbouring groups (merged roots) → modules of the neighbouring ops."""
        prof, find = g.profile, self.merge.find
        own = find(k)  # no merge happens while the neighbours are collected
        out: dict = {}
        for o in ops:
            if down:
                near = [c for t in prof.ops[o].outputs for c in g.consumers[t]]
            else:
                near = [prof.tensors[t].producer for t in prof.ops[o].inputs]
            for c in near:
                if c >= 0 and c in gof:
                    r = find(gof[c])
                    if r != own:
                        out.setdefault(r, set()).add(prof.ops[c].module)
        return out


def _mirrored(r: Region, fwd: dict[int, int]) -> Region:
    """The empty counterpart of a one-sided region: its anchored boundary, mapped over."""
    return Region(
        ops=[],
        inputs=list(dict.fromkeys(fwd[t] for t in r.inputs if t in fwd)),
        outputs=list(dict.fromkeys(fwd[t] for t in r.outputs if t in fwd)),
    )


def _region(p: Profile, g: RunGraph, ops: list[int], anchored: dict[int, int]) -> Region:
    inside = set(ops)
    recs = [p.ops[o] for o in ops]
    made = list(dict.fromkeys(t for r in recs for t in r.outputs))
    produced = set(made)
    inputs = list(dict.fromkeys(t for r in recs for t in r.inputs if t not in produced))
    final, consumers = g.final_set, g.consumers
    outputs = [t for t in made if t in final or not inside.issuperset(consumers[t])]
    return Region(
        ops=ops,
        inputs=inputs,
        outputs=outputs,
        energy_j=sum(r.energy_j for r in recs),
        time_s=sum(r.time_s for r in recs),
    )


def match_runs(a: Profile, b: Profile, tau: float = DEFAULT_TAU) -> MatchResult:
    """Pair the regions of two runs that compute equivalent values (see module doc)."""
    # with two loaded profiles alive, each cyclic-GC pass would rescan every record of
    # both runs (measured: a third of the matching time on a 32-layer model)
    with gc_paused():
        return _match_runs(a, b, tau)


def _match_runs(a: Profile, b: Profile, tau: float) -> MatchResult:
    m = _Matcher(a, b, tau)
    t0 = time.perf_counter()
    m.recurse()
    t1 = time.perf_counter()
    m.local_anchors()
    identity = m.identity_anchors()
    t2 = time.perf_counter()
    pairs, un_a, un_b = m.regions()
    t3 = time.perf_counter()
    inputs_a = [t.idx for t in a.tensors if t.producer < 0 and t.kind == "input"]
    inputs_b = [t.idx for t in b.tensors if t.producer < 0 and t.kind == "input"]
    set_b = set(inputs_b)
    inputs_matched = sum(1 for t in inputs_a if m.eq_set.get(t, set()) & set_b)
    odd_a = [t for t in inputs_a if not m.eq_set.get(t, set()) & set_b]
    odd_b = [t for t in inputs_b if not m.eq_rev.get(t, set()) & set(inputs_a)]
    timings = dict(m.timings)
    timings.update({"dominators_s": t1 - t0, "anchors_s": t2 - t1, "regions_s": t3 - t2})
    return MatchResult(
        pairs=pairs,
        anchors=sorted(m.a2b.items()),
        identity=identity,
        unmatched_ops_a=un_a,
        unmatched_ops_b=un_b,
        inputs_a=inputs_a,
        inputs_b=inputs_b,
        inputs_matched=inputs_matched,
        unmatched_inputs_a=odd_a,
        unmatched_inputs_b=odd_b,
        equivalent_pairs=sum(len(v) for v in m.eq.values()),
        fallback_roots=m.ga.fallback_roots or m.gb.fallback_roots,
        timings_s=timings,
    )
