"""`magneton import-trace` on real torch.profiler output, and `diff` of imported runs.

The GPU traces are real Kineto output recorded on NVIDIA GPUs (../shared/traces/hta/, see
its README): the only GPU profiler output available here, so the kernel-linking code is
tested on them. Counts are compared with what the raw JSON holds, computed independently
in the test. The Python-stack and power-log tests use a trace this machine's own
torch.profiler writes (CPU only).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
import warm_cli

from magneton.graphdb import open_db
from magneton.tracer.capture.kineto import estimate_energy, profile_from_trace, read_trace
from magneton.tracer.energy.power import MODELS

REPO = Path(__file__).resolve().parents[1]
# shipped next to the repo; MAGNETON_HTA_TRACES points elsewhere (e.g. from a worktree)
HTA = Path(os.environ.get("MAGNETON_HTA_TRACES", REPO.parent / "shared" / "traces" / "hta"))
needs_hta = pytest.mark.skipif(
    not (HTA / "trace_diff_control.json.gz").exists(),
    reason=f"real GPU traces not found at {HTA} (the project's shared/traces/hta test data)",
)
GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def cli(*args: str) -> subprocess.CompletedProcess:
    return warm_cli.run(args, timeout=600)


def raw_events(name: str) -> list[dict]:
    with gzip.open(HTA / name) as f:
        return json.load(f)["traceEvents"]


@needs_hta
@pytest.mark.parametrize(
    "name, kernels, memcpys",
    [
        ("trace_diff_control.json.gz", 8568, 228),
        ("trace_diff_test.json.gz", 9876, 4856),
        ("alexnet_train_step.json.gz", 79, 16),
        ("sampled_rank-0.json.gz", 1154, 40),
    ],
)
def test_gpu_activities_are_counted_and_linked_to_their_launch(name, kernels, memcpys):
    events = raw_events(name)
    launch_ids = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU]
    linkable = sum(e["args"].get("correlation") in launch_ids for e in gpu)
    profile, stats = profile_from_trace(read_trace(HTA / name), "r")
    assert (stats.kernels, stats.memcpys) == (kernels, memcpys)
    assert stats.gpu_activities == len(gpu)
    # every activity whose launch is in the file is linked to it: links are complete
    assert stats.launched == linkable
    ops = profile.ops
    on_gpu = [op for op in ops if op.device.startswith("cuda")]
    assert len(on_gpu) == len(gpu)
    by_launcher = [op for op in on_gpu if "launched_by=" in op.scalar_args]
    assert len(by_launcher) == stats.from_operator > 0.95 * linkable
    for op in by_launcher:
        host = ops[int(op.scalar_args.rsplit("launched_by=", 1)[1])]
        # the launching operator is a host op that started before its kernel ran, and the
        # kernel's call path runs through it
        assert host.device == "cpu" and host.start_ns <= op.start_ns
        assert op.call_paths[0].startswith(host.call_paths[0].split(" > ")[0])
        assert op.call_paths[0].endswith(op.name) and op.api == host.name
    assert [op.idx for op in ops] == list(range(len(ops)))
    assert all(ops[i].start_ns <= ops[i + 1].start_ns for i in range(len(ops) - 1))


@needs_hta
def test_estimated_energy_is_labelled_and_priced_on_gpu_activities():
    profile, _ = profile_from_trace(read_trace(HTA / "trace_diff_control.json.gz"), "c")
    estimate_energy(profile)
    run = profile.run
    assert run.energy_method == "estimated" and run.power_source == "model:a100"
    assert all(op.energy_method == "estimated" for op in profile.ops)
    gpu = [op for op in profile.ops if op.device != "cpu"]
    assert all(op.energy_j > 0 for op in gpu if op.time_s > 0)
    assert all(op.energy_j == 0 for op in profile.ops if op.device == "cpu")
    assert run.energy_j == pytest.approx(sum(op.energy_j for op in gpu))
    # a kernel's power lies between the profile's static and board power
    a100 = MODELS["a100"]
    for op in gpu:
        if op.time_s > 0:
            assert a100.p_static_w - 1e-6 <= op.energy_j / op.time_s <= a100.tdp_w + 1e-6


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
@needs_hta
def test_copies_are_priced_by_what_a_board_draws_during_a_copy():
    # a copy engine moves the bytes while the SMs idle: static power over the copy plus
    # the model's HBM energy per byte moved, not the board's rated power (at TDP,
    # `Memcpy` topped GPU reports: 31% of trace_diff_test's estimate, now 7%)
    profile, _ = profile_from_trace(read_trace(HTA / "alexnet_train_step.json.gz"), "x")
    estimate_energy(profile)
    a100 = MODELS["a100"]
    copies = [op for op in profile.ops if op.name.startswith(("Memcpy", "Memset"))]
    assert len(copies) == 19 and any(op.bytes > 0 for op in copies)
    for op in copies:
        moved = op.bytes * (2 if "DtoD" in op.name else 1)
        want = a100.p_static_w * op.time_s + a100.e_byte_pj * moved * 1e-12
        assert op.energy_j == pytest.approx(want, rel=1e-9)
        assert op.energy_j < a100.tdp_w * op.time_s or op.time_s == 0
    note = profile.energy.note
    assert "copies and memsets at P_static + 31 pJ per byte" in note and "O'Connor" in note


@needs_hta
def test_control_vs_test_diff_names_largest_kernel_differences(tmp_path):
    db = tmp_path / "db"
    for run, f in (("control", "trace_diff_control"), ("test", "trace_diff_test")):
        r = cli("import-trace", str(HTA / f"{f}.json.gz"), "--db", str(db), "--run", run)
        assert r.returncode == 0, r.stderr
        assert f"-> run '{run}'" in r.stdout
    r = cli("diff", "--db", str(db), "control", "test")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # the control ran on an A100, the test on a V100, priced by two GPU models: said first
    assert lines[0].startswith("warning: the two runs ran on different hardware")
    assert "A100-PG509-200" in lines[0] and "V100-SXM2-16GB" in lines[0]
    assert "model:a100" in lines[0] and "model:gpu-default" in lines[0]
    first = lines[1]
    assert first.startswith("matched by operator path and kernel names")
    # the test variant runs 4645 device-to-device copies against the control's 18 (no
    # longer the largest difference once copies are not priced at the rated power)
    largest = first.split("largest kernel-level differences: ", 1)[1]
    assert "Memcpy DtoD (Device -> Device)" in largest
    assert "×18 (a)" in first and "×4645 (b)" in first
    # readable at real size: 730 lines before names were shortened and findings without
    # a cause grouped by kernel family; no 1,500-character C++ signature printed whole
    assert len(lines) <= 150, len(lines)
    assert "GenericPackedTensorAccessor" not in r.stdout
    assert "split_embedding_backward_codegen_rowwise_adagrad" in r.stdout  # short form
    assert "grouped by kernel family" in r.stdout
    for line in lines:  # a kernel both sides ran is not "X vs X"
        if line.strip().startswith("diverges ("):
            a, b = line.split(": ", 1)[1].split(" vs ", 1)
            assert a != b, line
    assert any(line.strip().startswith("same kernel on both sides: ") for line in lines)
    # the stored result (what --json prints, plus regions), without a second diff
    with open_db(db, read_only=True) as h:
        rows = h.query("MATCH (d:Diff) RETURN d.run_a, d.run_b, d.result_json").rows
    assert [r[:2] for r in rows] == [["control", "test"]]
    findings = json.loads(rows[0][2])["result"]["findings"]
    assert findings and [f["id"] for f in findings] == list(range(1, len(findings) + 1))
    savings = [f["saving_j"] for f in findings]
    assert savings == sorted(savings, reverse=True)
    for f in findings:
        assert f["divergence"]["matched_by"] == "path"
        assert f["divergence"]["kernels"], f
        assert "largest kernel differences" in f["root_cause"]["note"]
    # the JSON keeps every name whole
    kernels = {k["name"] for f in findings for k in f["divergence"]["kernels"]}
    assert any("GenericPackedTensorAccessor" in k for k in kernels)
    rows_shown = sum(1 for line in lines if line.startswith("│") and line[1:].strip()[:1].isdigit())
    assert f"{rows_shown} finding(s)" in r.stdout  # one row per cause or kernel family
    assert rows_shown < len(findings)
    # `report --by kernel --top 10` is about ten rows (151 lines when names wrapped)
    r = cli("report", "--db", str(db), "control", "--by", "kernel", "--top", "10")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) <= 30, r.stdout
    assert "(other " in r.stdout and "GenericPackedTensorAccessor" not in r.stdout
    r = cli("report", "--db", str(db), "control", "--by", "kernel", "--top", "3", "--full-names")
    assert r.returncode == 0 and "GenericPackedTensorAccessor" in r.stdout


@needs_hta
def test_two_rank_traces_load_as_one_job(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        (ranks / f"sampled_rank-{r}.json.gz").write_bytes(
            (HTA / f"sampled_rank-{r}.json.gz").read_bytes()
        )
    db = tmp_path / "db"
    r = cli("import-trace", str(ranks), "--db", str(db), "--run", "job")
    assert r.returncode == 0, r.stderr
    assert "job 'job': 2 of 128 ranks imported" in r.stdout
    from magneton.diagnose.jobs.ranks import is_multirank

    with open_db(db, read_only=True) as h:
        assert is_multirank(h, "job")
        for rank in (0, 1):
            p = h.load_profile(f"job/rank{rank}")
            assert (p.run.rank, p.run.world_size) == (rank, 128)
            assert p.dist is not None and p.dist.backend == "nccl"
            assert any(op.device.startswith("cuda") for op in p.ops)
    # the job report: 126 missing ranks are one row and one note (277 lines before,
    # one row each), and --by kernel --top 10 gives each recorded rank's top 10
    r = cli("report", "--db", str(db), "job", "--by", "kernel", "--top", "10")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 80, len(lines)
    assert sum("2–127" in line for line in lines) == 2  # the row and the note
    assert "126 of 128 ranks are not in the DB: 2–127" in " ".join(r.stdout.split())
    for rank in (0, 1):
        assert f"run 'job/rank{rank}': energy by kernel" in r.stdout
    assert "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t" in r.stdout
    # importing again without --replace leaves the job as it is
    r = cli("import-trace", str(ranks), "--db", str(db), "--run", "job")
    assert r.returncode != 0 and "already in the DB" in r.stderr


def _torch_profiler_trace(path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(8, 16)

    def train_step():
        return model(x).sum()

    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, with_stack=True, record_shapes=True) as prof:
        for _ in range(3):
            train_step()
    prof.export_chrome_trace(str(path))


def test_python_stacks_and_a_power_log_from_this_machines_profiler(tmp_path):
    trace = tmp_path / "cpu.pt.trace.json"
    _torch_profiler_trace(trace)
    profile, stats = profile_from_trace(read_trace(trace), "cpu")
    linears = [op for op in profile.ops if op.name == "aten::linear"]
    assert len(linears) == 3 and stats.kernels == 0
    for op in linears:
        names = [profile.frames[f].function for f in op.frames]
        assert "train_step" in names and names[-1] == "forward"
        assert any("aten::addmm" in p for p in op.call_paths)
        assert op.input_shapes[0] == [8, 16]
    # a relative-time power log (seconds from the trace's start), constant 50 W
    span_s = profile.run.time_s
    log = tmp_path / "power.csv"
    n = 50
    log.write_text(
        "timestamp_s,watts\n" + "".join(f"{span_s * i / n:.9f},50\n" for i in range(n + 1))
    )
    db = tmp_path / "db"
    r = cli("import-trace", str(trace), "--db", str(db), "--run", "cpu", "--power", f"meter:{log}")
    assert r.returncode == 0, r.stderr
    with open_db(db, read_only=True) as h:
        p = h.load_profile("cpu")
    assert p.run.energy_method == "measured" and p.run.power_source == "meter:power.csv"
    assert p.power and p.power[0].source == "meter"
    # 50 W over the span, all of it charged to operators (gaps included)
    assert p.run.energy_j == pytest.approx(50.0 * span_s, rel=0.02)
    assert sum(op.energy_j for op in p.ops) == pytest.approx(p.run.energy_j, rel=1e-6)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    db = tmp_path / "db"
    r = cli("import-trace", str(bad), "--db", str(db), "--run", "x")
    assert r.returncode != 0
    assert r.stderr.startswith("magneton: ") and len(r.stderr.strip().splitlines()) == 1
    r = cli("import-trace", str(tmp_path / "missing"), "--db", str(db), "--run", "x")
    assert r.returncode != 0 and "no such trace" in r.stderr


def test_nvidia_smi_log_in_wall_clock_lines_up_with_the_trace(tmp_path):
    """nvidia-smi writes local wall-clock dates; Kineto's timestamps are relative to
    `baseTimeNanoseconds` (Unix ns). The two clocks must meet."""
    import datetime as dt

    trace = tmp_path / "cpu.pt.trace.json"
    _torch_profiler_trace(trace)
    tf = read_trace(trace)
    base = int(tf.doc["baseTimeNanoseconds"])
    profile, _ = profile_from_trace(tf, "cpu")
    t0 = min(op.start_ns for op in profile.ops)
    t1 = max(op.end_ns for op in profile.ops)
    mid = (t0 + t1) // 2
    n = 400
    rows = ["timestamp, power.draw [W]"]
    for i in range(n + 1):
        t_ns = t0 + (t1 - t0) * i // n
        when = dt.datetime.fromtimestamp((base + t_ns) / 1e9)
        rows.append(f"{when:%Y/%m/%d %H:%M:%S.%f}, {100.0 if t_ns <= mid else 20.0:.2f} W")
    log = tmp_path / "nvsmi.csv"
    log.write_text("\n".join(rows) + "\n")
    db = tmp_path / "db"
    r = cli("import-trace", str(trace), "--db", str(db), "--run", "cpu", "--power", f"meter:{log}")
    assert r.returncode == 0, r.stderr
    with open_db(db, read_only=True) as h:
        p = h.load_profile("cpu")
    span_s = (t1 - t0) / 1e9
    # half at 100 W, half at 20 W: a log read on the wrong clock would be extended from
    # its nearest sample (100 or 20 W throughout) or refused
    assert p.run.energy_j == pytest.approx(60.0 * span_s, rel=0.03)
    # the same log an hour late does not overlap the trace: refused, nothing written
    late = [rows[0]]
    for row in rows[1:]:
        stamp, watts = row.split(", ")
        when = dt.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f") + dt.timedelta(hours=1)
        late.append(f"{when:%Y/%m/%d %H:%M:%S.%f}, {watts}")
    log.write_text("\n".join(late) + "\n")
    r = cli("import-trace", str(trace), "--db", str(db), "--run", "late", "--power", f"meter:{log}")
    assert r.returncode != 0 and "does not overlap the trace" in r.stderr
    with open_db(db, read_only=True) as h:
        assert not h.has_run("late")


@needs_hta
def test_path_diff_of_a_trace_with_itself_and_with_a_slower_copy():
    from magneton.diagnose.matching.pathmatch import diff_by_path

    def load(run: str):
        p, _ = profile_from_trace(read_trace(HTA / "alexnet_train_step.json.gz"), run)
        estimate_energy(p)
        return p

    a, b = load("a"), load("b")
    result, regions = diff_by_path(a, b, threshold=0.10)
    assert result.findings == [] and result.message == ""
    assert result.matched_pairs == len(regions) and all(k == "matched" for k, _, _ in regions)
    # every operator and GPU activity is in exactly one region
    assert sorted(i for _, ra, _ in regions for i in ra.ops) == list(range(len(a.ops)))
    # make one kernel three times slower in b: that kernel's region is the top finding and
    # names it
    gpu = [op for op in b.ops if op.device != "cpu" and "launched_by=" in op.scalar_args]
    slow = max(gpu, key=lambda op: op.energy_j)
    for op in b.ops:
        if op.name == slow.name:
            op.time_s *= 3
            op.energy_j *= 3
    result, _ = diff_by_path(a, b, threshold=0.10)
    top = result.findings[0]
    assert top.wasteful == "b" and top.verdict == "waste"
    assert top.divergence.kernels[0]["name"] == slow.name
    assert slow.idx in top.region_b.ops
    assert result.match_note.startswith("matched by operator path and kernel names")
    assert slow.name[:40] in result.match_note


@needs_hta
def test_a_cpu_recording_against_a_gpu_trace_says_the_machines_differ(tmp_path):
    """A diff of this machine's CPU recording against an unrelated GPU trace: its first
    line says the devices and the energy models differ, before any finding."""
    db = tmp_path / "db"
    workload = REPO / "tests" / "workloads" / "tiny.py"
    rec = cli("record", str(workload), "--db", str(db), "--run", "cpu", "-q")
    assert rec.returncode == 0, rec.stderr[-1000:]
    imp = cli(
        "import-trace", str(HTA / "alexnet_train_step.json.gz"), "--db", str(db), "--run", "gpu"
    )
    assert imp.returncode == 0, imp.stderr[-1000:]
    diff = cli("diff", "--db", str(db), "cpu", "gpu")
    first = (diff.stdout + diff.stderr).lstrip().splitlines()[0]
    assert first.startswith("warning: the two runs ran on different hardware"), first
    assert "NVIDIA A100" in first and "priced differently" in first
