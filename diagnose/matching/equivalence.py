"""Tensor equivalence across two runs: "do these two records hold the same value?"

A record never holds data, only the layout-invariant summary written by
`magneton.tracer.capture.invariants.summarize`. Two tensors are *equivalent* when

* they are of the same dtype class (float / complex / integer / bool) and numel — a
  reshape keeps numel, and flattening ids for an embedding lookup must still match;
* integer/bool: the layout-invariant multiset hash of their values is equal (exact);
* float/complex: `distance(a, b) <= tolerance(tau, dtype_a, dtype_b)` where `distance` is
  the largest of
  - stats: |Δsum| / max abs_sum, |Δabs_sum| / max abs_sum, |Δmin|, |Δmax|, |Δstd| / scale
    (scale = the larger max|x| of the two),
  - quantiles: max |Δq_k| / scale,
  - spectra: for every unfolding key both tensors have (an (m, n) unfolding of a
    permuted or mode-refined tensor has the same key), max |Δσ_i| / σ_max, spectra
    paired by the best assignment when a key occurs more than once (shape (2, 3, 2) has
    two (2, 6) unfoldings). Tensors of order ≥ 2 with no common key have incompatible
    mode structures (e.g. (6, 4) vs (8, 3)) and are not equivalent; a vector or scalar
    is compared on stats and quantiles only.
  Every term is relative to the tensor's own magnitude, so one τ serves activations of
  1e-3 and logits of 1e3 alike.

Tolerance: the default `DEFAULT_TAU` comes from the sensitivity sweep in
`benchmarks/matching_sensitivity.py` (docs/matching.md has the curve). It is raised to
`EPS_FACTOR` × machine epsilon of the less precise dtype of the pair, so a bfloat16 run
still matches its float32 counterpart; float32 pairs use τ as is.

Sensitivity limit (documented, tested): a permutation-invariant summary cannot see
element-wise noise that leaves the value distribution unchanged. Independent relative
noise δ shifts spectra and sums by about δ/√(side length), so at the default τ it is
detected for δ ≥ 1e-2 on tensors with sides up to a few thousand elements, not on
arbitrarily large ones.

Pairing is indexed (see `TensorIndex`): candidates share (class, numel), a binary search
on max |x| bounds them, and a vectorized stats/quantile test leaves only near-certain
matches for the full spectral comparison — no blind O(n · m) full comparisons. The
survivors' spectra are compared in numpy batches per pair of key layouts
(`_batch_distances`) with the same elementwise operations as `distance`, so the values
are identical bit for bit; a pair the batch cannot express (non-finite spectra, more than
6 spectra under one key) goes through `distance` itself.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from magneton.model import TensorRecord
from magneton.tracer.capture.unfoldings import canonical_shape, plan_splits
from magneton.tracer.capture.unfoldings import dtype_class as _dtype_class

DEFAULT_TAU = 1e-3
EPS_FACTOR = 2.0

_EPS = {
    "float64": 2.220446049250313e-16,
    "double": 2.220446049250313e-16,
    "float32": 1.1920928955078125e-07,
    "float": 1.1920928955078125e-07,
    "float16": 9.765625e-04,
    "half": 9.765625e-04,
    "bfloat16": 7.8125e-03,
    "complex128": 2.220446049250313e-16,
    "complex64": 1.1920928955078125e-07,
    "complex32": 9.765625e-04,
}


@lru_cache(maxsize=64)
def dtype_eps(dtype: str) -> float:
    d = str(dtype).replace("torch.", "")
    if d in _EPS:
        return _EPS[d]
    if d.startswith("float8"):
        return 0.125 if "e4m3" in d else 0.25
    return _EPS["float32"]


def tolerance(tau: float, dtype_a: str, dtype_b: str) -> float:
    """The effective tolerance of a pair: τ, widened for low-precision dtypes."""
    return max(tau, EPS_FACTOR * max(dtype_eps(dtype_a), dtype_eps(dtype_b)))


# --------------------------------------------------------------------------------------
# Parsed summaries
# --------------------------------------------------------------------------------------


@dataclass
class Signature:
    """A TensorRecord's summary parsed once for repeated comparisons."""

    idx: int
    cls: str
    numel: int
    dtype: str
    comparable: bool = True
    multiset: str = ""  # integer/bool: layout-invariant value hash
    ordered: str = ""  # integer/bool: hash of the values in row-major order
    stats: list[float] = field(default_factory=list)
    quantiles: list[float] = field(default_factory=list)
    scale: float = 0.0
    mean_abs: float = 0.0
    has_splits: bool = False
    raw: tuple = ()  # exact summary, for a fast "identical" check
    canon: tuple[int, ...] = ()
    inv: list = field(default_factory=list, repr=False)
    _lens: list = field(default_factory=list, repr=False)
    _groups: dict | None = field(default=None, repr=False)
    _flat: tuple | None = field(default=None, repr=False)
    _keyed: tuple | None = field(default=None, repr=False)

    @property
    def groups(self) -> dict[tuple, list[np.ndarray]]:
        """Spectra by unfolding key, parsed on first use: most candidate pairs are
        rejected by stats and quantiles before the spectra are ever looked at."""
        if self._groups is None:
            self._groups = {}
            if self.has_splits:
                inv = np.asarray(self.inv, dtype=np.float64)
                off = 0
                for sp, n in zip(plan_splits(self.canon), self._lens, strict=True):
                    self._groups.setdefault(sp.key, []).append(inv[off : off + n])
                    off += n
        return self._groups

    @property
    def keyed(self) -> tuple:
        """(key layout, spectra concatenated in the layout's key order, whether every
        key occurs once, whether pairs of this layout can be compared in a batch),
        parsed on first use."""
        if self._keyed is None:
            if not self.has_splits:
                self._keyed = ((), None, False, False)
            else:
                layout, order, singleton, batchable = _layout(self.canon, tuple(self._lens))
                vals = np.asarray(self.inv, dtype=np.float64)[order[0]]
                self._keyed = (layout, vals, singleton, batchable)
        return self._keyed

    @property
    def flat(self) -> tuple:
        """(key layout, concatenated spectra, per-value normalizer): when two tensors
        have the same layout of singleton keys (the common case), all spectra compare in
        one vectorized step."""
        if self._flat is None:
            if not self.has_splits:
                self._flat = ((), None, None)
            else:
                layout, vals, singleton, _ = self.keyed
                if singleton:
                    order = _layout(self.canon, tuple(self._lens))[1]
                    tops = np.repeat(vals[order[1]], order[2])
                    self._flat = (layout, vals, tops)
                else:
                    self._flat = (layout, None, None)
        return self._flat


