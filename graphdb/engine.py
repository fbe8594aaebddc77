"""The graph engine: LadybugDB, the maintained continuation of Kùzu. The one import site.

Every other module reaches the engine through these names, so a change of engine (or of
its version) is one file. Why LadybugDB (PyPI `ladybug`) and not Kùzu 0.11.3, the last,
archived Kùzu release this project used first: on real-size runs (a BERT encoder of
~2,900 operators, a Llama `generate()` of ~840) Kùzu 0.11.3 corrupted its heap inside
the kernel-path query and the process died with a segfault or `munmap_chunk()` where
nothing can catch it; the same queries complete on LadybugDB (benchmarks/scale.py), whose
`Database`/`Connection`/`QueryResult` API and Cypher dialect are Kùzu's.

Its files are not Kùzu 0.11 files (a Kùzu 0.11 file is refused as "not a valid Lbug
database file"), so a Magneton DB now lives in `profile.lbug` and an old
`profile.kuzu` is recognised by name and header (`is_kuzu_file`) and converted by
`magneton migrate` (graphdb/migrate.py). The `kuzu` package cannot be imported in the
same process as `ladybug` (both register the same native types; the second import
fails and the interpreter later segfaults), so nothing here imports it: the migration
reads an old file in a child process.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from typing import Any

# the file name Magneton used on Kùzu 0.11.3 (same schema, another storage format)
KUZU_FILENAME = "profile.kuzu"

if os.environ.get("MAGNETON_READ_KUZU") == "1":
    # only in the child process of `magneton migrate` (graphdb/migrate.py), which reads
    # an old DB with this same graphdb code; never together with ladybug in one process
    NAME, DIST, DB_FILENAME = "Kùzu", "kuzu", KUZU_FILENAME
else:
    NAME, DIST, DB_FILENAME = "LadybugDB", "ladybug", "profile.lbug"
_impl: Any = importlib.import_module(DIST)

Database = _impl.Database
Connection = _impl.Connection
QueryResult = _impl.QueryResult


@functools.cache
def version() -> str:
    """The engine's version, from the installed distribution's metadata (asking the
    binding starts its native side). Only error messages need it, and importlib.metadata
    costs 25-45 ms of import, so it is read on the first call, not at import."""
    from importlib import metadata

    return metadata.version(DIST)


# engine errors: the binding raises RuntimeError for everything (parse, binder, runtime, IO)
EngineError = RuntimeError
# Kùzu 0.11 files begin with this magic, then a storage version byte (39 for 0.11.x)
_KUZU_MAGIC = b"KUZU"


# The files the engine keeps beside a DB file FILE, as FILE + suffix: its WAL, and a
# checkpoint's shadow pages, frozen WAL and locks (graphdb/recovery.py reads a cut one)
SIDE_SUFFIXES = (
    ".wal",
    ".shadow",
    ".wal.checkpoint",
    ".checkpoint.intent.lock",
    ".checkpoint.apply.lock",
)


# the engine's page cache; 0 = its default (most of the RAM). graphdb/contained.py caps it
# for user-written queries, so a runaway query fails in the engine, not in the machine
BUFFER_POOL_B = 0


def open_database(file: Path, read_only: bool, drop_torn_tail: bool = False) -> Any:
    """Open (or create) the engine file `file` (an engine.Database).

    compression=False: Kùzu 0.11.3's float compression zeroed some DOUBLE[] list
    elements written by a later COPY into a non-empty table (tensor stats came back 0.0).
    LadybugDB inherits that storage code; tests/test_graphdb.py round-trips every stored
    double exactly, and uncompressed pages cost nothing a run notices.

    `drop_torn_tail`: replay the WAL up to a record that fails its checksum and drop the
    rest (the torn tail a kill -9 mid-write leaves), instead of refusing to open; only
    graphdb/recovery.py asks for it, after keeping a copy of the WAL.
    """
    sizes: dict[str, Any] = {"buffer_pool_size": BUFFER_POOL_B, **_address_space_fit()}
    if drop_torn_tail:
        sizes["throw_on_wal_replay_failure"] = False
    return Database(str(file), read_only=read_only, compression=False, **sizes)


def _address_space_fit() -> dict[str, int]:
    """Sizes that fit an address-space limit (`ulimit -v`): the engine maps its whole
    maximum DB size (8 TB by default) up front, so under any finite limit the default
    open fails ("Mmap ... failed") on a healthy DB. A quarter of the limit, rounded
    down to a power of two, leaves the rest to Python, torch and the result."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return {}
    size = 1 << max(27, (soft // 4).bit_length() - 1)
    return {"max_db_size": size, "buffer_pool_size": BUFFER_POOL_B or size // 2}


def is_kuzu_file(file: Path) -> bool:
    """Whether `file` is a Kùzu (0.11) database file: by its header, not its name."""
    try:
        with open(file, "rb") as f:
            return f.read(len(_KUZU_MAGIC)) == _KUZU_MAGIC
    except OSError:
        return False


def old_file(path: str | Path) -> Path | None:
    """The Kùzu-era DB file of a `--db` argument, when there is one to convert."""
    p = Path(path)
    candidate = p if p.is_file() else p / KUZU_FILENAME
    if candidate.is_file() and is_kuzu_file(candidate):
        return candidate
    return None


def refuse_old_engine(path: str | Path) -> None:
    """Raise the one-line conversion hint when `path` holds only a Kùzu-era DB (the
    migration's own reader, bound to Kùzu, reads it instead)."""
    from magneton.model import MagnetonError

    old = None if DB_FILENAME == KUZU_FILENAME else old_file(path)
    if old is not None:
        raise MagnetonError(
            f"{old} was written by an earlier Magneton on Kùzu 0.11, which this version "
            f"({NAME} {version()}) cannot read; convert it once with "
            f'`magneton migrate --db {old.parent}` (pip install "magneton[kuzu]" first)'
        )
