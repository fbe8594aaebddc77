"""Differencing and diagnosis in a child process, so the TUI stays usable while they run.

Diagnosis re-runs both scripts with line tracing and can take seconds to minutes. Doing it
in a thread of the TUI process caused three failures this module prevents:

- quitting had to wait for the diagnosis to finish (Python joins executor threads at exit
  and Textual cannot cancel a thread), so `q` looked frozen;
- the re-run scripts, PyTorch's profiler and C extensions write to fds 1 and 2 directly,
  which scribbles over the screen; the child points both at a log file;
- the re-run holds the GIL for long stretches, which made key presses lag.

The child is a plain `python -m magneton.tui.jobs` subprocess rather than a
`multiprocessing` one: under Textual `sys.stderr` has no file descriptor, and
multiprocessing's resource tracker fails to start with "bad value(s) in fds_to_keep".
The child keeps a private duplicate of its stdout pipe for results, opens the DB
read-only itself and sends pickled `(kind, DiffResult | None, message)` tuples:
`("diff", result)` as soon as detection is done, `("progress", result, "k/n")` after
each diagnosed finding (the pipeline's progress callback), then `("diagnosed", result)`,
and last `("done", None, note)`; or `("error" | "diagnosis-error", None, line)`. A and B
may be runs or multi-rank jobs: the child runs the same pipeline as `magneton diff`.
`DiffJob.cancel()` terminates it.

The child only runs when the DB holds no diff of A and B (or the user asked `--rerun`),
and it stores what it made (`--store`), as `magneton diff` does: the DB is opened
read-write only for that write, after the pipeline, so `magneton record` in another
terminal is not locked out for the minutes a diagnosis takes. A TUI that kept its diff
to itself showed other numbers than the `diff` table and the HTML page of the same pair
(3.4% + 0.7% where the table said 5.2%): they were three measurements. A diff whose
findings were not diagnosed (`--no-diagnose`) is not stored, so a later `magneton diff`
does not show it undiagnosed. The store is written before "done" is sent, and the
parent waits for "done", so a TUI that leaves right after never kills a child mid-write.
"""

from __future__ import annotations

import argparse
import os
import pickle
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from magneton.model import DiffResult


@dataclass
class JobEvent:
    kind: str  # "diff" | "progress" | "diagnosed" | "done" | "error" | "diagnosis-error"
    result: DiffResult | None = None
    message: str = ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------


