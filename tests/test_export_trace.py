"""`magneton export-trace` writes Kineto-style traces that Holistic Trace Analysis loads.

HTA (`HolisticTraceAnalysis`, in the `test` extra) is the consumer: it finds each file's
rank in `distributedInfo`, parses the events into per-rank dataframes and runs its
analyses. The numbers it reports are checked against the Magneton DB the traces came
from: a format HTA misread (wrong track, unit or category) shows up as a different count,
total or span, not just as a parse error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from magneton.graphdb import open_db

hta = pytest.importorskip("hta", reason="HolisticTraceAnalysis (pip install -e '.[test]')")
from hta.trace_analysis import TraceAnalysis  # noqa: E402

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

    analysis = TraceAnalysis(trace_dir=str(out))
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=10_000)[1]
    for rank, p in profiles.items():
        gpu = _gpu_ops(p)
        df = analysis.t.get_trace(rank)
        on_streams = df[df.stream >= 0]
        # every GPU activity on a stream track, with its duration in µs
        assert len(on_streams) == len(gpu)
        assert on_streams.dur.sum() == pytest.approx(sum(op.time_s for op in gpu) * 1e6, abs=2)
        host = [op for op in p.ops if op.device == "cpu"]
        cpu_ops = analysis.t.symbol_table.sym_index["cpu_op"]
        assert (df.cat == cpu_ops).sum() == len(host)
        # HTA's temporal breakdown: kernel time spans the GPU work, idle is what no
        # activity covers
        span_us = (max(op.end_ns for op in gpu) - min(op.start_ns for op in gpu)) / 1000
        row = temporal.loc[rank]
        assert row["kernel_time(us)"] == pytest.approx(span_us, abs=2)
        assert row["idle_time(us)"] == pytest.approx(span_us - _union_us(gpu), rel=0.01)
        # its per-kernel table: the most expensive kernel's total time
        kernels = per_kernel[per_kernel["rank"] == rank]
        top = kernels.sort_values("sum (us)", ascending=False).iloc[0]
        mine = sum(op.time_s for op in gpu if op.name == top["name"]) * 1e6
        assert top["sum (us)"] == pytest.approx(mine, abs=2)


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
    analysis = TraceAnalysis(trace_dir=str(out.parent))
    df = analysis.t.get_trace(0)
    sym = analysis.t.symbol_table.sym_index
    assert (df.cat == sym["cpu_op"]).sum() == len(p.ops)
    names = set(analysis.t.symbol_table.sym_table)
    assert {"aten::addmm", "aten::gelu"} <= names
    # module spans are annotations on their own track
    annotations = df[df.cat == sym["user_annotation"]]
    assert {"0", "1", "2"} <= {analysis.t.symbol_table.sym_table[i] for i in annotations.name}
    assert set(annotations.tid).isdisjoint(set(df[df.cat == sym["cpu_op"]].tid))
