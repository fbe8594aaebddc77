"""Layout-invariant value summaries of tensors (paper §4.2), computed for every tensor of
the structure pass and used by differential matching to decide "same value".

Two runs rarely lay the same value out the same way: HF's `Conv1D` stores a weight as
(in, out) where `nn.Linear` stores (out, in); one attention backend is head-first, the
other sequence-first; one implementation keeps a transposed view where the other makes
a contiguous copy. Element-wise comparison fails on all of these, so a tensor is
summarized by quantities that do not depend on how its modes are ordered:

* `stats` — [sum, abs_sum, min, max, mean, std] as float64 numbers (population std),
  summed in the tensor's own precision (see `_stats`).
* `quantiles` — `N_QUANTILES` evenly spaced quantiles (linear interpolation between
  order statistics). Order statistics forget the layout. They are exactly the full
  sort's, but found by histogram selection (`_order_statistics`): a sort cost 35-45 ns
  per float32 element here (numpy's SIMD sort is not dispatched on every CPU) and was
  three quarters of a structure pass; counting value bins and sorting only the few
  elements in the bins that hold the wanted ranks costs about 5.
* `invariant` / `invariant_splits` — multi-mode SVD invariants: for every split of the
  modes into rows S and columns S^c (up to complement symmetry), the singular values of
  that unfolding, largest first, at most `TOP_K` of them. Permuting modes within S or
  S^c permutes rows/columns of the unfolding and leaves its singular values unchanged;
  swapping S and S^c transposes it. See `plan_splits` for the split order and keys.
* `value_hash` — integer and bool tensors compare exactly (see `_int_summary`).

Choices and the failures they prevent:

- Size-1 modes are dropped before splitting: `x[None]` or a squeezed batch of one must
  not change the invariant (a lone size-1 mode is a trivial split).
- The values are scaled by max|x| before any product, so float16 extremes or clamped
  infinities cannot overflow a float32 sketch or the float64 Gram matrix; spectra are
  scaled back after.
- Cost bound. An exact spectrum uses the Gram matrix of the smaller side
  (m² n work, m ≤ `EXACT_SIDE_MAX`) and `eigvalsh`; the float64 Gram loses relative
  accuracy only below ~1e-8·σ_max, far under any matching tolerance. Splits whose both
  sides are large (a 768×3072 weight; a (B, T, 768) activation unfolded as T | B·768)
  use a *mode-wise sketch*: every mode of size n > l is contracted with an n×l Gaussian
  matrix seeded by (n, l) only, and the spectrum is taken of the small core. Because the
  sketch matrix depends on the mode's size and never on its position, permuting modes
  permutes the core's modes, so the sketched spectrum is exactly as layout-invariant as
  the exact one (a randomized range finder applied to the unfolding would instead
  depend on the column order and need enough power iterations to converge on the flat
  spectra of random weights). Sketched spectra are not singular values of the tensor;
  they are keyed by the full mode-size multiset and only compared with each other.
  Whether a split is exact or sketched depends only on its side sizes and the element
  count, so two tensors that are permutations of each other always decide alike.
- Non-finite values: NaN → 0 and ±inf → ±(largest finite value of the tensor's dtype)
  before anything else, so an additive mask written with -inf matches one written with
  `torch.finfo(dtype).min` (HF does both, depending on the attention backend), and
  every stored number stays finite (JSON-safe).
- Views of one large tensor (a weight and its `.t()`) share the summary: the cache key
  is (storage, offset, dtype, multiset of (size, stride)), which identifies exactly the
  same elements, and a weak reference to the summarized tensor plus its version counter
  guard against freed-and-reused memory and writes between passes. A write by the
  operator being recorded is invisible to that counter until the operator returns, so
  the capture drops the written storage's summaries itself (`forget`); without that, the
  output of `y.add_(1)` was stored with `y`'s summary from before the write.
- numpy's BLAS runs single-threaded while a summary is computed (`_blas_single_thread`).
  The products here are small (a 128×768 sketch, a 64×64 Gram), so OpenBLAS's worker
  threads add nothing but wake-ups, and during a structure pass they spin against
  PyTorch's own OpenMP pool between operators: on a 2-core machine that made an
  activation's summary 3–20× more expensive in CPU time than the same work on one thread.
  The thread count is restored afterwards, so the caller's numpy is unaffected.
- The structure pass summarizes on worker threads (`SummaryPool`, one per core but
  one): numpy releases the GIL for the counts, reductions and products, so the
  summaries of one operator's tensors run while the next operators dispatch. Same
  functions, same arrays, same values as inline.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import hashlib
import math
import os
import threading
import weakref
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from magneton.tracer.capture.nested import recorded_view

# The layout of a summary (which unfoldings, in which order) is torch-free and lives in
# `unfoldings.py`, so diagnosis can read summaries without importing torch; re-exported.
from magneton.tracer.capture.unfoldings import (  # noqa: F401
    EXACT_SIDE_MAX,
    EXACT_WORK_MAX,
    MAX_SPLITS,
    N_QUANTILES,
    SKETCH_WORK_MAX,
    SUMMARY_KEYS,
    TOP_K,
    Split,
    _sketch_len,
    canonical_shape,
    dtype_class,
    plan_splits,
)

QUANTILE_SORT_MAX = 1 << 14  # elements; above, quantiles by histogram selection
QUANTILE_BINS = 1 << 14  # value bins per selection round
CACHE_MIN_NUMEL = 1 << 16  # cache summaries of views of tensors at least this large
_SEED = 0x4D41474E  # "MAGN"
_CHUNK = 1 << 16  # elements per step of a pass over a large tensor


# --------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------


@dataclass
class _CacheEntry:
    ref: weakref.ref
    version: int
    summary: dict


_cache: dict[tuple, _CacheEntry] = {}


def _cache_key(t: torch.Tensor) -> tuple | None:
    """None for a tensor that cannot be cached: one without storage, or an inference
    tensor (`torch.inference_mode`), which has no version counter to guard the entry
    (reading it raises; that made every such tensor of 64 K elements or more get an
    empty summary, so it matched nothing)."""
    if t.is_inference():
        return None
    try:
        st = t.untyped_storage()
        # size-1 modes do not change which elements are read, nor a summary (which drops
        # them), and their strides are arbitrary: `x.view(128, 768)` of a (1, 128, 768)
        # `x` is the same summary
        pairs = tuple(sorted(p for p in zip(t.shape, t.stride(), strict=True) if p[0] != 1))
        return (t.device.type, st.data_ptr(), t.storage_offset(), str(t.dtype), pairs)
    except Exception:
        return None


def summarize(t: torch.Tensor) -> dict:
    """Layout-invariant summary of `t`: keys are `TensorRecord` field names.

    A nested tensor is summarized through its packed components (`nested.recorded_view`).
    Never raises for an odd tensor (sparse, meta, quantized...): what cannot be read gives
    an empty dict, and such a tensor simply never matches anything.
    """
    try:
        t, key, known = _prepare(t)
        if known is not None:
            return known
        with _blas_single_thread():
            s = _summarize(t)
        if key is not None:
            _store(key, t, t._version, s)
            s = _copy(s)
        return s
    except Exception:
        return {}


def _prepare(t: torch.Tensor) -> tuple[torch.Tensor, tuple | None, dict | None]:
    """(the tensor a summary reads, its cache key or None, its summary when known without
    computing it: a cache hit, or {} for what cannot be read)."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return t, None, {}
    t = recorded_view(t)
    key, hit = _cached(t)
    return t, key, hit


