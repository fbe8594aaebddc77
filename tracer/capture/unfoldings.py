"""Which unfoldings a tensor summary holds, and in which order: the contract between the
tracer, which computes summaries (`invariants.py`), and diagnosis, which cuts a stored
`invariant` back into per-split spectra to compare them (`diagnose/matching/equivalence.py`).

Torch-free on purpose: importing `invariants.py` loads torch, and every `diff` used to
pay for that (seconds, and a torch install on a machine that only reads saved runs)
just to recompute the split keys. The planning depends on the shape alone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

N_QUANTILES = 33  # 0, 1/32, ..., 1
TOP_K = 32  # singular values kept per unfolding
MAX_SPLITS = 15  # all splits up to order 5; higher orders keep the most informative
EXACT_SIDE_MAX = 64  # exact Gram spectrum when the smaller side is at most this ...
EXACT_WORK_MAX = 1 << 26  # ... and m * numel (multiply-adds) stays under this
SKETCH_WORK_MAX = 1 << 27  # multiply-adds allowed for the first mode contraction

SUMMARY_KEYS = ("stats", "value_hash", "invariant", "invariant_splits", "quantiles")


# --------------------------------------------------------------------------------------
# Split planning (the tracer stores spectra in this order; diagnosis cuts them back)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """One unfolding of a tensor with canonical (size-1-free) shape `shape`.

    `rows` are canonical mode indices forming the rows. `key` identifies which splits of
    two tensors are comparable: ("e", m, n) with m <= n for an exact spectrum (an (m, n)
    unfolding of a permuted or mode-refined tensor has the same key), ("s", small sizes,
    large sizes) for a sketched one.
    """

    rows: tuple[int, ...]
    key: tuple
    exact: bool


def dtype_class(dtype: object) -> str:
    """ "f" float, "c" complex, "i" integer, "b" bool: tensors only match within a class."""
    s = str(dtype).replace("torch.", "")
    if s == "bool":
        return "b"
    if s.startswith("complex"):
        return "c"
    if s.startswith(("float", "bfloat", "half", "double")):
        return "f"
    return "i"


def canonical_shape(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape if int(d) != 1)


def _sketch_len(order: int, numel: int) -> int:
    base = {2: 32, 3: 12}.get(order, 6)
    return max(4, min(base, SKETCH_WORK_MAX // max(numel, 1)))


@lru_cache(maxsize=4096)
def plan_splits(shape: tuple[int, ...]) -> tuple[Split, ...]:
    """The unfoldings summarized for a tensor of this shape, in storage order.

    Depends only on the shape, so a stored `invariant` can be cut back into spectra by
    anyone holding the shape. Order: fewest modes on the smaller side first (the mode-n
    unfoldings of the HOSVD), then by key; for order > 5 only whole groups of equal sort
    key are kept until `MAX_SPLITS`, so a permuted tensor keeps the same set.
    """
    canon = canonical_shape(shape)
    k = len(canon)
    if k < 2 or 0 in canon:
        return ()  # an empty tensor (SDPA's unused logsumexp on a GPU) has no unfoldings
    numel = math.prod(canon)
    cands = []
    for r in range(0, k - 1):
        for extra in itertools.combinations(range(1, k), r):
            rows = (0, *extra)
            cols = tuple(j for j in range(k) if j not in rows)
            m = math.prod(canon[j] for j in rows)
            n = numel // m
            small = min(m, n)
            exact = small <= EXACT_SIDE_MAX and small * numel <= EXACT_WORK_MAX
            rs = tuple(sorted(canon[j] for j in rows))
            cs = tuple(sorted(canon[j] for j in cols))
            if exact:
                key: tuple[object, ...] = ("e", small, max(m, n))
            else:
                a, b = sorted([(math.prod(rs), rs), (math.prod(cs), cs)])
                key = ("s", a[1], b[1])
            depth = min(len(rows), len(cols))
            cands.append(((depth, key), Split(rows=rows, key=key, exact=exact)))
    cands.sort(key=lambda c: (c[0][0], repr(c[0][1])))
    out: list[Split] = []
    for _, group in itertools.groupby(cands, key=lambda c: (c[0][0], repr(c[0][1]))):
        g = [c[1] for c in group]
        if out and len(out) + len(g) > MAX_SPLITS:
            break
        out.extend(g)
    return tuple(out)