@lru_cache(maxsize=4096)
def _layout(canon: tuple[int, ...], lens: tuple[int, ...]) -> tuple:
    """Per (shape, spectrum lengths): the unfolding keys in a canonical order with their
    multiplicity and length, the gather index putting the stored spectra in that order,
    where each reordered spectrum starts, whether every key occurs once, and whether
    the layout is batchable (`_batch_distances`): each key's spectra are equally long
    and at most 6 of them, the exhaustive pairing of `_group_dist`."""
    splits = plan_splits(canon)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    by_key: dict[tuple, list[int]] = {}
    for i, sp in enumerate(splits):
        by_key.setdefault(sp.key, []).append(i)
    keys = sorted(by_key, key=repr)
    layout = tuple((k, len(by_key[k]), lens[by_key[k][0]]) for k in keys)
    singleton = all(len(by_key[k]) == 1 for k in keys)
    idx = [j for k in keys for i in by_key[k] for j in range(offsets[i], offsets[i + 1])]
    seg_lens = [lens[i] for k in keys for i in by_key[k]]
    starts = np.concatenate([[0], np.cumsum(seg_lens)[:-1]]).astype(np.int64)
    batchable = all(len(by_key[k]) <= 6 and len({lens[i] for i in by_key[k]}) == 1 for k in keys)
    gather = (np.asarray(idx, dtype=np.int64), starts, np.asarray(seg_lens))
    return layout, gather, singleton, batchable


