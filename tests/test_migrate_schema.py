"""A DB of the previous schema (v3: a tensor's summaries as DOUBLE[]) stays usable: every
command names `magneton migrate`, which rewrites it as v4 (BLOBs) with every run, stored
diff and failed run intact and keeps the old file as `profile.lbug.v3`.

The v3 DB is made by the last v3 commit itself, run from its own tree (`git archive`) in
its own processes, as in tests/test_migrate.py; every run is loaded by that code before
and by this code after the conversion, and the two are compared field by field.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_migrate import DUMP_RUNS, WORKLOAD, _old_release, _record_old_db, _run, as_before

# the last commit of schema v3 (LadybugDB, summaries as DOUBLE[])
LAST_V3 = "8b802fa"


@pytest.fixture(scope="module")
def v3_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("v3")
    return _record_old_db(_old_release(tmp, LAST_V3), tmp)


def test_commands_on_a_v3_db_name_the_conversion(v3_db) -> None:
    db, _ = v3_db
    for args in (["runs"], ["report", "a"], ["query", "MATCH (r:Run) RETURN r.name"]):
        res = _run(["-m", "magneton", args[0], "--db", str(db), *args[1:]])
        assert res.returncode != 0 and res.stderr.count("\n") == 1, res.stderr
        assert "schema v3" in res.stderr and f"magneton migrate --db {db}" in res.stderr


def test_migrate_rewrites_v3_with_every_run_and_keeps_the_old_file(v3_db, tmp_path) -> None:
    original, before = v3_db
    db = tmp_path / "db"
    shutil.copytree(original, db)
    # unsealed, as after a copy by hand: the damage probe's child reads it first
    (db / "profile.lbug.sha256").unlink()
    old_bytes = (db / "profile.lbug").read_bytes()
    res = _run(["-m", "magneton", "migrate", "--db", str(db)])
    assert res.returncode == 0, res.stderr[-2000:]
    assert "converted 3 run(s)" in res.stdout and "checksum" in res.stdout
    assert (db / "profile.lbug.v3").read_bytes() == old_bytes
    after = _run(["-c", DUMP_RUNS, str(db)])
    assert after.returncode == 0, after.stderr[-2000:]
    # summaries, diffs and the failed run
    assert as_before(json.loads(after.stdout), before) == before
    tensors = before["a"]["profile"]["tensors"]
    i = next(i for i, t in enumerate(tensors) if t["quantiles"])  # summaries were compared
    # an ordinary v4 DB now: summaries print as numbers, a new run goes in
    q = _run(
        ["-m", "magneton", "query", "--db", str(db), "--json"]
        + [f"MATCH (t:Tensor) WHERE t.run = 'a' AND t.idx = {i} RETURN t.quantiles AS q"]
    )
    assert q.returncode == 0 and json.loads(q.stdout)[0]["q"] == tensors[i]["quantiles"]
    rec = _run(["-m", "magneton", "record", str(WORKLOAD), "--db", str(db), "--run", "c", "-q"])
    assert rec.returncode == 0, rec.stderr[-2000:]
    again = _run(["-m", "magneton", "migrate", "--db", str(db)])
    assert again.returncode != 0 and "already schema v4" in again.stderr
