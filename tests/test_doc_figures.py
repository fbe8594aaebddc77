"""The figures the docs state that follow from the code and the shipped data alone.

A measured figure (a time, a ratio under load) is stated in docs/benchmarks.md with the
command and the machine that gave it; nothing here re-measures those. A figure that the
code computes deterministically (an import's counts and estimated energy, a path diff's
findings, a seeded sweep) must match what a fresh clone computes, and drifts silently
when the code changes. Each test recomputes such figures and reads the doc's own sentence
for them, so a change of the code or of the doc that makes them disagree fails here:

- docs/traces.md: what `magneton import-trace` prints for the HTA control trace, the
  test trace's unlinked activities, the A100 model's figures and the 100 MB copy, the
  control/test diff by path (findings, matched paths, the largest regions and their
  copies, rows once grouped, the first line), the AlexNet and control traces' launches;
- docs/matching.md and docs/benchmarks.md: benchmarks/matching_sensitivity.py (seeded):
  the number of labelled pairs, each family's distance range, the F1 plateau and floor;
- docs/benchmarks.md: the number of documented queries in docs/schema.md;
- docs/matching.md: two rows of benchmarks/confirm_rounds.py (seeded), what confirmation's
  futility stop costs.

The traces are parsed and priced in this process (what `import-trace` does before it
saves), not saved: the DB adds seconds and no figure.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from magneton.diagnose.matching.pathmatch import diff_by_path
from magneton.diagnose.pipeline import cause_groups
from magneton.tracer.capture.kineto import read_trace
from magneton.tracer.energy.power import MODELS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
HTA = Path(os.environ.get("MAGNETON_HTA_TRACES", REPO.parent / "shared" / "traces" / "hta"))
needs_hta = pytest.mark.skipif(
    not (HTA / "trace_diff_control.json.gz").exists(),
    reason=f"real GPU traces not found at {HTA} (the project's shared/traces/hta test data)",
)


def flat(text: str) -> str:
    """Text with every run of whitespace one space: doc sentences wrap anywhere."""
    return " ".join(text.split())


def doc(name: str) -> str:
    return flat((DOCS / name).read_text())


def stated(pattern: str, name: str) -> re.Match:
    """The doc's sentence holding a figure; fails naming the doc when it is gone."""
    m = re.search(pattern, doc(name))
    assert m, f"docs/{name} no longer says {pattern!r}: update the doc and this test"
    return m


def same2(text: str, x: float) -> bool:
    """A doc figure of two significant digits ("1.4e-15", "0.20", "0") against a value,
    or a bound ("< 1e-12") for a figure that is float rounding, which moves with the CPU's
    vector width (AVX2 or AVX-512 kernels sum the same values in another order)."""
    if text.startswith("<"):
        return x < float(text[1:])
    return float(text) == float(f"{x:.2g}")


def same3(text: str, x: float) -> bool:
    """A doc figure of three significant digits ("43.0", "0.263") against a value."""
    return float(text) == float(f"{x:.3g}")


RUNTIME = ("cuda_runtime", "cuda_driver")


