"""The suite's way of running `magneton` (tests/warm_cli.py): a command forked from a warm
interpreter answers as `python -m magneton` in a fresh process does, and a command whose
environment a warm interpreter cannot give gets a fresh process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import warm_cli

PROBE = """import json, os, sys
import torch


def setup():
    with open(os.environ["MAGNETON_TEST_PROBE_OUT"], "w") as f:
        json.dump({"cwd": os.getcwd(), "ppid": os.getppid(),
                   "threads": os.environ.get("OMP_NUM_THREADS"),
                   "torch_threads": torch.get_num_threads(), "argv": sys.argv}, f)
    return (torch.ones(4),)


def main(x):
    return x * 2
"""

RAISES = "def setup():\n    return ()\n\ndef main():\n    raise ValueError('bad input')\n"


def test_a_warm_command_answers_exactly_as_a_fresh_one(tiny_db: Path, tmp_path: Path) -> None:
    for argv in (
        ["--version"],
        ["runs", "--db", str(tmp_path / "none")],  # a missing DB: one line, exit status 1
        ["query", "--db", str(tiny_db), "MATCH (r:Run) RETURN r.name AS n", "--json"],
        ["runs", "--no-such-option"],  # argparse: usage, exit status 2
    ):
        warm, fresh = warm_cli.run(argv), warm_cli.run(argv, fresh=True)
        assert (warm.returncode, warm.stdout, warm.stderr) == (
            fresh.returncode,
            fresh.stdout,
            fresh.stderr,
        ), argv


def test_a_failing_recording_fails_alike_warm_and_fresh(tmp_path: Path) -> None:
    script = tmp_path / "raises.py"
    script.write_text(RAISES)
    out = {}
    for how in ("warm", "fresh"):
        db = tmp_path / how
        argv = ["record", str(script), "--db", str(db), "--run", "r", "-q"]
        out[how] = warm_cli.run(argv, fresh=how == "fresh")
    assert out["warm"].returncode == out["fresh"].returncode != 0
    assert out["warm"].stderr.replace("warm", "fresh") == out["fresh"].stderr
    assert "raised ValueError at raises.py:5: bad input" in out["warm"].stderr


def test_the_script_runs_in_the_tests_directory_and_environment(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    seen = {}
    for how, extra, fresh in (
        ("warm", {}, False),
        ("fresh", {}, True),
        ("threads", {"OMP_NUM_THREADS": "1"}, False),  # read by torch as it loads
    ):
        probe = tmp_path / f"{how}.json"
        env = {**os.environ, "MAGNETON_TEST_PROBE_OUT": str(probe), **extra}
        argv = ["record", "probe.py", "--db", str(tmp_path / "db"), "--run", how, "-q"]
        res = warm_cli.run(argv, env=env, cwd=tmp_path, fresh=fresh)
        assert res.returncode == 0, res.stderr
        seen[how] = json.loads(probe.read_text())
    # forked from the warm interpreter, the script sees what a fresh process shows it:
    # the test's directory, its own argv, torch's default thread count
    assert seen["warm"]["ppid"] != os.getpid() and seen["fresh"]["ppid"] == os.getpid()
    for key in ("cwd", "argv", "torch_threads", "threads"):
        assert seen["warm"][key] == seen["fresh"][key], key
    assert seen["warm"]["cwd"] == str(tmp_path)
    # a variable torch reads when it loads: a fresh `python -m magneton`, child of this one
    assert seen["threads"]["ppid"] == os.getpid() and seen["threads"]["threads"] == "1"
    assert seen["threads"]["torch_threads"] == 1
