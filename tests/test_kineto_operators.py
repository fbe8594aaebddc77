"""benchmarks/kineto_operators.py: the operators Kineto records are not the ones a Python
dispatch mode sees, which is why the timing pass cannot simply read Kineto's events
(docs/benchmarks.md, "Timing pass"), and the script's rule for which events a mode could
see. Checked on calls whose operators are known."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kineto_operators.py"
    spec = importlib.util.spec_from_file_location("kineto_operators_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_a_split_is_one_operator_to_the_mode_and_its_slices_to_kineto() -> None:
    """Kineto's names carry no overload: `aten::split` has a decomposed overload
    (`split.sizes`) beside the one that ran, so a rule over names keeps its slices."""
    bench = _bench()
    x = torch.randn(6, 8)
    mode = bench.mode_operators(lambda: torch.split(x, 2, dim=1))
    kineto = bench.kineto_operators(lambda: torch.split(x, 2, dim=1))
    assert mode == ["aten::split"]
    assert kineto == ["aten::slice"] * 4
    r = bench.compare(mode, kineto)
    assert (r["mode_ops"], r["kineto_ops"], r["differing_places"]) == (1, 4, 1)
    assert r["most_common"][0]["kind"] == "replace"


def test_identical_sequences_compare_equal_and_nested_calls_are_not_kept() -> None:
    bench = _bench()
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def call() -> None:
        torch.addmm(a, a, b)  # its kernel's own dispatcher calls are not operators of the mode
        torch.relu(a)

    kineto = bench.kineto_operators(call)
    assert kineto == bench.mode_operators(call) == ["aten::addmm", "aten::relu"]
    assert bench.compare(kineto, kineto)["differing_places"] == 0
