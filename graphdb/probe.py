"""The damage probe's child process: `python -m magneton.graphdb.probe FILE` reads every
row of every table of a DB file, per run where rows belong to one, then loads and checks
every complete run (graphdb/integrity.py starts it and reads its lines).

It is a module of its own, apart from integrity.py, because it opens the DB
(graphdb/db.py), and db.py calls integrity.py's checksums: kept in integrity.py, the two
modules would import each other. A crash of the engine here costs this process, not
the command that asked.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from magneton.model import MagnetonError

from . import schema as S
from .db import ProfileDB, open_db, reading_old_schema
from .integrity import PROBE_ENV


def _probe(file: Path) -> dict[str, str]:
    """Read every row of every table, per run where rows belong to one, then load and
    check every complete run. Prints each step before it starts, so the parent can say
    where a crash happened. Returns the damaged runs and why."""
    damaged: dict[str, str] = {}
    unexplained: list[str] = []  # tables that failed a full scan
    # a DB of a convertible older schema is probed too: `magneton migrate` reads it next,
    # and every other command's own open refuses it with the command that converts it
    with reading_old_schema(), open_db(file, read_only=True) as db:
        present = db._table_names()
        specs = [t for t in S.all_tables() if t.name in present]
        for spec in specs:
            error = _scan(db, spec, "")
            if error and not _per_run(spec):  # rows of no run: nothing else to blame
                raise MagnetonError(_unreadable(file, spec.name, error))
            if error:
                unexplained.append(f"{spec.name} ({error})")
        for row in db.list_runs():
            print(f"reading run '{row.name}'", flush=True)
            for spec in specs:
                error = _scan(db, spec, row.name) if _per_run(spec) else ""
                if error:
                    damaged[row.name] = f"table {spec.name} is unreadable ({error})"
                    break
            if row.status == "ok" and row.name not in damaged:
                try:
                    db.load_profile(row.name)
                except MagnetonError as e:
                    damaged[row.name] = str(e)
    if unexplained and not damaged:
        raise MagnetonError(_unreadable(file, unexplained[0], ""))
    return damaged


def _per_run(spec) -> bool:
    if isinstance(spec, S.NodeTable):
        return spec.per_run
    return S.table(spec.src).per_run


def _scan(db: ProfileDB, spec, run: str) -> str:
    """Read all rows of `spec` (of `run` when given); the error's first line, or ''."""
    if not run:
        print(f"reading table {spec.name}", flush=True)
    where = " WHERE x.run = $run" if run else ""
    if isinstance(spec, S.NodeTable):
        cypher = f"MATCH (x:{spec.name}){where} RETURN x.*"
    else:
        cypher = f"MATCH (x:{spec.src})-[r:{spec.name}]->(){where} RETURN r.*"
    try:
        db.query(cypher, {"run": run} if run else {})
    except (RuntimeError, MemoryError, ValueError) as e:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return ""


def _unreadable(file: Path, table: str, error: str) -> str:
    return (
        f"the Magneton DB {file} is damaged: table {table} is unreadable"
        + (f" ({error})" if error else "")
        + "; restore it from a copy, or record into a new --db"
    )


def main(argv: list[str]) -> int:
    if not os.environ.get(PROBE_ENV):  # never a probe inside a probe
        print(f"run with {PROBE_ENV}=1 (opens a DB without probing it)", file=sys.stderr)
        return 2
    try:
        found = _probe(Path(argv[0]))
    except MagnetonError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        return 3
    print("result " + json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
