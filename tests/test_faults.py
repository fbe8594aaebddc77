"""Faults a user or the machine inflicts on a recording, driven through the real CLI.

Every test runs `magneton` in a subprocess and, where a signal is involved, sends a real
signal to that process at a known phase: the slow workload writes a ready file once its
entry runs, so no test guesses timings. What each phase must leave is the durability
promise in docs/schema.md.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_cli
from recordings import copy_db, takes_ctrl_c

WORKLOADS = Path(__file__).parent / "workloads"


def magneton(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return warm_cli.run(args, env={**os.environ, **(env or {})}, timeout=300)


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
def good_db(tiny_db: Path, tmp_path: Path) -> Path:
    """A DB holding one complete run 'a' of tiny.py (5 operators): this test's own copy
    of the session's recording, which each test here changes."""
    return copy_db(tiny_db, tmp_path / "db")


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
        preexec_fn=takes_ctrl_c,
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
    assert "nothing stored" in line and "run 'a' stored before is kept" in line
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
    assert "run 'a' stored before is kept" in err and "Traceback" not in err, err
    kept = runs(good_db)["a"]
    assert kept["status"] == "ok" and kept["op_count"] == 5


def test_successful_replace_swaps_the_run(good_db: Path) -> None:
    proc = record(good_db, "slow.py", "a", "--replace")  # no ready file: one sum
    assert proc.returncode == 0, proc.stderr
    assert runs(good_db)["a"]["op_count"] == 1
    assert not list(good_db.glob("*.rebuild*"))  # the fresh file was renamed in


# ---- item 12: SIGTERM like Ctrl-C; the DB is readable while the workload runs ---------


def test_sigterm_stores_nothing_and_db_stays_readable(good_db: Path, tmp_path) -> None:
    proc = _start_slow(good_db, "s", tmp_path)
    # the recording holds no lock while its workload runs
    assert set(runs(good_db)) == {"a"}
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 143 and "SIGTERM" in err and "nothing stored" in err, err
    got = runs(good_db)
    assert set(got) == {"a"} and got["a"]["status"] == "ok"


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
    assert "nothing stored" in line
    got = runs(good_db)
    assert "e" not in got and got["a"]["status"] == "ok"


# ---- item 3: multi-statement queries --------------------------------------------------


def test_multi_statement_query_is_refused_in_one_line(tiny_db: Path) -> None:
    proc = magneton("query", "--db", str(tiny_db), "RETURN 1; RETURN 2")
    assert proc.returncode == 2 and "one statement" in one_line(proc)  # was a segfault (139)
    ok = magneton("query", "--db", str(tiny_db), "RETURN ';' AS s;", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout) == [{"s": ";"}]


