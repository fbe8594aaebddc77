"""benchmarks/gpu_check.py (issue 43) without a GPU: the script runs on this CPU machine,
says for every GPU part that it is skipped and why, writes its JSON with every check
"skipped" and a reason, and exits 0; and the pure functions its GPU checks are computed
with are fed synthetic numbers here, so the GPU logic is not untested until a device
runs it (the counter window, the sums against it, the A/A and attention verdicts, the
CUDA copy of a CPU case)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
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


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the script would record for minutes")
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out), "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return res, json.loads(out.read_text())


def test_without_a_gpu_every_part_says_it_is_skipped_and_why(cpu_run) -> None:
    res, _ = cpu_run
    assert res.returncode == 0, res.stderr[-2000:]
    why = "skipped: no CUDA device (torch.cuda.is_available() is False)"
    lines = res.stdout.splitlines()
    for name, _, _ in gcheck.PARTS:
        assert f"part {name}: {why}" in lines, res.stdout
    for number, key, _ in gcheck.CHECKS:
        assert f"check {number} {key}: {why}" in lines, res.stdout


def test_without_a_gpu_the_json_has_every_check_skipped_with_a_reason(cpu_run) -> None:
    _, data = cpu_run
    assert data["device"] is None
    assert set(data["checks"]) == set(gcheck.CHECK_KEYS)
    assert [c["number"] for c in data["checks"].values()] == [1, 2, 3, 4, 5, 6, 7]
    for c in data["checks"].values():
        assert c["status"] == "skipped"
        assert "torch.cuda.is_available() is False" in c["reason"]
    assert {p["status"] for p in data["parts"].values()} == {"skipped"}


def test_arguments_are_parsed() -> None:
    args = gcheck.parse_args(["--json", "x.json", "--timeout", "30", "--skip-real-size"])
    assert (args.json, args.timeout, args.skip_real_size) == ("x.json", 30.0, True)
    args = gcheck.parse_args(["--only", "overhead", "--only", "pair:cudnn_conv"])
    probe = gcheck.Probe({"name": "GPU"})
    assert gcheck.skip_reason("overhead", False, probe, args) == ""
    assert "--only" in gcheck.skip_reason("counter", True, probe, args)
    with pytest.raises(SystemExit):
        gcheck.parse_args(["--only", "nothing"])
    with pytest.raises(SystemExit):
        gcheck.parse_args(["--timeout", "0"])


def test_skip_real_size_is_said_for_the_real_size_pair(capsys) -> None:
    report = gcheck.Report(None, 10)
    gcheck.skip_all(report, "no CUDA device (x)", gcheck.parse_args(["--skip-real-size"]))
    assert report.parts[f"pair:{gcheck.REAL_SIZE}"]["reason"] == "--skip-real-size"
    assert report.parts["pair:gelu_backend"]["reason"] == "no CUDA device (x)"


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
