"""magneton.graphdb: the store of runs (LadybugDB, Kùzu's line).

The model it stores lives in `magneton.model`; the DB names below are imported lazily, so
importing this package costs neither the engine nor pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magneton.model import MagnetonError, Profile

if TYPE_CHECKING:
    from .db import ProfileDB, QueryResult, RunRow, find_write_clause, open_db
    from .schema import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "MagnetonError",
    "Profile",
    "ProfileDB",
    "QueryResult",
    "RunRow",
    "find_write_clause",
    "load_profile",
    "open_db",
]

_DB_NAMES = {"ProfileDB", "QueryResult", "RunRow", "find_write_clause", "open_db"}


def __getattr__(name: str) -> Any:
    if name in _DB_NAMES:
        from . import db

        return getattr(db, name)
    if name == "SCHEMA_VERSION":  # schema.py imports pyarrow: only when asked
        from .schema import SCHEMA_VERSION

        return SCHEMA_VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_profile(db_dir: str, run: str) -> Profile:
    """Open the DB in `db_dir` read-only and load one run (convenience for scripts)."""
    from .db import open_db

    with open_db(db_dir, read_only=True) as pdb:
        return pdb.load_profile(run)
