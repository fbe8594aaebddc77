"""Layout-invariant tensor summaries (tracer/capture/invariants.py) and the equivalence built on
them (diagnose/matching/equivalence.py): what a user relies on is that the same value laid out
differently matches and a perturbed value does not."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from magneton.diagnose.matching.equivalence import (
    DEFAULT_TAU,
    TensorIndex,
    distance,
    equivalent,
    match_tensors,
    signature,
)
from magneton.model import TensorRecord
from magneton.tracer.capture import invariants
from magneton.tracer.capture.invariants import MAX_SPLITS, plan_splits, summarize

# The same elements in another order differ only by float32 rounding of the pairwise sums
# (about 1e-8 of the sum of |x|): a thousandth of the default tolerance is the bound.
LAYOUT_ROUNDING = DEFAULT_TAU * 1e-3


def rec(t: torch.Tensor, idx: int = 0) -> TensorRecord:
    r = TensorRecord(
        idx=idx, shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""), numel=t.numel()
    )
    for k, v in summarize(t).items():
        setattr(r, k, v)
    return r


def dist(a: torch.Tensor, b: torch.Tensor) -> float:
    return distance(signature(rec(a)), signature(rec(b)))


shapes = st.lists(st.integers(1, 9), min_size=2, max_size=4).filter(
    lambda s: 16 <= math.prod(s) <= 3000
)


@st.composite
def tensor_and_perm(draw):
    shape = draw(shapes)
    seed = draw(st.integers(0, 2**16))
    perm = draw(st.permutations(range(len(shape))))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return x, list(perm)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(tensor_and_perm())
def test_permuted_and_contiguous_copies_match(case):
    x, perm = case
    y = x.permute(perm)
    assert dist(x, y) < LAYOUT_ROUNDING
    assert dist(x, y.contiguous()) < LAYOUT_ROUNDING
    assert equivalent(rec(x), rec(y.contiguous()))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(shapes, st.integers(0, 2**16), st.data())
def test_refining_reshape_matches(shape, seed, data):
    """Splitting one mode into two factors (768 -> 12 x 64) keeps every unfolding of the
    coarse tensor as an unfolding of the fine one."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    splittable = [i for i, d in enumerate(shape) if d >= 4 and d % 2 == 0]
    if not splittable:
        return
    i = data.draw(st.sampled_from(splittable))
    fine = list(shape[:i]) + [2, shape[i] // 2] + list(shape[i + 1 :])
    y = x.reshape(fine)
    assert dist(x, y) < LAYOUT_ROUNDING
    perm = data.draw(st.permutations(range(len(fine))))
    assert dist(x, y.permute(list(perm)).contiguous()) < LAYOUT_ROUNDING


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(2, 12), min_size=2, max_size=3).filter(
        lambda s: 64 <= math.prod(s) <= 4096
    ),
    st.floats(1e-2, 1e-1),
    st.integers(0, 2**16),
)
def test_relative_noise_of_one_percent_does_not_match(shape, delta, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    y = x * (1 + delta * torch.randn(shape, generator=g))
    assert not equivalent(rec(x), rec(y))


def test_rounding_level_differences_match():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 16, 64, generator=g), torch.randn(64, 64, generator=g)
    a = x @ w
    b = (x.double() @ w.double()).float()
    assert 0 < dist(a, b) < 1e-5
    assert equivalent(rec(a), rec(b))
    # a bfloat16 computation matches its float32 counterpart (dtype-widened tolerance)
    c = x.bfloat16() @ w.bfloat16()
    assert equivalent(rec(a), rec(c))
    assert not equivalent(rec(a), rec(a * 1.05))


def test_different_values_with_same_distribution_do_not_match():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 64, generator=g)
    w1, w2 = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    assert not equivalent(rec(x @ w1), rec(x @ w2))


def test_incompatible_mode_structure_does_not_match():
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    assert math.isinf(dist(x, x.reshape(8, 3)))
    # a flattened vector is compared on its values only
    assert dist(x, x.reshape(-1)) == 0.0