def _cached(t: torch.Tensor) -> tuple[tuple | None, dict | None]:
    """(cache key or None, a copy of the cached summary of exactly these elements or None)."""
    if t.numel() < CACHE_MIN_NUMEL:
        return None, None
    key = _cache_key(t)
    if key is None:
        return None, None
    hit = _cache.get(key)
    if hit is not None:
        if _unchanged(hit.ref, hit.version):
            return key, _copy(hit.summary)
        _cache.pop(key, None)
    return key, None


def _unchanged(ref: weakref.ref, version: int) -> bool:
    """Whether the tensor summarized (at `version`) is alive and has not been written since.

    The summarized tensor's own counter, not that of the tensor being looked up: a view
    made by the operator being recorded does not share its base's counter until the
    operator returns (torch links it after the dispatch mode has run), so its version
    says nothing yet. Writes by recorded operators are caught by `forget` instead."""
    src = ref()
    return src is not None and src._version == version


def forget(storage_ptr: int) -> None:
    """Drop the cached summaries of a storage about to be written.

    The cache's version check cannot see a write made by the operator being recorded:
    torch bumps a tensor's version counter after the kernel returns, outside the dispatch
    mode, so the output of `y.add_(1)` (or of `torch.mul(a, b, out=y)`) still shows the
    version `y` had before, and was given `y`'s old summary. The capture therefore calls
    this for every tensor an operator writes."""
    for key in [k for k in _cache if k[1] == storage_ptr]:
        _cache.pop(key, None)


