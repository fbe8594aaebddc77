"""The README's CI gate on unchanged code: the same script recorded twice, diffed with
`--fail-on waste`, passes - without and with the interleaved re-run - while another
process keeps a core busy (the load of a shared CI runner, which made interpreter-time
rows of 0.1-0.2% of the run fail the gate before it had a default minimum share and
judged interpreter time with its own noise). A run diffed with itself says so.

Everything goes through `magneton` processes, as a CI job runs it, and asserts on exit
codes: 0 is the only answer a gate on unchanged code may give.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magneton.commands.diff import DEFAULT_FAIL_ON_SHARE

# run alone (tests/conftest.py): an A/A gate under its own busy core; a second worker is load beyond it
pytestmark = pytest.mark.alone

WORKLOAD = Path(__file__).parent / "workloads" / "mlp_layernorm.py"


def magneton(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magneton", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.fixture(scope="module")
def busy_core() -> Iterator[None]:
    """A second process spinning on one core for the whole module."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


@pytest.fixture(scope="module")
def aa_db(tmp_path_factory: pytest.TempPathFactory, busy_core: None) -> Path:
    d = tmp_path_factory.mktemp("gate")
    script = d / "bench.py"
    script.write_text(WORKLOAD.read_text())
    for name in ("base", "candidate"):
        # the README's recipe: the energy model, as on a runner without a power sensor
        r = magneton(
            "record", str(script), "--db", str(d / "prof"), "--run", name,
            "--power", "model:cpu-default",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    return d / "prof"


def test_aa_gate_passes_without_rerun_under_load(aa_db: Path) -> None:
    r = magneton(
        "diff", "--db", str(aa_db), "base", "candidate", "--no-rerun", "--fail-on", "waste"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_aa_gate_passes_with_rerun_under_load(aa_db: Path) -> None:
    r = magneton("diff", "--db", str(aa_db), "base", "candidate", "--fail-on", "waste")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_run_diffed_with_itself_says_so(aa_db: Path) -> None:
    r = magneton("diff", "--db", str(aa_db), "base", "base", "--fail-on", "waste")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "compared with itself" in lines[0], r.stdout
    # a missing run is still an error, not "compared with itself"
    r = magneton("diff", "--db", str(aa_db), "nope", "nope")
    assert r.returncode == 2 and "no run 'nope'" in r.stderr


def test_the_default_minimum_share_is_documented() -> None:
    r = magneton("diff", "--help")
    assert f"default {DEFAULT_FAIL_ON_SHARE:g}" in " ".join(r.stdout.split())
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "1% by default" in " ".join(readme.split())
