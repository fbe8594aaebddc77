"""A DB whose writer was killed, or ran out of disk, in the engine's checkpoint recovers
at its next open, whatever command that is (issue 40, item 1; graphdb/recovery.py).

Every writer here is a real `python -m magneton` process on a real DB, killed with
SIGKILL by this test the moment the engine's files show the state named (the frozen WAL
`profile.lbug.wal.checkpoint` or the shadow pages of a checkpoint, the WAL of a write):
the test polls the DB's folder from outside, so the writer runs unchanged. A full disk
is a small tmpfs mounted in a private mount namespace (`unshare -rm`; skipped where that
is not allowed). What each case must leave: every earlier run intact (loaded, checksum
verified), the interrupted write either whole or gone, and no command that calls the DB
corrupt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_cli
from builders import synthetic_profile

from magneton.graphdb import open_db
from magneton.graphdb.recovery import pending

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).parent / "workloads"
# the engine's files that mark a state worth killing in (see the module doc)
CHECKPOINT = ("profile.lbug.wal.checkpoint", "profile.lbug.shadow")
WAL = ("profile.lbug.wal",)


def magneton(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return warm_cli.run(args, cwd=cwd, timeout=300)


def make_db(path: Path, runs: tuple[str, ...] = ("a", "b", "c"), n_ops: int = 150) -> Path:
    with open_db(path) as db:
        for i, run in enumerate(runs):
            gelu = "aten::gelu" if i % 2 == 0 else "aten::tanh"
            db.save_profile(synthetic_profile(run, n_ops=n_ops, seed=i, gelu=gelu))
    return path


def kill_when(db: Path, names: tuple[str, ...], *args: str) -> int:
    """Run `magneton ARGS` and SIGKILL it as soon as one of `names` exists in `db`; its
    return code (-9 when killed, else how it ended: the state never came)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "magneton", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watched = [db / n for n in names]
    deadline = time.monotonic() + 120  # a bound on a hang, not a timing assertion
    while proc.poll() is None and time.monotonic() < deadline:
        if any(p.exists() for p in watched):
            proc.send_signal(signal.SIGKILL)
            break
        # a poll every millisecond: the shortest state watched here, an `rm`'s checkpoint,
        # lasted 77-100 ms; polling without a pause spun a core the child needed
        time.sleep(0.001)
    return proc.wait()


def statuses(db: Path) -> dict[str, str]:
    res = magneton("runs", "--db", str(db), "--json")
    assert res.returncode == 0 and "corrupt" not in res.stderr, res.stderr
    return {r["name"]: r["status"] for r in json.loads(res.stdout)}


def intact(db: Path, runs: tuple[str, ...]) -> None:
    """Each run loads and matches the checksum stored when it was saved."""
    with open_db(db, read_only=True) as h:
        for run in runs:
            assert h.load_profile(run).ops