def _store(key: tuple, t: torch.Tensor, version: int, s: dict) -> None:
    if len(_cache) > 256:
        for k in [k for k, e in _cache.items() if e.ref() is None]:
            _cache.pop(k, None)
    try:
        _cache[key] = _CacheEntry(weakref.ref(t), version, s)
    except TypeError:
        pass


class SummaryPool:
    """`summarize` on worker threads, while the structure pass goes on dispatching.

    Summaries are pure numpy (bin counts, reductions, BLAS), which releases the GIL; run
    inline they leave every other core idle. `submit` does the torch side on the calling
    thread (view, dtype cast, `.numpy()`: no torch operator ever runs on a worker, so the
    profiler, which watches every thread, sees none there) and returns a future of the
    same dict `summarize` gives. The values are identical: the same functions on the
    same arrays.

    What could go wrong, and what prevents it:

    - A summary must describe the value *when the tensor was recorded*, but the array a
      worker reads is usually the tensor's own memory. The capture calls `before_write`
      with every tensor an operator is about to write in place (`add_`, `out=`,
      `copy_`); it waits for the pending summaries of those storages first.
    - A pending summary keeps its tensor alive. At most `MAX_PENDING_BYTES` of arrays
      wait at once; `submit` waits for the oldest beyond that, so a model's activations
      are not all held until the end of the pass.
    - BLAS runs single-threaded for the pool's lifetime (`_blas_single_thread`, taken
      once here rather than per summary, where its lock would serialize the workers).
    - Views of one large tensor (a weight and its `.t()`) share one summary, as in
      `summarize`: a second submit of the same elements gets the first one's future.
    - Only for passes whose time is not measured: a measured pass (`record_block`, a
      program's lone ACTIVE unit) would count the workers' CPU in its operators' energy,
      so it summarizes inline (`workers=0` here, or no pool at all).
    """

    MAX_PENDING_BYTES = 512 << 20

    def __init__(self, workers: int | None = None):
        self.workers = default_workers() if workers is None else workers
        self._exec: ThreadPoolExecutor | None = None
        self._blas: contextlib.AbstractContextManager | None = None
        # storage -> cache key -> (summarized tensor, its version, future): the pending
        # and done summaries of this pass that later views of the same elements share
        self._keyed: dict[int, dict[tuple, tuple[weakref.ref, int, Future]]] = {}
        self._by_storage: dict[int, list[Future]] = {}
        self._queue: collections.deque[tuple[Future, int]] = collections.deque()
        self._queued_bytes = 0

    def __enter__(self) -> SummaryPool:
        if self.workers > 0:
            self._blas = _blas_single_thread()
            self._blas.__enter__()
            self._exec = ThreadPoolExecutor(self.workers, thread_name_prefix="magneton-summary")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._exec is not None:
                # after an error nobody reads the results: drop what has not started
                self._exec.shutdown(wait=True, cancel_futures=exc[0] is not None)
            for keyed in self._keyed.values():
                for key, (ref, version, fut) in keyed.items():
                    src = ref()
                    if src is not None and fut.done() and not fut.cancelled():
                        _store(key, src, version, fut.result())
        finally:
            self._exec = None
            self._keyed.clear()
            self._by_storage.clear()
            self._queue.clear()
            if self._blas is not None:
                blas, self._blas = self._blas, None
                blas.__exit__(None, None, None)

    def submit(self, t: torch.Tensor) -> Future:
        """A future of `summarize(t)`; computed at once when the pool has no workers."""
        if self._exec is None:
            return _done(summarize(t))
        try:
            t, key, known = _prepare(t)
            if known is not None:
                return _done(known)
            if key is not None:
                same = self._keyed.get(key[1], {}).get(key)
                if same is not None and _unchanged(same[0], same[1]):
                    return same[2]
            cls, a = dtype_class(t.dtype), _to_numpy(t)
        except Exception:
            return _done({})
        try:
            fut = self._exec.submit(_summary_of_array, a, cls, t.dtype)
        except RuntimeError:  # no new threads at interpreter exit: summarize here
            return _done(_summary_of_array(a, cls, t.dtype))
        if key is not None:
            self._keyed.setdefault(key[1], {})[key] = (weakref.ref(t), t._version, fut)
        self._by_storage.setdefault(_storage_ptr(t), []).append(fut)
        self._queue.append((fut, a.nbytes))
        self._queued_bytes += a.nbytes
        self._bound()
        return fut

    def before_write(self, tensors: list[torch.Tensor]) -> None:
        """An operator is about to write `tensors` in place: wait for the pending summaries
        of their storages, and forget every summary of those storages (see `forget`)."""
        for t in tensors:
            ptr = _storage_ptr(recorded_view(t))
            for fut in self._by_storage.pop(ptr, []):
                futures.wait([fut])
            self._keyed.pop(ptr, None)
            forget(ptr)

    def _bound(self) -> None:
        while self._queue and (
            self._queue[0][0].done() or self._queued_bytes > self.MAX_PENDING_BYTES
        ):
            fut, nbytes = self._queue.popleft()
            futures.wait([fut])
            self._queued_bytes -= nbytes


