"""Programs as users run them (tests/workloads/programs/habits.py): a loop that logs every
few steps, evaluates and saves checkpoints is priced from its own steps, aligned
operator by operator, with the extra work kept apart; a `store_true` flag's fix is a
command line the program's parser accepts; a failed recording leaves nothing behind,
and one that failed after its window keeps the run."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import warm_cli

from magneton.graphdb import load_profile
from magneton.render.report import slowed_line

PROGRAM = Path(__file__).parent / "workloads" / "programs" / "habits.py"
BOUND_W = 270.0 * 1.5  # the default model's TDP, with EnergySession's margin


def magneton(*args: str, cwd: Path | None = None, check: bool = True, env=None):
    proc = warm_cli.run(args, cwd=cwd, env=env, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"magneton {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def habits(tmp_path_factory) -> tuple[Path, Path]:
    """Runs 'loop' (--per-param-adam) and 'foreach' of the habits program, steps 1..10:
    the timed steps 3..10 log (3, 6, 9), evaluate (4, 8) and save (5, 10)."""
    work = tmp_path_factory.mktemp("habits")
    db = work / "db"
    for run, flags in (("loop", ["--per-param-adam"]), ("foreach", [])):
        out = magneton(
            "record", "--db", str(db), "--run", run, "--steps", "1:1:9", "-q", "--",
            "python", str(PROGRAM), "--out", str(work), *flags, cwd=work,
        )  # fmt: skip
        assert f"recorded run '{run}' (steps 1:1:9)" in out.stdout
        assert "outside the step's common work" in out.stdout
    return work, db


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
def test_a_loop_that_logs_evaluates_and_saves_is_priced_from_its_steps(habits):
    _, db = habits
    p = load_profile(str(db), "loop")
    r = p.run
    assert r.status == "ok" and r.timing == "separate" and r.repeat == 8
    out = p.energy.outside
    assert out is not None and out.of_units == 8
    # the evaluations' forward passes lead what ran outside; the log lines' `.item()`
    # (aten::_local_scalar_dense) is one of several sub-microsecond operators whose
    # place among the five costliest moves with timing (a CI run left it out): the
    # units below show the log steps were found
    assert "aten::addmm" in {t[0] for t in out.top}
    # after step s's optimizer step comes its log line, evaluation or save: the timed
    # units (steps 3..10) that ran them are 2 (log of step 3), 3 (eval of 4), 4 (save of
    # 5), 5 (log of 6), 7 (eval of 8), 8 (log of 9)
    assert out.units == [2, 3, 4, 5, 7, 8]
    # within what the model's hardware can draw: no 985 W pricing of a 90 W model
    assert (r.energy_j + out.energy_j) / r.time_s < BOUND_W
    # the step's own operators are the structure step's: the evaluations' forward passes
    # (16 linear layers each) are not in them, only the step's own forward
    names = [op.name for op in p.ops]
    assert names.count("aten::addmm") == 16
    # an untraced step's wall time is kept: the bound the timed operators keep (they
    # did: the recording did not slow this program)
    assert float(p.config["energy.untraced_unit_s"]) > 0
    assert slowed_line(p) == ""


@pytest.mark.slow
def test_a_store_true_flag_is_fixed_by_a_command_line_its_parser_accepts(habits):
    work, db = habits
    res = json.loads(
        # --no-rerun: the fix and its command line come from the recordings and the
        # program's parser; re-measuring the rounds (each a run of the program's window,
        # 20-35 s in all here) is tested on programs in test_aa_program and
        # test_program_record
        magneton(
            "diff", "--db", str(db), "loop", "foreach", "--json", "--no-rerun", cwd=work
        ).stdout
    )
    found = [f for f in res["findings"] if (f.get("fix") or {}).get("command")]
    assert found, json.dumps(res["findings"], indent=1)[:3000]
    f = found[0]
    assert f["wasteful"] == "a"
    assert f["root_cause"]["origins"]["a"]["option"] == "--per-param-adam"
    command = shlex.split(f["fix"]["command"])
    assert "--per-param-adam" not in command and "False" not in command
    # the program's own parser, run up to its parse
    check = subprocess.run(
        [sys.executable, "-m", "magneton.tracer.programs.cmdline", command[1], *command[2:]],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert check.returncode == 0, check.stderr


def _raising(tmp_path: Path, at_step: int) -> Path:
    prog = tmp_path / "crash.py"
    prog.write_text(
        PROGRAM.read_text().replace(
            "        opt.zero_grad(set_to_none=True)\n",
            f"        opt.zero_grad(set_to_none=True)\n"
            f"        if step == {at_step}:\n"
            f"            raise RuntimeError('disk full')\n",
        )
    )
    return prog


def test_a_program_that_fails_in_its_window_leaves_nothing_in_the_db(tmp_path):
    db = tmp_path / "db"
    magneton("record", "--db", str(db), "--run", "keep", "--steps", "1:1:2", "-q", "--",
             "python", str(PROGRAM), "--steps", "4")  # fmt: skip
    out = magneton(
        "record", "--db", str(db), "--run", "x", "--steps", "1:1:4", "-q", "--",
        "python", str(_raising(tmp_path, 3)), check=False,
    )  # fmt: skip
    assert out.returncode == 1
    assert "raised RuntimeError" in out.stderr and "nothing stored" in out.stderr
    runs = json.loads(magneton("runs", "--db", str(db), "--json").stdout)
    assert [r["name"] for r in runs] == ["keep"]


def test_a_program_that_fails_after_its_window_keeps_the_run(tmp_path):
    db = tmp_path / "db"
    out = magneton(
        "record", "--db", str(db), "--run", "x", "--steps", "1:1:2", "-q", "--",
        "python", str(_raising(tmp_path, 8)), check=False,
    )  # fmt: skip
    assert out.returncode == 1
    assert "after the window" in out.stderr and "run 'x' was recorded" in out.stderr
    runs = json.loads(magneton("runs", "--db", str(db), "--json").stdout)
    assert [(r["name"], r["status"]) for r in runs] == [("x", "ok")]