dtype_class = lru_cache(maxsize=64)(_dtype_class)


@lru_cache(maxsize=4096)
def _sorted_shape(canon: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(canon))


_canon = lru_cache(maxsize=4096)(canonical_shape)


def _record_cls(t: TensorRecord) -> str:
    return dtype_class(t.dtype) if t.dtype else "f"


def _float_comparable(t: TensorRecord, cls: str) -> bool:
    """Whether a record of dtype class `cls` carries a float summary to compare."""
    return (cls == "f" or cls == "c") and len(t.stats) >= 6 and (t.numel <= 0 or bool(t.quantiles))


def signature(t: TensorRecord) -> Signature:
    cls = _record_cls(t)
    if _float_comparable(t, cls):
        return _float_signature(t, cls, t.stats)
    sig = Signature(idx=t.idx, cls=cls, numel=int(t.numel), dtype=t.dtype)
    if cls in ("i", "b"):
        parts = (t.value_hash or "").split(":")
        if len(parts) < 2 or not parts[1]:
            sig.comparable = False
            return sig
        sig.multiset = parts[1]
        sig.ordered = parts[2] if len(parts) > 2 else ""
        sig.raw = (t.value_hash,)
        return sig
    sig.comparable = False
    return sig


def _float_signature(
    t: TensorRecord,
    cls: str,
    stats: list[float],
    canon: tuple[int, ...] | None = None,
    raw: tuple | None = None,
) -> Signature:
    """The signature of a float/complex record with stats and quantiles, built in one
    constructor call (a run has thousands); `canon` and `raw` when already computed."""
    if canon is None:
        canon = _canon(tuple(t.shape))
    if raw is None:
        raw = (tuple(stats), tuple(t.quantiles), tuple(t.invariant))
    splits = plan_splits(canon)
    lens = t.invariant_splits
    numel = int(t.numel)
    return Signature(
        idx=t.idx,
        cls=cls,
        numel=numel,
        dtype=t.dtype,
        stats=stats,
        quantiles=t.quantiles,
        scale=max(abs(stats[2]), abs(stats[3])),
        mean_abs=stats[1] / numel if numel else 0.0,
        # A summary written by another split plan (older magneton) is ignored, not misread.
        has_splits=bool(splits) and len(lens) == len(splits) and sum(lens) == len(t.invariant),
        raw=raw,
        canon=canon,
        inv=t.invariant,
        _lens=list(lens),
    )


