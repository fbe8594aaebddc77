"""`magneton query --db DIR "CYPHER" [--json|--csv] [--limit N]`: read-only Cypher over a
profile DB.

The DB is opened read-only and only what graphdb/guard.py's allow-list of read-only
clauses, catalog procedures and functions admits runs (no files, extensions or other
databases), so a query can never change recorded runs or reach outside the DB. The query
runs in a child process that streams its rows (graphdb/contained.py), under a memory and
a time limit (`--memory-mb`, `--time-limit-s`; graphdb/limits.py): an engine crash or a
limit passed is one line and exit 1, a huge result is cut at `--limit` rows (said on
stderr), and `--json`/`--csv` print rows as they arrive. Cells are printed as text, never
as rich markup or emoji codes (a run named `:x:` stays `:x:`). The schema and example
queries are in docs/schema.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import textwrap
from typing import Any

from magneton.model import MagnetonError


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
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="print at most N rows (default 10000; 0: all); a query's own LIMIT is kept",
    )
    add_limit_args(p, "query", "2048", "600")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header row")
    p.set_defaults(func=run)


def add_limit_args(p: argparse.ArgumentParser, kind: str, memory: str, time_s: str) -> None:
    """`--memory-mb` and `--time-limit-s` of a query or an import (graphdb/limits.py)."""
    env = f"MAGNETON_{kind.upper()}"
    p.add_argument(
        "--memory-mb",
        type=float,
        default=None,
        metavar="N",
        help=f"memory the {kind} may use (default {memory}, or {env}_MEMORY_MB); past it the "
        f"{kind} is refused in one line",
    )
    p.add_argument(
        "--time-limit-s",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds the {kind} may run (default {time_s}, or {env}_TIME_LIMIT_S; 0: none)",
    )


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


def _cell(v: Any) -> str:
    """A table cell of a plain value (graphdb/contained.py `plain`)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):  # a node or rel: its properties
        return json.dumps(v, separators=(", ", ": "))
    if isinstance(v, list):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import DEFAULT_ROW_LIMIT, stream_query

    limit = DEFAULT_ROW_LIMIT if args.limit is None else max(0, args.limit)
    res = stream_query(
        args.db, args.cypher, _params(args.param), limit, args.memory_mb, args.time_limit_s
    )
    if args.json:
        _print_json(res)
    elif args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(res.columns)
        for row in res.rows:
            w.writerow([repr(v) if isinstance(v, float) else _cell(v) for v in row])
    else:
        _print_table(res)
    if res.truncated:
        print(
            f"magneton: showing the first {res.limit} rows; more matched (--limit N for more, "
            "--limit 0 for all, or add LIMIT/ORDER BY to the query)",
            file=sys.stderr,
        )
    return 0


def _print_json(res) -> None:
    """A JSON list of row objects, written row by row (nothing held but the current row)."""
    sep = "[\n"
    for row in res.rows:
        record = dict(zip(res.columns, row, strict=True))
        sys.stdout.write(sep + textwrap.indent(json.dumps(record, indent=2), "  "))
        sep = ",\n"
    sys.stdout.write("[]\n" if sep == "[\n" else "\n]\n")


def _print_table(res) -> None:
    from rich.markup import escape
    from rich.table import Table

    from magneton.commands.runs import _console

    rows = list(res.rows)  # bounded by --limit
    table = Table(caption=f"{len(rows)} row{'s' if len(rows) != 1 else ''}")
    for c in res.columns:
        table.add_column(escape(c), overflow="fold")
    for row in rows:
        table.add_row(*(escape(_cell(v)) for v in row))
    _console().print(table)
