"""The read-only query guard is an allow-list (issue 40, item 2; graphdb/guard.py): every
clause of the engine's grammar that touches files, the network, extensions, other
databases or the engine's settings is refused, in `magneton query` and in the TUI's
console, before the engine sees it, and nothing of it happens.

The attacks are the issue's, on real files: a shared object named `x.lbug_extension`
whose constructor writes a marker file (built with the C compiler when there is one; the
engine, asked directly, does run it), `/etc/passwd` read through `LOAD ... FROM`, a CSV
written by `COPY ... TO`. The lists of the guard are held to the engine's own
`show_functions()`: a function the engine gains fails here until it is classified.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import synthetic_profile
from tui_support import app_for, run_app, wait_for

from magneton.graphdb import engine, guard, open_db
from magneton.tui.query_screen import QueryScreen

CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
    FILE *f = fopen(getenv("MAGNETON_TEST_MARKER"), "w");
    if (f) { fputs("constructor ran\n", f); fclose(f); }
}
"""


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A DB with one run, an extension file whose constructor leaves a marker, and the
    paths the attacks would write."""
    root = tmp_path_factory.mktemp("guard")
    db = root / "db"
    with open_db(db) as h:
        h.save_profile(synthetic_profile("a", n_ops=30))
    ext = root / "x.lbug_extension"
    if shutil.which("cc"):
        src = root / "x.c"
        src.write_text(CONSTRUCTOR)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(ext), str(src)], check=True)
    else:
        ext.write_bytes(b"\x7fELF not really")
    return {"db": db, "ext": ext, "marker": root / "marker", "out": root / "out"}


# Every clause of the grammar (LadybugDB's Cypher.g4) that reaches outside the DB, with
# the name the refusal gives it: extensions by path and by name, host files read
# (LOAD FROM in each form and position, COPY FROM) and written (COPY TO, EXPORT), other
# databases (ATTACH, IMPORT, USE, DETACH), file- and host-reading table functions, and
# engine settings (CALL name = value: the home directory, the file search path).
OUTSIDE = [
    ("LOAD '{ext}'", "LOAD"),
    ("LOAD EXTENSION '{ext}'", "LOAD EXTENSION"),
    ("load extension json", "LOAD EXTENSION"),
    ("LOAD FROM '/etc/passwd' (header=false, delim=':') RETURN *", "LOAD FROM"),
    ("LOAD WITH HEADERS (a STRING) FROM '/etc/passwd' RETURN a", "LOAD FROM"),
    ("LOAD FROM GLOB('/etc/pass*') RETURN *", "LOAD FROM"),
    ("LOAD FROM read_csv('/etc/passwd') RETURN *", "LOAD FROM"),
    ("MATCH (r:Run) WITH r LOAD FROM '/etc/passwd' RETURN *", "LOAD FROM"),
    ("UNWIND [1] AS load LOAD FROM '/etc/passwd' RETURN *", "LOAD"),
    ("RETURN 1 AS x UNION ALL LOAD FROM '/etc/passwd' RETURN *", "LOAD FROM"),
    ("/* read */ LoAd // a comment\n FROM '/etc/passwd' RETURN *", "LOAD FROM"),
    ("EXPLAIN LOAD FROM '/etc/passwd' RETURN *", "EXPLAIN"),
    ("PROFILE LOAD FROM '/etc/passwd' RETURN *", "PROFILE"),
    ("INSTALL json", "INSTALL"),
    ("FORCE INSTALL json FROM 'http://127.0.0.1:9/'", "FORCE"),
    ("UNINSTALL json", "UNINSTALL"),
    ("UPDATE json", "UPDATE"),
    ("COPY Run FROM '/etc/passwd'", "COPY"),
    ("COPY (MATCH (r:Run) RETURN r.name) TO '{out}.csv'", "COPY TO"),
    ("EXPORT DATABASE '{out}'", "EXPORT"),
    ("IMPORT DATABASE '{out}'", "IMPORT"),
    ("ATTACH '{out}.lbug' AS o (dbtype lbug)", "ATTACH"),
    ("DETACH o", "DETACH"),
    ("USE o", "USE"),
    ("CALL read_csv('/etc/passwd') RETURN *", "CALL read_csv"),
    ("CALL read_parquet('/etc/passwd') RETURN *", "CALL read_parquet"),
    ("CALL read_npy('/etc/passwd') RETURN *", "CALL read_npy"),
    ("CALL file_info('/etc/passwd') RETURN *", "CALL file_info"),
    ("CALL disk_info() RETURN *", "CALL disk_info"),
    ("CALL show_official_extensions() RETURN *", "CALL show_official_extensions"),
    ("CALL home_directory = '/etc'", "CALL home_directory"),
    ("CALL file_search_path = '/etc'", "CALL file_search_path"),
    ("CREATE MACRO m(x) AS x", "CREATE"),
    ("MATCH (r:Run) RETURN r.name, nextval('s')", "function nextval"),
    ("MATCH (r:Run) RETURN r.name ＃", "character '＃'"),
]


def _fill(query: str, place: dict[str, Path]) -> str:
    return query.format(ext=place["ext"], out=place["out"])


def _nothing_happened(place: dict[str, Path], output: str) -> None:
    assert not place["marker"].exists(), "the extension's constructor ran"
    assert not list(place["out"].parent.glob("out*")), "a file was written"
    assert "root:" not in output, "/etc/passwd was printed"


@pytest.mark.parametrize("query, name", OUTSIDE, ids=[n for _, n in OUTSIDE])
def test_every_outside_clause_is_refused_by_name(query: str, name: str, place) -> None:
    assert guard.find_write_clause(_fill(query, place)) == name


# The queries run end to end, each in its own `magneton query`: the two attacks
# and one of each kind; the rest are refused by the same function, checked above.
THROUGH_THE_CLI = [
    "LOAD '{ext}'",
    "LOAD WITH HEADERS (a STRING) FROM '/etc/passwd' RETURN a",
    "UNWIND [1] AS load LOAD FROM '/etc/passwd' RETURN *",
    "COPY (MATCH (r:Run) RETURN r.name) TO '{out}.csv'",
    "ATTACH '{out}.lbug' AS o (dbtype lbug)",
    "CALL read_csv('/etc/passwd') RETURN *",
    "CALL home_directory = '/etc'",
]


@pytest.mark.parametrize("query", THROUGH_THE_CLI)
def test_magneton_query_refuses_them_and_nothing_happens(query: str, place) -> None:
    env = {**os.environ, "MAGNETON_TEST_MARKER": str(place["marker"])}
    res = subprocess.run(
        [sys.executable, "-m", "magneton", "query", "--db", str(place["db"]), _fill(query, place)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("magneton: query refused: ") and res.stderr.count("\n") == 1
    _nothing_happened(place, res.stdout + res.stderr)


def test_the_extension_attack_is_real_without_the_guard(place, tmp_path: Path) -> None:
    """The engine itself loads the file and runs its constructor: the guard, not the
    engine, is what stops it."""
    if not shutil.which("cc"):
        pytest.skip("no C compiler to build the extension")
    marker = tmp_path / "marker"
    code = (
        "import sys\n"
        "from magneton.graphdb import engine\n"
        "db = engine.Database(':memory:')\n"
        "try:\n"
        "    engine.Connection(db).execute(f\"LOAD '{sys.argv[1]}'\")\n"
        "except RuntimeError:\n"
        "    pass\n"
    )
    env = {**os.environ, "MAGNETON_TEST_MARKER": str(marker)}
    subprocess.run([sys.executable, "-c", code, str(place["ext"])], env=env, timeout=120)
    assert marker.read_text() == "constructor ran\n"


def test_the_tui_console_refuses_them_and_nothing_happens(place, monkeypatch) -> None:
    monkeypatch.setenv("MAGNETON_TEST_MARKER", str(place["marker"]))
    app = app_for(place["db"])
    seen: list[str] = []

    async def scenario(pilot) -> None:
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, QueryScreen)
        err = screen.query_one("#query-error")
        for query in THROUGH_THE_CLI[:3]:
            err.display = False
            screen.query_one("#cypher").value = _fill(query, place)
            await pilot.press("enter")
            await wait_for(pilot, lambda: err.display, 60, "the refusal")
            seen.append(str(err.content))

    run_app(app, scenario)
    assert len(seen) == 3 and all(s.startswith("query refused: ") for s in seen), seen
    _nothing_happened(place, "".join(seen))


@pytest.mark.parametrize(
    "query",
    [
        "MATCH (o:Operator) RETURN o.name, sum(o.energy_j) AS j ORDER BY j DESC LIMIT 3",
        "MATCH (n:Run) RETURN n.name AS `load`, {from: 1, copy: 2, load: 3} AS m, n.script",
        "CALL show_tables() RETURN name ORDER BY name LIMIT 2",
        "CALL table_info('Run') RETURN count(*) AS n",
        "RETURN CAST(1.5 AS DECIMAL(10, 2)) AS d, list_transform([1, 2], x -> x * 2) AS l",
        "MATCH (a:Operator) WHERE EXISTS { MATCH (a)-[:IN_MODULE]->(m) } RETURN count(*) AS n",
        "UNWIND [3, 1] AS x RETURN x ORDER BY x UNION ALL RETURN 5 AS x",
        "RETURN 5! AS f, 2 * 3 AS m, 1 <> 2 AS ne",
    ],
)
def test_read_only_queries_still_run(query: str, place) -> None:
    assert guard.find_write_clause(query) is None
    res = subprocess.run(
        [sys.executable, "-m", "magneton", "query", "--db", str(place["db"]), query, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)


def test_every_engine_function_is_classified() -> None:
    """The allow-list follows the engine: each function `show_functions()` lists is
    allowed or refused by name, never by default."""
    db = engine.Database(":memory:")
    conn = engine.Connection(db)
    try:
        rows = conn.execute("CALL show_functions() RETURN name, type").get_all()
    finally:
        conn.close()
        db.close()
    kinds = {"SCALAR FUNCTION", "AGGREGATE FUNCTION", "REWRITE FUNCTION"}
    functions = {n.lower() for n, t in rows if t in kinds and n.replace("_", "").isalnum()}
    tables = {n.lower() for n, t in rows if "TABLE FUNCTION" in t}
    assert functions - guard.FUNCTIONS - guard.REFUSED_FUNCTIONS == set()
    assert tables - guard.PROCEDURES - guard.REFUSED_PROCEDURES == set()
    assert not guard.PROCEDURES & guard.REFUSED_PROCEDURES
