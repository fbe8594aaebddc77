"""Store and load recorded runs in the embedded graph DB (`--db DIR` → DIR/profile.lbug).

The engine is LadybugDB, Kùzu's maintained continuation (graphdb/engine.py says why and
is the one import site); a DB of the Kùzu 0.11 era is refused with the command that
converts it (graphdb/migrate.py). `open_db` returns a `ProfileDB`; `save_profile` /
`load_profile` are exact inverses (except `OpRecord.windows_ns`, an in-memory input of
energy attribution that is not stored). Three concerns live beside it: opening the file
safely and naming each failure (graphdb/opening.py), the read-only query guard
(graphdb/guard.py) and the Arrow codec of a run (graphdb/codec.py); this module composes
them with the lock (graphdb/lock.py) and the damage checks (graphdb/integrity.py).
Choices and the failures they prevent:

- Bulk loads only: every table is written with one `COPY <table> FROM` of an Arrow
  table typed by `schema.arrow_schema` (measured on Kùzu: an `UNWIND ... MATCH ...
  CREATE` of 10k rels took 89 s, the COPY of the same rows 0.4 s), handed over as a
  Parquet file in a private temporary directory: an Arrow `$rows` parameter made the
  engine's binding import pandas, 0.32-0.44 s of every save (graphdb/arrowio.py). Reads
  use `get_as_arrow()`. Every table of a run is built, and every index checked, before
  the first write, so a malformed profile fails without touching the DB.
- The Run node is written first with status "loading" and flipped to its real status
  last, so a crash mid-load is visible in `magneton runs` instead of looking complete;
  on an exception the partial run is removed. A plain save is not one transaction: the
  status marks it, and the next writable open removes a "loading" run (`remove_ghosts`).
- Deletes and replaces are in place and in ONE transaction (`delete_where`): the old
  rows go and the new ones come in, or nothing changes. Kùzu 0.11.3 lost rels of other
  runs on every in-place delete and rolled back rel COPYs wrongly, so these used to
  rewrite the whole DB; graphdb/engine_checks.py replays those defects and the tests
  fail if the engine ever brings them back. Databases are opened with compression=False
  (Kùzu's float compression zeroed DOUBLE[] elements; engine.open_database).
- Opening checks the `Meta` table: a DB of another schema version, a graph DB that
  Magneton did not write, a corrupt file and a DB in use by another process each give
  one `MagnetonError` line instead of an engine traceback or a misread graph.
- Who may open at once is Magneton's own lock (graphdb/lock.py: one writer or many
  readers across processes; a busy DB is waited for, as SQLite's busy timeout does):
  the engine itself lets a reader in while another process writes. Within a process a
  registry of open paths refuses a second writer, which no file lock can see.
- `user_query` runs only what graphdb/guard.py's allow-list of read-only clauses,
  catalog procedures and functions admits, checked on the tokens before anything runs
  (files, extensions, other databases and settings stay out; the read-only database
  also refuses writes). The CLI and the TUI run user queries in a child process under a
  memory and a time limit (graphdb/contained.py).
- Every engine `QueryResult` is closed before its DB (`_execute` keeps them): one left
  open at close segfaulted in `QueryResult.__del__` (Kùzu). `user_query` refuses
  several statements in one text.
- Failure modes are named, never lumped as "corrupt": a DB in use (`DBLocked`), not
  writable (`DBNotWritable`), out of disk (checked before writing, `check_space`), out
  of memory or address space (`ulimit -v`), a commit cut in its checkpoint (`.shadow`,
  `.wal.checkpoint`: finished by graphdb/recovery.py before anything reads the DB,
  whichever command opens it, or set aside beside the DB when a full disk cut the
  shadow pages short or a kill tore the WAL), and a run whose numbers or references are
  implausible on load
  (`_check_plausible`: damaged pages); graphdb/opening.py words each.
- Damage (graphdb/integrity.py): each Run stores a checksum of its rows, verified by
  every `load_profile`; a file that is not byte for byte what a writer's clean close left
  (`profile.lbug.sha256`) is read completely in a child process before the engine opens
  it here, since a damaged page can crash the engine where nothing can catch it.
"""

from __future__ import annotations

import contextlib
import json
import re
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magneton.model import (
    EnergySpread,
    FrameRecord,
    KernelRecord,
    MagnetonError,
    ModuleRecord,
    OpRecord,
    PowerSeries,
    Profile,
    RunEnergy,
    RunInfo,
    TensorRecord,
    gc_paused,
    split_stored_config,
)

from . import engine, files, integrity, lock, recovery
from . import schema as S
from .guard import (
    _query_error,
    _refused,
    check_size,
    find_write_clause,
    query_params,
    statement_count,
)
from .opening import (
    DBNotWritable,
    Reserve,
    _first_line,
    _not_writable,
    _open_kuzu,
    _register_open,
    _release,
    _unregister_open,
    check_folder_writable,
    check_space,
    disk_full,
    ghost_message,
    memory_message,
    out_of_memory,
    out_of_space_message,
)
from .schema import SCHEMA_VERSION

if TYPE_CHECKING:
    import pyarrow as pa

# numpy, pyarrow and the Arrow codec (graphdb/codec.py, graphdb/arrowio.py) are imported
# by the methods that write or load a run's rows, not here: about 0.15 s of CPU a process
# that `magneton runs`, `rm`, a query's child or a lock-waiting reader would pay for
# nothing, some 250 times in a run of the test suite.

