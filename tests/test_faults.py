"""Faults a user or the machine inflicts on a recording, driven through the real CLI.

Every test runs `magneton` in a subprocess and, where a signal is involved, sends a real
signal to that process at a known phase: the slow workload writes a ready file once its
entry runs, so no test guesses timings. What each phase must leave is the durability
promise in docs/schema.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKLOADS = Path(__file__).parent / "workloads"


def magneton(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "magneton", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def runs(db: Path) -> dict[str, dict]:
    proc = magneton("runs", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return {r["name"]: r for r in json.loads(proc.stdout)}


def record(db: Path, script: str, run: str, *extra: str, env: dict | None = None):
    return magneton(
        "record",
        str(WORKLOADS / script),
        "--db",
        str(db),
        "--run",
        run,
        "--repeat",
        "1",
        *extra,
        env=env,
    )


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def good_db(tmp_path: Path) -> Path:
    """A DB holding one complete run 'a' of tiny.py (5 operators)."""
    db = tmp_path / "db"
    proc = record(db, "tiny.py", "a")
    assert proc.returncode == 0, proc.stderr
    assert runs(db)["a"]["op_count"] == 5
    return db


def _start_slow(db: Path, run: str, tmp_path: Path, *extra: str) -> subprocess.Popen:
    """`magneton record slow.py` running its entry (the ready file exists) when returned."""
    ready = tmp_path / f"ready-{run}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "magneton", "record", str(WORKLOADS / "slow.py")]
        + ["--db", str(db), "--run", run, "--warmup", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MAGNETON_TEST_READY": str(ready)},
    )
    deadline = time.monotonic() + 240  # a bound on a hang, not a timing assertion
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"slow.py never started: {proc.communicate()}")
        time.sleep(0.1)
    return proc


# ---- item 1: --replace swaps in the new run only once it is complete ----------------


def test_failed_replace_keeps_the_earlier_run(good_db: Path) -> None:
    proc = record(good_db, "raises.py", "a", "--replace")
    line = one_line(proc)
    assert proc.returncode == 1 and "ValueError" in line
    assert "kept unchanged" in line and "marked failed" not in line
    kept = runs(good_db)["a"]
    assert kept["status"] == "ok" and kept["op_count"] == 5


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_replace_keeps_the_earlier_run(
    good_db: Path, tmp_path: Path, sig: int, code: int
) -> None:
    proc = _start_slow(good_db, "a", tmp_path, "--replace")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == code, err
    assert "kept unchanged" in err and "Traceback" not in err
    kept = runs(good_db)["a"]
    assert kept["status"] == "ok" and kept["op_count"] == 5


def test_successful_replace_swaps_the_run(good_db: Path) -> None:
    proc = record(good_db, "slow.py", "a", "--replace")  # no ready file: one sum
    assert proc.returncode == 0, proc.stderr
    assert runs(good_db)["a"]["op_count"] == 1
    assert not list(good_db.glob("*.rebuild*"))  # the fresh file was renamed in


# ---- item 12: SIGTERM like Ctrl-C; the DB is readable while the workload runs ---------


def test_sigterm_marks_the_run_failed_and_db_stays_readable(good_db: Path, tmp_path) -> None:
    proc = _start_slow(good_db, "s", tmp_path)
    # the recording holds no lock while its workload runs
    assert set(runs(good_db)) == {"a"}
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 143 and "SIGTERM" in err, err
    got = runs(good_db)
    assert got["s"]["status"] == "failed" and "SIGTERM" in got["s"]["error"]
    assert got["a"]["status"] == "ok"


@pytest.mark.parametrize("name", ["", "   "])
def test_blank_run_name_is_refused_before_recording(tmp_path: Path, name: str) -> None:
    proc = record(tmp_path / "db", "raises.py", name)
    line = one_line(proc)
    assert proc.returncode != 0 and "non-blank" in line
    assert "ValueError" not in line  # the workload never ran


# ---- item 8: a workload that exits is a failed recording ------------------------------


@pytest.mark.parametrize(
    "how, call", [("sys", "sys.exit(0)"), ("os", "os._exit(3)"), ("setup", "sys.exit(0)")]
)
def test_workload_exit_is_a_failed_recording(good_db: Path, how: str, call: str) -> None:
    proc = record(good_db, "exits.py", "e", env={"MAGNETON_TEST_EXIT": how})
    line = one_line(proc)
    assert proc.returncode == 1 and call in line and "exits.py:" in line
    got = runs(good_db)
    assert got["e"]["status"] == "failed" and call in got["e"]["error"]
    assert got["a"]["status"] == "ok"


# ---- item 3: multi-statement queries --------------------------------------------------


def test_multi_statement_query_is_refused_in_one_line(good_db: Path) -> None:
    proc = magneton("query", "--db", str(good_db), "RETURN 1; RETURN 2")
    assert proc.returncode == 2 and "one statement" in one_line(proc)  # was a segfault (139)
    ok = magneton("query", "--db", str(good_db), "RETURN ';' AS s;", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout) == [{"s": ";"}]


def test_internal_multi_statement_query_closes_every_result(good_db: Path) -> None:
    code = (
        "from magneton.graphdb import open_db\n"
        f"db = open_db({str(good_db)!r}, read_only=True)\n"
        "print(db.query('RETURN 1; RETURN 2').rows)\n"
        "left = db._execute('RETURN 3; RETURN 4')  # never read, still open at close\n"
        "db.close()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # was a segfault in QueryResult.__del__
    assert proc.stdout.strip() == "[[2]]"


# ---- the final write: a real signal or kill -9 while the new run's rows go in --------


def _start_paused_write(db: Path, run: str, tmp_path: Path, *extra: str):
    """`magneton record` stopped inside its final DB write (node tables in, rels not)."""
    ready, go = tmp_path / f"ready-{run}", tmp_path / f"go-{run}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "magneton", "record", str(WORKLOADS / "pauses_in_write.py")]
        + ["--db", str(db), "--run", run, "--repeat", "1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MAGNETON_TEST_READY": str(ready), "MAGNETON_TEST_GO": str(go)},
    )
    deadline = time.monotonic() + 240  # a bound on a hang, not a timing assertion
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the write never started: {proc.communicate()}")
        time.sleep(0.05)
    return proc, go


def _operator_counts(db: Path) -> dict[str, int]:
    proc = magneton(
        "query", "--db", str(db), "MATCH (o:Operator) RETURN o.run AS run, count(*) AS n", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    return {r["run"]: r["n"] for r in json.loads(proc.stdout)}


def test_ctrl_c_during_the_final_write_saves_and_says_so(good_db: Path, tmp_path) -> None:
    proc, go = _start_paused_write(good_db, "w", tmp_path)
    proc.send_signal(signal.SIGINT)  # held back until the write is done
    go.write_text("go")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130 and "run 'w' is saved" in one_line(
        subprocess.CompletedProcess([], 130, "", err)
    )
    assert "marked failed" not in err and "Segmentation" not in err
    got = runs(good_db)
    assert got["w"]["status"] == "ok" and got["w"]["op_count"] == 5


def test_kill_during_a_replace_leaves_the_old_db(good_db: Path, tmp_path) -> None:
    proc, _ = _start_paused_write(good_db, "a", tmp_path, "--replace")
    proc.kill()
    proc.communicate(timeout=240)
    got = runs(good_db)
    assert got["a"]["status"] == "ok" and got["a"]["script"].endswith("tiny.py")
    assert _operator_counts(good_db) == {"a": 5}


def test_kill_mid_load_leaves_a_ghost_that_the_next_write_removes(good_db: Path, tmp_path):
    proc, _ = _start_paused_write(good_db, "ghost", tmp_path)
    proc.kill()
    proc.communicate(timeout=240)
    assert runs(good_db)["ghost"]["status"] == "loading"
    load = magneton("report", "--db", str(good_db), "ghost")
    assert load.returncode != 0 and "magneton rm" in one_line(load)
    rm = magneton("rm", "--db", str(good_db))
    assert rm.returncode == 0 and "ghost" in rm.stdout
    assert set(runs(good_db)) == {"a"} and _operator_counts(good_db) == {"a": 5}


def test_rm_checks_every_name_before_removing(good_db: Path) -> None:
    assert record(good_db, "tiny.py", "b").returncode == 0
    bad = magneton("rm", "--db", str(good_db), "b", "nope")
    assert bad.returncode != 0 and "nothing removed" in one_line(bad)
    assert set(runs(good_db)) == {"a", "b"}
    ok = magneton("rm", "--db", str(good_db), "b")
    assert ok.returncode == 0 and set(runs(good_db)) == {"a"}
    assert _operator_counts(good_db) == {"a": 5}