def _spectrum_dist(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    if n == 0:
        return 0.0
    top = max(a[0], b[0])
    if top <= 0.0:
        return 0.0
    return float(np.abs(a[:n] - b[:n]).max()) / top


def _group_dist(ga: list[np.ndarray], gb: list[np.ndarray]) -> float:
    """Best pairing of the spectra of one key (the smaller group into the larger)."""
    if len(ga) > len(gb):
        ga, gb = gb, ga
    if len(ga) == 1:
        return min(_spectrum_dist(ga[0], s) for s in gb)
    d = [[_spectrum_dist(x, y) for y in gb] for x in ga]
    if len(gb) <= 6:
        return min(
            max(d[i][j] for i, j in enumerate(perm))
            for perm in itertools.permutations(range(len(gb)), len(ga))
        )
    used: set[int] = set()
    worst = 0.0
    for i in range(len(ga)):  # greedy beyond 6: groups that large are rare
        j = min((j for j in range(len(gb)) if j not in used), key=lambda j: d[i][j])
        used.add(j)
        worst = max(worst, d[i][j])
    return worst


def distance(
    a: Signature, b: Signature, limit: float = math.inf, *, prefiltered: float | None = None
) -> float:
    """Normalized discrepancy of two summaries (0 = identical, inf = incomparable).

    Stops early once the discrepancy exceeds `limit` (the result is then some value
    above `limit`, not necessarily the maximum). `prefiltered`: the stats/quantile part,
    already computed by the index's vectorized prefilter.
    """
    if not (a.comparable and b.comparable) or a.cls != b.cls or a.numel != b.numel:
        return math.inf
    if a.cls in ("i", "b"):
        return 0.0 if a.multiset == b.multiset else math.inf
    if a.raw == b.raw:
        return 0.0
    if a.numel == 0:
        return 0.0
    scale = max(a.scale, b.scale)
    if scale == 0.0:
        return 0.0
    if prefiltered is not None:
        d = prefiltered
    else:
        sa, sb = a.stats, b.stats
        abs_ref = max(sa[1], sb[1])
        d = max(
            abs(sa[0] - sb[0]) / abs_ref,
            abs(sa[1] - sb[1]) / abs_ref,
            abs(sa[2] - sb[2]) / scale,
            abs(sa[3] - sb[3]) / scale,
            abs(sa[5] - sb[5]) / scale,
        )
        if d > limit:
            return d
        if len(a.quantiles) != len(b.quantiles) or not len(a.quantiles):
            return math.inf
        d = max(d, float(np.abs(np.subtract(a.quantiles, b.quantiles)).max()) / scale)
    if d > limit:
        return d
    if a.has_splits and b.has_splits:
        la, va, ta = a.flat
        lb, vb, tb = b.flat
        if la == lb and va is not None:
            top = np.maximum(np.maximum(ta, tb), 1e-300)
            return max(d, float((np.abs(va - vb) / top).max()))
        groups_a, groups_b = a.groups, b.groups
        common = groups_a.keys() & groups_b.keys()
        if not common:
            return math.inf
        for key in common:
            d = max(d, _group_dist(groups_a[key], groups_b[key]))
            if d > limit:
                return d
    return d


def equivalent(a: TensorRecord, b: TensorRecord, tau: float = DEFAULT_TAU) -> bool:
    """Whether two tensor records hold the same value up to layout and tolerance."""
    sa, sb = signature(a), signature(b)
    return distance(sa, sb) <= tolerance(tau, a.dtype, b.dtype)


# --------------------------------------------------------------------------------------
# Indexed pairing
# --------------------------------------------------------------------------------------


@dataclass
class _Block:
    """The float representatives of one (class, numel), sorted by scale (max |x|), with
    their stats and quantiles stacked for a vectorized prefilter."""

    reps: np.ndarray
    scale: np.ndarray
    stats: np.ndarray
    quantiles: np.ndarray
    eps: np.ndarray


class _Signatures(dict):
    """Tensor idx → `Signature`; a tensor whose record was only keyed (it shares a
    representative's summary) is parsed on first lookup."""

    def __init__(self):
        super().__init__()
        self.records: dict[int, TensorRecord] = {}

    def __missing__(self, idx: int) -> Signature:
        if idx not in self.records:
            raise KeyError(idx)
        sig = self[idx] = signature(self.records.pop(idx))
        return sig


class TensorIndex:
    """The tensors of one run, deduplicated by summary and indexed for lookup.

    Views and copies of one value share their summary exactly (it is layout-invariant),
    so only one representative per distinct summary is compared; a transformer run has
    several records per value (view, transpose, reshape), which would otherwise multiply
    the comparisons. Float representatives of one (class, numel) are sorted by scale:
    equivalent tensors have scales within the tolerance, so a binary search bounds the
    rows that the vectorized stats/quantile prefilter looks at, and only its survivors
    get the full (spectral) comparison.
    """

    def __init__(self, tensors: Iterable[TensorRecord]):
        self.sigs: dict[int, Signature] = _Signatures()
        self.members: dict[int, list[int]] = {}  # representative -> tensors sharing it
        self.ints: dict[tuple, list[int]] = defaultdict(list)
        floats: dict[tuple, list[int]] = defaultdict(list)
        seen: dict[tuple, int] = {}
        for t in tensors:
            cls = _record_cls(t)
            if _float_comparable(t, cls):
                # keyed before it is parsed, so a tensor that shares a representative's
                # summary (about half of them) is parsed only if someone asks for it
                sig = None
                canon = _canon(tuple(t.shape))
                raw = (tuple(t.stats), tuple(t.quantiles), tuple(t.invariant))
                key = (cls, t.dtype, _sorted_shape(canon), raw)
            else:  # integer/bool (exact) or not comparable at all
                sig = self.sigs[t.idx] = signature(t)
                if not sig.comparable:
                    continue
                key = (sig.cls, sig.dtype, _sorted_shape(sig.canon), sig.raw)
            n_seen = len(seen)
            r = seen.setdefault(key, t.idx)  # one hash of the (long) summary, not two
            if len(seen) == n_seen:
                self.members[r].append(t.idx)
                if sig is None:
                    self.sigs.records[t.idx] = t
                continue
            self.members[t.idx] = [t.idx]
            if sig is None:
                sig = self.sigs[t.idx] = _float_signature(t, cls, t.stats, canon, raw)
                floats[(cls, sig.numel, len(sig.quantiles))].append(t.idx)
            else:
                self.ints[(sig.cls, sig.numel, sig.multiset)].append(t.idx)
        self.blocks: dict[tuple, _Block] = {}
        for key, reps in floats.items():
            reps.sort(key=lambda i: self.sigs[i].scale)
            sigs = [self.sigs[i] for i in reps]
            nq = key[2]
            self.blocks[key] = _Block(
                reps=np.asarray(reps, dtype=np.int64),
                scale=np.asarray([g.scale for g in sigs], dtype=np.float64),
                stats=np.array([g.stats[:6] for g in sigs], dtype=np.float64),
                quantiles=(
                    np.array([g.quantiles for g in sigs], dtype=np.float64)
                    if nq
                    else np.zeros((len(sigs), 0))
                ),
                eps=np.asarray([dtype_eps(g.dtype) for g in sigs], dtype=np.float64),
            )

    def candidates(self, sig: Signature, tau: float) -> list[int]:
        """Representatives whose stats and quantiles are within tolerance of `sig`."""
        if not sig.comparable:
            return []
        if sig.cls in ("i", "b"):
            return self.ints.get((sig.cls, sig.numel, sig.multiset), [])
        blk = self.blocks.get((sig.cls, sig.numel, len(sig.quantiles)))
        if blk is None:
            return []
        eps_a = dtype_eps(sig.dtype)
        tol_max = max(tau, EPS_FACTOR * max(eps_a, float(blk.eps.max())))
        if tol_max >= 1.0:
            lo, hi = 0, len(blk.reps)
        else:
            lo = int(np.searchsorted(blk.scale, sig.scale * (1.0 - tol_max), side="left"))
            hi = int(np.searchsorted(blk.scale, sig.scale / (1.0 - tol_max), side="right"))
        if hi <= lo:
            return []
        sc = np.maximum(blk.scale[lo:hi], sig.scale)
        st = blk.stats[lo:hi]
        absref = np.maximum(st[:, 1], sig.stats[1])
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.maximum.reduce(
                [
                    np.abs(st[:, 0] - sig.stats[0]) / absref,
                    np.abs(st[:, 1] - sig.stats[1]) / absref,
                    np.abs(st[:, 2] - sig.stats[2]) / sc,
                    np.abs(st[:, 3] - sig.stats[3]) / sc,
                    np.abs(st[:, 5] - sig.stats[5]) / sc,
                ]
            )
            if blk.quantiles.shape[1]:
                d = np.maximum(d, np.abs(blk.quantiles[lo:hi] - sig.quantiles).max(axis=1) / sc)
        d = np.where(sc == 0.0, 0.0, d)  # both all-zero
        tol = np.maximum(tau, EPS_FACTOR * np.maximum(blk.eps[lo:hi], eps_a))
        return blk.reps[lo:hi][d <= tol].tolist()


def _batch_key(a: Signature, b: Signature) -> tuple | None:
    """(layout of A, layout of B, both singleton and equal) for a prefiltered pair whose
    `distance` is decided by its spectra, compared key by key, else None (identical or
    degenerate summaries, no spectra, no common key, unbatchable layouts: `distance`)."""
    if not (a.has_splits and b.has_splits) or a.raw == b.raw or a.numel == 0:
        return None
    if max(a.scale, b.scale) == 0.0:
        return None
    la, _, singleton, batchable = a.keyed
    lb, _, _, batchable_b = b.keyed
    if not (batchable and batchable_b):
        return None
    if la == lb:
        return la, lb, singleton
    return (la, lb, False) if _key_segments(la, lb) else None


@lru_cache(maxsize=4096)
def _key_segments(la: tuple, lb: tuple) -> tuple:
    """Per unfolding key the two layouts share: (offset, count, length) of its spectra
    in A's keyed values, then the same in B's."""

    def offsets(layout: tuple) -> dict:
        out, off = {}, 0
        for key, mult, n in layout:
            out[key] = (off, mult, n)
            off += mult * n
        return out

    oa, ob = offsets(la), offsets(lb)
    return tuple(oa[k] + ob[k] for k in oa if k in ob)


def _batch_distances(
    la: tuple, lb: tuple, singleton: bool, pairs: list[tuple[Signature, Signature]], pre: list
) -> list[float] | None:
    """`distance` of many prefiltered pairs of one pair of layouts in a few numpy calls
    (the per-pair comparison costs more in call overhead than in arithmetic). Same
    elementwise operations, so the same values bit for bit: the flat normalizer for
    equal singleton layouts, else per common key the best pairing of its spectra by
    permutation (`_group_dist`). None when a spectrum is not finite (NaN ordering
    differs between numpy and `max`)."""
    va = np.stack([a.keyed[1] for a, _ in pairs])
    vb = np.stack([b.keyed[1] for _, b in pairs])
    if not (np.isfinite(va).all() and np.isfinite(vb).all()):
        return None
    d = np.asarray(pre, dtype=np.float64)
    if singleton:
        # `Signature.flat`'s normalizer: each spectrum's largest value, repeated over it
        # (one layout of singleton keys has one segmentation)
        _, starts, lens = _layout(pairs[0][0].canon, tuple(pairs[0][0]._lens))[1]
        top = np.repeat(np.maximum(va[:, starts], vb[:, starts]), lens, axis=1)
        top = np.maximum(top, 1e-300)
        return np.maximum(d, (np.abs(va - vb) / top).max(axis=1)).tolist()
    rows = len(pairs)
    for off_a, ka, na, off_b, kb, nb in _key_segments(la, lb):
        n = min(na, nb)
        if n == 0:
            continue
        a = va[:, off_a : off_a + ka * na].reshape(rows, ka, na)[:, :, :n]
        b = vb[:, off_b : off_b + kb * nb].reshape(rows, kb, nb)[:, :, :n]
        if ka > kb:  # the smaller group into the larger, as `_group_dist`
            a, b, ka, kb = b, a, kb, ka
        # dist[p, i, j]: spectrum i of one side against spectrum j of the other
        top = np.maximum(a[:, :, None, 0], b[:, None, :, 0])
        diff = np.abs(a[:, :, None, :] - b[:, None, :, :]).max(axis=3)
        with np.errstate(divide="ignore", invalid="ignore"):
            dist = np.where(top > 0.0, diff / top, 0.0)
        perms = np.asarray(list(itertools.permutations(range(kb), ka)))
        d = np.maximum(d, dist[:, np.arange(ka), perms].max(axis=2).min(axis=1))
    return d.tolist()


def _batched_distances(
    index_a: TensorIndex, index_b: TensorIndex, rows: list[tuple[int, int, float, float]]
) -> dict[int, float]:
    """Row number → `distance` for the prefiltered rows (ra, rb, prefilter d, tol) that
    can be compared in batches of one layout; the other rows are left to `confirm`."""
    batches: dict[tuple, list[int]] = defaultdict(list)
    for k, (ra, rb, _, _) in enumerate(rows):
        key = _batch_key(index_a.sigs[ra], index_b.sigs[rb])
        if key is not None:
            batches[key].append(k)
    out: dict[int, float] = {}
    for (la, lb, singleton), ks in batches.items():
        sigs = [(index_a.sigs[rows[k][0]], index_b.sigs[rows[k][1]]) for k in ks]
        dists = _batch_distances(la, lb, singleton, sigs, [rows[k][2] for k in ks])
        if dists is not None:
            out.update(zip(ks, dists, strict=True))
    return out


def match_tensors(
    index_a: TensorIndex,
    index_b: TensorIndex,
    tau: float = DEFAULT_TAU,
) -> dict[int, list[tuple[float, int]]]:
    """For each A tensor, its equivalent B tensors as (distance, idx), closest first.
    Tensors without a comparable summary get no entry.

    Float representatives are prefiltered block against block: every A row's window of
    B rows (by scale) is expanded into index arrays and the stats/quantile test runs on
    all those candidate pairs in a handful of numpy calls.
    """
    found: dict[int, list[tuple[float, int]]] = defaultdict(list)

    def confirm(ra: int, rb: int, tol: float, pre: float | None = None) -> None:
        sa, sb = index_a.sigs[ra], index_b.sigs[rb]
        d = distance(sa, sb, limit=tol, prefiltered=pre)
        if d <= tol:
            found[ra].extend((d, ib) for ib in index_b.members[rb])

    for key, reps in index_a.ints.items():
        for ra in reps:
            for rb in index_b.ints.get(key, ()):
                confirm(ra, rb, 0.0)
    for key, ba in index_a.blocks.items():
        bb = index_b.blocks.get(key)
        if bb is None:
            continue
        tol_max = max(tau, EPS_FACTOR * max(float(ba.eps.max()), float(bb.eps.max())))
        if tol_max >= 1.0:
            lo = np.zeros(len(ba.reps), dtype=np.int64)
            hi = np.full(len(ba.reps), len(bb.reps), dtype=np.int64)
        else:
            lo = np.searchsorted(bb.scale, ba.scale * (1.0 - tol_max), side="left")
            hi = np.searchsorted(bb.scale, ba.scale / (1.0 - tol_max), side="right")
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if total == 0:
            continue
        ia = np.repeat(np.arange(len(ba.reps)), counts)
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        ib = np.arange(total) + starts
        sc = np.maximum(ba.scale[ia], bb.scale[ib])
        sa_, sb_ = ba.stats[ia], bb.stats[ib]
        absref = np.maximum(sa_[:, 1], sb_[:, 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.maximum.reduce(
                [
                    np.abs(sa_[:, 0] - sb_[:, 0]) / absref,
                    np.abs(sa_[:, 1] - sb_[:, 1]) / absref,
                    np.abs(sa_[:, 2] - sb_[:, 2]) / sc,
                    np.abs(sa_[:, 3] - sb_[:, 3]) / sc,
                    np.abs(sa_[:, 5] - sb_[:, 5]) / sc,
                ]
            )
            if ba.quantiles.shape[1]:
                dq = np.abs(ba.quantiles[ia] - bb.quantiles[ib]).max(axis=1) / sc
                d = np.maximum(d, dq)
        d = np.where(sc == 0.0, 0.0, d)
        tol = np.maximum(tau, EPS_FACTOR * np.maximum(ba.eps[ia], bb.eps[ib]))
        keep = np.nonzero(d <= tol)[0]
        reps_a, reps_b = ba.reps[ia[keep]].tolist(), bb.reps[ib[keep]].tolist()
        rows = list(zip(reps_a, reps_b, d[keep].tolist(), tol[keep].tolist(), strict=True))
        batched = _batched_distances(index_a, index_b, rows)
        # confirmed in the prefilter's order, so `found` (and the result) keeps its order
        for k, (ra, rb, dk, tk) in enumerate(rows):
            got = batched.get(k)
            if got is None:
                confirm(ra, rb, tk, dk)
            elif got <= tk:
                found[ra].extend((got, ib_) for ib_ in index_b.members[rb])
    out: dict[int, list[tuple[float, int]]] = {}
    for ra, lst in found.items():
        lst.sort()
        for ia_ in index_a.members[ra]:
            out[ia_] = lst
    return out
