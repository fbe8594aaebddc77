"""A DB of an earlier schema stays usable: every command names `magneton migrate`, which
rewrites it in the current one (v5) with every run, stored diff and failed run intact and
keeps the old file as `profile.lbug.vN`. v3 held a tensor's summaries as DOUBLE[], v3 and
v4 an operator's call stack as a rel per frame.

Each old DB is made by the last commit of its schema itself, run from its own tree (`git
archive`) in its own processes, as in tests/test_migrate.py; every run is loaded by that
code before and by this code after the conversion, and the two are compared field by
field (call stacks included).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_migrate import DUMP_RUNS, WORKLOAD, _old_release, _record_old_db, _run, as_before

# the last commit of each earlier schema (both on LadybugDB)
LAST_COMMIT = {"3": "8b802fa", "4": "c451adb"}


@pytest.fixture(scope="module", params=sorted(LAST_COMMIT))
def old_db(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    version = request.param
    tmp = tmp_path_factory.mktemp(f"v{version}")
    return version, *_record_old_db(_old_release(tmp, LAST_COMMIT[version]), tmp)


def test_commands_on_an_old_db_name_the_conversion(old_db) -> None:
    version, db, _ = old_db
    for args in (["runs"], ["report", "a"], ["query", "MATCH (r:Run) RETURN r.name"]):
        res = _run(["-m", "magneton", args[0], "--db", str(db), *args[1:]])
        assert res.returncode != 0 and res.stderr.count("\n") == 1, res.stderr
        assert f"schema v{version}" in res.stderr and f"magneton migrate --db {db}" in res.stderr


def test_migrate_rewrites_an_old_db_with_every_run_and_keeps_the_old_file(old_db, tmp_path) -> None:
    version, original, before = old_db
    db = tmp_path / "db"
    shutil.copytree(original, db)
    # unsealed, as after a copy by hand: the damage probe's child reads it first
    (db / "profile.lbug.sha256").unlink()
    old_bytes = (db / "profile.lbug").read_bytes()
    res = _run(["-m", "magneton", "migrate", "--db", str(db)])
    assert res.returncode == 0, res.stderr[-2000:]
    runs = [k for k in before if not k.startswith("#")]  # v3 kept the failed run, v4 not
    assert f"converted {len(runs)} run(s)" in res.stdout and "checksum" in res.stdout
    assert (db / f"profile.lbug.v{version}").read_bytes() == old_bytes
    after = _run(["-c", DUMP_RUNS, str(db)])
    assert after.returncode == 0, after.stderr[-2000:]
    # summaries, call stacks, diffs and the failed run
    assert as_before(json.loads(after.stdout), before) == before
    assert any(o["frames"] for o in before["a"]["profile"]["ops"])  # stacks were compared
    tensors = before["a"]["profile"]["tensors"]
    i = next(i for i, t in enumerate(tensors) if t["quantiles"])  # summaries were compared
    # an ordinary v5 DB now: summaries print as numbers, stacks are walked, a run goes in
    q = _run(
        ["-m", "magneton", "query", "--db", str(db), "--json"]
        + [f"MATCH (t:Tensor) WHERE t.run = 'a' AND t.idx = {i} RETURN t.quantiles AS q"]
    )
    assert q.returncode == 0 and json.loads(q.stdout)[0]["q"] == tensors[i]["quantiles"]
    walk = "MATCH (o:Operator)-[:ON_STACK]->(:CallStack)-[:HAS_FRAME]->(f:Frame) "
    q = _run(
        ["-m", "magneton", "query", "--db", str(db), "--json"]
        + [walk + "WHERE o.run = 'a' RETURN count(*) AS n"]
    )
    frames = sum(len(o["frames"]) for o in before["a"]["profile"]["ops"])
    assert q.returncode == 0 and json.loads(q.stdout)[0]["n"] == frames
    rec = _run(["-m", "magneton", "record", str(WORKLOAD), "--db", str(db), "--run", "c", "-q"])
    assert rec.returncode == 0, rec.stderr[-2000:]
    again = _run(["-m", "magneton", "migrate", "--db", str(db)])
    assert again.returncode != 0 and "already schema v5" in again.stderr
