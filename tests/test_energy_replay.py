"""Operator replay (paper §5.2) on runs recorded in-process with the real recorder."""

from __future__ import annotations

import time

import pytest
import torch
from fakes import RaplKernel, make_rapl_tree  # tests/ is on sys.path (rootdir mode)

from magneton.model import MagnetonError
from magneton.tracer.energy.replay import replay_ops
from magneton.tracer.energy.session import EnergySession
from magneton.tracer.programs.record import RecordOptions, record_callable


def inplace_workload(x, w):
    y = x @ w
    y.add_(1.0)  # in-place: every replayed call must see the recorded y
    z = torch.relu(y)
    return z.sum()


def random_workload(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) * 2.0


def _inputs():
    torch.manual_seed(0)
    return torch.randn(64, 128), torch.randn(128, 96)


def _record(fn, args, power="model", replay=False):
    opts = RecordOptions(power=power, replay=replay, call_paths=False, warmup=1, repeat=2)
    return record_callable(fn, args, run="r", options=opts)


def test_replay_with_model_restores_inplace_inputs_and_keeps_estimates():
    x, w = _inputs()
    x0, w0 = x.clone(), w.clone()
    expected = inplace_workload(x, w)
    p = _record(inplace_workload, (x, w))
    session = EnergySession.create("model")
    res = replay_ops(lambda: inplace_workload(x, w), p, session, min_window_s=0.02, progress=False)
    by_name = {r.name: r for r in res}
    assert {"aten::mm", "aten::add_", "aten::relu", "aten::sum"} <= set(by_name)
    add = by_name["aten::add_"]
    assert add.output_checked and not add.skipped and add.loop_calls > 1
    assert add.method == "estimated"  # a model-based replay stays an estimate
    # program state untouched, result unchanged
    assert torch.equal(x, x0) and torch.equal(w, w0)
    assert torch.equal(inplace_workload(x, w), expected)
    assert all(op.energy_method == "estimated" for op in p.ops)
    assert sum(op.energy_j for op in p.ops) == pytest.approx(p.run.energy_j, rel=1e-9)
    stored = p.energy.replay
    assert {r["name"] for r in stored} == set(by_name)


def test_replay_preserves_rng_stream_and_skips_output_check_for_random_ops():
    (x, _) = _inputs()
    p = _record(random_workload, (x,))
    outs = []
    torch.manual_seed(7)
    baseline = random_workload(x)
    torch.manual_seed(7)
    res = replay_ops(
        lambda: outs.append(random_workload(x)),
        p,
        EnergySession.create("model"),
        min_window_s=0.02,
        progress=False,
    )
    assert torch.equal(outs[0], baseline)  # replaying bernoulli_ did not shift the stream
    bern = next(r for r in res if r.name == "aten::bernoulli_")
    assert not bern.output_checked and not bern.skipped


def test_diverging_entry_is_refused():
    x, w = _inputs()
    p = _record(inplace_workload, (x, w))
    with pytest.raises(MagnetonError, match="replay diverged"):
        replay_ops(lambda: torch.relu(x @ w), p, EnergySession.create("model"), progress=False)
    with pytest.raises(MagnetonError, match="no op with idx"):
        replay_ops(lambda: None, p, EnergySession.create("model"), ops={10_000}, progress=False)


def test_replay_through_recorder_with_measured_counter(tmp_path):
    """`record --power rapl --replay` end to end on a fake powercap tree drawing 50 W."""
    root = make_rapl_tree(tmp_path, dram_uj=0)
    t0 = time.perf_counter_ns()
    with RaplKernel(root, lambda t: 50.0 * (t - t0) / 1e9):
        x, w = _inputs()
        p = _record(inplace_workload, (x, w), power=f"rapl:{root}", replay=True)
    assert p.run.power_source == "rapl:package-0+dram"
    assert p.run.idle_w == pytest.approx(50.0, rel=0.05)
    assert p.run.energy_method == "replayed"
    reps = p.energy.replay
    assert reps and all(r["method"] == "replayed" for r in reps if not r["skipped"])
    for r in reps:
        assert r["power_w"] == pytest.approx(50.0, rel=0.1), r
    replayed = [op for op in p.ops if op.energy_method == "replayed"]
    assert {op.name for op in replayed} >= {"aten::mm", "aten::add_"}
    assert sum(op.energy_j for op in p.ops) == pytest.approx(p.run.energy_j, rel=1e-9)