def _send(out: IO[bytes], kind: str, result: DiffResult | None = None, message: str = "") -> None:
    pickle.dump((kind, result, message), out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def child_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m magneton.tui.jobs")
    p.add_argument("--db", required=True)
    p.add_argument("--threshold", type=float, default=0.10)
    p.add_argument("--no-diagnose", action="store_true")
    p.add_argument("--no-rerun", action="store_true")
    p.add_argument("--store", action="store_true")
    p.add_argument("a")
    p.add_argument("b")
    args = p.parse_args(argv)
    # results go through a private copy of the stdout pipe; fd 1 then joins fd 2 (the log),
    # so anything the re-run scripts or C extensions print cannot corrupt the stream
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        return _diff(args, out)
    finally:
        out.close()


def _diff(args: argparse.Namespace, out: IO[bytes]) -> int:
    """Run the diff pipeline (diagnose/pipeline.py), sending its stages as events, then
    store the outcome when asked (module docstring). The pipeline reads the DB opened
    read-only."""
    from magneton.diagnose.api import run_diff
    from magneton.graphdb import open_db
    from magneton.model import MagnetonError

    detected = False

    def progress(stage: str, result: DiffResult, done: int, total: int) -> None:
        nonlocal detected
        if stage == "detected":
            detected = True
            _send(out, "diff", result)
        elif stage == "diagnosed" and done < total:
            _send(out, "progress", result, f"{done}/{total}")

    # an error after detection loses no findings: the TUI keeps those it was sent
    failed = "diagnosis-error"
    try:
        with open_db(args.db, read_only=True) as db:
            outcome = run_diff(
                db,
                args.a,
                args.b,
                threshold=args.threshold,
                diagnose=not args.no_diagnose,
                rerun=not args.no_rerun,
                progress=progress,
            )
        note = _store(args, outcome) if args.store else ""
        res = outcome.result
        if not args.no_diagnose and res.findings:
            _send(out, "diagnosed", res)
        _send(out, "done", message=note)
    except MagnetonError as e:
        _send(out, failed if detected else "error", message=str(e))
    except Exception as e:  # a bug must not lose the findings shown
        import traceback

        traceback.print_exc()
        _send(out, failed if detected else "error", message=f"{type(e).__name__}: {_first_line(e)}")
        return 1
    return 0


def _store(args: argparse.Namespace, outcome) -> str:
    """Store the diff for every other surface; "" when stored, else why not (one line:
    the findings stand either way)."""
    from magneton.diagnose.api import store_outcome
    from magneton.graphdb import open_db
    from magneton.model import MagnetonError

    if args.no_diagnose and outcome.result.findings:
        return ""  # undiagnosed: not the diff the other surfaces should show (asked for)
    try:
        with open_db(args.db, create=False) as db:
            store_outcome(db, outcome)
    except MagnetonError as e:
        return f"not stored: {_first_line(e)}"
    return ""


# --------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------


_LIVE: set[DiffJob] = set()


def cancel_all() -> None:
    """Terminate every child still running (the TUI calls this when it exits)."""
    for job in list(_LIVE):
        job.cancel()


class DiffJob:
    """One diff (+ diagnosis) of runs a and b of the DB at `db_path`, in a child process."""

    def __init__(
        self,
        db_path: str | Path,
        a: str,
        b: str,
        threshold: float = 0.10,
        diagnose: bool = True,
        rerun: bool = True,
        store: bool = True,
    ):
        self.db_path = str(db_path)
        self.a, self.b = a, b
        self.threshold = threshold
        self.diagnose = diagnose
        self.rerun = rerun
        self.store = store
        self.log = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False
        self.started = 0.0

    def start(self) -> None:
        fd, self.log = tempfile.mkstemp(prefix="magneton-tui-", suffix=".log")
        cmd = [sys.executable, "-m", "magneton.tui.jobs", "--db", self.db_path]
        cmd += ["--threshold", repr(self.threshold)]
        if not self.diagnose:
            cmd.append("--no-diagnose")
        if not self.rerun:
            cmd.append("--no-rerun")
        if self.store:
            cmd.append("--store")
        cmd += ["--", self.a, self.b]
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=fd,
            )
        finally:
            os.close(fd)
        _LIVE.add(self)
        self.started = time.monotonic()

    def poll(self, timeout: float) -> JobEvent | None:
        """The next event, or None if none came within `timeout`. A child that ends without
        a final event becomes an "error" event carrying the tail of its log."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return JobEvent("error", message="the diff job is not running")
        try:
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
            if not ready:
                return None
            kind, result, message = pickle.load(proc.stdout)
        except (EOFError, pickle.UnpicklingError, OSError, ValueError):
            # ValueError: the pipe was closed under us (the job is being cancelled)
            return self._died()
        if kind in ("error", "diagnosis-error"):
            self._failed = True
        return JobEvent(kind, result, message)

    def _died(self) -> JobEvent:
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._failed = True
        tail = ""
        try:
            lines = Path(self.log).read_text(errors="replace").strip().splitlines()
            tail = lines[-1] if lines else ""
        except OSError:
            pass
        msg = f"the diff/diagnosis process stopped (exit status {code})"
        return JobEvent("error", message=f"{msg}: {tail} (log: {self.log})" if tail else msg)

    def finish(self) -> None:
        """Reap the child after its last event; its log is kept only after a failure."""
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.cancel()
                return
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        _LIVE.discard(self)
        if not self._failed and self.log:
            Path(self.log).unlink(missing_ok=True)

    def terminate(self) -> None:
        """Stop the child (safe from any thread; the pipe is left to the reader)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def cancel(self) -> None:
        """Stop the child and release the pipe and log (from the reading thread)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=3)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        _LIVE.discard(self)
        if self.log:
            Path(self.log).unlink(missing_ok=True)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started if self.started else 0.0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None


if __name__ == "__main__":
    sys.exit(child_main())
