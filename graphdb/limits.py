"""Memory and time limits on the work whose size a user's input decides: a Cypher query
(`magneton query`, the TUI's console: graphdb/contained.py) and an import (`magneton
import-trace`, `magneton merge`).

Unbounded, such work took the machine: `UNWIND range(1,300000000) AS x WITH collect(x)`
passed 4 GB in 2 s, 120 KB of nested parentheses 3 GB in the engine's parser, a 10 MB
list literal 23.8 GB before the kernel killed it, a 2 MB gzip trace that inflates to
2 GiB or a 3 MB trace of 30k nested events 1.5-3 GB; on a shared machine the other
jobs died first. Choices and the failures they prevent:

- The limit is on address space (`RLIMIT_AS`), which the kernel enforces on every
  allocation, numpy's, pyarrow's and the engine's included: an allocation past it fails
  (a MemoryError in Python, `std::bad_alloc` in the engine) instead of growing. It is
  set relative to what the process has mapped when the work starts (`cap`), so the
  interpreter, the libraries and the engine's up-front mappings (its page cache and DB
  range, sized by graphdb/engine.py) do not count against the user's figure.
- A query runs in its own child process, whose limit is permanent; an import runs in the
  command's process under a soft limit that is lifted again afterwards (`limited`), so
  storing the result is not starved.
- Time is limited too (a wall-clock limit): a query by the engine's own timeout and a
  kill of its child, an import by an alarm.
- Each limit has a flag (`--memory-mb`, `--time-limit-s`) and an environment variable
  (`MAGNETON_QUERY_MEMORY_MB`, `MAGNETON_IMPORT_MEMORY_MB`, `..._TIME_LIMIT_S`; 0 turns a
  time limit off); passing one is refused in one line that names both (exit 1), and
  nothing is stored.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from magneton.model import MagnetonError

# defaults: a query's result and an import's parse, on a machine others share
QUERY_MEMORY_MB = 2048
QUERY_TIME_LIMIT_S = 600.0
IMPORT_MEMORY_MB = 4096
IMPORT_TIME_LIMIT_S = 1800.0


@dataclass(frozen=True)
class Limits:
    """The limits of one piece of work; `kind` is "query" or "import"."""

    kind: str
    memory_mb: int
    time_s: float  # 0: no time limit

    def _env(self, what: str) -> str:
        return f"MAGNETON_{self.kind.upper()}_{what}"

    def memory_exceeded(self) -> MagnetonError:
        stored = "" if self.kind == "query" else "; nothing was stored"
        return MagnetonError(
            f"{self.kind} refused: it needed more than its memory limit of {self.memory_mb} MB "
            f"(--memory-mb N or {self._env('MEMORY_MB')} raises it, where the machine has "
            f"room){stored}",
            exit_code=1,
        )

    def time_exceeded(self) -> MagnetonError:
        stored = "" if self.kind == "query" else "; nothing was stored"
        return MagnetonError(
            f"{self.kind} stopped at its time limit of {self.time_s:g} s (--time-limit-s S "
            f"or {self._env('TIME_LIMIT_S')} raises it; 0 for none){stored}",
            exit_code=1,
        )


def _env_number(names: tuple[str, ...], default: float) -> float:
    for name in names:
        raw = os.environ.get(name, "").strip()
        if raw:
            try:
                return float(raw)
            except ValueError:
                raise MagnetonError(f"{name} must be a number, got {raw!r}") from None
    return default


def resolve(kind: str, memory_mb: float | None = None, time_s: float | None = None) -> Limits:
    """The limits of a "query" or an "import": the flags' values, else the environment's,
    else the defaults; a limit that is not positive is bad input (a time limit of 0 is
    none)."""
    mem_default, time_default = (
        (QUERY_MEMORY_MB, QUERY_TIME_LIMIT_S)
        if kind == "query"
        else (IMPORT_MEMORY_MB, IMPORT_TIME_LIMIT_S)
    )
    up = kind.upper()
    if memory_mb is None:
        memory_mb = _env_number((f"MAGNETON_{up}_MEMORY_MB", "MAGNETON_MEMORY_MB"), mem_default)
    if time_s is None:
        time_s = _env_number((f"MAGNETON_{up}_TIME_LIMIT_S", "MAGNETON_TIME_LIMIT_S"), time_default)
    if not memory_mb > 0:
        raise MagnetonError(f"the {kind} memory limit must be a positive number of MB")
    if not time_s >= 0:
        raise MagnetonError(f"the {kind} time limit must be 0 (none) or a positive number of s")
    return Limits(kind, int(memory_mb), float(time_s))


def mapped_b() -> int:
    """The address space this process has mapped now (VmSize), in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cap(extra_b: int, permanent: bool = False) -> tuple[int, int] | None:
    """Let this process map at most `extra_b` more bytes than now (never above a limit
    already set); returns the limits before, for `lift`, or None where none can be set."""
    now = mapped_b()
    if not now:
        return None
    before = resource.getrlimit(resource.RLIMIT_AS)
    soft = now + extra_b
    hard = before[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    if before[0] != resource.RLIM_INFINITY:
        soft = min(soft, before[0])
    try:
        resource.setrlimit(resource.RLIMIT_AS, (soft, soft if permanent else hard))
    except (ValueError, OSError):
        return None
    return before


def lift(before: tuple[int, int] | None) -> None:
    if before is not None:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, before)


class _TimeUp(BaseException):
    """Raised by the alarm of `limited` (a BaseException: no `except Exception` in the
    work swallows it)."""


@contextlib.contextmanager
def limited(limits: Limits) -> Iterator[None]:
    """Run the enclosed work of this process under `limits` (see the module doc); a
    MemoryError or the alarm becomes the one-line refusal."""
    before = cap(limits.memory_mb << 20)
    alarm = limits.time_s > 0 and threading.current_thread() is threading.main_thread()
    old_handler = None
    if alarm:
        old_handler = signal.signal(signal.SIGALRM, _raise_time_up)
        signal.setitimer(signal.ITIMER_REAL, limits.time_s)
    try:
        yield
    except MemoryError:
        raise limits.memory_exceeded() from None
    except _TimeUp:
        raise limits.time_exceeded() from None
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
        lift(before)


def _raise_time_up(signum: int, frame: object) -> None:
    raise _TimeUp()
