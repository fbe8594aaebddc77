"""A warm re-measurement worker: one side of a diff, loaded once, timed round by round.

Interleaved confirmation (diagnose/confirm.py) starts one of these per side as
`python -m magneton.tracer.remeasure SPEC CMD_FD RES_FD` and then alternates rounds
between them (A B A B ...). The worker loads the recorded script exactly as `magneton
record` does (tracer/record.py: imported as a module, `sys.argv = [script]`, the recorded
environment, `setup()`, then warm-up calls of the entry) and keeps the model and inputs in
memory; each "round" command runs the entry once under the recorder's timing pass
(tracer/timing.py: the same CPU-clock capture, the same GC handling) and answers with that
iteration's operator names and windows. The parent prices them with the recording's own
pricing (tracer/energy.py `reprice`).

Choices, and the failure each prevents:

* **A child per side, kept warm.** Scripts set process-wide flags at import
  (`torch.backends.mkldnn.enabled = False`) that must not leak into the other side or into
  Magneton; and loading a model costs seconds, so it is paid once, not per round.
* **Commands and answers travel on their own pipes** (two inherited fds, JSON lines), not
  on stdin/stdout: a script that prints would corrupt the stream otherwise. Its stdout
  is discarded and its stderr goes to a log the parent reads for the error line.
* **End of the command pipe ends the worker.** If the parent dies (Ctrl-C, the TUI
  terminating its diff child) the pipe closes and the worker exits after its round
  instead of idling forever with a model in memory.
* **It dies with its parent.** A worker in the middle of a long round does not read
  its pipe; on Linux it asks the kernel for SIGTERM when the diff process goes away
  (`PR_SET_PDEATHSIG`), so even a SIGKILLed diff leaves no worker behind.
* **A failure is an answer, not a crash.** Whatever the script raises (at import, in
  `setup()`, in a round) is sent as `{"error": ...}`; the parent then marks the findings
  unconfirmed with that reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import IO, Any


def _send(out: IO[str], msg: dict) -> None:
    out.write(json.dumps(msg, separators=(",", ":")) + "\n")
    out.flush()


def _prepare(spec: dict) -> tuple[Any, bool, bool]:
    """Load the side as the recorder does; returns (call, sync, cpu_clock)."""
    os.environ.update(spec.get("env", {}))
    script = spec["script"]
    sys.argv = [script]
    from magneton.tracer.record import _as_args, load_script

    module = load_script(script)
    entry_fn = getattr(module, spec.get("entry") or "main")
    setup_name = spec.get("setup") or ""
    setup_fn = getattr(module, setup_name, None) if setup_name else None
    args = _as_args(setup_fn()) if callable(setup_fn) else ()

    def call() -> Any:
        return entry_fn(*args)

    # the recording's warm-up calls plus one for its structure pass
    for _ in range(int(spec.get("warmup", 1)) + 1):
        call()
    return call, bool(spec.get("sync")), bool(spec.get("cpu_clock"))


def _round(call: Any, sync: bool, cpu_clock: bool) -> dict:
    from magneton.tracer.timing import timed_iterations

    tp = timed_iterations(call, 1, sync, cpu_clock=cpu_clock, max_iterations=1)
    events = tp.iterations[0]
    return {
        "names": [e[0] for e in events],
        "wall": [[e[1], e[2]] for e in events],
        "cpu": [list(w) for w in tp.cpu_windows[0]] if tp.cpu_windows else None,
    }


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        with contextlib.suppress(Exception):  # best effort: the pipe's EOF still ends us
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if parent_pid and os.getppid() != parent_pid:  # the parent died before prctl
        sys.exit(1)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    _die_with_parent(int(spec.get("parent", 0)))
    commands = os.fdopen(int(argv[1]), "r")
    answers = os.fdopen(int(argv[2]), "w")
    try:
        call, sync, cpu_clock = _prepare(spec)
    except BaseException as e:  # the user's script failed: say so, never hang the parent
        _send(answers, {"error": _describe(e)})
        return 1
    _send(answers, {"ready": True})
    for line in commands:
        if line.strip() != "round":
            break
        try:
            _send(answers, _round(call, sync, cpu_clock))
        except BaseException as e:
            _send(answers, {"error": _describe(e)})
            return 1
    return 0


def _describe(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}"[:300] if msg else type(e).__name__


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: leave quietly
        sys.exit(130)
