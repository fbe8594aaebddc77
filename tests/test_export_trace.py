"""`magneton export-trace` writes Kineto-style traces that Holistic Trace Analysis loads.

HTA (`HolisticTraceAnalysis`, in the `test` extra) is the consumer: it finds each file's
rank in `distributedInfo`, parses the events into per-rank dataframes and runs its
analyses. The numbers it reports are checked against the Magneton DB the traces came
from: a format HTA misread (wrong track, unit or category) shows up as a different count,
total or span, not just as a parse error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from magneton.graphdb import open_db

# HTA (and the pandas it loads) is imported by the tests that use it, not at collection,
# which every xdist worker does: 0.5 s of each worker's start
if importlib.util.find_spec("hta") is None:
    pytest.skip("HolisticTraceAnalysis (pip install -e '.[test]')", allow_module_level=True)


def hta_analysis(trace_dir: Path):
    """HTA's `TraceAnalysis` of the trace files in `trace_dir`."""
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis(trace_dir=str(trace_dir))


# HTA 0.5 calls pandas APIs that pandas 3 deprecates; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:The inplace keyword", "ignore:Rounding down")
REPO = Path(__file__).resolve().parents[1]
HTA_DATA = Path(os.environ.get("MAGNETON_HTA_TRACES", REPO.parent / "shared" / "traces" / "hta"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "magneton", *args], capture_output=True, text=True, timeout=600
    )


def _gpu_ops(profile) -> list:
    return [op for op in profile.ops if op.device.startswith("cuda")]


