"""User-written Cypher at real size cannot take the user's terminal or the DB down
(graphdb/contained.py): the engine runs it in a child that streams rows; a crash of that
child is one line, and a runaway result is cut at a row limit that says so. Also: Magneton's own kernel-path
query at the size where Kùzu 0.11.3 returned garbage (600 ops) and aborted (1,000)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import warm_cli
from builders import synthetic_profile

from magneton.graphdb import open_db, paths
from magneton.graphdb.contained import stream_query, with_row_limit
from magneton.model import MagnetonError

N_OPS = 3000


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("contained") / "db"
    with open_db(d) as db:
        db.save_profile(synthetic_profile("a", n_ops=N_OPS, seed=1))
        db.save_profile(synthetic_profile("b", n_ops=N_OPS, seed=2, gelu="aten::tanh"))
    return d


def magneton(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return warm_cli.run(args, env={**os.environ, **(env or {})}, timeout=300)


def test_kernel_paths_of_every_operator_at_size(big_db: Path) -> None:
    with open_db(big_db, read_only=True) as db:
        got = paths.kernel_paths(db, "a", list(range(N_OPS)))
        rp = paths.region_paths(db, "a", "b", list(range(40)), list(range(40)))
    assert len(got) > N_OPS // 2
    assert all(
        p[0] == "py:<script>:main" and p[-1].startswith(("at:", "k:"))
        for ps in got.values()
        for p in ps
    )
    # one pair per two distinct paths, the longest common prefix first, each with the
    # first operator of either side that took its path
    assert len(rp.pairs) == len(rp.ops_a) * len(rp.ops_b) > 0
    assert rp.pairs == sorted(rp.pairs, key=lambda p: -p.common)
    assert all(
        p.op_a == rp.ops_a[p.path_a][0] and p.op_b == rp.ops_b[p.path_b][0] for p in rp.pairs
    )


def test_a_huge_result_is_cut_at_the_limit_and_says_so(big_db: Path) -> None:
    cross = "MATCH (x:Operator), (y:Operator) RETURN x.idx, y.idx"  # 36M rows
    res = magneton("query", "--db", str(big_db), "--csv", cross)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 1 + 10_000  # the header and the default limit
    assert "showing the first 10000 rows" in res.stderr and res.stderr.count("\n") == 1
    res = magneton("query", "--db", str(big_db), "--json", "--limit", "3", cross)
    assert res.returncode == 0 and len(json.loads(res.stdout)) == 3
    # a query's own LIMIT is kept and nothing is said
    own = magneton("query", "--db", str(big_db), "--json", cross + " LIMIT 5")
    assert len(json.loads(own.stdout)) == 5 and own.stderr == ""


def test_an_engine_crash_is_one_line_and_the_db_is_intact(big_db: Path) -> None:
    res = stream_query(big_db, "MATCH (x:Operator), (y:Operator) RETURN x.idx, y.idx", limit=0)
    first = next(res.rows)
    assert len(first) == 2
    os.kill(res.pid, signal.SIGSEGV)  # what a native defect does to the engine's process
    with pytest.raises(MagnetonError, match=r"engine crashed running it \(SIGSEGV\)"):
        for _ in res.rows:
            pass
    with open_db(big_db, read_only=True) as db:
        assert {r.name for r in db.list_runs()} == {"a", "b"}


def test_load_from_reading_host_files_is_refused(big_db: Path) -> None:
    q = "LOAD FROM '/etc/passwd' (file_format='csv', header=false, delim=':') RETURN * LIMIT 3"
    res = magneton("query", "--db", str(big_db), q)
    assert res.returncode != 0 and "LOAD FROM reads files outside the DB" in res.stderr
    assert "root" not in res.stdout


@pytest.mark.parametrize(
    "cypher, expected",
    [
        ("MATCH (o:Operator) RETURN o.idx", "MATCH (o:Operator) RETURN o.idx LIMIT 11"),
        ("MATCH (o:Operator) RETURN o.idx LIMIT 3;", "MATCH (o:Operator) RETURN o.idx LIMIT 3;"),
        (
            "MATCH (o) WITH o LIMIT 2 RETURN o.limit",
            "MATCH (o) WITH o LIMIT 2 RETURN o.limit LIMIT 11",
        ),
        ("MATCH (o:Operator) RETURN o.idx;", "MATCH (o:Operator) RETURN o.idx LIMIT 11"),
    ],
)
def test_row_limit_is_added_only_where_the_query_sets_none(cypher: str, expected: str) -> None:
    assert with_row_limit(cypher, 10) == expected
