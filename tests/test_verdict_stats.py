"""Statistical verdicts: a region is a finding only when its energy difference exceeds the
threshold with 95% confidence, judged from the regions' per-iteration energies."""

from __future__ import annotations

import numpy as np
import pytest
from builders import priced_ops, profile

from magneton.diagnose.matching.detect import (
    confident,
    region_samples,
    run_samples,
    saving_interval,
)
from magneton.model import OpRecord, Profile, RunEnergy, RunInfo

SEEDS = range(8)


def samples(rng: np.random.Generator, mean_j: float, noise: float, n: int) -> np.ndarray:
    """Per-iteration energies with multiplicative noise (timers and load scale costs)."""
    return mean_j * np.exp(rng.normal(0.0, noise, n))


@pytest.mark.parametrize("seed", SEEDS)
def test_true_15_percent_difference_is_found(seed):
    rng = np.random.default_rng(seed)
    wasteful, efficient = samples(rng, 1.15, 0.02, 12), samples(rng, 1.0, 0.02, 12)
    ratio, low, high = saving_interval(wasteful, efficient)
    assert low <= ratio <= high
    assert confident(low, 0.10)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_difference_under_10_percent_noise_is_not_found(seed):
    rng = np.random.default_rng(seed)
    a, b = samples(rng, 1.0, 0.10, 10), samples(rng, 1.0, 0.10, 10)
    ratio, low, _ = saving_interval(a, b) if a.mean() > b.mean() else saving_interval(b, a)
    assert not confident(low, 0.10)


def test_small_true_difference_is_not_a_finding_even_when_certain():
    rng = np.random.default_rng(0)
    _, low, _ = saving_interval(samples(rng, 1.05, 0.001, 20), samples(rng, 1.0, 0.001, 20))
    assert low > 1.0 and not confident(low, 0.10)  # real, but under the 10% threshold


def test_too_few_iterations_give_no_interval():
    assert saving_interval(np.array([1.0]), np.array([1.0, 1.1])) is None


def _profile(op_j: list[float], rows: list[list[float]]) -> Profile:
    return profile(ops=priced_ops(op_j), energy_j=sum(op_j), energy=RunEnergy(op_samples_j=rows))


def test_region_samples_keep_the_noise_and_take_the_level_from_the_ops():
    # op estimates priced on the fastest iteration, below the samples' mean
    p = _profile([1.8, 4.0], [[1.8, 4.0], [2.2, 4.0]])
    per_iter = region_samples(run_samples(p), [0, 1])
    assert per_iter.mean() == pytest.approx(5.8)
    assert per_iter.tolist() == pytest.approx([1.62 + 4.0, 1.98 + 4.0])


def test_samples_of_a_loaded_recording_are_kept():
    # most iterations ran beside a busy process, three times the quiet ones: the point
    # estimate (the cheapest iteration) is a third of the mean, and still the samples'
    rows = [[1.0, 2.0]] + [[3.0 + 0.1 * k, 6.0] for k in range(9)]
    assert run_samples(_profile([1.0, 2.0], rows)) is not None


def test_samples_that_do_not_describe_the_energies_are_ignored():
    assert run_samples(_profile([1e-9, 1e-9], [[1.0, 1.0], [1.0, 1.0]])) is None
    assert run_samples(_profile([1.0, 1.0], [[1.0, 1.0]])) is None  # one iteration
    # one op re-priced after recording (twice its dearest iteration)
    assert run_samples(_profile([1.0, 5.0], [[1.0, 2.0], [1.2, 2.5]])) is None


def test_identical_work_measures_the_noise_between_recordings():
    """Matched pairs that did the same work are an A/A experiment inside the diff: their
    energy ratio is the drift between the recordings, and it widens every interval."""
    from magneton.diagnose.matching.detect import between_runs_log_sd
    from magneton.diagnose.matching.match import RegionPair
    from magneton.model import Region

    def prof(energies, dtypes):
        ops = [
            OpRecord(idx=i, name="aten::mm", energy_j=e, input_shapes=[[4, 4]], input_dtypes=[d])
            for i, (e, d) in enumerate(zip(energies, dtypes, strict=True))
        ]
        return Profile(run=RunInfo(name="r", energy_j=sum(energies)), ops=ops)

    f32 = ["torch.float32"]
    pa = prof([1.0, 1.0, 5.0], [f32, f32, f32])
    pb = prof([1.1, 1.1, 1.0], [f32, f32, ["torch.float64"]])  # op 2 is other work
    pairs = [RegionPair(a=Region(ops=[i]), b=Region(ops=[i])) for i in range(3)]
    sd = between_runs_log_sd(pa, pb, pairs)
    # op 2's 5x is not noise; the identical pairs' 10% is shrunk towards the prior by the
    # energy share they rest on
    from magneton.diagnose.matching.detect import PRIOR_BETWEEN_LOG_SD, PRIOR_WEIGHT

    share = 0.5 * (2.0 / 7.0 + 2.2 / 3.2)
    expect = (share * np.log(1.1) ** 2 + PRIOR_WEIGHT * PRIOR_BETWEEN_LOG_SD**2) / (
        share + PRIOR_WEIGHT
    )
    assert sd == pytest.approx(np.sqrt(expect), rel=1e-9)
    assert PRIOR_BETWEEN_LOG_SD < sd < np.log(1.1)
    # a 15% difference in a region is within a 10% drift between recordings
    rng = np.random.default_rng(0)
    w, e = samples(rng, 1.15, 0.02, 12), samples(rng, 1.0, 0.02, 12)
    assert confident(saving_interval(w, e)[1], 0.10)
    assert not confident(saving_interval(w, e, between_runs_log_sd=np.log(1.1))[1], 0.10)
    assert not confident(saving_interval(w, e, between_runs_log_sd=sd)[1], 0.10)
    # a 3x difference stays a finding
    assert confident(saving_interval(3 * w, e, between_runs_log_sd=sd)[1], 0.10)
