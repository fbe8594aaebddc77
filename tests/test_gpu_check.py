"""benchmarks/gpu_check.py without a GPU: `--plan` prints each step's allowance and a total
within the budget, with no torch; the script runs on this CPU machine, says for every GPU
step that it is skipped and why, writes its JSON with one entry per step and every check
"skipped" with a reason, and exits 0; the step runner stops a step at its allowance (its
child processes killed) and goes on; and the pure functions the GPU checks are computed
with are fed synthetic numbers, so the GPU logic is not untested until a device runs it
(the counter window, the sums against it, the A/A, attention, cuDNN and power verdicts,
the CUDA copy of a CPU case)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


gcheck = _load()

NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the script would record for minutes")
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return res, json.loads(out.read_text())


def test_without_a_gpu_every_gpu_step_says_it_is_skipped_and_why(cpu_run) -> None:
    res, _ = cpu_run
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    for step in gcheck.PLAN:
        if step.needs:
            assert f"step {step.name}: skipped: {NO_CUDA}" in lines, res.stdout
    for number, key, _ in gcheck.CHECKS:
        assert f"check {number} {key}: skipped: {NO_CUDA}" in lines, res.stdout


def test_without_a_gpu_the_json_has_one_entry_per_step_and_every_check_skipped(cpu_run) -> None:
    _, data = cpu_run
    assert data["device"] is None
    assert list(data["steps"]) == [s.name for s in gcheck.PLAN]
    assert data["plan"] == {s.name: s.allowance_s for s in gcheck.PLAN}
    assert data["budget_s"] == data["plan_total_s"] == gcheck.plan_total(gcheck.PLAN)
    for step in gcheck.PLAN:
        entry = data["steps"][step.name]
        assert entry["allowance_s"] == step.allowance_s
        assert isinstance(entry["seconds"], float | int)
        if step.needs:
            assert (entry["status"], entry["reason"]) == ("skipped", NO_CUDA)
        else:  # the probe and the checks run on any machine
            assert entry["status"] == "ok", entry
            assert "figures" in entry
    assert data["steps"]["probe"]["figures"]["cuda"] == NO_CUDA
    assert set(data["checks"]) == set(gcheck.CHECK_KEYS)
    assert [c["number"] for c in data["checks"].values()] == list(range(1, 10))
    for c in data["checks"].values():
        assert c["status"] == "skipped"
        assert "torch.cuda.is_available() is False" in c["reason"]


# --- the plan ----------------------------------------------------------------------------

STEP_LINE = re.compile(r"^(\S+) +(\d+) s  \S")


def _plan(*args: str) -> subprocess.CompletedProcess:
    # torch made unimportable: --plan needs neither a GPU nor torch
    code = (
        "import runpy, sys; sys.modules['torch'] = None; "
        f"sys.argv = [{str(SCRIPT)!r}, '--plan', *{list(args)!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_plan_prints_each_step_and_a_total_within_the_budget_without_torch() -> None:
    res = _plan()
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    steps = [STEP_LINE.match(x) for x in lines[:-1]]
    assert all(steps), lines
    names = [m.group(1) for m in steps if m]
    assert names == [s.name for s in gcheck.PLAN]
    total = re.fullmatch(r"total (\d+) s", lines[-1])
    assert total, lines[-1]
    seconds = sum(int(m.group(2)) for m in steps if m)
    assert int(total.group(1)) == seconds <= 360
    assert gcheck.plan_total(gcheck.PLAN) <= gcheck.BUDGET_S == 360
    # the cuDNN pair and the instant-power readings are steps of their own
    assert {"cudnn", "power", "overhead"} <= set(names)


def test_plan_follows_only_and_real_size() -> None:
    res = _plan("--only", "cudnn", "--only", "power")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert [x.split()[0] for x in lines[:-1]] == ["probe", "cudnn", "power", "checks"]
    assert lines[-1] == f"total {15 + 50 + 10 + 15} s"
    real = _plan("--real-size").stdout.splitlines()
    assert real[-2].startswith("checks ") and real[-3].startswith(f"pair:{gcheck.REAL_SIZE} ")
    assert real[-1] == f"total {gcheck.plan_total(gcheck.PLAN) + 90:.0f} s"
    only = _plan("--only", f"pair:{gcheck.REAL_SIZE}").stdout.splitlines()
    assert [x.split()[0] for x in only[:-1]] == ["probe", f"pair:{gcheck.REAL_SIZE}", "checks"]


def test_plan_says_when_the_timeout_is_shorter_than_the_plan() -> None:
    lines = gcheck.plan_lines(gcheck.PLAN, 100.0)
    assert "--timeout 100 s" in lines[-2]
    assert lines[-1] == f"total {gcheck.plan_total(gcheck.PLAN):.0f} s"


def test_arguments_are_parsed() -> None:
    args = gcheck.parse_args(["--json", "x.json", "--timeout", "30", "--real-size"])
    assert (args.json, args.timeout, args.real_size) == ("x.json", 30.0, True)
    assert gcheck.parse_args([]).timeout is None  # the plan's total
    args = gcheck.parse_args(["--only", "overhead", "--only", "cudnn"])
    by = {s.name: s for s in gcheck.PLAN}
    assert gcheck.only_reason(by["overhead"], args) == ""
    assert gcheck.only_reason(by["probe"], args) == ""  # always runs
    assert "--only" in gcheck.only_reason(by["counter"], args)
    with pytest.raises(SystemExit):
        gcheck.parse_args(["--only", "nothing"])
    with pytest.raises(SystemExit):
        gcheck.parse_args(["--timeout", "0"])


# --- each step bounded by its allowance --------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 3.0) -> bool:
    end = time.perf_counter() + within_s
    while time.perf_counter() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_step_that_overruns_in_python_is_stopped_and_timed_out() -> None:
    finished = threading.Event()

    def slow(deadline) -> dict:
        time.sleep(20)
        finished.set()
        return {"never": True}

    t0 = time.perf_counter()
    out = gcheck.bounded(slow, 0.3)
    took = time.perf_counter() - t0
    assert (out.status, out.reason) == ("timed out", "timed out: stopped at its allowance of 0.3 s")
    assert out.value is None
    assert took < 0.3 + gcheck.KILL_GRACE_S + 0.5
    assert not finished.is_set()


def test_a_step_whose_child_overruns_has_the_childs_whole_group_killed(tmp_path) -> None:
    pids = tmp_path / "pids"
    child = (
        "import subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pids)!r}, 'w').write(f'{{__import__(\"os\").getpid()}} {{g.pid}}'); "
        "time.sleep(60)"
    )

    def step(deadline) -> dict:
        gcheck.run_step([sys.executable, "-c", child], deadline)
        return {"never": True}

    t0 = time.perf_counter()
    out = gcheck.bounded(step, 1.5)
    assert out.status == "timed out", out
    assert time.perf_counter() - t0 < 1.5 + gcheck.KILL_GRACE_S + 1.0
    pid, grandchild = map(int, pids.read_text().split())
    assert _gone(pid) and _gone(grandchild)  # the re-run workers of a diff die with it


def test_a_stopped_step_starts_no_more_children() -> None:
    d = gcheck.Deadline(30)
    d.stop()
    with pytest.raises(gcheck.StepTimeout):
        gcheck.run_step([sys.executable, "-c", "pass"], d)
    d = gcheck.Deadline(30)
    threading.Timer(0.3, d.stop).start()
    t0 = time.perf_counter()
    with pytest.raises(gcheck.StepTimeout):
        gcheck.run_step([sys.executable, "-c", "import time; time.sleep(30)"], d)
    assert time.perf_counter() - t0 < 5


def test_a_failing_step_is_failed_not_timed_out() -> None:
    def broken(deadline) -> dict:
        raise RuntimeError("recording x/a: exit status 1")

    out = gcheck.bounded(broken, 5)
    assert (out.status, out.reason) == ("failed", "RuntimeError: recording x/a: exit status 1")
    assert gcheck.bounded(lambda d: {"x": 1}, 5).value == {"x": 1}


def test_the_runner_records_each_step_and_goes_on_after_one_times_out(tmp_path) -> None:
    path = tmp_path / "gpu.json"
    steps = [
        gcheck.PlanStep("first", 5, "fast"),
        gcheck.PlanStep("slow", 0.5, "overruns"),
        gcheck.PlanStep("after", 5, "fast"),
        gcheck.PlanStep("named", 5, "left out"),
    ]
    report = gcheck.Report(path, 20, plan=steps)
    runner = gcheck.Runner(report, 20)
    ran: list[str] = []

    def fast(name: str):
        def fn(deadline) -> dict:
            ran.append(name)
            return {"deadline_s": deadline.seconds}

        return fn

    runner.run(steps[0], fast("first"))
    runner.run(steps[1], lambda d: time.sleep(30))
    runner.run(steps[2], fast("after"))
    runner.run(steps[3], fast("named"), skip="not named by --only")
    data = json.loads(path.read_text())
    assert list(data["steps"]) == ["first", "slow", "after", "named"]
    assert [data["steps"][n]["status"] for n in data["steps"]] == [
        "ok",
        "timed out",
        "ok",
        "skipped",
    ]
    assert ran == ["first", "after"]
    assert data["steps"]["first"]["figures"] == {"deadline_s": 5}
    assert 0.5 <= data["steps"]["slow"]["seconds"] < 0.5 + gcheck.KILL_GRACE_S + 0.5
    assert data["steps"]["slow"]["reason"] == "timed out: stopped at its allowance of 0.5 s"
    assert data["steps"]["named"]["reason"] == "not named by --only"
    assert data["plan_total_s"] == 15.5


def test_the_runner_bounds_a_step_by_what_is_left_of_the_budget() -> None:
    report = gcheck.Report(None, 30.0)
    runner = gcheck.Runner(report, 30.0)
    seen: list[float] = []
    out = runner.run(gcheck.PlanStep("a", 50, "x"), lambda d: seen.append(d.seconds))
    assert out.status == "ok" and seen[0] <= 30.0  # not its 50 s allowance
    runner.end = time.perf_counter()  # the budget spent
    out = runner.run(gcheck.PlanStep("b", 50, "x"), lambda d: seen.append(d.seconds))
    assert out.status == "skipped" and "budget is spent" in out.reason
    assert len(seen) == 1
    assert report.steps["b"]["status"] == "skipped"


def test_main_goes_on_after_a_gpu_step_times_out(monkeypatch, tmp_path, capsys) -> None:
    """The whole flow with a fake device: a step that overruns its allowance is timed
    out, the steps after it run, the checks come from what they left."""
    plan = tuple(
        gcheck.PlanStep(s.name, 1.0 if s.name == "overhead" else 5.0, s.what, s.needs)
        for s in gcheck.PLAN
    )
    monkeypatch.setattr(gcheck, "PLAN", plan)
    monkeypatch.setattr(gcheck, "STEP_LOG", [])
    monkeypatch.setattr(gcheck, "probe", lambda: gcheck.Probe({"name": "fake GPU"}))
    cudnn = _summary(["torch.backends.cudnn.enabled"], saving_j=0.2)
    power = {
        "board_offers_instant": True,
        "field_id": 186,
        "instant_w": 120.0,
        "average_w": 110.0,
        "signals": {"cudnn_conv/a": _instant(), "cudnn_conv/b": _instant()},
    }

    def fake_step(name: str, work: Path, deadline, state: dict) -> dict:
        if name == "overhead":
            time.sleep(30)
        if name == "cudnn":
            return cudnn
        if name == "power":
            state["power"] = power
            return power
        raise RuntimeError(f"{name}: no device here")

    monkeypatch.setattr(gcheck, "run_gpu_step", fake_step)
    out = tmp_path / "gpu.json"
    rc = gcheck.main(["--json", str(out), "--work", str(tmp_path / "work")])
    data = json.loads(out.read_text())
    assert rc == 1  # the failed steps' checks are errors
    status = {n: e["status"] for n, e in data["steps"].items()}
    assert list(status) == [s.name for s in plan]
    assert status["overhead"] == "timed out"
    assert status["cudnn"] == status["power"] == status["checks"] == "ok"
    assert status["counter"] == "failed"
    checks = data["checks"]
    assert checks["cudnn_pair"]["status"] == "pass"
    assert checks["cudnn_pair"]["figures"]["saving_j"] == 0.2
    assert checks["instant_power"]["status"] == "pass"
    assert checks["timing_overhead"]["status"] == "error"
    assert "timed out" in checks["timing_overhead"]["reason"]
    assert data["elapsed_s"] < gcheck.plan_total(plan) + 1


# --- the cuDNN pair and the power signal (checks 8 and 9) ---------------------------------


def _summary(causes: list[str], saving_j: float = 0.1) -> dict:
    findings = [
        {
            "wasteful": "a",
            "verdict": "waste",
            "saving_j": saving_j if i == len(causes) - 1 else 0.01,
            "saving_share": 0.9,
            "root_cause": {"variable": c},
        }
        for i, c in enumerate(causes)
    ]
    side = {"energy_j": 0.2, "time_s": 0.001, "energy_method": "measured"}
    result = {"a": side, "b": side, "findings": findings, "matched_pairs": 3, "message": ""}
    expect = {"variable": "torch.backends.cudnn.enabled"}
    return gcheck.pair_summary(result, expect)


def _instant() -> str:
    from magneton.tracer.energy.power.nvml import INSTANT_SIGNAL

    return INSTANT_SIGNAL


def test_cudnn_verdict_needs_a_finding_named_by_the_flag() -> None:
    ok = _summary(["", "torch.backends.cudnn.enabled"], saving_j=0.2)
    assert gcheck.cudnn_verdict(ok) == (True, "")
    assert ok["expected"]["saving_j"] == 0.2  # the named finding's saving, not the top's
    none = _summary([])
    passed, why = gcheck.cudnn_verdict(none)
    assert not passed and why.startswith("no finding (3 matched region pairs")
    other = _summary(["torch.backends.cudnn.benchmark"])
    passed, why = gcheck.cudnn_verdict(other)
    assert not passed and "expected torch.backends.cudnn.enabled" in why


def test_check_cudnn_reports_found_saving_and_named() -> None:
    report = gcheck.Report(None, 10)
    gcheck.check_cudnn(report, _summary(["torch.backends.cudnn.enabled"], saving_j=0.2))
    c = report.checks["cudnn_pair"]
    assert c["status"] == "pass"
    assert (c["figures"]["found"], c["figures"]["named"], c["figures"]["saving_j"]) == (
        True,
        True,
        0.2,
    )
    gcheck.check_cudnn(report, _summary([]))
    c = report.checks["cudnn_pair"]
    assert c["status"] == "fail" and c["figures"]["found"] is False


def test_power_verdict() -> None:
    from magneton.tracer.energy.power.nvml import AVERAGE_SIGNAL, INSTANT_SIGNAL

    both = {"a": INSTANT_SIGNAL, "b": INSTANT_SIGNAL}
    assert gcheck.power_verdict(True, both) == ("pass", "")
    status, why = gcheck.power_verdict(True, {"a": INSTANT_SIGNAL, "b": AVERAGE_SIGNAL})
    assert status == "fail" and AVERAGE_SIGNAL in why
    status, why = gcheck.power_verdict(True, {"a": ""})
    assert status == "fail" and "no power signal stored" in why
    assert gcheck.power_verdict(False, {"a": AVERAGE_SIGNAL})[0] == "skipped"
    assert gcheck.power_verdict(False, {"a": INSTANT_SIGNAL})[0] == "fail"
    assert gcheck.power_verdict(True, {})[0] == "error"


# --- the counter window (checks 2, 3 and 7) ----------------------------------------------


def _counter(watts: float, update_ms: int, poll_ms: int, seconds: float):
    """Polls of a counter that gains `watts` J/s and changes only every `update_ms`."""
    t, j = [], []
    for k in range(int(seconds * 1000 / poll_ms)):
        now_ms = k * poll_ms
        t.append(now_ms * 1_000_000)
        j.append(watts * (now_ms // update_ms * update_ms) / 1000)
    return t, j


def test_stale_polls_are_dropped_and_the_update_period_found() -> None:
    t, j = _counter(300.0, update_ms=20, poll_ms=1, seconds=1.0)
    ups = gcheck.update_instants(t, j)
    assert len(ups) == 50  # one per 20 ms update, not one per 1 ms poll
    assert gcheck.median_interval_s([u for u, _ in ups]) == pytest.approx(0.020)


def test_counter_power_over_the_timed_calls() -> None:
    t, j = _counter(250.0, update_ms=100, poll_ms=1, seconds=4.0)
    calls = [(int(0.5e9 + k * 0.01e9), int(0.5e9 + (k + 1) * 0.01e9)) for k in range(250)]
    ref = gcheck.counter_reference(t, j, calls)
    assert ref["power_w"] == pytest.approx(250.0)
    assert ref["update_period_s"] == pytest.approx(0.100)
    assert ref["timed_span_s"] == pytest.approx(2.5)
    assert ref["window_s"] <= ref["timed_span_s"]


def test_a_counter_that_does_not_update_inside_the_calls_is_refused() -> None:
    t, j = _counter(250.0, update_ms=1000, poll_ms=1, seconds=3.0)
    with pytest.raises(ValueError, match="counter update"):
        gcheck.counter_reference(t, j, [(int(1.1e9), int(1.5e9))])


def test_operator_sum_against_the_counter() -> None:
    # 10 ms calls at 300 W: 3 J; the ops were charged 2.95 J over a 9.8 ms span
    f = gcheck.op_sum_vs_counter([1.0, 1.5, 0.45], call_s=0.010, span_s=0.0098, counter_w=300.0)
    assert f["counter_j"] == pytest.approx(3.0)
    assert f["error"] == pytest.approx(-0.05 / 3)
    assert gcheck.within(f["error"], gcheck.OP_SUM_TOL)
    assert f["span_share"] == pytest.approx(0.98)
    # on CUDA a span of host launches can cover a sliver of the call
    short = gcheck.op_sum_vs_counter([0.03], call_s=0.010, span_s=0.0001, counter_w=300.0)
    assert not gcheck.within(short["error"], gcheck.OP_SUM_TOL)
    assert short["span_error"] == pytest.approx(0.0)
    assert not gcheck.within(math.nan, 1.0)


# --- labels, A/A, attention, overhead, rate -------------------------------------------


def test_label_problems_name_runs_and_operators_not_measured_by_nvml() -> None:
    runs = [
        {"name": "a", "energy_method": "measured", "power_source": "nvml:gpu0"},
        {"name": "b", "energy_method": "estimated", "power_source": "model:h100"},
        {"name": "r", "energy_method": "replayed", "power_source": "nvml:gpu0"},
    ]
    ops = {"a": ["measured", "estimated"], "r": ["replayed"]}
    assert gcheck.label_problems(runs, ops) == [
        "b: estimated by model:h100",
        "a: operators labelled estimated",
    ]
    assert gcheck.label_problems(runs[:1], {"a": ["measured"]}) == []


def test_aa_figures() -> None:
    diff = {"a": {"energy_j": 1.00}, "b": {"energy_j": 1.02}, "findings": []}
    f = gcheck.aa_figures(diff)
    assert f["findings"] == 0
    assert f["energy_gap"] == pytest.approx(0.02 / 1.01)
    assert gcheck.within(f["energy_gap"], gcheck.AA_TOL)


def test_attention_kinds_from_operators_call_paths_and_kernels() -> None:
    sdpa = "aten::scaled_dot_product_attention > aten::_scaled_dot_product_efficient_attention"
    assert gcheck.attention_kind(["aten::scaled_dot_product_attention", sdpa]) == "mem-efficient"
    assert gcheck.attention_kind(["fmha_cutlassF_f32_aligned_64x64_rf_sm80"]) == "mem-efficient"
    assert gcheck.attention_kind(["aten::_scaled_dot_product_flash_attention"]) == "flash"
    assert gcheck.attention_kind(["aten::_scaled_dot_product_cudnn_attention"]) == "cudnn"
    assert gcheck.attention_kind(["aten::matmul > aten::bmm", "aten::_softmax"]) == "math"
    assert gcheck.attention_kind(["aten::addmm"]) == ""


def test_attention_verdict() -> None:
    ok = {"a": "math", "b": "mem-efficient"}
    assert gcheck.attention_verdict(ok, True, "attn_implementation") == (True, "")
    assert not gcheck.attention_verdict(ok, False, "attn_implementation")[0]
    assert not gcheck.attention_verdict(ok, True, "activation_function")[0]
    assert not gcheck.attention_verdict({"a": "math", "b": "math"}, True, "attn_implementation")[0]


def test_the_attention_finding_is_picked_by_its_kernels_then_its_cause() -> None:
    math_fused = {"a": "math", "b": "flash"}
    none = {"a": "", "b": ""}
    rc = "attn_implementation"
    assert gcheck.pick_attention([(none, True, rc), (math_fused, True, rc)]) == 1
    assert gcheck.pick_attention([(none, True, rc), (math_fused, True, "x")]) == 1
    assert gcheck.pick_attention([(none, True, "x"), (none, True, rc)]) == 1
    assert gcheck.pick_attention([(none, True, "x")]) == 0


def test_interleaved_rounds_keep_traced_and_untraced_apart_and_alternate() -> None:
    order: list[bool] = []

    def call(traced: bool) -> float:
        order.append(traced)
        return 1.1 if traced else 1.0

    untraced, traced = gcheck.interleaved(call, 4)
    assert untraced == [1.0] * 4 and traced == [1.1] * 4
    assert order == [False, True, True, False, False, True, True, False]
    assert gcheck.overhead_figures(untraced, traced)["overhead"] == pytest.approx(0.1)


def test_overhead_figures() -> None:
    f = gcheck.overhead_figures([0.010, 0.011, 0.010], [0.0104, 0.0115, 0.0103])
    assert f["overhead"] == pytest.approx(0.0104 / 0.010 - 1)
    assert f["paired_overhead"] == pytest.approx(0.04)


def test_sampling_rate_verdict_and_words() -> None:
    assert gcheck.rate_verdict(0.020, 0.020, 0.005)  # every counter update kept
    assert gcheck.rate_verdict(0.006, 0.001, 0.005)  # a 1 ms counter polled every 5 ms
    assert not gcheck.rate_verdict(0.100, 0.020, 0.005)  # averaged down
    assert not gcheck.rate_verdict(math.nan, 0.020, 0.005)
    words = gcheck.rate_words(400, 0.020, 0.020)
    assert "one every 20.0 ms (50 Hz)" in words and "updates every 20.0 ms" in words


def test_the_json_has_no_nan() -> None:
    text = gcheck.dumps({"x": math.nan, "y": [1.0, math.inf], "p": Path("a")})
    assert json.loads(text) == {"x": None, "y": [1.0, None], "p": "a"}


def test_parse_json_skips_what_precedes_it() -> None:
    assert gcheck.parse_json('warning: x\n{"a": [1]}') == {"a": [1]}
    assert gcheck.parse_json("[1, 2]") == [1, 2]


# --- the CUDA copy of a CPU case ---------------------------------------------------------


def test_a_cpu_case_is_moved_to_cuda_before_setups_return() -> None:
    src = (ROOT / "examples" / "cases" / "attn_impl" / "a.py").read_text()
    out = gcheck.cuda_variant(src)
    added = [x for x in out.splitlines() if x not in src.splitlines()]
    assert added == ['    model = model.to("cuda")', '    ids = ids.to("cuda")']
    lines = out.splitlines()
    assert lines.index('    ids = ids.to("cuda")') + 1 == lines.index("    return model, ids")
    compile(out, "a.py", "exec")
    # the origin line the diagnosis must find is unchanged
    assert 'attn_implementation="eager"' in out


def test_a_case_whose_setup_returns_no_names_is_refused() -> None:
    with pytest.raises(ValueError):
        gcheck.cuda_variant("def setup():\n    return make()\n")
    with pytest.raises(ValueError):
        gcheck.cuda_variant("def main():\n    pass\n")


def test_every_pair_the_script_records_is_there() -> None:
    for pair in gcheck.PAIRS:
        for f in ("a.py", "b.py", "expect.toml"):
            assert (pair.source / f).is_file(), pair.source / f


@pytest.mark.parametrize("instant", [True, False])
def test_the_power_step_asks_the_board_and_reads_each_runs_stored_signal(
    monkeypatch, tmp_path, instant: bool
) -> None:
    """Step `power` on a fake Hopper board (tests/fakes.py): whether the board answers
    the instantaneous field, and `energy.power_signal` as the DB stored it per run."""
    from builders import synthetic_profile
    from fakes import HopperNvml

    from magneton.graphdb import open_db
    from magneton.tracer.energy.power.nvml import AVERAGE_SIGNAL, INSTANT_SIGNAL

    board = HopperNvml(base_w=150.0, instant=instant)
    monkeypatch.setitem(sys.modules, "pynvml", board.module)
    monkeypatch.setattr(gcheck, "nvml_handle", lambda nvml, torch: ("hopper", 0))
    signal = INSTANT_SIGNAL if instant else AVERAGE_SIGNAL
    db = tmp_path / "db"
    with open_db(db) as h:
        p = synthetic_profile("a", n_ops=5)
        p.config["energy.power_signal"] = signal
        h.save_profile(p)
        h.save_profile(synthetic_profile("b", n_ops=5, seed=1))  # stored none
    power = gcheck.run_power({"dbs": {"pair": db}})
    assert power["board_offers_instant"] is instant
    assert power["signals"] == {"pair/a": signal, "pair/b": ""}
    assert power["average_w"] == pytest.approx(150.0, rel=0.05)
    if instant:
        assert power["instant_w"] == pytest.approx(150.0, rel=0.05)
    else:
        assert power["instant_w"] is None
    report = gcheck.Report(None, 10)
    gcheck.check_power(report, power)
    c = report.checks["instant_power"]
    assert c["status"] == "fail" and "no power signal stored" in c["reason"]
    assert c["figures"]["runs"] == 2
    power["signals"] = {"pair/a": signal}
    gcheck.check_power(report, power)
    assert report.checks["instant_power"]["status"] == ("pass" if instant else "skipped")
