"""Run `python -m magneton ...` for a test: a fork of a warm interpreter where the command
only needs what a fresh process would give it, a fresh process where it needs more.

Each `magneton record` of the suite started as its own `python -m magneton` and spent
1.1-1.4 s of its 2.3 s of CPU importing torch; the suite ran about a hundred of them
outside `magneton eval`. `run` instead forks the command from a zygote that imported
magneton, torch and the commands' libraries once per pytest worker: the product's own
`WarmWorker` (tracer/timing/warm.py), whose forks its diffs already use as fresh runs of
a user's script (torch's OpenMP pool not started before the fork, the thread count a
fresh process would have, malloc thresholds pinned under the steady mode the suite runs
in). The child takes the test's environment, working directory, arguments, stdin and
output files, runs `magneton.cli.console` as `magneton/__main__.py` does, then the
atexit handlers a process exit would run, and reports the exit status.

What such a child cannot be, and so what stays a fresh process:

* **An environment libraries read when imported.** The zygote imported torch under the
  suite's environment; a command whose environment differs from it in anything but the
  test workloads' own run-time knobs (`MAGNETON_TEST_*`, read by the workload as it
  runs) the terminal width and TensorFlow's log level gets a fresh interpreter: `MAGNETON_STEADY` cleared, `OMP_NUM_THREADS`, a
  `PYTHONPATH`.
* **What a test checks about the process itself**: which modules a command imports
  (tests/test_torch_free.py), what importing magneton does to the environment
  (test_record_imports.py), signals and a terminal (those tests start their own
  processes with `subprocess.Popen` and do not come here), and the A/A files' timed
  recordings, which keep their own fresh processes. `fresh=True` asks for one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TESTS = str(Path(__file__).resolve().parent)
# what the commands import besides torch; each fork finds it in sys.modules
PRELOAD = (
    "warm_cli",
    "magneton.cli",
    "magneton.commands.record",
    "magneton.commands.diff",
    "magneton.tracer.programs.record",
    "magneton.graphdb.db",
    "magneton.diagnose.pipeline",
)
# variables read as the command runs, never by what the zygote imports (TensorFlow, whose
# C++ log level this is, is imported by the child's workload)
RUN_TIME = frozenset({"COLUMNS", "TF_CPP_MIN_LOG_LEVEL"})
_worker: Any = None  # the WarmWorker, started by the first `run` of this process


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    input: str | None = None,
    timeout: float | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([sys.executable, "-m", "magneton", *argv], capture_output=True,
    text=True, ...)`, forked from the warm interpreter unless the environment or `fresh`
    needs a new one (module docstring)."""
    args = [sys.executable, "-m", "magneton", *map(str, argv)]
    full = dict(os.environ if env is None else env)
    if fresh or not _warm_env(full):
        return subprocess.run(
            args, capture_output=True, text=True, env=full, cwd=cwd, input=input, timeout=timeout
        )
    return _forked(args, full, os.fspath(cwd or os.getcwd()), input, timeout)


def _warm_env(env: Mapping[str, str]) -> bool:
    """Whether `env` differs from this process's only in the workloads' run-time knobs."""
    keys = set(env) ^ set(os.environ) | {k for k in env if env[k] != os.environ.get(k)}
    return all(k.startswith("MAGNETON_TEST_") or k in RUN_TIME for k in keys)


def _forked(
    args: list[str], env: dict[str, str], cwd: str, input: str | None, timeout: float | None
) -> subprocess.CompletedProcess[str]:
    from magneton.model import WorkerError

    with tempfile.TemporaryDirectory(prefix="warm-cli-") as d:
        io = {k: os.path.join(d, k) for k in ("stdin", "stdout", "stderr")}
        Path(io["stdin"]).write_text(input or "")
        job = {"argv": args[3:], "env": env, "io": io}
        w = _zygote()
        jid = w.submit("warm_cli:command", job, cwd=cwd)
        try:
            res = w.result(jid, timeout_s=timeout if timeout is not None else 3600.0)
        except WorkerError as e:
            if "timed out" in str(e):
                raise subprocess.TimeoutExpired(args, timeout or 0) from e
            raise
        out, err = (Path(io[k]).read_text(errors="replace") for k in ("stdout", "stderr"))
        if not res.ok:  # the child died outside the command (a crash of the interpreter)
            raise AssertionError(f"warm `magneton` child failed: {res.error}\n{err}")
        return subprocess.CompletedProcess(args, int(res.value), out, err)


def _zygote() -> Any:
    global _worker
    from magneton.tracer.timing.warm import WarmWorker

    if _worker is None or _worker.proc.poll() is not None:
        # the zygote finds this module through PYTHONPATH; each job takes the folder out
        # of sys.path again and runs in the test's own environment
        path = os.pathsep.join(filter(None, (TESTS, os.environ.get("PYTHONPATH"))))
        _worker = WarmWorker(
            [], env={"PYTHONPATH": path}, preload=PRELOAD, tmp_prefix="magneton-warm-cli-"
        )
        atexit.register(_worker.close)
    return _worker


def command(job: dict) -> int:
    """In the forked child: be `python -m magneton ARGV` run in the job's environment."""
    with contextlib.suppress(ValueError):
        sys.path.remove(TESTS)
    os.environ.clear()
    os.environ.update(job["env"])
    for fd, name, flags in (
        (0, "stdin", os.O_RDONLY),
        (1, "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        f = os.open(job["io"][name], flags)
        os.dup2(f, fd)
        os.close(f)
    import magneton

    sys.argv = [os.path.join(os.path.dirname(magneton.__file__), "__main__.py"), *job["argv"]]
    from magneton.cli import console

    try:
        code = console()
    except SystemExit as e:  # what the interpreter makes of `sys.exit(x)`
        code = _exit_status(e.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # the child ends with os._exit: run what an exit would
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