def write_trace(path: Path, n_ops: int = 400) -> Path:
    """A Kineto trace of `n_ops` cpu_ops one after another on one thread."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1}
        | {"ts": 1_000_000 + 10 * i, "dur": 8}
        for i in range(n_ops)
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.fixture(scope="module")
def killed_in_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DB of runs a, b, c whose `rm c` was killed in its checkpoint (the frozen WAL
    written, the checkpoint unfinished): LadybugDB refuses it to every read-only open."""
    db = make_db(tmp_path_factory.mktemp("killed") / "db")
    assert kill_when(db, CHECKPOINT, "rm", "--db", str(db), "c") == -signal.SIGKILL
    assert pending(db / "profile.lbug")
    return db


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "--json"),
        ("query", "MATCH (r:Run) RETURN r.name ORDER BY r.name", "--json"),
        ("report", "a"),
        ("rm",),  # was "cannot open ... (corrupt ...)": the very command users were told
        ("diff", "a", "b", "--no-rerun"),
    ],
    ids=lambda c: c[0],
)
def test_every_command_recovers_a_checkpoint_a_kill_left(
    killed_in_checkpoint: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    db = shutil.copytree(killed_in_checkpoint, tmp_path / "db")
    res = magneton(command[0], "--db", str(db), *command[1:])
    assert res.returncode == 0, res.stderr
    assert "corrupt" not in res.stderr and "Traceback" not in res.stderr
    assert f"recovered the DB in {db}" in res.stderr  # it says that it did
    assert not pending(db / "profile.lbug")
    # the rm had committed: its deletion is replayed, the other runs are whole
    assert statuses(db) == {"a": "ok", "b": "ok"}
    intact(db, ("a", "b"))


@pytest.mark.parametrize(
    "writer, point",
    [
        ("rm", "wal"),
        ("rm", "checkpoint"),
        ("diff", "checkpoint"),  # storing its result
        ("import-trace", "wal"),  # a run's save, as `record` makes it
        ("import-trace", "checkpoint"),
    ],
)
def test_a_writer_killed_at_each_point_keeps_every_earlier_run(
    tmp_path: Path, writer: str, point: str
) -> None:
    db = make_db(tmp_path / "db")
    args = {
        "rm": ("rm", "--db", str(db), "c"),
        "diff": ("diff", "--db", str(db), "a", "b", "--no-rerun"),
        "import-trace": (
            *("import-trace", str(write_trace(tmp_path / "t.json"))),
            *("--db", str(db), "--run", "d"),
        ),
    }[writer]
    rc = kill_when(db, WAL if point == "wal" else CHECKPOINT, *args)
    assert rc in (0, -signal.SIGKILL)  # 0: the write finished before the state showed
    got = statuses(db)  # recovers what is pending, never "corrupt"
    assert {r: got[r] for r in ("a", "b")} == {"a": "ok", "b": "ok"}
    assert got.get("c", "ok") == "ok" and got.get("d", "loading") in ("ok", "loading")
    intact(db, ("a", "b"))


# a writer that commits `rm c` into the WAL and is killed before any checkpoint
_COMMITTED_THEN_KILLED = """
import os, signal, sys
from magneton.graphdb import open_db
db = open_db(sys.argv[1])
db.query("CALL auto_checkpoint=false")
db.delete_runs(["c"])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_wal_torn_by_a_kill_is_replayed_up_to_the_tear(tmp_path: Path) -> None:
    """A kill in the middle of writing the WAL leaves its last record cut: the engine
    said "Checksum verification failed, the WAL file is corrupted" and every command
    called the DB corrupt. The tear is made by cutting in half the WAL a killed `rm c`
    left (a cut at a record's end is no tear: the engine drops a short last record)."""
    db = make_db(tmp_path / "db")
    proc = subprocess.run([sys.executable, "-c", _COMMITTED_THEN_KILLED, str(db)])
    assert proc.returncode == -signal.SIGKILL
    wal = db / "profile.lbug.wal"
    torn = wal.stat().st_size // 2
    os.truncate(wal, torn)
    res = magneton("runs", "--db", str(db), "--json")
    assert res.returncode == 0 and "corrupt" not in res.stderr, res.stderr
    (aside,) = db.glob("profile.lbug.unfinished-*")  # a copy of the torn WAL, kept
    assert "torn by a kill" in res.stderr and str(aside) in res.stderr
    assert (aside / "profile.lbug.wal").stat().st_size == torn
    assert {r["name"] for r in json.loads(res.stdout)} == {"a", "b", "c"}  # rm undone
    intact(db, ("a", "b", "c"))
    res = magneton("rm", "--db", str(db), "c")  # and the DB takes writes again
    assert res.returncode == 0, res.stderr
    assert statuses(db) == {"a": "ok", "b": "ok"}


def test_record_killed_in_its_checkpoint_keeps_every_earlier_run(tmp_path: Path) -> None:
    db = make_db(tmp_path / "db", runs=("a", "b"))
    rc = kill_when(
        db,
        CHECKPOINT,
        *("record", str(WORKLOADS / "tiny.py"), "--db", str(db), "--run", "t", "--repeat", "1"),
    )
    assert rc in (0, -signal.SIGKILL)
    got = statuses(db)
    assert {r: got[r] for r in ("a", "b")} == {"a": "ok", "b": "ok"}
    assert got.get("t", "ok") in ("ok", "loading")
    intact(db, ("a", "b"))


# ---- migrate: killed in its commit, then run again -------------------------------------


def _v3_db(path: Path) -> Path:
    """A DB that `migrate` converts: this schema's rows with Meta saying v3 (the
    conversion reads every table and writes a fresh file either way)."""
    with open_db(path) as db:
        for i, run in enumerate(("a", "b")):
            db.save_profile(synthetic_profile(run, n_ops=200, seed=i))
        db.query("MATCH (m:Meta {key: 'schema_version'}) SET m.value = '3'")
    return path


@pytest.mark.parametrize(
    "names",
    [
        ("profile.lbug.migrating.wal",),
        ("profile.lbug.migrating.wal.checkpoint", "profile.lbug.migrating.shadow"),
    ],
    ids=["staging-wal", "staging-checkpoint"],
)
def test_migrate_killed_in_its_commit_converts_when_run_again(
    tmp_path: Path, names: tuple[str, ...]
) -> None:
    db = _v3_db(tmp_path / "db")
    old = (db / "profile.lbug").read_bytes()
    assert kill_when(db, names, "migrate", "--db", str(db)) == -signal.SIGKILL
    assert (db / "profile.lbug").read_bytes() == old  # the old file as it was
    again = magneton("migrate", "--db", str(db))  # was a traceback (the staging's WAL)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "converted 2 run(s)" in again.stdout
    assert not list(db.glob("profile.lbug.migrating*"))
    with open_db(db, read_only=True) as h:
        assert all(h.load_profile(r).ops for r in ("a", "b"))


def test_migrate_killed_between_its_link_and_its_rename_converts_when_run_again(
    tmp_path: Path,
) -> None:
    db = _v3_db(tmp_path / "db")
    # the state a kill after `profile.lbug.v3` is linked and before the rename leaves
    os.link(db / "profile.lbug", db / "profile.lbug.v3")
    again = magneton("migrate", "--db", str(db))  # was "profile.lbug.v3 exists already"
    assert again.returncode == 0, again.stderr
    assert "converted 2 run(s)" in again.stdout
    assert not os.path.samefile(db / "profile.lbug", db / "profile.lbug.v3")


# ---- a disk that fills during the write -----------------------------------------------

# The writer: `import-trace` run by the CLI's own entry point, one run after another,
# with the up-front space checks off (graphdb/opening.py), so the disk fills inside the
# engine's write or checkpoint as it does when another process fills it meanwhile.
_FILLER = """
import sys
import magneton.graphdb.opening as opening
from magneton.cli import main
opening._SPACE_RESERVE_B = opening._SPACE_PER_ROW_BYTE = 0
for i in range(100):
    rc = main(["import-trace", sys.argv[1], "--db", sys.argv[2], "--run", f"r{i}"])
    print(f"rc={rc}", flush=True)
    if rc:
        break
"""


def _in_namespace(script: str, *args: str) -> subprocess.CompletedProcess:
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -rm (a private mount namespace) for a small tmpfs")
    proc = subprocess.run(
        ["unshare", "-rm", "bash", "-c", script, "scenario", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    if proc.returncode == 77:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    return proc


@pytest.mark.parametrize("size", ["12m", "20m"])  # full at the first run's checkpoint, later
def test_a_disk_filling_mid_write_is_one_line_and_the_db_recovers(
    tmp_path: Path, size: str
) -> None:
    trace = write_trace(tmp_path / "t.json", n_ops=3000)
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    proc = _in_namespace(
        f"""
        mount -t tmpfs -o size={size} tmpfs "$1" || exit 77
        {sys.executable} -c '{_FILLER}' "$3" "$1/db"; echo "writer=$?"
        cp -r "$1/db" "$2"
        """,
        str(mnt),
        str(out),
        str(trace),
    )
    lines = proc.stdout.split()
    assert "writer=0" in lines, proc.stdout + proc.stderr  # was rc 134, an abort
    assert lines[-2] == "rc=2", proc.stdout  # the write that found the disk full
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("magneton: ")]
    assert said and "no space left on the disk holding" in said[-1], proc.stderr
    assert "Traceback" not in proc.stderr and "terminate called" not in proc.stderr
    done = [f"r{i}" for i in range(lines.count("rc=0"))]
    got = statuses(out)  # finishes (or sets aside) what the full disk cut
    assert all(got[r] == "ok" for r in done), got
    with open_db(out, read_only=True) as h:
        for run in done:
            assert len(h.load_profile(run).ops) == 3000