def default_workers() -> int:
    """Summary threads: one per core this process may run on but one, at least one and at
    most 8. The core left is the dispatching thread's: PyTorch's own OpenMP threads
    already use every core, and on 2 cores a second summary thread made a GPT-2 12L pass
    slower (1.13-1.57 s against 1.00-1.15 s with one, five passes each, three runs)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores - 1))


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # no storage (sparse): keyed apart, waited for at the end
        return -1


def _done(s: dict) -> Future:
    fut: Future = Future()
    fut.set_result(s)
    return fut


def _summary_of_array(a: np.ndarray, cls: str, dtype: torch.dtype) -> dict:
    try:
        return _int_summary(a, cls) if cls in ("i", "b") else _float_summary(a, dtype)
    except Exception:
        return {}


# Setter/getter names of the BLAS builds numpy ships or links: OpenBLAS (plain, 64-bit
# integer, and the scipy-openblas wheels' prefixed names) and MKL.
_BLAS_THREAD_SYMBOLS = (
    ("openblas_set_num_threads", "openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("MKL_Set_Num_Threads", "MKL_Get_Max_Threads"),
)


@lru_cache(maxsize=1)
def _blas_thread_controls() -> tuple:
    """(set, get) pairs for every BLAS library numpy has loaded into this process.

    Found by scanning the process's mapped libraries (Linux); elsewhere, or when no known
    symbol is exported, the result is empty and summaries simply run with numpy's default.
    """
    np.dot(np.ones((2, 2)), np.ones((2, 2)))  # make sure the BLAS library is loaded
    paths: list[str] = []
    try:
        with open(f"/proc/{os.getpid()}/maps") as f:
            for line in f:
                part = line.split()
                path = part[-1] if len(part) >= 6 else ""
                low = os.path.basename(path).lower()
                if ("blas" in low or "mkl_rt" in low) and path not in paths:
                    paths.append(path)
    except OSError:
        return ()
    controls = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _BLAS_THREAD_SYMBOLS:
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                controls.append((setter, getter))
                break
    return tuple(controls)


# The BLAS thread count is process-wide: summaries taken on two threads at once (a
# multi-threaded program under the structure pass) run one after the other, so one
# cannot restore the count while the other still relies on it.
_blas_lock = threading.RLock()  # re-entered by `summarize` on a pool's own thread


@contextlib.contextmanager
def _blas_single_thread():
    with _blas_lock:
        with _blas_single_thread_unlocked():
            yield


@contextlib.contextmanager
def _blas_single_thread_unlocked():
    saved = []
    for setter, getter in _blas_thread_controls():
        n = getter()
        if n != 1:
            setter(1)
            saved.append((setter, n))
    try:
        yield
    finally:
        for setter, n in saved:
            setter(n)


def _copy(s: dict) -> dict:
    return {k: (list(v) if isinstance(v, list) else v) for k, v in s.items()}


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    x = t.detach()
    if x.is_sparse:
        x = x.to_dense()
    if x.is_quantized:
        x = x.dequantize()
    if x.device.type != "cpu":
        x = x.cpu()
    if x.is_complex():
        x = x.abs()
    if x.dtype in (torch.float32, torch.float64):
        return x.numpy()
    if x.dtype == torch.bool:
        return x.numpy().astype(np.uint8)
    if x.is_floating_point():
        return x.to(torch.float32).numpy()
    return x.to(torch.int64).numpy()


def _summarize(t: torch.Tensor) -> dict:
    return _summary_of_array(_to_numpy(t), dtype_class(t.dtype), t.dtype)


def _int_summary(a: np.ndarray, cls: str) -> dict:
    """Exact comparison for integer/bool tensors.

    `value_hash` = "<cls>:<multiset>:<ordered>". The multiset part (hash of the sorted
    values, as int64) is layout-invariant and is what equivalence compares, so token ids
    flattened for an embedding lookup still match the (B, T) ids. The ordered part
    (values in row-major order with the size-1-free shape) only lets a caller tell "same
    values in another order" apart, e.g. when checking that two runs got the same input.
    """
    flat = np.ascontiguousarray(a, dtype=np.int64).reshape(-1)
    srt = np.sort(flat)
    h1 = hashlib.blake2b(srt.tobytes(), digest_size=8).hexdigest()
    h2 = hashlib.blake2b(digest_size=8)
    h2.update(repr(canonical_shape(a.shape)).encode())
    h2.update(flat.tobytes())
    out: dict[str, str | list[float]] = {"value_hash": f"{cls}:{h1}:{h2.hexdigest()}"}
    if flat.size:
        out["quantiles"] = _quantiles_sorted(srt.astype(np.float64))
    return out


def _quantiles_sorted(srt: np.ndarray) -> list[float]:
    n = srt.size
    pos = np.linspace(0.0, n - 1, N_QUANTILES)
    lo = pos.astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    frac = pos - lo
    return (srt[lo].astype(np.float64) * (1 - frac) + srt[hi].astype(np.float64) * frac).tolist()


def _quantiles(flat: np.ndarray, extremes: tuple | None = None) -> list[float]:
    """`N_QUANTILES` evenly spaced quantiles of `flat`, exactly as `_quantiles_sorted`
    of the full sort would give them, from the order statistics they interpolate.
    `extremes`: flat's (min, max), when the caller has them."""
    n = flat.size
    pos = np.linspace(0.0, n - 1, N_QUANTILES)
    lo = pos.astype(np.int64)
    frac = pos - lo
    hi = np.where(frac > 0, lo + 1, lo)  # a zero weight needs no second order statistic
    ranks = np.unique(np.concatenate([lo, hi]))
    vals = _order_statistics(flat, ranks, extremes).astype(np.float64)
    at_lo, at_hi = vals[np.searchsorted(ranks, lo)], vals[np.searchsorted(ranks, hi)]
    return (at_lo * (1 - frac) + at_hi * frac).tolist()


