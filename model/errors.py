"""The error family every stage raises for what a user can act on: one line, an exit code.

The CLI prints `magneton: <message>` and exits with the error's `exit_code`; nothing of
this family carries a traceback to the user. Real bugs raise whatever they raise, so they
keep their tracebacks. The subclasses name the kinds a caller may want to tell apart
(a run that failed, a worker that died) without parsing messages.
"""

from __future__ import annotations


class MagnetonError(Exception):
    """A problem with the user's input or environment, shown as one line (no traceback).

    The CLI prints `magneton: <message>` and exits with `exit_code`. Raise it for bad
    input (missing run, foreign DB, sensor without permission); let real bugs raise
    whatever they raise so they keep their tracebacks.
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class WorkloadError(MagnetonError):
    """The user's workload raised, exited or was stopped while being recorded or re-run
    (exit status 1: the workload's failure, not bad input)."""

    exit_code = 1


class WorkerError(MagnetonError):
    """A worker process could not run a job: it died, timed out, or measured something
    other than the recording (tracer warm workers, interleaved confirmation)."""

    exit_code = 1