def test_integer_tensors_compare_exactly_and_layout_free():
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    a, b = summarize(ids), summarize(ids.t().contiguous())
    ms_a, ms_b = a["value_hash"].split(":")[1], b["value_hash"].split(":")[1]
    assert ms_a == ms_b
    assert a["value_hash"] != b["value_hash"]  # the ordered part tells the layouts apart
    assert "stats" not in a and "invariant" not in a
    assert equivalent(rec(ids), rec(ids.reshape(-1)))
    assert equivalent(rec(ids), rec(ids.to(torch.int32)))
    other = ids.clone()
    other[0, 0] += 1
    assert not equivalent(rec(ids), rec(other))
    mask = ids > 500
    assert summarize(mask)["value_hash"].startswith("b:")
    assert not equivalent(rec(mask), rec(ids))


def test_infinite_mask_matches_finfo_min_mask_and_everything_is_finite():
    m = torch.zeros(16, 16)
    m_inf = m.masked_fill(torch.ones(16, 16).triu(1).bool(), float("-inf"))
    m_min = m.masked_fill(torch.ones(16, 16).triu(1).bool(), torch.finfo(torch.float32).min)
    s = summarize(m_inf)
    assert all(math.isfinite(v) for k in ("stats", "quantiles", "invariant") for v in s[k])
    assert dist(m_inf, m_min) == 0.0
    nan = torch.full((4, 4), float("nan"))
    assert all(math.isfinite(v) for v in summarize(nan)["stats"])


def test_odd_tensors_never_raise():
    for t in (
        torch.tensor(3.0),
        torch.empty(0, 5),
        torch.ones(1, 1, 1),
        torch.randn(3, 4, dtype=torch.complex64),
        torch.randn(3, 4).to(torch.bfloat16),
        torch.randn(3, 4).to(torch.float16),
        torch.randn(3, 4).to_sparse(),
        torch.empty(3, 4, device="meta"),
        torch.tensor([True, False]),
    ):
        out = summarize(t)
        assert set(out) <= set(invariants.SUMMARY_KEYS)
    assert summarize(torch.empty(3, 4, device="meta")) == {}
    # empty tensors (a GPU's memory-efficient SDPA returns a (B, H, 0) logsumexp) index
    # for matching without unfoldings (was: ZeroDivisionError in every diff of such runs)
    empties = [torch.empty(8, 16, 0), torch.empty(0, 5), torch.zeros(4, 0, 3)]
    assert all(plan_splits(tuple(t.shape)) == () for t in empties)
    TensorIndex(rec(t, i) for i, t in enumerate(empties))
    # size-1 modes are dropped: a batch of one matches its squeezed value
    x = torch.randn(16, 32)
    assert dist(x, x[None]) == 0.0