def _union_us(ops) -> float:
    spans = sorted((op.start_ns, op.end_ns) for op in ops)
    total, cur_s, cur_e = 0, *spans[0]
    for s, e in spans[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return (total + cur_e - cur_s) / 1000.0


@pytest.mark.skipif(
    not (HTA_DATA / "sampled_rank-0.json.gz").exists(),
    reason=f"real GPU traces not found at {HTA_DATA} (the project's shared/traces/hta)",
)
def test_exported_job_loads_in_hta_with_the_dbs_kernels(tmp_path):
    ranks = tmp_path / "in"
    ranks.mkdir()
    for r in (0, 1):
        name = f"sampled_rank-{r}.json.gz"
        (ranks / name).write_bytes((HTA_DATA / name).read_bytes())
    db = tmp_path / "db"
    assert cli("import-trace", str(ranks), "--db", str(db), "--run", "job").returncode == 0
    out = tmp_path / "out"
    r = cli("export-trace", "--db", str(db), "job", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["rank0.json", "rank1.json"]
    doc = json.loads((out / "rank1.json").read_text())
    assert doc["distributedInfo"] == {"rank": 1, "world_size": 128, "backend": "nccl"}
    with open_db(db, read_only=True) as h:
        profiles = {rank: h.load_profile(f"job/rank{rank}") for rank in (0, 1)}

    analysis = hta_analysis(out)
    original = hta_analysis(ranks)
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=10_000)[1]
    for rank, p in profiles.items():
        gpu = _gpu_ops(p)
        df = analysis.t.get_trace(rank)
        on_streams = df[df.stream >= 0]
        # every GPU activity on a stream track, with its duration in µs (HTA drops the
        # kernels of the last, partial iteration: count those of the DB that it kept)
        kept = set(on_streams.correlation)
        mine = [op for op in gpu if _correlation(op) in kept]
        assert len(on_streams) == len(mine) > 0
        assert on_streams.dur.sum() == pytest.approx(sum(op.time_s for op in mine) * 1e6, abs=2)
        # every operator of the DB is a cpu_op of the file; HTA keeps those that start
        # before the last ProfilerStep (the iterations it analyses)
        events = json.loads((out / f"rank{rank}.json").read_text())["traceEvents"]
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        assert len(ops) == sum(1 for op in p.ops if op.device == "cpu")
        last = max(e["ts"] for e in events if e["name"].startswith("ProfilerStep#"))
        cpu_ops = analysis.t.symbol_table.sym_index["cpu_op"]
        assert (df.cat == cpu_ops).sum() == sum(1 for e in ops if e["ts"] < last) > 0
        # its per-kernel table: the most expensive kernel's total time
        kernels = per_kernel[per_kernel["rank"] == rank]
        top = kernels.sort_values("sum (us)", ascending=False).iloc[0]
        total = sum(op.time_s for op in mine if op.name == top["name"]) * 1e6
        assert top["sum (us)"] == pytest.approx(total, abs=2)

    # the round trip: HTA reads the same iterations, kernel time, idle time and launch
    # statistics from the export as from the original traces (before the step markers
    # and cuda_runtime launches were kept: rank 0 kernel time 1,222,847 µs against
    # 600,058 µs, and no launch statistics at all)
    before = original.get_temporal_breakdown(visualize=False).set_index("rank")
    for col in ("kernel_time(us)", "idle_time(us)", "compute_time(us)"):
        assert temporal[col].to_dict() == before[col].to_dict()
    assert temporal.loc[0, "kernel_time(us)"] == 600_058
    for r in (0, 1):
        assert analysis.t.get_iterations(r) == original.t.get_iterations(r) != []
    got = analysis.get_cuda_kernel_launch_stats(ranks=[0, 1], visualize=False)
    want = original.get_cuda_kernel_launch_stats(ranks=[0, 1], visualize=False)
    for r in (0, 1):
        assert len(got[r]) == len(want[r]) > 100
        for col in ("launch_delay", "cpu_duration", "gpu_duration"):
            assert got[r][col].sum() == want[r][col].sum()
    idle = analysis.get_idle_time_breakdown(ranks=[0], visualize=False)[0]
    idle_before = original.get_idle_time_breakdown(ranks=[0], visualize=False)[0]
    key = ["stream", "idle_category"]
    assert idle.set_index(key).idle_time.to_dict() == idle_before.set_index(key).idle_time.to_dict()


def _correlation(op) -> int:
    return int(op.scalar_args.split("correlation=")[1].split(",")[0])


def test_imported_run_with_a_power_log_exports_its_power_counter(tmp_path):
    trace = HTA_DATA / "alexnet_train_step.json.gz"
    if not trace.exists():
        pytest.skip(f"real GPU traces not found at {HTA_DATA}")
    log = tmp_path / "power.csv"
    log.write_text("timestamp_s,watts\n" + "".join(f"{t / 10},{100 + t}\n" for t in range(40)))
    db = tmp_path / "db"
    r = cli("import-trace", str(trace), "--db", str(db), "--run", "alex", "--power", f"meter:{log}")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "alex.json"
    assert cli("export-trace", "--db", str(db), "alex", "-o", str(out)).returncode == 0
    events = json.loads(out.read_text())["traceEvents"]
    with open_db(db, read_only=True) as h:
        p = h.load_profile("alex")
    counters = [e for e in events if e["ph"] == "C"]
    assert p.power and len(counters) == sum(len(s.t_ns) for s in p.power) > 0
    assert {e["name"] for e in counters} == {"power meter (W)"}
    # the launches of the original are kept with their correlations
    launches = [e for e in events if e.get("cat") == "cuda_runtime"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(launches) == 361
    assert {e["args"]["correlation"] for e in kernels} <= {
        e["args"].get("correlation") for e in launches
    }


def test_recorded_run_exports_operators_modules_and_power_for_hta(tmp_path):
    import magneton

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    x = torch.randn(16, 32)
    db = tmp_path / "db"
    magneton.record(model, (x,), run="small", db=str(db))
    out = tmp_path / "trace" / "small.json"
    r = cli("export-trace", "--db", str(db), "small", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert doc["distributedInfo"] == {"rank": 0, "world_size": 1}
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and all(e["name"].startswith("power ") for e in counters)
    with open_db(db, read_only=True) as h:
        p = h.load_profile("small")
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert sum(e["args"]["energy_j"] for e in ops) == pytest.approx(
        sum(op.energy_j for op in p.ops), rel=1e-9
    )
    # the interpreter part of each operator's energy is labelled (report shows it apart)
    assert p.energy.interp_j and len(p.energy.interp_j) == len(ops)
    assert [e["args"]["python_j"] for e in ops] == pytest.approx(
        [max(x, 0.0) for x in p.energy.interp_j]
    )
    assert all(0 <= e["args"]["python_j"] <= e["args"]["energy_j"] + 1e-12 for e in ops)
    analysis = hta_analysis(out.parent)
    df = analysis.t.get_trace(0)
    sym = analysis.t.symbol_table.sym_index
    assert (df.cat == sym["cpu_op"]).sum() == len(p.ops)
    names = set(analysis.t.symbol_table.sym_table)
    assert {"aten::addmm", "aten::gelu"} <= names
    # HTA's temporal and idle breakdowns on a CPU run (before: IndexError, "No objects to
    # concatenate"): the operators' windows are the device's busy time, the gaps between
    # them (the interpreter) its idle time
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    span_us = (max(op.end_ns for op in p.ops) - min(op.start_ns for op in p.ops)) / 1000
    assert temporal.loc[0, "kernel_time(us)"] == pytest.approx(span_us, abs=2)
    busy_us = _union_us(p.ops)
    assert temporal.loc[0, "idle_time(us)"] == pytest.approx(span_us - busy_us, abs=len(p.ops) + 2)
    idle = analysis.get_idle_time_breakdown(visualize=False)[0]
    assert idle.idle_time.sum() == pytest.approx(span_us - busy_us, abs=len(p.ops) + 2)
    execution = df[df.stream >= 0]
    assert len(execution) == len(p.ops)
    # module spans are annotations on their own track
    annotations = df[df.cat == sym["user_annotation"]]
    assert {"0", "1", "2"} <= {analysis.t.symbol_table.sym_table[i] for i in annotations.name}
    assert set(annotations.tid).isdisjoint(set(df[df.cat == sym["cpu_op"]].tid))