def _import(name: str, run: str) -> tuple[object, str, int]:
    """A trace converted as `magneton import-trace` converts it, the line it prints, and
    the number of runtime and driver calls the file holds (counted before converting)."""
    from magneton.commands.import_trace import _convert

    trace = read_trace(HTA / name)
    calls = sum(e.get("cat") in RUNTIME for e in trace.doc["traceEvents"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        profile = _convert(trace, run, argparse.Namespace(power=None, model=""))
    return profile, out.getvalue().strip(), calls


@pytest.fixture(scope="module")
def hta_pair():
    control, control_line, control_calls = _import("trace_diff_control.json.gz", "control")
    test, test_line, _ = _import("trace_diff_test.json.gz", "test")
    result, _ = diff_by_path(control, test, threshold=0.10)
    return control, control_line, test, test_line, result, control_calls


@needs_hta
def test_traces_md_import_line_and_unlinked_activities(hta_pair):
    control, control_line, _, test_line, _, _ = hta_pair
    # the line docs/traces.md quotes ("The import prints what it found ..."), whole
    assert flat(control_line) in doc("traces.md"), control_line
    m = stated(
        r"In `trace_diff_test\.json\.gz`, (\d+) of (\d+) GPU activities have no launch", "traces.md"
    )
    linked, total = map(int, re.search(r"launches linked (\d+)/(\d+)", test_line).groups())
    assert (int(m[1]), int(m[2])) == (total - linked, total), test_line
    # "Import time and memory": the sizes of the file it was measured on
    m = stated(
        r"\(([\d ]+) `cpu_op`s, (\d+) GPU activities, ([\d ]+) Magneton operators\)", "traces.md"
    )
    cpu_ops = int(re.search(r"\((\d+) cpu_ops\)", control_line)[1])
    gpu = int(re.search(r"launches linked \d+/(\d+)", control_line)[1])
    assert [int(g.replace(" ", "")) for g in m.groups()] == [cpu_ops, gpu, len(control.ops)]


@needs_hta
def test_traces_md_path_diff_of_the_control_and_test_traces(hta_pair):
    control, _, test, _, result, _ = hta_pair
    m = stated(
        r"this finds (\d+) regions with ≥ 10 % difference among (\d+) matched paths", "traces.md"
    )
    assert (int(m[1]), int(m[2])) == (len(result.findings), result.matched_pairs)
    m = stated(r"so the (\d+) findings print as (\d+) rows", "traces.md")
    assert (int(m[1]), int(m[2])) == (len(result.findings), len(cause_groups(result)))
    # the two largest: regions only the test variant runs, and their device-to-device copies
    m = stated(
        r"which the control does not run: ([\d.]+) J and ([\d.]+) J, with (\d+) and (\d+) "
        r"device-to-device copies",
        "traces.md",
    )
    first, second = result.findings[:2]
    assert "CompiledFunctionBackward" in first.root_cause.note
    assert "CompiledFunction > aten::copy_" in second.root_cause.note
    assert first.region_a.energy_j == second.region_a.energy_j == 0

    def copies(f) -> int:
        return sum(
            k["calls_b"] for k in f.divergence.kernels if k["name"].startswith("Memcpy DtoD")
        )

    assert same3(m[1], first.region_b.energy_j) and same3(m[2], second.region_b.energy_j)
    assert (int(m[3]), int(m[4])) == (copies(first), copies(second))
    # over the whole runs
    m = stated(
        r"the test variant makes (\d+) `Memcpy DtoD` copies \(([\d.]+) J estimated\) against "
        r"the control's (\d+) \(([\d.]+) J\)",
        "traces.md",
    )
    dtod = [[op for op in p.ops if op.name.startswith("Memcpy DtoD")] for p in (test, control)]
    assert (int(m[1]), int(m[3])) == (len(dtod[0]), len(dtod[1]))
    assert same3(m[2], sum(op.energy_j for op in dtod[0]))
    assert same3(m[4], sum(op.energy_j for op in dtod[1]))
    # the first line of the diff, as far as the doc quotes it (it ends "; ...")
    m = stated(r"(matched by operator path and kernel names .*?); \.\.\.", "traces.md")
    assert flat(result.match_note).startswith(m[1]), result.match_note


def test_traces_md_gpu_model_figures():
    a100 = MODELS["a100"]
    m = stated(r"For an A100 that is (\d+) W \+ (\d+) W · u", "traces.md")
    assert (float(m[1]), float(m[2])) == (a100.p_static_w, a100.tdp_w - a100.p_static_w)
    m = stated(
        r"A 100 MB host-to-device copy on an A100 \((\d+) ms\) costs ([\d.]+) J of static power "
        r"and (\d+) mJ of traffic; priced at TDP it would cost ([\d.]+) J",
        "traces.md",
    )
    t = int(m[1]) / 1000
    assert same2(m[2], a100.p_static_w * t)
    assert int(m[3]) == round(a100.e_byte_pj * 1e-12 * 100e6 * 1e3)
    assert same2(m[4], a100.tdp_w * t)


@needs_hta
def test_traces_md_launch_counts_of_the_shipped_traces(hta_pair):
    # AlexNet: launches whose `External id` names a cpu_op that does not contain them
    with gzip.open(HTA / "alexnet_train_step.json.gz") as f:
        ev = json.load(f)["traceEvents"]
    ops: dict[object, list[dict]] = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X" and "External id" in e.get("args", {}):
            ops.setdefault(e["args"]["External id"], []).append(e)
    launches = [e for e in ev if e.get("cat") in RUNTIME and e.get("ph") == "X"]
    named = [e for e in launches if e.get("args", {}).get("External id") in ops]

    def inside(e: dict, o: dict) -> bool:
        return (
            o["tid"] == e["tid"] and o["ts"] <= e["ts"] <= e["ts"] + e["dur"] <= o["ts"] + o["dur"]
        )

    outside = [e for e in named if not any(inside(e, o) for o in ops[e["args"]["External id"]])]
    m = stated(
        r"in the AlexNet trace, (\d+) of the (\d+) launches whose `External id`", "traces.md"
    )
    assert (int(m[1]), int(m[2])) == (len(outside), len(named))
    # the control trace's runtime and driver calls, which an import keeps for HTA
    m = stated(r"the control trace of the HTA pair, ([\d,]+) launches", "traces.md")
    assert int(m[1].replace(",", "")) == hta_pair[5]


def test_matching_sensitivity_figures(tmp_path):
    out = tmp_path / "sensitivity.json"
    r = subprocess.run(
        [sys.executable, "benchmarks/matching_sensitivity.py", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(out.read_text())
    fams = {k.replace("-", "−"): v for k, v in got["families"].items()}
    pairs = sum(int(n) for n in re.findall(r"│ [+-] \w+\s*│\s*(\d+) │", r.stdout))
    assert pairs > 0, r.stdout
    assert int(stated(r"(\d+) labelled pairs built so their truth", "matching.md")[1]) == pairs
    assert int(stated(r"over (\d+) labelled pairs", "benchmarks.md")[1]) == pairs
    # docs/matching.md's family table: every family in exactly one row, its range to 2 digits
    text = (DOCS / "matching.md").read_text()
    table = text[text.index("| family | pairs | distance |") :].split("\n\n", 1)[0]
    seen: list[str] = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        sign, names = cells[0][0].replace("-", "−"), cells[0][1:].split(",")
        keys = [f"{sign} {n.strip()}" for n in names]
        lo, hi = (x.strip() for x in cells[2].split("–")) if "–" in cells[2] else [cells[2]] * 2
        assert same2(lo, min(fams[k][0] for k in keys)), (line, {k: fams[k] for k in keys})
        assert same2(hi, max(fams[k][1] for k in keys)), (line, {k: fams[k] for k in keys})
        seen += keys
    assert sorted(seen) == sorted(fams)
    # the plateau where F1 (τ alone for same-dtype pairs) is 1, and the floor elsewhere
    lo, hi = got["plateau"]
    floor = min(s["raw_f1"] for s in got["sweep"])
    m = stated(
        r"F1 \(τ alone for same-dtype pairs\) is 1\.0 for τ ∈ \[(\d+(?:\.\d+)?(?:e-?\d+)?), (\d+(?:\.\d+)?(?:e-?\d+)?)\] and ≥ "
        r"([\d.]+) everywhere from (\d+(?:\.\d+)?(?:e-?\d+)?) to ([\d.]+); the geometric middle of the plateau, "
        r"(\d+(?:\.\d+)?(?:e-?\d+)?), rounds to (\d+(?:\.\d+)?(?:e-?\d+)?)",
        "matching.md",
    )
    assert same2(m[1], lo) and same2(m[2], hi)
    # a bound: the floor is at the smallest τ, where float32 rounding (which moves with the
    # CPU's vector width) decides which positives still match
    assert 0 <= floor - float(m[3]) < 0.07
    assert math.isclose(float(m[4]), got["sweep"][0]["tau"])
    assert math.isclose(float(m[5]), got["sweep"][-1]["tau"])
    assert same2(m[6], math.sqrt(lo * hi)) and float(m[7]) == got["default_tau"]
    m = stated(
        r"F1 \(τ alone for same-dtype pairs\) is 1\.0 for τ ∈ \[(\d+(?:\.\d+)?(?:e-?\d+)?), (\d+(?:\.\d+)?(?:e-?\d+)?)\] and at "
        r"least ([\d.]+) over the grid; the default τ = (\d+(?:\.\d+)?(?:e-?\d+)?)",
        "benchmarks.md",
    )
    assert same2(m[1], lo) and same2(m[2], hi)
    assert 0 <= floor - float(m[3]) < 0.07 and float(m[4]) == got["default_tau"]


def test_benchmarks_md_counts_the_documented_queries():
    m = stated(r"each of the (\d+) queries of docs/schema\.md", "benchmarks.md")
    assert int(m[1]) == (DOCS / "schema.md").read_text().count("```cypher")


def test_confirm_rounds_figures():
    """docs/matching.md's two rows of benchmarks/confirm_rounds.py (seeded): what the
    futility stop costs a burst-garbled 1.5x difference and a scattered 1.65x one."""
    import importlib.util

    from magneton.diagnose.matching.confirm import FUTILITY

    spec = importlib.util.spec_from_file_location(
        "confirm_rounds", REPO / "benchmarks" / "confirm_rounds.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    m = stated(
        r"\((\d+\.\d)% → (\d+\.\d)% of true 1\.5x differences\s+whose first five rounds a "
        r"burst garbled; (\d+\.\d)% → (\d+\.\d)% of 1\.65x ones that scatter by\s+80% a round\)",
        "matching.md",
    )
    rows = ((1.5, 0.2, True), (1.65, 0.8, False))
    got = [
        bench.population(ratio, sd, burst, 1000, 0, futility)["confirmed"]
        for ratio, sd, burst in rows
        for futility in (0.0, FUTILITY)
    ]
    assert [f"{100 * g:.1f}" for g in got] == [m[1], m[2], m[3], m[4]]
