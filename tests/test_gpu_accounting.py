"""What an H100 showed the fakes did not (docs/energy.md, "On a real GPU"): an operator's
window on CUDA is its launch on the host, so the GPU work still queued after the last
launch must be charged up to the sync; and a sensor that updates every 100 ms needs the
timed iterations to span many of its updates."""

from __future__ import annotations

import time

import numpy as np
import pytest

from magneton.model import OpRecord
from magneton.tracer.energy.session import Trace, attribute_traces
from magneton.tracer.timing.passes import timed_iterations

MS = 1_000_000


def _ops(windows_per_op: list[list[tuple[int, int]]]) -> list[OpRecord]:
    return [
        OpRecord(idx=i, name=f"aten::op{i}", device="cuda:0", windows_ns=list(w))
        for i, w in enumerate(windows_per_op)
    ]


def test_queued_gpu_work_after_the_last_launch_is_charged_to_the_ops_by_kernel_time():
    """Two launches take 1 ms of host time in a 10 ms call; the GPU runs until the sync.
    The ops sum to what the sensor measured over the whole call, shared 3:1 as their
    kernels ran on the device."""
    flat = Trace(np.array([0, 100 * MS]), np.array([200.0, 200.0]), device="gpu:0")
    ops = _ops(
        [
            [(0, MS // 2), (20 * MS, 20 * MS + MS // 2)],
            [(MS // 2, MS), (20 * MS + MS // 2, 21 * MS)],
        ]
    )
    att = attribute_traces(ops, [flat], synced_ns=[10 * MS, 30 * MS], kernel_s=[0.006, 0.002])
    assert att.energy_j.sum() == pytest.approx(200.0 * 0.010, rel=1e-9)  # the whole call
    queued = 200.0 * 0.009  # 9 ms after the last launch
    assert att.energy_j[0] == pytest.approx(200.0 * 0.0005 + 0.75 * queued, rel=1e-9)
    assert att.energy_j[1] == pytest.approx(200.0 * 0.0005 + 0.25 * queued, rel=1e-9)
    assert att.span_s == pytest.approx(0.010)
    # without the sync instants the queued work is charged to nobody (what the H100 showed)
    bare = attribute_traces(ops, [flat])
    assert bare.energy_j.sum() == pytest.approx(200.0 * 0.001, rel=1e-9)


def test_queued_work_is_shared_by_launch_time_when_kernel_times_are_unknown():
    flat = Trace(np.array([0, 100 * MS]), np.array([100.0, 100.0]), device="gpu:0")
    ops = _ops([[(0, 3 * MS)], [(3 * MS, 4 * MS)]])
    att = attribute_traces(ops, [flat], synced_ns=[8 * MS])
    assert att.energy_j == pytest.approx([0.3 + 0.3, 0.1 + 0.1], rel=1e-9)


def test_the_timed_iterations_span_the_minimum_duration():
    """A 1 ms call with a floor of 5 iterations would stop after 5 ms: a 100 ms sensor
    sees nothing of it. With a minimum duration the pass runs on until it is covered."""
    t0 = time.perf_counter()
    tp = timed_iterations(
        lambda: time.sleep(0.001), 5, sync=False, cpu_clock=False, min_duration_s=0.15
    )
    assert time.perf_counter() - t0 >= 0.15
    assert len(tp.walls_s) > 30  # past the cap of MAX_ITERATIONS as well
