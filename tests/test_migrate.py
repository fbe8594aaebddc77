"""Old profiles stay usable: a DB written by the last Magneton release on Kùzu 0.11.3 is
recognised by every command with a one-line hint, and `magneton migrate` converts it
with every run, stored diff and failed run intact (graphdb/migrate.py).

The old DB is made by that release itself: its tree is taken from this repository's
history (`git archive`) and run with its own `kuzu`, in its own processes — the way a
user's DB was made. Every run is loaded by the old code before and by this code after
the conversion, and the two are compared field by field.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "workloads" / "tiny.py"
# the last commit of the Kùzu era (schema v3 on kuzu 0.11.3)
LAST_KUZU_RELEASE = "c3262ef"

# find_spec, not importorskip: importing kuzu here would break ladybug in this process
# (graphdb/engine.py) for every later test of the worker
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("kuzu") is None,
    reason='the old engine (pip install "magneton[kuzu]") is needed',
)

DUMP_RUNS = textwrap.dedent(
    """
    import dataclasses, json, sys
    from magneton.graphdb import open_db
    out = {}
    with open_db(sys.argv[1], read_only=True) as db:
        for r in db.list_runs():
            row = dataclasses.asdict(r)
            if r.status == "ok":
                row["profile"] = dataclasses.asdict(db.load_profile(r.name))
            out[r.name] = row
        out["#diffs"] = db.query("MATCH (d:Diff) RETURN d.uid, d.findings, d.result_json").rows
    print(json.dumps(out, default=repr, sort_keys=True))
    """
)


def as_before(after: object, before: object) -> object:
    """`after` without the fields this version added that `before` (the old release's
    dump) cannot have, where they hold their defaults: a field added to the model since
    (e.g. `RunEnergy.outside`) is no loss, a field the old dump has and `after` lacks is."""
    if isinstance(after, dict) and isinstance(before, dict):
        return {
            k: as_before(v, before.get(k))
            for k, v in after.items()
            if k in before or v not in (None, [], {}, "", 0)
        }
    if isinstance(after, list) and isinstance(before, list) and len(after) == len(before):
        return [as_before(a, b) for a, b in zip(after, before, strict=True)]
    return after


def _old_release(tmp: Path, commit: str = LAST_KUZU_RELEASE) -> Path:
    """The tree of this repository at `commit` (an earlier release), extracted from git."""
    where = tmp / "old"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True
    )
    if archive.returncode != 0:  # a shallow clone without that commit
        pytest.skip(f"commit {commit} is not in this clone's history")
    where.mkdir()
    tar = tmp / "old.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as t:
        t.extractall(where, filter="tar")  # keeps magneton/<stage> -> ../<stage> links
    return where


def _run(argv: list[str], old: Path | None = None, cwd: Path | None = None):
    env = dict(os.environ, MAGNETON_DB_WAIT_S="0")
    if old is not None:  # the old tree first on the path (and as `-m`'s cwd): its magneton
        env["PYTHONPATH"] = str(old)
        cwd = old
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def _record_old_db(old: Path, tmp: Path) -> tuple[Path, dict]:
    """A DB written by the release in `old`: runs a and b, a failed run and a stored
    diff; and every run as that release loads it (DUMP_RUNS)."""
    db = tmp / "db"
    for run in ("a", "b"):
        rec = _run(
            ["-m", "magneton", "record", str(WORKLOAD), "--db", str(db), "--run", run, "-q"], old
        )
        assert rec.returncode == 0, rec.stderr[-2000:]
    bad = tmp / "raises.py"
    bad.write_text("def setup():\n    return ()\n\ndef main():\n    raise ValueError('x')\n")
    failed = _run(
        ["-m", "magneton", "record", str(bad), "--db", str(db), "--run", "broken", "-q"], old
    )
    assert failed.returncode != 0
    diff = _run(["-m", "magneton", "diff", "--db", str(db), "a", "b", "--no-rerun"], old)
    assert diff.returncode == 0, diff.stderr[-2000:]
    before = _run(["-c", DUMP_RUNS, str(db)], old)
    assert before.returncode == 0, before.stderr[-2000:]
    return db, json.loads(before.stdout)


@pytest.fixture(scope="module")
def old_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("migrate")
    old = _old_release(tmp)
    db, before = _record_old_db(old, tmp)
    assert (db / "profile.kuzu").is_file() and not (db / "profile.lbug").exists()
    return old, db, before


def test_commands_on_an_old_db_say_how_to_convert_it(old_db, tmp_path: Path) -> None:
    _, db, _ = old_db
    for args in (["runs"], ["report", "a"], ["query", "MATCH (r:Run) RETURN r.name"]):
        res = _run(["-m", "magneton", args[0], "--db", str(db), *args[1:]])
        assert res.returncode != 0
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
        assert f"magneton migrate --db {db}" in res.stderr and "Kùzu 0.11" in res.stderr
    # a recording into it does not start a second, empty DB beside the old one
    rec = _run(["-m", "magneton", "record", str(WORKLOAD), "--db", str(db), "--run", "c", "-q"])
    assert rec.returncode != 0 and "magneton migrate" in rec.stderr
    assert not (db / "profile.lbug").exists()


def test_migrate_keeps_every_run_diff_and_failure(old_db, tmp_path: Path) -> None:
    _, original, before = old_db
    db = tmp_path / "db"
    shutil.copytree(original, db)
    old_bytes = (db / "profile.kuzu").read_bytes()
    res = _run(["-m", "magneton", "migrate", "--db", str(db)])
    assert res.returncode == 0, res.stderr[-2000:]
    assert "converted 3 run(s)" in res.stdout and "checksum" in res.stdout
    assert (db / "profile.kuzu").read_bytes() == old_bytes  # the old file is untouched
    after = _run(["-c", DUMP_RUNS, str(db)])
    assert after.returncode == 0, after.stderr[-2000:]
    assert as_before(json.loads(after.stdout), before) == before
    assert before["broken"]["status"] == "failed" and before["#diffs"]
    # and the converted DB is an ordinary one: commands work, a new run goes in
    runs = _run(["-m", "magneton", "runs", "--db", str(db)])
    assert runs.returncode == 0 and "broken" in runs.stdout
    again = _run(["-m", "magneton", "migrate", "--db", str(db)])
    assert again.returncode != 0 and "exists already" in again.stderr


def test_migrate_without_an_old_db_is_one_line(tmp_path: Path) -> None:
    res = _run(["-m", "magneton", "migrate", "--db", str(tmp_path / "nothing")])
    assert res.returncode != 0 and res.stderr.count("\n") == 1
    assert "no Magneton DB to convert" in res.stderr
