"""`magneton query --db DIR "CYPHER" [--json|--csv]`: read-only Cypher over a profile DB.

The DB is opened read-only and write clauses are refused before running (see
graphdb/db.py), so a query can never change recorded runs. The schema and example
queries are in docs/schema.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from decimal import Decimal
from typing import Any

from magneton.graphdb.model import MagnetonError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "query",
        help="run a read-only Cypher query on a DB",
        description=(
            "Run a read-only Cypher query against a profile DB (tables: Run, Operator, "
            "Tensor, Module, Frame, Kernel, ConfigEntry, PowerSeries, PowerSample; see "
            "docs/schema.md)."
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory")
    p.add_argument("cypher", help='the query, e.g. "MATCH (r:Run) RETURN r.name"')
    p.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="query parameter $NAME (repeatable); VALUE is read as JSON when it parses "
        "(1, 2.5, true, [1,2], '\"007\"'), as text otherwise",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header row")
    p.set_defaults(func=run)


def _params(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().lstrip("$")
        if not sep or not name.isidentifier():
            raise MagnetonError(f"--param wants NAME=VALUE, got {item!r}")
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


def _plain(v: Any) -> Any:
    """JSON-safe value: NaN/inf → null (JSON has neither), nested lists/dicts kept."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, Decimal):  # Kùzu sums INT64 into INT128, which arrives as Decimal
        return int(v) if v == v.to_integral_value() else float(v)
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)


def _cell(v: Any) -> str:
    if isinstance(v, Decimal):
        v = _plain(v)
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):  # a node or rel: its properties without Kùzu internals
        v = {k: x for k, x in v.items() if not k.startswith("_")}
        return json.dumps(_plain(v), separators=(", ", ": "))
    if isinstance(v, list | tuple):
        return json.dumps(_plain(v), separators=(",", ":"))
    return str(v)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import open_db

    with open_db(args.db, read_only=True) as db:
        res = db.user_query(args.cypher, _params(args.param))
    if args.json:
        print(json.dumps([_plain(r) for r in res.records()], indent=2))
    elif args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(res.columns)
        for row in res.rows:
            w.writerow([_cell(v) if not isinstance(v, float) else repr(v) for v in row])
    else:
        from rich.markup import escape
        from rich.table import Table

        from magneton.commands.runs import _console

        table = Table(caption=f"{len(res.rows)} row{'s' if len(res.rows) != 1 else ''}")
        for c in res.columns:
            table.add_column(escape(c), overflow="fold")
        for row in res.rows:
            table.add_row(*(escape(_cell(v)) for v in row))
        _console().print(table)
    return 0