DB_FILENAME = engine.DB_FILENAME
APP = "magneton"


def db_file(path: str | Path) -> Path:
    """The DB file of a `--db` argument: DIR/profile.lbug (an existing file is used as is)."""
    p = Path(path)
    return p if p.is_file() else p / DB_FILENAME


@dataclass
class RunRow:
    name: str
    script: str
    started_at: str
    op_count: int
    status: str
    energy_j: float
    time_s: float
    power_source: str
    energy_method: str
    error: str = ""


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[list]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


# --------------------------------------------------------------------------------------
# Opening
# --------------------------------------------------------------------------------------

# Schema versions `magneton migrate` converts (graphdb/migrate.py): v3 stored a tensor's
# summaries as DOUBLE[] (v4: BLOBs), v3 and v4 an operator's call stack as a rel per
# frame (v5: a shared `CallStack`). Only the migration reads them (`reading_old_schema`).
CONVERTIBLE_VERSIONS = frozenset({"3", "4"})
_readable_versions = frozenset({str(SCHEMA_VERSION)})


@contextlib.contextmanager
def reading_old_schema() -> Iterator[None]:
    """Let `open_db` open a DB of a convertible older schema, for the migration to read."""
    global _readable_versions
    saved = _readable_versions
    _readable_versions = saved | CONVERTIBLE_VERSIONS
    try:
        yield
    finally:
        _readable_versions = saved


def open_db(
    path: str | Path, read_only: bool = False, create: bool = True, wait_s: float | None = None
) -> ProfileDB:
    """Open the Magneton DB in directory `path` (file `path`/profile.lbug).

    Writable opens create the directory and the schema when missing (unless
    `create=False`). A DB another process is writing (or reading, for a writable open)
    is waited for, up to `wait_s` seconds (graphdb/lock.py). Raises MagnetonError for a
    missing, foreign, corrupt, busy, Kùzu-0.11 or wrong-version DB.
    """
    path = Path(path)
    file = db_file(path)
    if not file.exists():
        engine.refuse_old_engine(path)  # a DB of the Kùzu era: say how to convert it
    if not file.exists() and (read_only or not create):
        raise MagnetonError(f"no Magneton DB at {path} (record a run first: magneton record ...)")
    if file.exists() and file.is_dir():
        raise MagnetonError(f"{file} is a directory, not a Magneton DB file; use another --db")
    if not read_only:
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _not_writable(file, e) from None
        # the engine, the lock and the seal must not write through a link out of --db
        files.check_db_files(file, (*engine.SIDE_SUFFIXES, ".lock", ".sha256", ".reserve"))
        if not integrity.in_probe():  # the engine's WAL, made at the first write
            check_folder_writable(file)
    key = file.resolve()
    mode = "ro" if read_only else "rw"
    _register_open(key, mode)
    held: lock.DBFileLock | None = None
    try:
        # the damage probe's child (integrity.py) reads under its parent's lock
        probe = integrity.in_probe()
        held = lock.DBFileLock(None) if probe else lock.acquire(file, not read_only, wait_s)
        if not read_only and not file.exists():
            check_space(file)  # a new DB's pages, before the engine writes (and dies on) any
        if not probe:  # a checkpoint a killed writer left pending, before anything reads
            held = recovery.recover_if_pending(file, read_only, held, wait_s)
            Reserve(file).release_stale()  # a killed writer's; no writer holds the lock
        try:
            damaged, db = _probe_and_open(file, read_only)
        except recovery.RecoveryPending:  # by a file this code does not know: same cure
            if probe:
                raise
            held = recovery.recover_if_pending(file, read_only, held, wait_s, force=True)
            damaged, db = _probe_and_open(file, read_only)
    except BaseException:
        if held is not None:
            held.release()
        _unregister_open(key, mode)
        raise
    if not read_only:
        integrity.unseal(file)  # resealed by a clean close
    try:
        pdb = ProfileDB(db, file, read_only, damaged)
    except BaseException:
        db.close()
        held.release()
        _unregister_open(key, mode)
        raise
    pdb._finalizer = weakref.finalize(pdb, _release, key, mode, held)
    return pdb


def _probe_and_open(file: Path, read_only: bool) -> tuple[dict, engine.Database]:
    damaged = integrity.check_before_open(file)  # a damaged file can crash the engine
    return damaged, _open_kuzu(file, read_only)


def open_db_prefer_write(path: str | Path) -> ProfileDB:
    """Open an existing DB for writing, or read-only when it cannot be written: for
    commands whose write is a cache (`diff` stores its result), which can still compute
    on a read-only DB. The caller checks `.read_only` before storing."""
    try:
        return open_db(path, create=False)
    except DBNotWritable:
        return open_db(path, read_only=True)


# --------------------------------------------------------------------------------------
# The DB
# --------------------------------------------------------------------------------------


def _used(cypher: str, params: dict) -> dict:
    """The parameters `cypher` refers to (Kùzu rejects unused ones)."""
    return {k: v for k, v in params.items() if re.search(rf"\${re.escape(k)}\b", cypher)}


