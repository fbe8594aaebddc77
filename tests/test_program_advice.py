"""What `magneton record -- python ...` says about a program run's timed steps, and what
`diff` says when one side was timed while traced (`record_block`).

A program's timed steps are fixed by `--steps WAIT:WARMUP:ACTIVE` (the first active step
is the structure pass): `1:1:3`, the README's old example, left two timed steps whose
energy varied ±49% / ±22%, and the advice then said `--repeat 4`, which `record` refuses
for programs. The advice must be a command that works, and following it must give a run
with enough timed steps.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import warm_cli

from magneton.model import EnergySpread, Profile, RunInfo
from magneton.render.report import spread_line
from magneton.tracer.programs.program import MIN_TIMED_UNITS, parse_command

PROGRAMS = Path(__file__).parent / "workloads" / "programs"


def magneton(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = warm_cli.run(args, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"magneton {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_too_few_timed_steps_prints_a_command_that_records_enough(tmp_path):
    db = tmp_path / "db"
    script = str(PROGRAMS / "step_marker.py")
    proc = magneton("record", "--db", str(db), "--run", "few", "--steps", "1:1:2",
                    "--", "python", script, "--steps", "20")  # fmt: skip
    advice = [line for line in proc.stderr.splitlines() if "timed unit" in line]
    assert len(advice) == 1, proc.stderr
    assert "1 timed unit" in advice[0] and "--repeat" not in proc.stdout + proc.stderr
    command = advice[0].split("record again with ", 1)[1]
    argv = shlex.split(command)
    assert argv[:2] == ["magneton", "record"] and argv[argv.index("--db") + 1] == str(db)
    assert argv[argv.index("--steps") + 1] == f"1:1:{MIN_TIMED_UNITS + 1}"
    # the command as printed (under another run name) records enough steps
    argv[argv.index("--run") + 1] = "enough"
    again = magneton(*argv[1:])
    assert "recorded run 'enough' (steps 1:1:9)" in again.stdout
    assert "timed unit" not in again.stderr


def test_unstable_program_run_is_told_to_record_more_steps_not_repeat():
    spec = parse_command(
        ["python", str(PROGRAMS / "step_marker.py"), "--steps", "9"], steps="1:1:3"
    )
    p = Profile(run=RunInfo(name="a"), config=spec.to_config())
    p.energy.spread = EnergySpread(
        iterations=2, mean_j=1.0, std_j=0.49, cv=0.49, min_j=0.6, max_j=1.4
    )
    p.run.energy_j = 1.0
    line = spread_line(p, "prof")
    assert "unstable" in line and "--repeat" not in line
    assert (
        "--db prof --run a --steps 1:1:9 -- python" in line and "step_marker.py --steps 9" in line
    )
    # a script run keeps --repeat (what `record SCRIPT` takes)
    s = Profile(run=RunInfo(name="s", script="/w/a.py"))
    s.energy.spread = p.energy.spread
    s.run.energy_j = 1.0
    assert "--repeat 4" in spread_line(s)


def test_diff_of_record_against_record_block_warns_that_the_block_was_timed_traced(tmp_path):
    import torch

    import magneton as mg

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(4, 16)
    db = str(tmp_path / "db")
    mg.record(model, (x,), run="called", db=db)
    with mg.record_block("block", db=db):
        model(x)
    out = magneton("diff", "--db", db, "called", "block", "--no-rerun", check=False)
    assert out.returncode == 0, out.stderr
    warning = [line for line in out.stdout.splitlines() if "timed while traced" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: b was timed while traced")


def test_window_advice_keeps_recording_the_same_block(tmp_path):
    # no --window: the first block entered ("decode"), once, so no timed unit; the
    # advised command names that block, since --steps alone would count optimizer steps
    db = tmp_path / "db"
    script = str(PROGRAMS / "window_decode.py")
    proc = magneton("record", "--db", str(db), "--run", "first", "--",
                    "python", script, "--n", "12")  # fmt: skip
    [advice] = [line for line in proc.stderr.splitlines() if "timed unit" in line]
    argv = shlex.split(advice.split("record again with ", 1)[1])
    assert argv[argv.index("--window") + 1] == "decode"
    assert argv[argv.index("--steps") + 1] == "0:0:9"
    argv[argv.index("--run") + 1] = "again"
    again = magneton(*argv[1:])
    assert "recorded run 'again' (window 'decode' 0:0:9)" in again.stdout, again.stdout
