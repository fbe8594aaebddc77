"""The adaptive timing pass: how many iterations it runs, and what each one records."""

from __future__ import annotations

import gc

import torch

from magneton.tracer.timing.passes import relative_halfwidth, timed_iterations

X = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
# No test depends on the wall-clock budget except the one about it: on a loaded CI
# machine a first call can take seconds.


def work():
    return torch.tanh(X @ X).sum()


def test_stops_once_stable_but_not_before_the_minimum():
    tp = timed_iterations(work, 3, sync=False, cpu_clock=True, target_rel=10.0, budget_s=1e9)
    assert len(tp.walls_s) == 5 and tp.stop_reason == "stable"  # 5: fewer say little
    tp = timed_iterations(work, 8, sync=False, cpu_clock=True, target_rel=10.0, budget_s=1e9)
    assert len(tp.walls_s) == 8 and tp.stop_reason == "stable"


def test_never_past_max_iterations_or_the_budget():
    tp = timed_iterations(
        work, 2, sync=False, cpu_clock=True, target_rel=0.0, max_iterations=6, budget_s=1e9
    )
    assert len(tp.walls_s) == 6 and tp.stop_reason == "max-iterations"
    tp = timed_iterations(work, 3, sync=False, cpu_clock=False, target_rel=0.0, budget_s=0.0)
    assert len(tp.walls_s) == 3 and tp.stop_reason == "budget"
    assert tp.cpu_windows == []  # wall clock only


def test_each_iteration_records_ops_on_both_clocks_and_gc_is_restored():
    assert gc.isenabled()
    tp = timed_iterations(work, 3, sync=False, cpu_clock=True, max_iterations=3, budget_s=1e9)
    assert gc.isenabled()
    for events, cpu in zip(tp.iterations, tp.cpu_windows, strict=True):
        assert [e[0] for e in events] == ["aten::mm", "aten::tanh", "aten::sum"]
        assert len(cpu) == 3 and all(b >= a for a, b in cpu)
        assert all(cpu[i + 1][0] >= cpu[i][1] for i in range(2))  # sequential on the clock


def test_relative_halfwidth():
    assert relative_halfwidth([1.0]) == float("inf")
    assert relative_halfwidth([2.0, 2.0, 2.0]) == 0.0
    assert 0 < relative_halfwidth([1.0, 1.1, 0.9, 1.0]) < 0.2