def write_fresh(file: Path, tables: Iterable[tuple[S.Table, pa.Table]]) -> None:
    """Write a new DB file `file` holding the schema and `tables` (nodes before the rels
    that point at them), one bulk write per table; on any failure the partial file is
    removed. `magneton migrate` writes the converted DB with it.

    A writer of `file` killed before (a migration killed in its checkpoint) left the
    engine's files beside it; they are removed with it, since the engine refuses to open
    a new file beside another file's WAL or shadow pages."""
    from .codec import _SMALL_ROWS, _copy_statement, _create_statement

    _remove_with_side_files(file)
    new_db = engine.open_database(file, read_only=False)
    try:
        conn = engine.Connection(new_db)
        conn.execute("BEGIN TRANSACTION")
        for stmt in S.ddl():
            conn.execute(stmt)
        conn.execute("COMMIT")
        for spec, data in tables:
            if not data.num_rows:
                continue
            if isinstance(spec, S.NodeTable) and data.num_rows <= _SMALL_ROWS:
                conn.execute(*_create_statement(spec, data))
                continue
            with _copy_statement(spec.name, data) as copy:
                conn.execute(*copy)
        conn.close()
    except BaseException:
        new_db.close()
        _remove_with_side_files(file)
        raise
    new_db.close()


def _remove_with_side_files(file: Path) -> None:
    for suffix in ("", *engine.SIDE_SUFFIXES):
        file.with_name(file.name + suffix).unlink(missing_ok=True)