def _order_statistics(a: np.ndarray, ranks: np.ndarray, extremes: tuple | None) -> np.ndarray:
    """`np.sort(a)[ranks]` for sorted unique `ranks`, without sorting all of `a`.

    Each round puts every element in one of `QUANTILE_BINS` equal-width value bins over
    [min, max], counts them, and keeps only the elements of bins that hold a wanted rank
    (the ranks shift by what was dropped below them). The survivors are sorted once they
    are few, or once a round no longer halves them (few distinct values, where a sort is
    cheap). Binning is monotone in the value, so the kept elements are exactly the ranks'
    neighbourhoods and the result equals the full sort's, bit for bit, at about a tenth
    of its cost. The extremes come from min and max: a lone outlier stretches the bins,
    and the next round's range leaves it out.
    """
    out = np.empty(ranks.size, dtype=a.dtype)
    slot, r = np.arange(ranks.size), np.asarray(ranks, dtype=np.int64)
    while a.size > QUANTILE_SORT_MAX and slot.size:
        mn, mx = extremes if extremes is not None else (a.min(), a.max())
        extremes = None  # the next round's elements have their own
        out[slot[r == 0]], out[slot[r == a.size - 1]] = mn, mx
        inner = (r > 0) & (r < a.size - 1)
        slot, r = slot[inner], r[inner]
        if mn == mx:
            out[slot] = mn
            return out
        bins = _value_bins(a, mn, mx)
        if bins is None or not slot.size:
            break
        counts = np.zeros(QUANTILE_BINS, dtype=np.int64)
        for c in _chunks(bins):
            counts += np.bincount(c, minlength=QUANTILE_BINS)
        below = np.cumsum(counts) - counts
        b = np.searchsorted(below, r, side="right") - 1
        keep = np.zeros(QUANTILE_BINS, dtype=bool)
        keep[b] = True
        kept = np.where(keep, counts, 0)
        kept_below = np.cumsum(kept) - kept
        size = a.size
        a = a[np.take(keep, bins)]
        r = r - (below[b] - kept_below[b])
        if 2 * a.size > size:
            break
    if slot.size:
        out[slot] = np.sort(a)[r]
    return out


