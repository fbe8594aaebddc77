"""A warm re-measurement worker: one side of a diff, loaded once, timed round by round.

Interleaved confirmation (diagnose/matching/confirm.py) runs `serve` once per side as a job of the
diff's warm worker (tracer/timing/warm.py: a fork of the zygote that already imported the
scripts' libraries) and then alternates rounds between the two jobs (A B A B ...). The
job loads the recorded script exactly as `magneton record` does (tracer/programs/record.py:
imported as a module, `sys.argv = [script]`, the recorded environment, `setup()`, then
warm-up calls of the entry) and keeps the model and inputs in memory; each "round"
command runs the entry once under the recorder's timing pass (tracer/timing/passes.py: the same
CPU-clock capture, the same GC handling) and answers with that iteration's operator names
and windows. The diff prices them with the recording's own pricing (tracer/energy/pricing.py
`reprice`).

Choices, and the failure each prevents:

* **A process per side, kept warm.** Scripts set process-wide flags at import
  (`torch.backends.mkldnn.enabled = False`) that must not leak into the other side or into
  Magneton; and loading a model costs seconds, so it is paid once, not per round.
* **Forked from the diff's zygote, not launched.** A fresh interpreter per side imported
  transformers again (5-7 s of CPU each), on top of the key-variable re-run's import; the
  fork starts with the libraries loaded, and warm.py restores torch's thread count in it,
  so its rounds measure what a fresh process's would.
* **Commands and answers travel on a Unix socket of their own** (the path in `arg`,
  inside the worker's private temporary directory; JSON lines), not on stdin/stdout: a
  script that prints would corrupt the stream, and a fork of the zygote cannot inherit
  pipes from the diff process. The job's stdout is discarded and its stderr goes to the
  worker's log for that job, whose last line the diff reports.
* **End of the socket ends the worker.** If the diff closes its end (done, Ctrl-C, an
  error) the job sees end-of-file and exits after its round instead of idling with a
  model in memory; a diff that dies outright (even SIGKILLed) closes the zygote's
  command pipe, and the zygote kills its whole process group, this job included.
* **It dies with its zygote.** On Linux the job asks the kernel for SIGTERM when its
  parent goes away (`PR_SET_PDEATHSIG`), so no job outlives a killed zygote.
* **A failure is an answer, not a crash.** Whatever the script raises (at import, in
  `setup()`, in a round) is sent as `{"error": ...}`; the diff then marks the findings
  unconfirmed with that reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from typing import IO, Any

from magneton.tracer.timing.warm import unix_address


def _send(out: IO[str], msg: dict) -> None:
    out.write(json.dumps(msg, separators=(",", ":")) + "\n")
    out.flush()


def _prepare(spec: dict) -> tuple[Any, bool, bool]:
    """Load the side as the recorder does; returns (call, sync, cpu_clock). For a JAX or
    TensorFlow script `call` is the program's unfused replay (tracer/frameworks/), whose
    windows are what its recording priced."""
    os.environ.update(spec.get("env", {}))
    from magneton.tracer.programs import steady

    if steady.requested():  # as the recording did (a fork has it from the zygote already)
        steady.apply()
    script = spec["script"]
    sys.argv = [script]
    from magneton.tracer.programs.record import _as_args, load_script

    module = load_script(script)
    entry_fn = getattr(module, spec.get("entry") or "main")
    setup_name = spec.get("setup") or ""
    setup_fn = getattr(module, setup_name, None) if setup_name else None
    args = _as_args(setup_fn()) if callable(setup_fn) else ()

    from magneton.tracer.frameworks import detect_framework

    framework = detect_framework(script)
    if framework != "torch":
        from magneton.tracer.frameworks import program_for

        program = program_for(framework, entry_fn, args)
        for _ in range(int(spec.get("warmup", 1)) + 1):
            program.call()
        program.replay()  # the recording's structure pass walked the graph once too
        return program, False, bool(spec.get("cpu_clock"))

    def call() -> Any:
        return entry_fn(*args)

    # the recording's warm-up calls plus one for its structure pass
    for _ in range(int(spec.get("warmup", 1)) + 1):
        call()
    return call, bool(spec.get("sync")), bool(spec.get("cpu_clock"))


def _round(call: Any, sync: bool, cpu_clock: bool) -> dict:
    from magneton.tracer.frameworks.base import TracedProgram
    from magneton.tracer.timing.passes import timed_iterations

    if isinstance(call, TracedProgram):  # one unfused replay, as the recording's
        wins = call.replay()
        return {
            "names": [w[0] for w in wins],
            "wall": [[w[1], w[2]] for w in wins],
            "cpu": [[w[3], w[4]] for w in wins] if cpu_clock else None,
        }

    tp = timed_iterations(call, 1, sync, cpu_clock=cpu_clock, max_iterations=1)
    events = tp.iterations[0]
    return {
        "names": [e[0] for e in events],
        "wall": [[e[1], e[2]] for e in events],
        "cpu": [list(w) for w in tp.cpu_windows[0]] if tp.cpu_windows else None,
    }


def _die_with_parent() -> None:
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        with contextlib.suppress(Exception):  # best effort: the socket's EOF still ends us
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() != parent:  # the parent died before prctl
        sys.exit(1)


def serve(spec: dict) -> int:
    """The job (tracer/timing/warm.py): connect to the diff's socket `spec["socket"]`, load the
    side, answer `{"ready": true, "pid": ...}`, then one answer per "round" command until
    the diff closes the socket (or sends anything else). 0 when it ended that way."""
    _die_with_parent()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with unix_address(spec["socket"]) as address:
        conn.connect(address)
    commands = conn.makefile("r", encoding="utf-8")
    answers = conn.makefile("w", encoding="utf-8")
    try:
        call, sync, cpu_clock = _prepare(spec)
    except BaseException as e:  # the user's script failed: say so, never hang the diff
        _send(answers, {"error": _describe(e)})
        return 1
    _send(answers, {"ready": True, "pid": os.getpid()})
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
