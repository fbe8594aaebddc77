"""User-written Cypher, run where a crash or a runaway result cannot reach the user's
terminal or the DB: `magneton query` and the TUI's console go through `stream_query`.

A query a user writes may hit a native defect of any embedded engine (Kùzu 0.11.3 died
with a segfault or `munmap_chunk()` on queries over ~1,000 operators; nothing in a
process survives that), or ask for a cross product of a large run (one grew past 5.6 GB
of RSS with `| head` on the other end). Choices and the failures they prevent:

- The query runs in a child process (`python -m magneton.graphdb.contained`) that opens
  the DB read-only and sends rows back as JSON lines as the engine produces them. A child
  killed by a signal becomes one line naming the signal, exit 1; the DB was only read.
  Cost: one interpreter start and engine open per query (measured in docs/benchmarks.md,
  "Containing user queries"), paid only by user-written queries — Magneton's own
  queries run in-process.
- The engine's buffer pool is capped (`MAGNETON_QUERY_MEMORY_MB`, default 2048): its
  page cache and intermediate results stay within it (an ORDER BY over a 36M-row cross
  product ran in 64 MB, spilling); the child's address space is not capped with
  `RLIMIT_AS` because the engine maps its whole virtual DB range up front.
- Rows are limited (`limit`, default `DEFAULT_ROW_LIMIT`): a query without its own
  `LIMIT` gets `LIMIT limit+1` appended (the engine stops early) and the caller is told
  when rows were left out. Rows stream: the parent never holds more than it prints.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from magneton.model import MagnetonError

DEFAULT_ROW_LIMIT = 10_000
DEFAULT_MEMORY_MB = 2048


@dataclass
class QueryStream:
    """Columns, then rows as they arrive; `truncated` is set once more rows existed than
    the limit let through (read it after iterating `rows`)."""

    columns: list[str]
    rows: Iterator[list]
    limit: int
    truncated: bool = False
    pid: int = 0  # the child running the query


def plain(v: Any) -> Any:
    """A JSON-safe value: NaN/inf → null, the engine's INT128 sums (Decimal) → numbers,
    nodes and rels → their properties without the engine's `_`-internals, BLOBs (a
    tensor's summaries, graphdb/schema.py) → the float64 arrays they hold."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, bytes):
        if len(v) % 8:  # not one of Magneton's; say what it is rather than guess
            return v.hex()
        return plain(np.frombuffer(v, "<f8").tolist())
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items() if not str(k).startswith("_")}
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)


def with_row_limit(cypher: str, limit: int) -> str:
    """`cypher` with `LIMIT limit+1` appended when its last clause sets no LIMIT."""
    from .guard import _words

    words = [w.upper() for w, prev, _ in _words(cypher) if prev not in (".", ":")]
    last_return = max((i for i, w in enumerate(words) if w == "RETURN"), default=-1)
    if limit <= 0 or last_return < 0 or "LIMIT" in words[last_return:]:
        return cypher
    return f"{cypher.rstrip().rstrip(';')} LIMIT {limit + 1}"


def stream_query(
    db: str | Path, cypher: str, params: dict | None = None, limit: int = DEFAULT_ROW_LIMIT
) -> QueryStream:
    """Run a user's read-only query on the DB in `db` in a child process (see above)."""
    request = json.dumps(
        {
            "db": str(db),
            "cypher": cypher,
            "params": params or {},
            "limit": limit,
            "parent": os.getpid(),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "magneton.graphdb.contained"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(request)
    proc.stdin.close()
    first = proc.stdout.readline()
    if not first:
        raise _child_failed(proc)
    columns = json.loads(first)["columns"]
    stream = QueryStream(columns=columns, rows=iter(()), limit=limit, pid=proc.pid)
    stream.rows = _rows(proc, stream)
    return stream


def _rows(proc: subprocess.Popen, stream: QueryStream) -> Iterator[list]:
    assert proc.stdout is not None
    n = 0
    done = False  # the child closed its output: every row was read
    try:
        for line in proc.stdout:
            if stream.limit > 0 and n >= stream.limit:
                stream.truncated = True
                break
            yield json.loads(line)
            n += 1
        else:
            done = True
    finally:
        if not done and proc.poll() is None:  # cut at the limit, or the caller stopped
            proc.kill()  # (a child blocked on a full pipe would never exit by itself)
        proc.stdout.close()
        rc = proc.wait()
    if done and rc != 0:
        raise _child_failed(proc, rc)


def _child_failed(proc: subprocess.Popen, rc: int | None = None) -> MagnetonError:
    rc = proc.wait() if rc is None else rc
    err = proc.stderr.read().strip() if proc.stderr else ""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return MagnetonError(
            f"query failed: the graph engine crashed running it ({name}); the DB was only "
            "read and is unchanged. Simplify the query (fewer rows, no cross product)"
        )
    lines = err.splitlines()
    return MagnetonError(
        lines[-1].removeprefix("magneton: ") if lines else f"query failed (exit {rc})"
    )


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this child when the parent dies (a killed `magneton query` left
    its child computing a cross product for minutes); elsewhere, a broken pipe ends it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request was set
        os._exit(1)


def _child() -> int:
    """Child side: read the request, run it, print the columns and then each row."""
    req = json.loads(sys.stdin.read())
    _die_with_parent(int(req["parent"]))
    from . import engine
    from .db import open_db

    engine.BUFFER_POOL_B = int(os.environ.get("MAGNETON_QUERY_MEMORY_MB", DEFAULT_MEMORY_MB)) << 20
    try:
        with open_db(req["db"], read_only=True) as db:
            cypher = with_row_limit(req["cypher"], int(req["limit"]))
            columns, rows = db.user_query_rows(cypher, req["params"])
            out = sys.stdout
            out.write(json.dumps({"columns": columns}) + "\n")
            for row in rows:
                out.write(json.dumps(plain(row)) + "\n")
            out.flush()
    except MagnetonError as e:
        print(f"magneton: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the parent has its rows
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(_child())