def _value_bins(a: np.ndarray, lo: np.floating, hi: np.floating) -> np.ndarray | None:
    """Each element's bin 0 .. QUANTILE_BINS-1 over [lo, hi] (uint16), monotone in the
    value: every step rounds monotonically, and the scale (bins - 1) / width keeps the
    largest value below the last bin's upper edge, so no clamp is needed. Computed in
    the array's precision where the range and its inverse are finite in it, else in
    float64; None where even that overflows."""
    width = float(hi) - float(lo)
    inv = (QUANTILE_BINS - 1) / width if width > 0.0 else math.inf
    for work in (a.dtype.type, np.float64):
        with np.errstate(over="ignore"):
            if np.isfinite(work(width)) and np.isfinite(work(inv)) and work(inv) > 0:
                break
    else:
        return None
    lo_w, inv_w = work(lo), work(inv)
    t = np.empty(min(a.size, _CHUNK), dtype=work)
    bins = np.empty(a.size, dtype=np.uint16)
    for c, bc in zip(_chunks(a), _chunks(bins), strict=True):
        tc = t[: c.size]
        np.subtract(c, lo_w, out=tc)
        tc *= inv_w
        bc[...] = tc
    return bins


def _chunks(a: np.ndarray) -> Iterator[np.ndarray]:
    for i in range(0, a.size, _CHUNK):
        yield a[i : i + _CHUNK]


def _float_summary(a: np.ndarray, dtype: torch.dtype) -> dict:
    n = a.size
    if n == 0:
        return {"stats": [0.0] * 6, "quantiles": []}
    flat = a.reshape(-1)
    extremes = flat.min(), flat.max()
    if not (np.isfinite(extremes[0]) and np.isfinite(extremes[1])):  # they carry a NaN
        try:
            big = (
                float(torch.finfo(dtype).max)
                if dtype.is_floating_point
                else float(np.finfo(a.dtype).max)
            )
        except TypeError:
            big = float(np.finfo(np.float64).max)
        flat = np.nan_to_num(flat, nan=0.0, posinf=big, neginf=-big)
        extremes = flat.min(), flat.max()
    stats = _stats(flat, extremes)
    out = {"stats": stats, "quantiles": _quantiles(flat, extremes)}
    scale = max(abs(stats[2]), abs(stats[3]))
    splits = plan_splits(tuple(a.shape))
    if splits:
        inv, lens = _spectra(flat.reshape(canonical_shape(a.shape)), splits, scale)
        out["invariant"], out["invariant_splits"] = inv, lens
    else:
        out["invariant"], out["invariant_splits"] = [], []
    return out


