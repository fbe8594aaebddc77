"""`magneton migrate --db DIR`: convert a DB written on Kùzu 0.11 to the current engine.

Earlier Magneton versions stored runs in Kùzu 0.11.3 (`DIR/profile.kuzu`); this one uses
LadybugDB (`DIR/profile.lbug`), which cannot open those files, so every other command
names this one when it meets an old DB. The conversion and its checks are in
graphdb/migrate.py; the old file is left as it was.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "migrate",
        help="convert a DB written by an earlier Magneton (Kùzu 0.11) to this version",
        description=(
            "Copy every run, stored diff and rule of DIR/profile.kuzu into DIR/profile.lbug, "
            "check that each run loads with its checksum, and leave the old file as it was. "
            'Needs the old engine: pip install "magneton[kuzu]".'
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory holding profile.kuzu")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb.migrate import migrate

    result = migrate(args.db)
    rows = sum(result.rows.values())
    print(
        f"converted {len(result.runs)} run(s), {rows} rows in {len(result.rows)} tables, "
        f"into {result.new_file} in {result.time_s:.1f} s; every run loaded and matched its "
        f"checksum. The old file {result.old_file} is unchanged: delete it when satisfied"
    )
    return 0