def test_large_splits_are_sketched_layout_invariantly():
    """A 300 x 400 matrix exceeds the exact-Gram budget: its sketched spectrum must still
    be identical for the transpose (Conv1D vs Linear weight layout) and for permuted
    3-way activations."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 400, generator=g)
    assert not plan_splits((300, 400))[0].exact
    assert dist(w, w.t().contiguous()) < LAYOUT_ROUNDING
    a = torch.randn(8, 100, 96, generator=g)
    assert any(not s.exact for s in plan_splits((8, 100, 96)))
    assert dist(a, a.permute(1, 2, 0).contiguous()) < LAYOUT_ROUNDING
    assert not equivalent(rec(w), rec(w * (1 + 0.02 * torch.randn(300, 400, generator=g))))


def _sorted_quantiles(x: np.ndarray) -> list[float]:
    return invariants._quantiles_sorted(np.sort(x.reshape(-1)))


_rng = np.random.default_rng(0)
_QUANTILE_CASES = {
    "gaussian": _rng.standard_normal(20_000).astype(np.float32),
    "outliers": np.concatenate([_rng.standard_normal(9_998), [300.0, -200.0]]).astype(np.float32),
    "mostly zeros": np.where(_rng.random(20_000) < 0.9, 0.0, _rng.standard_normal(20_000)),
    "heavy tail": np.exp(3 * _rng.standard_normal(20_000)).astype(np.float32),
    "two values": np.where(_rng.random(20_000) < 0.5, 1.0, 3.0).astype(np.float32),
    "small integers": _rng.integers(0, 5, 20_000).astype(np.float32),
    "near one": (1 + 1e-6 * _rng.standard_normal(20_000)).astype(np.float32),
    "float32 extremes": np.concatenate([_rng.standard_normal(9_998), [3e38, -3e38]]).astype(
        np.float32
    ),
    "denormals": (_rng.integers(1, 50, 20_000) * 1e-45).astype(np.float32),
    "signed zeros": np.where(_rng.random(20_000) < 0.5, -0.0, 0.0).astype(np.float32),
    "float64": _rng.standard_normal(20_000),
}


@pytest.mark.parametrize("case", sorted(_QUANTILE_CASES))
def test_quantiles_by_histogram_selection_equal_the_full_sort(monkeypatch, case):
    """Quantiles come from order statistics selected by value histograms, not a full sort;
    they must be the sort's, bit for bit, on distributions that defeat equal-width bins
    (outliers, heavy tails, few distinct values, float32's extremes, denormals)."""
    x = _QUANTILE_CASES[case]
    for sort_max in (64, 1 << 14):  # several selection rounds, then the shipped threshold
        monkeypatch.setattr(invariants, "QUANTILE_SORT_MAX", sort_max)
        assert invariants._quantiles(x) == _sorted_quantiles(x), sort_max
    for n in (1, 2, 3, 65, 66):  # sizes around the edges of the rank arithmetic
        assert invariants._quantiles(x[:n]) == _sorted_quantiles(x[:n])


def test_quantiles_of_a_large_tensor_are_layout_invariant_and_exact():
    x = torch.randn(512, 4100, generator=torch.Generator().manual_seed(0))
    qa = summarize(x)["quantiles"]
    assert qa == summarize(x.t().contiguous())["quantiles"]
    assert qa == _sorted_quantiles(x.numpy())


def test_views_of_large_tensors_reuse_the_summary_until_written():
    w = torch.randn(300, 300)
    first = summarize(w)
    assert summarize(w.t()) == first
    w.add_(1.0)  # in-place write bumps the shared version counter
    assert summarize(w.t()) != first


def test_a_reshape_that_only_adds_or_drops_size_one_modes_is_summarized_once(monkeypatch):
    """`x.view(-1, d)` of a batch of one, and back, read the same elements in the same
    order: the summary is the same, so it is computed once (a GPT-2 pass with batch 1
    summarized 25 M elements of such views again)."""
    x = torch.randn(1, 128, 768)
    computed = []
    inner = invariants._summarize
    monkeypatch.setattr(invariants, "_summarize", lambda t: computed.append(t.shape) or inner(t))
    first = summarize(x)
    assert summarize(x.view(128, 768)) == first == summarize(x.view(128, 1, 768))
    assert computed == [x.shape]
    assert summarize(x.view(128, 12, 64)) != first  # other modes: other spectra


def test_split_plan_is_layout_invariant_and_capped():
    keys = lambda s: sorted(repr(sp.key) for sp in plan_splits(s))  # noqa: E731
    assert keys((2, 16, 12, 64)) == keys((64, 12, 2, 16))
    assert keys((1, 16, 768)) == keys((16, 768))
    assert len(plan_splits((2, 3, 4, 5, 6, 7, 8))) <= MAX_SPLITS
    assert plan_splits((7,)) == ()


def test_index_pairs_tensors_across_runs_without_comparing_everything():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, 16, 64, generator=g) for _ in range(20)]
    ra = [rec(x, i) for i, x in enumerate(xs)]
    rb = [rec(x.permute(2, 0, 1).contiguous(), i) for i, x in enumerate(reversed(xs))]
    pairs = match_tensors(TensorIndex(ra), TensorIndex(rb), DEFAULT_TAU)
    assert {a: [b for _, b in v] for a, v in pairs.items()} == {i: [19 - i] for i in range(20)}


def test_summaries_run_numpy_blas_on_one_thread_and_restore_the_callers_setting():
    controls = invariants._blas_thread_controls()
    if not controls:  # no BLAS thread control found (not Linux, or an unknown BLAS build)
        return
    setter, getter = controls[0]
    seen = []
    real = invariants._spectra

    def spy(*a, **k):
        seen.append(getter())
        return real(*a, **k)

    setter(2)
    try:
        invariants._spectra = spy
        summarize(torch.randn(96, 80, generator=torch.Generator().manual_seed(0)))
    finally:
        invariants._spectra = real
    assert seen == [1]
    assert getter() == 2
