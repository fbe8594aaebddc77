"""`magneton migrate --db DIR`: convert a DB written by an earlier Magneton to this one.

Earlier Magneton versions stored runs in Kùzu 0.11.3 (`DIR/profile.kuzu`), which
LadybugDB (`DIR/profile.lbug`) cannot open, or in an older schema of `profile.lbug`;
every other command names this one when it meets such a DB. The conversion and its
checks are in graphdb/migrate.py; the old file is kept as it was.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "migrate",
        help="convert a DB written by an earlier Magneton (Kùzu 0.11, or an older schema)",
        description=(
            "Copy every run, stored diff and rule of DIR/profile.kuzu into DIR/profile.lbug "
            "(or of an older schema's DIR/profile.lbug into the current schema, the old file "
            "kept as profile.lbug.vN), check that each run loads with its checksum, and leave "
            'the old file as it was. A Kùzu-era DB needs: pip install "magneton[kuzu]".'
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory to convert")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import migrate_db

    result = migrate_db(args.db)
    rows = sum(result.rows.values())
    print(
        f"converted {len(result.runs)} run(s), {rows} rows in {len(result.rows)} tables, "
        f"into {result.new_file} in {result.time_s:.1f} s; every run loaded and matched its "
        f"checksum. The old file {result.old_file} is unchanged: delete it when satisfied"
    )
    return 0