def _stats(flat: np.ndarray, extremes: tuple) -> list[float]:
    """[sum, abs_sum, min, max, mean, std] of `flat`, whose (min, max) are `extremes`,
    read in the array's own precision.

    numpy's pairwise sums keep float32 within ~1e-7 of the float64 result (the same
    elements in another order differ by ~1e-8 of the sum of |x|), far under any matching
    tolerance, and a float64 copy of every activation cost more than the statistics
    themselves. The squares are summed per chunk (BLAS dot) into a float64 total. Sums
    that overflow float32 (an additive mask of `finfo.min`) are taken in float64 again,
    and so is the variance where the mean dwarfs the spread and E[x²] − mean² would
    cancel.
    """
    n = flat.size
    mn, mx = float(extremes[0]), float(extremes[1])
    with np.errstate(over="ignore"):
        s, sa = float(flat.sum()), float(np.abs(flat).sum())
        sq = sum(float(np.dot(c, c)) for c in _chunks(flat))
    if not math.isfinite(s + sa + sq):
        s = sum(float(c.astype(np.float64).sum()) for c in _chunks(flat))
        sa = sum(float(np.abs(c.astype(np.float64)).sum()) for c in _chunks(flat))
        sq = math.inf
    mean = s / n
    var = sq / n - mean * mean
    if not math.isfinite(var) or mean * mean > 1e2 * max(var, 0.0):
        var = sum(float(np.square(c.astype(np.float64) - mean).sum()) for c in _chunks(flat)) / n
    return [s, sa, mn, mx, mean, math.sqrt(max(var, 0.0))]


@lru_cache(maxsize=256)
def _omega(n: int, width: int, dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng([_SEED, n, width])
    return (rng.standard_normal((n, width)) / math.sqrt(width)).astype(dtype)


def _spectra(x: np.ndarray, splits: tuple[Split, ...], scale: float) -> tuple[list, list]:
    """Spectra of `x`'s unfoldings, scaled by max|x| (`scale`) while computed.

    Exact spectra take a float64 Gram (its small eigenvalues need the precision);
    the sketch contracts in the array's own precision, whose relative error (~1e-6 for
    float32) is far under the tolerance, and only its small core goes to float64.
    """
    k = x.ndim
    lens: list[int] = []
    if scale == 0.0:
        for sp in splits:
            m = math.prod(x.shape[j] for j in sp.rows)
            lens.append(min(TOP_K, m, x.size // m))
        return [0.0] * sum(lens), lens
    xs = core = None
    inv: list[float] = []
    for sp in splits:
        cols = tuple(j for j in range(k) if j not in sp.rows)
        if sp.exact:
            if xs is None:
                xs = x.astype(np.float64) / scale
            m = math.prod(xs.shape[j] for j in sp.rows)
            # Gram of the smaller side: contract over the larger side's modes
            if m <= xs.size // m:
                g = np.tensordot(xs, xs, axes=(cols, cols)).reshape(m, m)
            else:
                n = xs.size // m
                g = np.tensordot(xs, xs, axes=(sp.rows, sp.rows)).reshape(n, n)
            ev = np.linalg.eigvalsh(g)[::-1]
            sv = np.sqrt(np.clip(ev, 0.0, None))[:TOP_K]
        else:
            if core is None:
                core = _sketch_core(x / x.dtype.type(scale)).astype(np.float64)
            m = math.prod(core.shape[j] for j in sp.rows)
            mat = np.transpose(core, sp.rows + cols).reshape(m, -1)
            sv = np.linalg.svd(mat, compute_uv=False)[:TOP_K]
        inv.extend((sv * scale).tolist())
        lens.append(len(sv))
    return inv, lens


def _sketch_core(xs: np.ndarray) -> np.ndarray:
    """Contract every mode of size n > w with the (n, w) Gaussian seeded by (n, w)."""
    width = _sketch_len(xs.ndim, xs.size)
    core = xs
    # Largest modes first: the first contraction dominates the cost and shrinks most.
    for j in sorted(range(xs.ndim), key=lambda j: -xs.shape[j]):
        n = xs.shape[j]
        if n > width:
            omega = _omega(n, width, xs.dtype)
            core = np.moveaxis(np.tensordot(core, omega, axes=([j], [0])), -1, j)
    return core