class ProfileDB:
    """One open Magneton DB. Use as a context manager or call `close()`."""

    def __init__(
        self, db: engine.Database, file: Path, read_only: bool, damaged: dict | None = None
    ):
        self._db = db
        self.file = file
        self.read_only = read_only
        # runs whose rows failed their checksum when the file was probed (integrity.py)
        self.damaged: dict[str, str] = damaged or {}
        self._finalizer: weakref.finalize | None = None
        # every kuzu.QueryResult handed out, closed before the DB (see `_execute`)
        self._results: weakref.WeakSet = weakref.WeakSet()
        self.removed_ghosts: list[str] = []  # "loading" runs of a dead writer, removed
        # disk kept back for the engine's close after a disk filled mid-write (opening.py)
        self._reserve = Reserve(file)
        if not read_only:
            self._reserve.claim()
        try:
            self._conn = engine.Connection(db)
            self._check_or_create_schema()
        except MagnetonError:
            self._reserve.release()
            raise
        except Exception as e:
            self._reserve.release()
            if out_of_memory(e):  # not "corrupt": a healthy DB under `ulimit -v`
                raise MagnetonError(memory_message(f"to read the Magneton DB {file}", e)) from None
            raise MagnetonError(
                f"cannot read the Magneton DB {file} (corrupt?): {_first_line(e)}"
            ) from None

    # ---- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        if self._db is None:
            return
        # a writer seals what it leaves, unless damaged runs it did not remove remain
        reseal = not self.read_only
        if reseal and self.damaged:
            reseal = False
            with contextlib.suppress(Exception):
                reseal = not any(self.has_run(r) for r in self.damaged)
        self._close_results()
        self._conn.close()
        self._reserve.release()  # room for the engine's final WAL flush and checkpoint
        self._db.close()
        self._db = None
        if reseal and not recovery.pending(self.file):  # a cut checkpoint is no clean close
            integrity.seal(self.file)
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> ProfileDB:
        return self

    def _execute(self, cypher: str, params: dict | None = None) -> Any:
        """`Connection.execute`, remembering each QueryResult so `close` can close it
        first. A result still alive when its DB is closed (an exception traceback holding
        it, a multi-statement query's unread results) segfaulted later in
        `QueryResult.__del__` (seen at exit after Ctrl-C and for `RETURN 1; RETURN 2`)."""
        try:
            res = self._conn.execute(cypher, params or {})
        except RuntimeError as e:
            if not self.read_only and disk_full(self.file, e):
                self._reserve.release()  # room for the rollback, the cleanup and the close
            raise
        for r in res if isinstance(res, list) else [res]:
            self._results.add(r)
        return res

    def _close_results(self) -> None:
        for r in list(self._results):
            with contextlib.suppress(Exception):
                r.close()
        self._results = weakref.WeakSet()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- schema ----------------------------------------------------------------------

    def _table_names(self) -> set[str]:
        res = self._execute("CALL show_tables() RETURN name")
        return {r[0] for r in res.get_all()}

    def _check_or_create_schema(self) -> None:
        tables = self._table_names()
        if not tables:
            if self.read_only:
                raise MagnetonError(f"{self.file} is an empty {engine.NAME} DB, not a Magneton DB")
            self._create_schema()
            return
        if "Meta" not in tables:
            raise MagnetonError(
                f"{self.file} is a {engine.NAME} DB but not a Magneton DB (no Meta table); "
                "use another --db"
            )
        meta = dict(self._execute("MATCH (m:Meta) RETURN m.key, m.value").get_all())
        if meta.get("app") != APP:
            raise MagnetonError(
                f"{self.file} is a {engine.NAME} DB but not a Magneton DB (Meta has no app=magneton); "
                "use another --db"
            )
        version = meta.get("schema_version", "?")
        if version in CONVERTIBLE_VERSIONS and version not in _readable_versions:
            raise MagnetonError(
                f"{self.file} holds schema v{version} of an earlier Magneton, this one needs "
                f"v{SCHEMA_VERSION}; convert it once with `magneton migrate --db {self.file.parent}`"
            )
        if version not in _readable_versions:
            raise MagnetonError(
                f"DB schema v{version}, this magneton needs v{SCHEMA_VERSION}; re-record or "
                "use a matching magneton version"
            )
        if not self.read_only:
            missing = [t for t in S.all_tables() if t.name not in tables]
            for t in missing:  # extension tables added since the DB was created
                self._execute(t.ddl())
            # a load cut by kill -9 left its rows counting in cross-run queries, and a
            # replace cut the same way left its unfinished fresh file
            self.removed_ghosts = self.remove_ghosts()

    def _create_schema(self) -> None:
        # one transaction: a commit per DDL statement doubled the cost of a new DB
        self._execute("BEGIN TRANSACTION")
        for stmt in S.ddl():
            self._execute(stmt)
        self._execute(
            "CREATE (:Meta {key: 'app', value: $app}), (:Meta {key: 'schema_version', value: $v})",
            {"app": APP, "v": str(SCHEMA_VERSION)},
        )
        self._execute("COMMIT")

    def _writable(self) -> None:
        if self._db is None:
            raise MagnetonError("the Magneton DB is closed")
        if self.read_only:
            raise MagnetonError(f"the Magneton DB {self.file} is open read-only")

    # ---- generic bulk load -------------------------------------------------------------

    def bulk_insert(self, table: str, rows: list[dict] | pa.Table) -> int:
        """COPY rows into `table` (a name from `schema`); returns the number of rows.

        Node rows are keyed by property name; rel rows also carry "from" and "to" (the
        primary keys of the end nodes). Missing properties are stored as null; columns
        are put in the table's property order and cast to its types.
        """
        from .codec import _rows_table

        self._writable()
        data = _rows_table(S.table(table), rows)
        if data.num_rows:
            self._copy(table, data)
        return data.num_rows

    def _copy(self, table: str, data: pa.Table) -> None:
        from .codec import _copy_statement

        with _copy_statement(table, data) as stmt:  # a Parquet file, removed after
            self._execute(*stmt)

    def _create_rows(self, spec: S.NodeTable, data: pa.Table) -> None:
        from .codec import _create_statement

        self._execute(*_create_statement(spec, data))

    def _load_tables(self, tables: Iterable[tuple[S.Table, pa.Table]]) -> None:
        """Write a run's tables (from `_profile_tables`) into this DB."""
        from .codec import _SMALL_ROWS

        for spec, data in tables:
            if not data.num_rows:
                continue
            if isinstance(spec, S.NodeTable) and data.num_rows <= _SMALL_ROWS:
                self._create_rows(spec, data)
            else:
                self._copy(spec.name, data)

    # ---- runs ------------------------------------------------------------------------

    def has_run(self, name: str) -> bool:
        res = self._execute("MATCH (r:Run {name: $n}) RETURN count(*)", {"n": name})
        return res.get_all()[0][0] > 0

    def list_runs(self) -> list[RunRow]:
        cols = [f.name for f in fields(RunRow)]
        res = self._execute(
            f"MATCH (r:Run) RETURN {', '.join('r.' + c for c in cols)} "
            "ORDER BY r.started_at, r.name"
        )
        rows = [RunRow(*row) for row in res.get_all()]
        for r in rows:  # failed its checksum when the file was probed
            if r.name in self.damaged:
                r.status, r.error = "damaged", self.damaged[r.name]
        return rows

    def run_spreads(self) -> dict[str, EnergySpread]:
        """Each run's energy spread over its timed iterations (runs that recorded one)."""
        res = self._execute("MATCH (c:ConfigEntry {key: 'energy.spread'}) RETURN c.run, c.value")
        out: dict[str, EnergySpread] = {}
        for run, value in res.get_all():
            energy, _ = RunEnergy.from_config({"energy.spread": value})
            out[run] = energy.spread
        return out

    def require_run(self, name: str) -> None:
        if not self.has_run(name):
            names = sorted(r.name for r in self.list_runs())
            raise MagnetonError(
                f"no run '{name}' in DB (runs: {', '.join(names) if names else 'none yet'})"
            )

    def delete_run(self, name: str) -> None:
        """Remove a run with all its nodes and rels (no error when it is absent).

        Rows of extension tables with a `run` column go too; tables keyed otherwise
        (e.g. `Diff` with run_a/run_b) keep theirs, minus rels to the removed nodes.
        """
        self._writable()
        if not self.has_run(name):
            return
        self.delete_runs([name])

    def delete_runs(self, names: list[str]) -> None:
        """Remove several runs in one rewrite (`delete_where`: a crash leaves the DB as
        it was). Unknown names are an error, raised before anything is deleted."""
        self._writable()
        known = {r.name for r in self.list_runs()}
        missing = [n for n in names if n not in known]
        if missing:
            raise MagnetonError(
                f"no run {', '.join(repr(n) for n in missing)} in DB (runs: "
                f"{', '.join(sorted(known)) if known else 'none yet'}); nothing removed"
            )
        if names:
            self.delete_where(*self._run_rows(names))

    @staticmethod
    def _run_rows(names: str | list[str]) -> tuple[dict[str, str], dict[str, str], dict]:
        """`delete_where` predicates selecting every row of the runs `names`."""
        nodes = {
            t.name: "list_contains($runs, {v}.run)"
            for t in S.all_tables()
            if isinstance(t, S.NodeTable) and t.per_run
        }
        nodes["Run"] = "list_contains($runs, {v}.name)"
        return nodes, {}, {"runs": [names] if isinstance(names, str) else list(names)}

    def remove_ghosts(self) -> list[str]:
        """Delete runs left "loading" by a writer that died mid-load (kill -9, power
        loss). Only a writable open calls this, and Kùzu admits one writer, so no live
        load can be mistaken for a ghost. Returns the names removed."""
        res = self._execute("MATCH (r:Run) WHERE r.status = 'loading' RETURN r.name")
        ghosts = [row[0] for row in res.get_all()]
        if ghosts:
            self.delete_where(*self._run_rows(ghosts))
        return ghosts

    def delete_where(
        self,
        nodes: dict[str, str] | None = None,
        rels: dict[str, str] | None = None,
        params: dict | None = None,
        add: list[tuple[str, list[dict] | pa.Table]] | None = None,
    ) -> int:
        """Delete rows matching Cypher predicates, then insert the rows of `add` (table
        name, rows as for `bulk_insert`; nodes before the rels that point at them), all in
        ONE transaction: a crash or an error at any point leaves the DB as it was.

        `nodes` maps a node table to a predicate over `{v}` (e.g.
        `{"Diff": "{v}.run_a = $a AND {v}.run_b = $b"}`); matching nodes go with all
        their rels. `rels` maps a rel table to a predicate over `{v}` (the rel); matching
        rels go. Returns the number of node and rel rows deleted.

        In place, since LadybugDB: Kùzu 0.11.3 lost rels of *other* runs on every form
        of in-place `DELETE` (this method then rewrote the whole DB into a fresh file,
        about one bulk load of everything kept). graphdb/engine_checks.py replays that
        defect's sequences against the engine, and tests/test_graphdb.py fails if it
        returns; a deleted row's rels go with it because every rel table stores both
        directions (graphdb/schema.py).
        """
        self._writable()
        nodes, rels, params = nodes or {}, rels or {}, params or {}
        for t in (*nodes, *rels):
            S.table(t)  # KeyError for a typo, before anything happens
        added = []
        if add:  # rows to write: the codec is needed (a plain delete does without it)
            from .codec import _rows_table

            added = [(S.table(t), _rows_table(S.table(t), rows)) for t, rows in add]
        tables = self._table_names()
        check_space(self.file, sum(t.nbytes for _, t in added))
        deleted = 0
        self._execute("BEGIN TRANSACTION")
        try:
            for spec in S.all_tables():
                pred = (nodes if isinstance(spec, S.NodeTable) else rels).get(spec.name)
                if pred and spec.name in tables:
                    deleted += self._delete(spec, f"coalesce({pred.format(v='x')}, false)", params)
            if added:
                self._load_tables(added)
            self._execute("COMMIT")
        except BaseException as e:
            with contextlib.suppress(Exception):
                self._execute("ROLLBACK")
            if isinstance(e, RuntimeError):
                raise self._write_error(e) from None
            raise
        return deleted

    def _count(self, spec: S.Table, cond: str, params: dict) -> int:
        cypher = f"MATCH {S.pattern(spec)} WHERE {cond} RETURN count(*)"
        res = self._execute(cypher, _used(cypher, params))
        return int(res.get_all()[0][0])

    def _delete(self, spec: S.Table, cond: str, params: dict) -> int:
        """Delete the rows of `spec` matching `cond` (a node's rels go with it)."""
        n = self._count(spec, cond, params)
        if n:
            verb = "DETACH DELETE" if isinstance(spec, S.NodeTable) else "DELETE"
            cypher = f"MATCH {S.pattern(spec)} WHERE {cond} {verb} x"
            self._execute(cypher, _used(cypher, params))
        return n

    def _kept_rows(
        self, spec: S.Table, nodes: dict[str, str], rels: dict[str, str], params: dict
    ) -> pa.Table:
        """The rows of `spec` that survive, as a COPY-ready Arrow table."""
        import pyarrow as pa

        from .codec import conform

        def keep(var: str, pred: str | None) -> str | None:
            # a predicate that is null (e.g. on a null property) deletes nothing
            return f"NOT coalesce({pred.format(v=var)}, false)" if pred else None

        if isinstance(spec, S.NodeTable):
            conds = [keep("n", nodes.get(spec.name))]
            ret = [f"n.{c.name}" for c in spec.columns]
            match = f"MATCH (n:{spec.name})"
        else:
            conds = [
                keep("a", nodes.get(spec.src)),
                keep("b", nodes.get(spec.dst)),
                keep("r", rels.get(spec.name)),
            ]
            src, dst = S.table(spec.src), S.table(spec.dst)
            # a rel table links two node tables (schema.ddl creates them first)
            assert isinstance(src, S.NodeTable) and isinstance(dst, S.NodeTable), spec.name
            ret = [f"a.{src.primary_key}", f"b.{dst.primary_key}"]
            ret += [f"r.{c.name}" for c in spec.columns]
            match = f"MATCH (a:{spec.src})-[r:{spec.name}]->(b:{spec.dst})"
        where = " AND ".join(c for c in conds if c)
        cypher = f"{match} {'WHERE ' + where if where else ''} RETURN {', '.join(ret)}"
        got = self._execute(cypher, _used(cypher, params)).get_as_arrow()
        target = S.arrow_schema(spec)
        return pa.Table.from_arrays(
            [conform(got.column(i), f.type) for i, f in enumerate(target)], schema=target
        )

    def _claim_name(self, name: str, replace: bool) -> None:
        if not name.strip():
            raise MagnetonError("a run needs a non-empty name")
        if self.has_run(name):
            if not replace:
                raise MagnetonError(
                    f"run '{name}' already exists in the DB; choose another name or replace it"
                )
            self.delete_run(name)

    def _insert_run(self, run: RunInfo, status: str, op_count: int, checksum: str = "") -> None:
        from .codec import _run_row

        # one row: a parameterized CREATE costs ~10 ms where a COPY costs ~100 ms
        row = _run_row(run, status, op_count, checksum)
        cols = [c.name for c in S.RUN.columns]
        props = ", ".join(f"{c}: $p_{c}" for c in cols)
        self._execute(f"CREATE (:Run {{{props}}})", {f"p_{c}": row.get(c) for c in cols})

    def save_failed_run(self, run: RunInfo, replace: bool = False) -> None:
        """Store only the Run node, status "failed", for a script that raised or was
        interrupted. Other runs stay untouched."""
        from .codec import _profile_tables

        self._writable()
        checksum = integrity.run_digest(run, list(_profile_tables(Profile(run=run))))
        self._claim_name(run.name, replace)
        self._insert_run(run, "failed", 0, checksum=checksum)

    def save_profile(self, profile: Profile, replace: bool = False) -> None:
        """Bulk-load a recorded run. An existing run of that name is an error unless
        `replace`: then the DB is rewritten without the old run and with the new one
        into a fresh file that is renamed over the old one only once complete, so a
        failure or a crash at any point leaves the old run in place."""
        from .codec import _check_profile, _profile_tables

        self._writable()
        run = profile.run.name
        if not run.strip():
            raise MagnetonError("a run needs a non-empty name")
        # every Arrow table is built (and every index checked) before the first write
        with gc_paused():
            _check_profile(profile)
            tables = _profile_tables(profile)
        status = profile.run.status or "ok"
        rewrite = replace and self.has_run(run)
        check_space(self.file, sum(t.nbytes for _, t in tables), rewrite=rewrite)
        try:
            self._save_tables(profile, tables, status, rewrite, replace)
        except RuntimeError as e:
            raise self._write_error(e) from None

    def _write_error(self, e: RuntimeError) -> Exception:
        """What a failed engine write becomes: the full disk named in one line (the next
        writable open finishes or sets aside what the engine left), else the error."""
        if disk_full(self.file, e):
            return MagnetonError(out_of_space_message(self.file))
        if out_of_memory(e):  # the next writable open finishes or drops the write
            return MagnetonError(
                memory_message(f"to write to the Magneton DB {self.file}", e), exit_code=1
            )
        msg = str(e).lower()
        if "permission denied" in msg or "read-only file system" in msg:
            # the folder or a file of the DB became unwritable after the open's checks
            return _not_writable(self.file, e)
        return e

    def _save_tables(
        self,
        profile: Profile,
        tables: list[tuple[S.Table, pa.Table]],
        status: str,
        rewrite: bool,
        replace: bool,
    ) -> None:
        from .codec import _run_table

        run = profile.run.name
        digest = integrity.run_digest(profile.run, tables)
        if rewrite:  # the old run out and the new one in, in one transaction
            run_row = (S.RUN.name, _run_table(profile.run, status, len(profile.ops), digest))
            self.delete_where(
                *self._run_rows(run), add=[run_row, *((t.name, d) for t, d in tables)]
            )
            return
        self._claim_name(run, replace)
        self._insert_run(profile.run, "loading", len(profile.ops), checksum=digest)
        try:
            self._load_tables(tables)
        except BaseException:
            # never leave half a run behind; the original error is the one to show
            with contextlib.suppress(Exception):
                self.delete_run(run)
            raise
        self._execute("MATCH (r:Run {name: $n}) SET r.status = $s", {"n": run, "s": status})

    # ---- load ------------------------------------------------------------------------

    def _arrow(self, cypher: str, run: str) -> pa.Table:
        return self._execute(cypher, {"run": run}).get_as_arrow()

    def _nodes(self, spec: S.NodeTable, run: str, order: str = "idx") -> dict[str, list]:
        from .codec import blobs_as_lists

        cols = [c.name for c in spec.columns if c.name not in ("uid", "run")]
        tbl = self._arrow(
            f"MATCH (n:{spec.name}) WHERE n.run = $run "
            f"RETURN {', '.join(f'n.{c} AS {c}' for c in cols)} ORDER BY {order}",
            run,
        )
        tbl = blobs_as_lists(tbl)  # a tensor's summaries: float64 BLOBs
        return {c: tbl.column(c).to_pylist() for c in cols}

    def _rel(self, cypher: str, run: str, n: int) -> list[list[int]]:
        """Rel rows (owner idx, position, value idx) grouped per owner."""
        from . import arrowio
        from .codec import _group

        tbl = self._arrow(cypher, run)
        owner, pos, val = (arrowio.int64s(tbl.column(i)) for i in range(3))
        return _group(n, owner, pos, val)

    def load_profile(self, run: str) -> Profile:
        """The profile saved as `run` (OpRecord.windows_ns comes back empty)."""
        from .codec import _check_plausible, _check_profile, _profile_tables

        self.require_run(run)
        status, checksum = self._execute(
            "MATCH (r:Run {name: $n}) RETURN r.status, r.checksum", {"n": run}
        ).get_all()[0]
        if status == "loading":
            raise MagnetonError(ghost_message(run, self.file))
        try:
            with gc_paused():
                profile = self._load_profile(run)
                _check_profile(profile)
                _check_plausible(profile)  # names the wild number, so it goes first
                integrity.verify_run(profile.run, list(_profile_tables(profile)), checksum)
        except (ValueError, RuntimeError, KeyError, IndexError, TypeError) as e:
            # damaged pages read back as wild numbers or broken references: say so
            # instead of diffing garbage (`time_s` 9.5e+62) or crashing downstream
            raise MagnetonError(
                f"run '{run}' in {self.file} is damaged ({_first_line(e)}); re-record it "
                f"(magneton record ... --run {run} --replace) or `magneton rm` it"
            ) from None
        return profile

    def _load_profile(self, run: str) -> Profile:
        res = self._execute("MATCH (r:Run {name: $run}) RETURN r.*", {"run": run})
        row = dict(zip((c[2:] for c in res.get_column_names()), res.get_all()[0], strict=True))
        # tolerate a RunInfo field the schema lacks (tests flag that drift loudly)
        info = RunInfo(**{f.name: row[f.name] for f in fields(RunInfo) if f.name in row})
        ops, tensors = self._load_ops_and_tensors(run)
        fc = self._nodes(S.FRAME, run)
        frames = [
            FrameRecord(*r)
            for r in zip(fc["idx"], fc["file"], fc["line"], fc["function"], strict=True)
        ]
        kc = self._nodes(S.KERNEL, run)
        kernels = [KernelRecord(*r) for r in zip(kc["idx"], kc["name"], kc["device"], strict=True)]
        cc = self._nodes(S.CONFIG_ENTRY, run)
        rows = dict(zip(cc["key"], cc["value"], strict=True))
        config, dist, energy = split_stored_config(rows)
        return Profile(
            run=info,
            ops=ops,
            tensors=tensors,
            modules=self._load_modules(run),
            frames=frames,
            kernels=kernels,
            config=config,
            power=self._load_power(run),
            dist=dist,
            energy=energy,
        )

    def _load_ops_and_tensors(self, run: str) -> tuple[list[OpRecord], list[TensorRecord]]:
        import numpy as np

        from .codec import _JSON_OP_COLUMNS, _group

        oc = self._nodes(S.OPERATOR, run)
        n = len(oc["idx"])
        for c in _JSON_OP_COLUMNS:  # one parse for the whole column, not one per row
            oc[c] = json.loads("[" + ",".join(oc[c]) + "]")
        inputs = self._rel(
            "MATCH (t:Tensor)-[e:INPUT]->(o:Operator) WHERE o.run = $run "
            "RETURN o.idx, e.arg, t.idx",
            run,
            n,
        )
        frames = self._load_stacks(run, n)
        kernels = self._rel(
            "MATCH (o:Operator)-[e:LAUNCHED]->(k:Kernel) WHERE o.run = $run "
            "RETURN o.idx, e.launch_order, k.idx",
            run,
            n,
        )
        module_idx = [-1] * n
        mods = self._arrow(
            "MATCH (o:Operator)-[:IN_MODULE]->(m:Module) WHERE o.run = $run RETURN o.idx, m.idx",
            run,
        )
        for i, m in zip(mods.column(0).to_pylist(), mods.column(1).to_pylist(), strict=True):
            module_idx[i] = m
        tc = self._nodes(S.TENSOR, run)
        # an operator's outputs are the tensors naming it as producer, in out_index
        # order (save_profile checks that this holds, so no OUTPUT rel table is stored)
        producer = np.asarray(tc["producer"], dtype=np.int64)
        made = producer >= 0
        outputs = _group(
            n,
            producer[made],
            np.asarray(tc["out_index"], dtype=np.int64)[made],
            np.asarray(tc["idx"], dtype=np.int64)[made],
        )
        op_cols = list(oc)
        ops = [
            OpRecord(
                **dict(zip(op_cols, vals, strict=True)),
                module_idx=mi,
                inputs=ins,
                outputs=outs,
                frames=frs,
                kernels=ks,
            )
            for vals, mi, ins, outs, frs, ks in zip(
                zip(*oc.values(), strict=True),
                module_idx,
                inputs,
                outputs,
                frames,
                kernels,
                strict=True,
            )
        ]
        t_cols = list(tc)
        tensors = [
            TensorRecord(**dict(zip(t_cols, vals, strict=True)))
            for vals in zip(*tc.values(), strict=True)
        ]
        return ops, tensors

    def _load_stacks(self, run: str, n: int) -> list[list[int]]:
        """Each operator's call stack (frame indices, entry first; [] without one)."""
        from . import arrowio

        on = self._arrow(
            "MATCH (o:Operator)-[:ON_STACK]->(s:CallStack) WHERE o.run = $run RETURN o.idx, s.idx",
            run,
        )
        n_stacks = self._execute(
            "MATCH (s:CallStack) WHERE s.run = $run RETURN count(s)", {"run": run}
        ).get_all()[0][0]
        stacks = self._rel(
            "MATCH (s:CallStack)-[e:HAS_FRAME]->(f:Frame) WHERE s.run = $run "
            "RETURN s.idx, e.depth, f.idx",
            run,
            n_stacks,
        )
        frames: list[list[int]] = [[] for _ in range(n)]
        for op, stack in zip(
            arrowio.int64s(on.column(0)), arrowio.int64s(on.column(1)), strict=True
        ):
            frames[op] = list(stacks[stack])
        return frames

    def _load_modules(self, run: str) -> list[ModuleRecord]:
        mc = self._nodes(S.MODULE, run)
        parent = [-1] * len(mc["idx"])
        kids = self._arrow(
            "MATCH (c:Module)-[:CHILD_OF]->(p:Module) WHERE c.run = $run RETURN c.idx, p.idx",
            run,
        )
        for c, par in zip(kids.column(0).to_pylist(), kids.column(1).to_pylist(), strict=True):
            parent[c] = par
        return [
            ModuleRecord(idx=i, name=nm, type=ty, parent=parent[i])
            for i, nm, ty in zip(mc["idx"], mc["name"], mc["type"], strict=True)
        ]

    def _load_power(self, run: str) -> list[PowerSeries]:
        import numpy as np

        sc = self._nodes(S.POWER_SERIES, run)
        power = [
            PowerSeries(device=d, source=s, gaps=list(zip(gs, ge, strict=True)))
            for d, s, gs, ge in zip(
                sc["device"], sc["source"], sc["gap_start_ns"], sc["gap_end_ns"], strict=True
            )
        ]
        if power:
            pc = self._nodes(S.POWER_SAMPLE, run, order="series, idx")
            series = np.asarray(pc["series"], dtype=np.int64)
            bounds = np.searchsorted(series, np.arange(len(power) + 1))
            for si, s in enumerate(power):
                a, b = int(bounds[si]), int(bounds[si + 1])
                s.t_ns = pc["t_ns"][a:b]
                s.watts = pc["watts"][a:b]
        return power

    # ---- queries ---------------------------------------------------------------------

    def query(self, cypher: str, params: dict | None = None) -> QueryResult:
        """Run Cypher as is (internal use: no write guard, kuzu errors propagate)."""
        res = self._execute(cypher, params or {})
        results = res if isinstance(res, list) else [res]
        try:  # several statements: the last one's result; all are closed here
            last = results[-1]
            return QueryResult(columns=list(last.get_column_names()), rows=last.get_all())
        finally:
            for r in results:
                r.close()

    def user_query(self, cypher: str, params: dict | None = None) -> QueryResult:
        """Run a user's read-only Cypher; refused clauses and engine errors →
        MagnetonError. In-process: the CLI and the TUI go through graphdb/contained.py."""
        columns, rows = self.user_query_rows(cypher, params)
        return QueryResult(columns=columns, rows=list(rows))

    def user_query_rows(
        self, cypher: str, params: dict | None = None
    ) -> tuple[list[str], Iterator[list]]:
        """`user_query` streamed: the columns, and the rows as the engine hands them out."""
        used = self._guard_user_query(cypher, params or {})
        try:
            res = self._execute(cypher, used)
        except RuntimeError as e:
            raise _query_error(e) from None
        return list(res.get_column_names()), self._stream(res)

    def _stream(self, res: Any) -> Iterator[list]:
        try:
            while res.has_next():
                yield res.get_next()
        except RuntimeError as e:
            raise _query_error(e) from None
        finally:
            res.close()

    def _guard_user_query(self, cypher: str, params: dict) -> dict:
        """Refuse what `magneton query` must not run; the parameters the query uses."""
        if not cypher.strip():
            raise MagnetonError("empty query")
        if self.damaged:  # its rows could reach the result unchecked
            names = " ".join(sorted(self.damaged))
            raise MagnetonError(
                f"query refused: {self.file} is damaged (run(s) "
                f"{', '.join(map(repr, sorted(self.damaged)))} hold damaged rows, which a "
                f"query could return); `magneton rm --db {self.file.parent} {names}` "
                "removes them"
            )
        check_size(cypher)  # before the engine's parser spends gigabytes on it
        clause = find_write_clause(cypher)
        if clause:
            raise _refused(clause)
        n_statements = statement_count(cypher)
        if n_statements > 1:  # whose result would be shown is a guess; refuse instead
            raise MagnetonError(
                f"one statement per query, got {n_statements} separated by ';' "
                "(run them one at a time)"
            )
        wanted = query_params(cypher)
        missing = sorted(wanted - set(params))
        if missing:  # the engine would run it with the parameter silently unset
            raise MagnetonError(
                f"the query uses {', '.join('$' + m for m in missing)}; pass "
                + " ".join(f"-p {m}=VALUE" for m in missing)
            )
        # unused parameters are dropped (the engine rejects them) so one set of `-p`
        # values serves a whole file of queries
        return {k: v for k, v in params.items() if k in wanted}