def test_internal_multi_statement_query_closes_every_result(tiny_db: Path) -> None:
    code = (
        "from magneton.graphdb import open_db\n"
        f"db = open_db({str(tiny_db)!r}, read_only=True)\n"
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
        preexec_fn=takes_ctrl_c,
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


def test_rm_checks_every_name_before_removing(named_runs, tmp_path: Path) -> None:
    db = copy_db(named_runs[0], tmp_path / "db")
    bad = magneton("rm", "--db", str(db), "bert[fp64]", "nope")
    assert bad.returncode != 0 and "nothing removed" in one_line(bad)
    assert set(runs(db)) == {"a", "[/]", "bert[fp64]"}
    ok = magneton("rm", "--db", str(db), "bert[fp64]")
    assert ok.returncode == 0 and set(runs(db)) == {"a", "[/]"}
    assert _operator_counts(db) == {"a": 5, "[/]": 5}


# ---- items 9 and 15: user text is printed as is; progress on a terminal, quiet with -q ---


@pytest.fixture(scope="module")
def named_runs(tiny_db: Path, tmp_path_factory) -> tuple[Path, dict]:
    """A copy of tiny_db plus two runs whose names are rich markup, each recorded as on a
    terminal: '[/]' with the progress display (2 warmup calls), 'bert[fp64]' with -q.
    Tests read the recorders' output and the DB; `rm` works on its own copy."""
    db = copy_db(tiny_db, tmp_path_factory.mktemp("named") / "db")
    tty = {"FORCE_COLOR": "1"}  # rich draws its live display as on a terminal
    shown = record(db, "tiny.py", "[/]", "--warmup", "2", env=tty)
    quiet = record(db, "tiny.py", "bert[fp64]", "-q", env=tty)
    return db, {"shown": shown, "quiet": quiet}


def test_run_names_with_brackets_are_listed_as_typed(named_runs) -> None:
    db, made = named_runs
    assert made["shown"].returncode == 0 and made["quiet"].returncode == 0
    proc = magneton("runs", "--db", str(db), env={"COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr  # `[/]` crashed the table before
    assert "bert[fp64]" in proc.stdout and "[/]" in proc.stdout


def _screen(stderr: str) -> str:
    """What a terminal shows over time: control sequences dropped, redraws as lines."""
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stderr).replace("\r", "\n")


def test_record_shows_phases_and_iterations_unless_quiet(named_runs) -> None:
    shown, quiet = named_runs[1]["shown"], named_runs[1]["quiet"]
    assert shown.returncode == 0, shown.stderr
    screen = _screen(shown.stderr)
    for phase in ("setup()", "warmup", "structure pass", "timing pass", "writing to the DB"):
        assert f"record: {phase}" in screen, screen
    assert "2/2" in screen  # the warmup's iterations counted
    assert quiet.returncode == 0 and "record:" not in quiet.stderr


# ---- items 2, 4, 10: a full disk, an unfinished commit, a read-only file system ---------
# These need file systems of a set size or mode: a tmpfs mounted in a private mount
# namespace (`unshare -rm`, no root needed where user namespaces are enabled). Each
# scenario is a shell script run there; the DB states it makes are real Kùzu states.

REPO = Path(__file__).resolve().parents[1]


def _in_namespace(script: str, *args: str) -> subprocess.CompletedProcess:
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("needs unshare -rm (a private mount namespace) for a small tmpfs")
    full = f"set -u\nM='{sys.executable} -m magneton'\nW='{WORKLOADS}'\n{script}"
    proc = subprocess.run(
        ["unshare", "-rm", "bash", "-c", full, "scenario", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    if proc.returncode == 77:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    return proc


def test_full_disk_is_one_line_naming_it_and_the_db_is_kept(tmp_path: Path) -> None:
    proc = _in_namespace(
        """
        D="$1"; mount -t tmpfs -o size=100m tmpfs "$D" || exit 77
        $M record "$W/tiny.py" --db "$D/db" --run a -q >/dev/null || exit 3
        avail=$(df --output=avail -B1 "$D" | tail -1)
        dd if=/dev/zero of="$D/filler" bs=1M count=$(( avail / 1048576 - 20 )) status=none
        for args in "--run b" "--run a --replace"; do
            $M record "$W/tiny.py" --db "$D/db" -q $args; echo "rc=$?"
        done
        $M runs --db "$D/db" --json
        """,
        str(tmp_path),
    )
    errors = proc.stderr.strip().splitlines()
    assert proc.stdout.count("rc=2") == 2 and len(errors) == 2, proc.stdout + proc.stderr
    for line in errors:
        assert "no space left on the disk holding" in line and str(tmp_path) in line
    listed = json.loads(proc.stdout[proc.stdout.index("[") :])
    assert [(r["name"], r["status"], r["op_count"]) for r in listed] == [("a", "ok", 5)]


_UNFINISHED_COMMIT = """
    D="$1"; mount -t tmpfs -o size=16m tmpfs "$D" || exit 77
    # the disk fills during the checkpoint (space checks off): Kùzu leaves .shadow pages
    python=${M% -m magneton}
    # (Kùzu then segfaults or spins in close: a spinning writer is killed, as a user would)
    timeout -s KILL 25 $python - "$D/db" <<'PY' 2>/dev/null
import sys
import magneton.graphdb.opening as dbm
from magneton.tracer.programs.record import RecordOptions, record_script
dbm._SPACE_RESERVE_B = dbm._SPACE_PER_ROW_BYTE = 0
record_script("tests/workloads/tiny.py", db=sys.argv[1], run="a", options=RecordOptions(repeat=1))
PY
    ls "$D/db"; cp -r "$D/db" "$2"
"""


def test_unfinished_commit_is_finished_and_read_only_is_not_corrupt(tmp_path: Path) -> None:
    mnt, db = tmp_path / "mnt", tmp_path / "db"
    mnt.mkdir()
    made = _in_namespace(_UNFINISHED_COMMIT, str(mnt), str(db))
    if "profile.lbug.shadow" not in made.stdout:  # Kùzu failed before its checkpoint
        pytest.skip(f"the full disk left no .shadow file this time: {made.stdout.split()}")
    proc = _in_namespace(
        """
        R="$1"; mount -t tmpfs -o size=256m tmpfs "$R" || exit 77
        cp -r "$2" "$R/pending"; cp -r "$2" "$R/done"
        $M rm --db "$R/done" 2>&1 >/dev/null | sed 's/^/rm: /'  # finishes that copy's commit
        mount -o remount,ro "$R"
        $M runs --db "$R/pending"; echo "rc=$?"
        $M runs --db "$R/done" --json >/dev/null; echo "rc=$?"
        $M record "$W/slow.py" --db "$R/done" --run z; echo "rc=$?"
        ${M% -m magneton} -c "from magneton.graphdb.db import open_db_prefer_write as o; \
print('fallback', o('$R/done').read_only)"
        """,
        str(mnt),
        str(db),
    )
    out, err = proc.stdout, proc.stderr.strip().splitlines()
    assert "corrupt" not in proc.stderr and len(err) == 2, proc.stderr
    assert "unfinished commit" in err[0] and "magneton rm --db" in err[0]
    assert "not writable" in err[1]  # the record is refused by its up-front check
    assert out.split().count("rc=0") == 1 and out.split().count("rc=2") == 2, out
    assert "fallback True" in out  # what `diff` needs to compute without storing
    # shadow pages cut short (the disk filled while the checkpoint wrote them; CI's run
    # left one): Kùzu cannot finish that commit ("Reading past the end of the file"), so
    # it is set aside beside the DB, kept, and the DB opens as of the commit before
    cut = tmp_path / "cut"
    shutil.copytree(db, cut)
    shadow = cut / "profile.lbug.shadow"
    os.truncate(shadow, (shadow.stat().st_size // 4096 - 16) * 4096)
    listed = magneton("runs", "--db", str(cut), "--json")
    assert listed.returncode == 0 and "could not be finished" in listed.stderr, listed.stderr
    (aside,) = cut.glob("profile.lbug.unfinished-*")
    assert {p.name for p in aside.iterdir()} == {"profile.lbug.shadow", "profile.lbug.wal"}
    assert "set aside in" in listed.stderr and str(aside) in listed.stderr
    # where it can write, a read-only command finishes the commit itself (or sets it
    # aside, when this run's full disk cut it)
    listed = magneton("runs", "--db", str(db), "--json")  # was "corrupt ... shadow pages"
    assert listed.returncode == 0, listed.stderr
    assert not (db / "profile.lbug.shadow").exists()
    assert bool(list(db.glob("profile.lbug.unfinished-*"))) == ("set aside" in listed.stderr)


# ---- item 7: operators of worker threads are not dropped without a word ---------------


def test_operators_in_worker_threads_are_reported_as_not_recorded(tmp_path: Path) -> None:
    proc = record(tmp_path / "db", "threads.py", "t")
    assert proc.returncode == 0, proc.stderr
    assert (
        "4 operator call(s) ran in other threads" in proc.stderr and "NOT recorded" in proc.stderr
    )
    rows = magneton(
        "query",
        "--db",
        str(tmp_path / "db"),
        "MATCH (c:ConfigEntry {run: 't'}) WHERE c.key = 'record.unrecorded_thread_ops' "
        "RETURN c.value AS n",
        "--json",
    )
    assert json.loads(rows.stdout) == [{"n": "4"}]  # the DB says so too
    shown = magneton("report", "t", "--db", str(tmp_path / "db"))  # and so does report
    assert shown.returncode == 0 and "4 operator call(s)" in shown.stderr, shown.stderr


def test_operators_in_a_pool_built_in_setup_are_reported_as_not_recorded(tmp_path) -> None:
    """The pool's threads exist before the entry runs, so no hook on thread start sees
    them (this was silent); the structure pass's profiler watches every thread."""
    proc = record(tmp_path / "db", "thread_pool.py", "p")
    assert proc.returncode == 0, proc.stderr
    assert "3 operator call(s) ran in other threads" in proc.stderr, proc.stderr
    assert "NOT recorded" in proc.stderr


# ---- item 6: damaged data pages are one line, or correct data -------------------------

# Runs each read command as `magneton ...` would, one after the other in one process
# (a Kùzu crash kills it, and the test sees that), and prints their outcomes as JSON.
_READER = """
import contextlib, io, json, sys, traceback
from magneton.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            rc = main(argv)
        except BaseException:
            traceback.print_exc()
            rc = 1
    out.append([rc, o.getvalue(), e.getvalue()])
print(json.dumps(out))
"""


def _places(file: Path, values: list[bytes]) -> list[int]:
    """Offsets in the Kùzu file where any of `values` (bytes of a run's rows) is stored."""
    data = file.read_bytes()
    return sorted({at for v in values for at in _find_all(data, v)})


def _find_all(data: bytes, v: bytes):
    at = data.find(v)
    while at >= 0:
        yield at
        at = data.find(v, at + 1)


def _damage(file: Path, places: list[int], seed: int, on_value: bool) -> None:
    """Random bytes as bit rot or a bad copy leaves them: 8 at each of two of `places`
    (where a run's values are, `on_value`) or 64 anywhere in a page holding one, and 64 at
    a random place in a random used (not all-zero) page."""
    rng = random.Random(seed)
    data = bytearray(file.read_bytes())
    used = [p for p in range(len(data) // 4096) if any(data[p * 4096 : (p + 1) * 4096])]
    at = rng.choice(places)
    if on_value:
        hits = [(at, 8), (rng.choice(places), 8)]
    else:
        hits = [(at // 4096 * 4096 + rng.randrange(4096 - 64), 64)]
    hits.append((rng.choice(used) * 4096 + rng.randrange(4096 - 64), 64))
    for at, n in hits:
        data[at : at + n] = rng.randbytes(n)
    file.write_bytes(data)


def _outcome(db: Path, trace: Path) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each read command in one child process; the
    trace file's text is export-trace's stdout. `diff` goes last: it stores its result."""
    q = "MATCH (o:Operator) RETURN o.run, o.idx, o.name, o.time_s ORDER BY o.run, o.idx"
    argvs = [
        ["runs", "--db", str(db), "--json"],
        ["query", "--db", str(db), q, "--json"],
        ["report", "a", "--db", str(db), "--json"],
        ["export-trace", "a", "--db", str(db), "-o", str(trace)],
        ["diff", "--db", str(db), "a", "b", "--no-rerun", "--json"],
    ]
    trace.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _READER, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"the reader crashed ({proc.returncode}): {proc.stderr[-2000:]}"
    got = [tuple(r) for r in json.loads(proc.stdout)]
    if trace.exists():
        rc, out, err = got[3]
        got[3] = (rc, out + trace.read_text(), err)
    return got


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
def test_damaged_pages_are_one_line_or_correct_data(tiny_db: Path, tmp_path: Path) -> None:
    """Random bytes in pages holding a run's rows (and in one other used page): every
    read command gives the data it gave before, or one line and a non-zero exit; none
    crashes, none prints garbage (was: `time_s` 9.5e+62, bad_alloc, segfaults)."""
    pristine = tmp_path / "pristine"
    shutil.copytree(tiny_db, pristine)
    assert record(pristine, "tiny.py", "b").returncode == 0
    from magneton.graphdb import open_db

    with open_db(pristine, read_only=True) as pdb:
        b = pdb.load_profile("b")
    times = _places(pristine / "profile.lbug", [struct.pack("<d", o.time_s) for o in b.ops])
    names = _places(pristine / "profile.lbug", [o.name.encode() for o in b.ops])
    catalog = _places(pristine / "profile.lbug", [b"Operator"])  # the tables' definitions
    assert times and names and catalog, "the rows are not where this test looks for them"
    db, trace = tmp_path / "db", tmp_path / "trace.json"
    shutil.copytree(pristine, db)
    want = _outcome(db, trace)
    assert [rc for rc, _, _ in want] == [0] * 5, want
    detected = 0
    # seed 0: on one of b's time_s values, 1: on an operator name; 2, 3: in their pages;
    # 4: in the catalog (in-process, Kùzu raised std::bad_alloc or crashed reading it)
    for seed, places in enumerate((times, names, times, names, catalog)):
        shutil.rmtree(db)
        shutil.copytree(pristine, db)
        _damage(db / "profile.lbug", places, seed, on_value=seed < 2)
        for k, ((rc, out, err), (_, want_out, _)) in enumerate(
            zip(_outcome(db, trace), want, strict=True)
        ):
            what = f"seed {seed}, command {k}: exit {rc}\n{err}"
            if rc:
                assert rc in (1, 2) and len(err.strip().splitlines()) == 1, what
                assert "Traceback" not in err and ("damaged" in err or "corrupt" in err), what
                detected += 1
            elif k == 0 and '"damaged"' in out:  # `runs` lists a damaged run as such
                listed = {r["name"]: r for r in json.loads(out)}
                ok = {r["name"]: r for r in json.loads(want_out)}
                assert {n for n in listed if listed[n]["status"] == "damaged"} <= {"a", "b"}
                assert all(listed[n] == ok[n] for n in listed if listed[n]["status"] != "damaged")
                detected += 1
            else:
                assert out == want_out, what
    assert detected, "no seed damaged anything a command reads: the test tests nothing"
