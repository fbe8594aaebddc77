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
- Memory and time are limited (graphdb/limits.py; `--memory-mb`, `--time-limit-s`,
  `MAGNETON_QUERY_MEMORY_MB`, default 2048, `MAGNETON_QUERY_TIME_LIMIT_S`, default 600):
  half of the memory is the engine's buffer pool (its page cache and intermediate
  results stay within it: an ORDER BY over a 36M-row cross product ran in 64 MB,
  spilling), the other half the child's address space beyond what it has mapped once the
  DB is open (`RLIMIT_AS`, set after the open because the engine maps its DB range up
  front; `MALLOC_ARENA_MAX=2` so that glibc's per-thread arenas do not reserve it). A
  query past either limit is one line (exit 1): the engine's `std::bad_alloc`, a
  MemoryError, the engine's own timeout ("Interrupted."), or the parent's kill of a
  child still busy after the limit (the parser cannot be interrupted).
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
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from magneton.model import MagnetonError

from .guard import check_size
from .limits import Limits, cap, resolve

DEFAULT_ROW_LIMIT = 10_000
# seconds the parent waits past the time limit before it kills a child (the engine's own
# timeout answers within that; its parser does not)
_KILL_GRACE_S = 5.0  # at most; min(this, 1 s + the limit)
# the engine's words for a failed allocation
_NO_MEMORY = ("bad_alloc", "unable to allocate memory", "cannot allocate memory", "mmap")


@dataclass
class QueryStream:
    """Columns, then rows as they arrive; `truncated` is set once more rows existed than
    the limit let through (read it after iterating `rows`)."""

    columns: list[str]
    rows: Iterator[list]
    limit: int
    truncated: bool = False
    pid: int = 0  # the child running the query
    limits: Limits | None = None
    timed_out: bool = False  # the parent killed the child at the time limit


def plain(v: Any) -> Any:
    """A JSON-safe value: NaN/inf → null, the engine's INT128 sums (Decimal) → numbers,
    nodes and rels → their properties without the engine's `_`-internals, BLOBs (a
    tensor's summaries, graphdb/schema.py) → the float64 arrays they hold."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, bytes):
        if len(v) % 8:  # not one of Magneton's; say what it is rather than guess
            return v.hex()
        import numpy as np  # here, not at import: the query child pays it only for a BLOB

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
    db: str | Path,
    cypher: str,
    params: dict | None = None,
    limit: int = DEFAULT_ROW_LIMIT,
    memory_mb: float | None = None,
    time_limit_s: float | None = None,
) -> QueryStream:
    """Run a user's read-only query on the DB in `db` in a child process (see above),
    under the query limits (graphdb/limits.py: the arguments, else the environment)."""
    limits = resolve("query", memory_mb, time_limit_s)
    check_size(cypher)  # a 10 MB query is refused here, before it is even sent
    request = json.dumps(
        {
            "db": str(db),
            "cypher": cypher,
            "params": params or {},
            "limit": limit,
            "parent": os.getpid(),
            "memory_mb": limits.memory_mb,
            "time_s": limits.time_s,
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "magneton.graphdb.contained"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},
    )
    stream = QueryStream(columns=[], rows=iter(()), limit=limit, pid=proc.pid, limits=limits)
    timer = _kill_at_limit(proc, stream)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(request)
    proc.stdin.close()
    first = proc.stdout.readline()
    if not first:
        _stop(timer)
        raise _child_failed(proc, stream)
    stream.columns = json.loads(first)["columns"]
    stream.rows = _rows(proc, stream, timer)
    return stream


def _kill_at_limit(proc: subprocess.Popen, stream: QueryStream) -> threading.Timer | None:
    """Kill the child once it has run past its time limit (and a grace for the engine's
    own timeout to answer first)."""
    assert stream.limits is not None
    if not stream.limits.time_s:
        return None

    def kill() -> None:
        if proc.poll() is None:
            stream.timed_out = True
            proc.kill()

    grace = min(_KILL_GRACE_S, 1.0 + stream.limits.time_s)
    timer = threading.Timer(stream.limits.time_s + grace, kill)
    timer.daemon = True
    timer.start()
    return timer


def _stop(timer: threading.Timer | None) -> None:
    if timer is not None:
        timer.cancel()


def _rows(
    proc: subprocess.Popen, stream: QueryStream, timer: threading.Timer | None
) -> Iterator[list]:
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
        _stop(timer)
        if not done and proc.poll() is None:  # cut at the limit, or the caller stopped
            proc.kill()  # (a child blocked on a full pipe would never exit by itself)
        proc.stdout.close()
        rc = proc.wait()
    if done and rc != 0:
        raise _child_failed(proc, stream, rc)
    if done and proc.stderr is not None:  # what the open told the user (a recovery)
        for line in proc.stderr.read().splitlines():
            if line.startswith("magneton: "):
                print(line, file=sys.stderr)


def _child_failed(
    proc: subprocess.Popen, stream: QueryStream, rc: int | None = None
) -> MagnetonError:
    rc = proc.wait() if rc is None else rc
    err = proc.stderr.read().strip() if proc.stderr else ""
    assert stream.limits is not None
    if stream.timed_out:
        return stream.limits.time_exceeded()
    if any(w in err.lower() for w in _NO_MEMORY):  # an abort on a failed allocation
        return stream.limits.memory_exceeded()
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return MagnetonError(
            f"query failed: the graph engine crashed running it ({name}); the DB was only "
            "read and is unchanged. Simplify the query (fewer rows, no cross product)",
            exit_code=1,
        )
    said = [ln for ln in err.splitlines() if ln.startswith("magneton: ")]
    if said:
        line, code = said[-1].removeprefix("magneton: "), 2
        if line.startswith("[exit 1] "):
            line, code = line.removeprefix("[exit 1] "), 1
        return MagnetonError(line, exit_code=code)
    return MagnetonError(f"query failed (exit {rc})", exit_code=1)


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
    """Child side: read the request, run it under its limits, print the columns and then
    each row. A MagnetonError is one line on stderr; "[exit 1] " marks a failure (a
    limit passed, the engine's error) rather than bad input."""
    req = json.loads(sys.stdin.read())
    _die_with_parent(int(req["parent"]))
    limits = Limits("query", int(req["memory_mb"]), float(req["time_s"]))
    try:
        _answer(req, limits)
    except MagnetonError as e:
        mark = "[exit 1] " if e.exit_code == 1 else ""
        print(f"magneton: {mark}{str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"magneton: [exit 1] {limits.memory_exceeded()}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the parent has its rows
        return 0
    return 0


def _answer(req: dict, limits: Limits) -> None:
    from . import engine
    from .db import open_db

    half = (limits.memory_mb << 20) // 2
    engine.BUFFER_POOL_B = half  # the engine's page cache and intermediate results
    with open_db(req["db"], read_only=True) as db:
        cap(half, permanent=True)  # everything else: beyond what the open has mapped
        if limits.time_s:
            db._conn.set_query_timeout(int(limits.time_s * 1000))
        cypher = with_row_limit(req["cypher"], int(req["limit"]))
        try:
            columns, rows = db.user_query_rows(cypher, req["params"])
            out = sys.stdout
            out.write(json.dumps({"columns": columns}) + "\n")
            for row in rows:
                out.write(json.dumps(plain(row)) + "\n")
            out.flush()
        except MagnetonError as e:
            raise _limit_passed(e, limits) from None


def _limit_passed(e: MagnetonError, limits: Limits) -> MagnetonError:
    """The engine's words for a limit passed, as the limit's refusal."""
    text = str(e).lower()
    if any(w in text for w in _NO_MEMORY):
        return limits.memory_exceeded()
    if text.endswith("interrupted."):
        return limits.time_exceeded()
    return e


if __name__ == "__main__":
    sys.exit(_child())
