"""magneton.graphdb: the store of runs (LadybugDB, Kùzu's line), and its one door.

The model it stores lives in `magneton.model`. The front ends (the CLI, `render/`, the
TUI) use the store only through the names here (tests/test_layering.py holds them to
it); each is imported when first used, so importing this package costs neither the
engine nor pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from magneton.model import MagnetonError, Profile

if TYPE_CHECKING:
    from .contained import DEFAULT_ROW_LIMIT, QueryStream, stream_query
    from .db import (
        ProfileDB,
        QueryResult,
        RunRow,
        db_file,
        find_write_clause,
        ghost_message,
        open_db,
        open_db_prefer_write,
    )
    from .files import write_confined
    from .limits import Limits, limited
    from .matches import load_diff
    from .migrate import migrate as migrate_db
    from .schema import SCHEMA_VERSION

__all__ = [
    "DEFAULT_ROW_LIMIT",
    "Limits",
    "SCHEMA_VERSION",
    "MagnetonError",
    "Profile",
    "ProfileDB",
    "QueryResult",
    "QueryStream",
    "RunRow",
    "db_file",
    "find_write_clause",
    "ghost_message",
    "import_limits",
    "limited",
    "load_diff",
    "load_profile",
    "migrate_db",
    "open_db",
    "open_db_prefer_write",
    "stream_query",
    "write_confined",
]

_LAZY = {
    **dict.fromkeys(
        (
            "ProfileDB",
            "QueryResult",
            "RunRow",
            "db_file",
            "find_write_clause",
            "ghost_message",
            "open_db",
            "open_db_prefer_write",
        ),
        ".db",
    ),
    **dict.fromkeys(("DEFAULT_ROW_LIMIT", "QueryStream", "stream_query"), ".contained"),
    "load_diff": ".matches",
    **dict.fromkeys(("Limits", "limited"), ".limits"),
    "write_confined": ".files",
    "migrate_db": ".migrate",
    "SCHEMA_VERSION": ".schema",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # a name that is also a module here would be shadowed by the module once imported
    # (`from magneton.graphdb import migrate` gives the module), hence `migrate_db`
    attr = "migrate" if name == "migrate_db" else name
    return getattr(importlib.import_module(module, __name__), attr)


def import_limits(memory_mb: float | None = None, time_s: float | None = None) -> Limits:
    """The memory and time limits of an import (graphdb/limits.py): the flags' values,
    else MAGNETON_IMPORT_MEMORY_MB / MAGNETON_IMPORT_TIME_LIMIT_S, else the defaults."""
    from .limits import resolve

    return resolve("import", memory_mb, time_s)


def load_profile(db_dir: str, run: str) -> Profile:
    """Open the DB in `db_dir` read-only and load one run (convenience for scripts)."""
    from .db import open_db

    with open_db(db_dir, read_only=True) as pdb:
        return pdb.load_profile(run)
