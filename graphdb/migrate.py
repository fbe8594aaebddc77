"""Convert a Magneton DB of the Kùzu era (`DIR/profile.kuzu`) to the current engine, or a
`DIR/profile.lbug` of an older schema to the current schema.

    magneton migrate --db DIR          (a Kùzu-era DB needs: pip install "magneton[kuzu]")

Magneton first stored runs in Kùzu 0.11.3, whose files the current engine (LadybugDB,
graphdb/engine.py) cannot open. Schema v3 stored a tensor's summaries as DOUBLE[]
columns, v4 as BLOBs; v3 and v4 an operator's call stack as a rel per frame, v5 as one
rel to a shared `CallStack` (graphdb/schema.py says why); `graphdb.db.CONVERTIBLE_VERSIONS`
are the versions converted, and the version check names this command for them. An
older `profile.lbug` is converted in the same way (read, written anew, checked) and
kept beside the new one as `profile.lbug.vN`. Choices and the failures they prevent:

- Every table is copied row for row (read as Arrow, written with one bulk write per
  table into a fresh file), not run by run through the data model: stored diff results,
  failed runs, rule rows and tables this version added as extensions come along without a
  line of code per table, and each run's stored checksum (graphdb/integrity.py) travels
  with its rows, so `load_profile` on the new file proves the rows are what was recorded.
  The one table rebuilt rather than copied is a rel per frame of a DB before v5, which
  becomes the shared call stacks a save of the same run writes (`_with_call_stacks`).
- The old file is read in a child process (`python -m magneton.graphdb.migrate --dump`)
  with `MAGNETON_READ_KUZU=1`, which makes graphdb/engine.py bind `kuzu`: the two engines'
  Python packages cannot be loaded in one process (the second import fails and the
  interpreter later segfaults), and an old, damaged file may crash Kùzu natively —
  in the child, where the parent reports it instead of dying.
- Nothing is lost: the new file is written beside the old one as `profile.lbug.migrating`,
  checked (every run loads and verifies its checksum; every table has as many rows as
  were read), and only then renamed to `profile.lbug`. `profile.kuzu` is never modified;
  the user deletes it when satisfied.
- A migration killed at any point (kill -9 in the engine's checkpoint of the staging
  file, between the old file's `.vN` link and the rename) is simply run again: the
  staging file goes with the engine's files beside it (the engine refused to create a
  new file beside another's WAL, and the next `migrate` printed a traceback), a `.vN`
  that is the very same file as `profile.lbug` is the killed run's link, and the
  Kùzu-era dump lives in one fixed folder, emptied first. An engine error is one line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magneton.model import MagnetonError

from . import engine

_DUMP_SUFFIX = ".arrow"
# where the Kùzu-era tables are dumped, beside the old file
_SCRATCH = ".magneton-migrate"


@dataclass
class MigrationResult:
    old_file: Path
    new_file: Path
    runs: list[str]
    rows: dict[str, int] = field(default_factory=dict)  # table → rows copied
    time_s: float = 0.0


def migrate(path: str | Path, say: Callable[[str], None] = print) -> MigrationResult:
    """Convert the Kùzu-era DB in `path` into `path`/profile.lbug, or a `profile.lbug` of
    an older schema into the current one (see the module doc)."""
    try:
        old = engine.old_file(path)
        return _upgrade(Path(path), say) if old is None else _from_kuzu(old, say)
    except engine.EngineError as e:  # the old file as it was; one line, not a traceback
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise MagnetonError(
            f"converting the DB in {path} failed ({first}); the old file is unchanged",
            exit_code=1,
        ) from None


def _from_kuzu(old: Path, say: Callable[[str], None]) -> MigrationResult:
    new = old.with_name(engine.DB_FILENAME)
    if new.exists():
        raise MagnetonError(
            f"{new} exists already (converted before?); move it away to convert {old} again"
        )
    t0 = time.perf_counter()
    # a fixed name, emptied first: a migration killed before left its dump there
    scratch = old.with_name(_SCRATCH)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        say(f"reading {old} with Kùzu (a child process) ...")
        runs = _dump_in_child(old, scratch)
        tables = _read_dump(scratch)
        staging = new.with_name(new.name + ".migrating")
        say(f"writing {len(runs)} run(s) into {new} ...")
        _write_and_check(staging, _current_meta(tables), runs)
        os.replace(staging, new)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = {spec.name: t.num_rows for spec, t in tables}
    return MigrationResult(old, new, runs, rows, time.perf_counter() - t0)


def _dump_in_child(old: Path, out: Path) -> list[str]:
    env = {**os.environ, "MAGNETON_READ_KUZU": "1"}
    argv = [sys.executable, "-m", "magneton.graphdb.migrate", "--dump", str(old), str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        if "No module named 'kuzu'" in proc.stderr:
            raise MagnetonError(
                'reading the old DB needs the Kùzu package: pip install "magneton[kuzu]"'
            )
        if proc.returncode < 0:
            err = f"Kùzu crashed reading it (signal {-proc.returncode}); the file is damaged"
        raise MagnetonError(f"cannot read {old}: {err}; nothing was written")
    return json.loads((out / "runs.json").read_text())


def _read_dump(out: Path) -> list:
    import pyarrow as pa

    from . import schema as S

    tables = []
    for spec in sorted(S.all_tables(), key=lambda t: isinstance(t, S.RelTable)):
        f = out / f"{spec.name}{_DUMP_SUFFIX}"
        if f.exists():
            with pa.memory_map(str(f)) as src:
                tables.append((spec, pa.ipc.open_file(src).read_all()))
    return tables


def _write_and_check(staging: Path, tables: list, runs: list[str]) -> None:
    from .db import ProfileDB, write_fresh

    write_fresh(staging, tables)
    pdb = ProfileDB(engine.open_database(staging, read_only=True), staging, read_only=True)
    try:
        for spec, data in tables:
            got = pdb._count(spec, "true", {})
            if got != data.num_rows:
                raise MagnetonError(
                    f"conversion check failed: {spec.name} has {got} rows, {data.num_rows} "
                    "were read; the old DB is untouched"
                )
        stored = [r.name for r in pdb.list_runs()]
        if sorted(stored) != sorted(runs):
            raise MagnetonError("conversion check failed: the runs differ; the old DB is untouched")
        for r in pdb.list_runs():
            if r.status not in ("loading", "failed"):
                pdb.load_profile(r.name)  # verifies the run's stored checksum
    except BaseException:
        pdb.close()
        staging.unlink(missing_ok=True)
        raise
    pdb.close()


def _upgrade(path: Path, say: Callable[[str], None]) -> MigrationResult:
    """A `profile.lbug` of an older schema, rewritten in the current one: the converted
    file is written beside it and checked, the old file stays as `profile.lbug.vN` (a
    hard link, made before the new file takes its name, so no crash loses it)."""
    from .db import db_file, open_db, reading_old_schema
    from .integrity import seal
    from .schema import SCHEMA_VERSION

    file = db_file(path)
    if not file.is_file():
        raise MagnetonError(
            f"no Magneton DB to convert at {path} (neither a Kùzu-era "
            f"{engine.KUZU_FILENAME} nor an older {engine.DB_FILENAME})"
        )
    t0 = time.perf_counter()
    with reading_old_schema(), open_db(path, read_only=True, wait_s=0) as pdb:
        res = pdb._execute("MATCH (m:Meta {key: 'schema_version'}) RETURN m.value").get_all()
        version = res[0][0] if res else "?"
        if version == str(SCHEMA_VERSION):
            raise MagnetonError(f"{file} is already schema v{version}; nothing to convert")
        say(f"reading {file} (schema v{version}) ...")
        tables, runs = _read_tables(pdb)
    kept = file.with_name(f"{file.name}.v{version}")
    if kept.exists() and os.path.samefile(kept, file):
        kept.unlink()  # the link of a migration killed before its rename: made again below
    if kept.exists():
        raise MagnetonError(f"{kept} exists already; move it away to convert {file} again")
    staging = file.with_name(file.name + ".migrating")
    say(f"writing {len(runs)} run(s) as schema v{SCHEMA_VERSION} ...")
    _write_and_check(staging, _current_meta(tables), runs)
    os.link(file, kept)
    os.replace(staging, file)
    seal(file)
    rows = {spec.name: t.num_rows for spec, t in tables}
    return MigrationResult(kept, file, runs, rows, time.perf_counter() - t0)


def _read_tables(pdb) -> tuple[list, list[str]]:
    """Every table of an open DB as COPY-ready Arrow of the current schema (nodes first),
    and its run names."""
    from . import schema as S

    present = pdb._table_names()
    specs = sorted(S.all_tables(), key=lambda t: isinstance(t, S.RelTable))
    tables = [(spec, pdb._kept_rows(spec, {}, {}, {})) for spec in specs if spec.name in present]
    if S.LEGACY_CALLED_FROM.name in present and S.CALL_STACK.name not in present:
        tables = _with_call_stacks(pdb, tables)
    return tables, [r.name for r in pdb.list_runs()]


def _with_call_stacks(pdb, tables: list) -> list:
    """`tables` of a DB before schema v5 with the call stacks that its rel per frame
    (`CALLED_FROM`) held, as `CallStack` nodes and `ON_STACK`/`HAS_FRAME` rels."""
    from collections import Counter, defaultdict

    import numpy as np
    import pyarrow as pa

    from . import arrowio
    from . import schema as S
    from .codec import run_stack_tables

    by_name = {spec.name: data for spec, data in tables}
    n_ops = Counter(by_name[S.OPERATOR.name].column("run").to_pylist())
    n_frames = Counter(by_name[S.FRAME.name].column("run").to_pylist())
    rows = pdb._execute(
        "MATCH (o:Operator)-[c:CALLED_FROM]->(f:Frame) RETURN o.run, o.idx, c.depth, f.idx"
    ).get_as_arrow()
    runs = np.asarray(rows.column(0).to_pylist(), dtype=object)
    op, depth, frame = (arrowio.int64s(rows.column(i)) for i in (1, 2, 3))
    parts: dict[S.Table, list[pa.Table]] = defaultdict(list)
    for run, n in n_ops.items():
        at = runs == run
        for spec, data in run_stack_tables(run, n, n_frames[run], op[at], depth[at], frame[at]):
            parts[spec].append(data)
    stacks = [(spec, pa.concat_tables(data)) for spec, data in parts.items()]
    # nodes before the rels that point at them (a stable sort keeps each group's order)
    return sorted(tables + stacks, key=lambda t: isinstance(t[0], S.RelTable))


def _current_meta(tables: list) -> list:
    """The tables with Meta's schema_version set to the version they were converted to."""
    import pyarrow as pa

    from .schema import SCHEMA_VERSION

    out = []
    for spec, data in tables:
        if spec.name == "Meta":
            keys = data.column("key").to_pylist()
            values = [
                str(SCHEMA_VERSION) if k == "schema_version" else v
                for k, v in zip(keys, data.column("value").to_pylist(), strict=True)
            ]
            data = data.set_column(data.schema.get_field_index("value"), "value", pa.array(values))
        out.append((spec, data))
    return out


def _dump(old: Path, out: Path) -> None:
    """Child side: every table of the old DB as an Arrow IPC file, and the run names."""
    import pyarrow as pa

    from .db import open_db, reading_old_schema

    with reading_old_schema(), open_db(old, read_only=True, wait_s=0) as pdb:
        tables, names = _read_tables(pdb)
    for spec, data in tables:
        with pa.OSFile(str(out / f"{spec.name}{_DUMP_SUFFIX}"), "wb") as sink:
            with pa.ipc.new_file(sink, data.schema) as writer:
                writer.write_table(data)
    (out / "runs.json").write_text(json.dumps(names))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="child side of `magneton migrate`")
    ap.add_argument("--dump", nargs=2, metavar=("OLD_FILE", "OUT_DIR"), required=True)
    args = ap.parse_args(argv)
    try:
        _dump(Path(args.dump[0]), Path(args.dump[1]))
    except MagnetonError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
