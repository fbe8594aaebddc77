"""`magneton rm --db DIR RUN [RUN...]`: remove recorded runs.

Removal has the safety of `record --replace`: every name is checked before anything is
deleted (one unknown name removes nothing), and the DB is rewritten without the runs into
a fresh file renamed over the old one, so a crash or Ctrl-C at any point leaves either
the old DB or the new one, never half of each. Runs a writer left "loading" when it died
are removed by any writable open, this command included (`magneton rm --db DIR` with no
names does only that).
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rm",
        help="remove runs from a DB",
        description=(
            "Remove runs (all their operators, tensors, modules, power samples). With no "
            "RUN, only removes runs left 'loading' by a recording that was killed."
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory")
    p.add_argument("runs", nargs="*", metavar="RUN", help="names of the runs to remove")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import open_db
    from magneton.tracer.api import defer_sigint

    names = list(dict.fromkeys(args.runs))
    with open_db(args.db, create=False) as db:
        ghosts = db.removed_ghosts
        with defer_sigint():
            db.delete_runs(names)
    for g in ghosts:
        print(f"removed run '{g}' (left 'loading' by a recording that was killed)")
    for n in names:
        print(f"removed run '{n}'")
    if not names and not ghosts:
        print("nothing to remove")
    return 0
