"""Run `python -m magneton ...` for a test: a fork of a warm interpreter where the command
only needs what a fresh process would give it, a fresh process where it needs more.

Each `magneton record` of the suite started as its own `python -m magneton` and spent
1.1-1.4 s of its 2.3 s of CPU importing torch; the suite ran about a hundred of them
outside `magneton eval`. `run` (and `start`, which leaves the command running) instead
forks the command from a zygote that imported magneton, torch and the commands'
libraries once per pytest worker: the product's own `WarmWorker`
(tracer/timing/warm.py), whose forks its diffs already use as fresh runs of a user's
script (torch's OpenMP pool not started before the fork, the thread count a fresh
process would have, malloc thresholds pinned under the steady mode the suite runs in).
The child takes the test's environment, working directory, arguments, stdin and output
files, runs `magneton.cli.console` as `magneton/__main__.py` does, then the atexit
handlers a process exit would run, and reports the exit status. A script whose leading
imports include transformers or TensorFlow gets a zygote that imported that library
too (`HEAVY`); the others never see it loaded.

What such a child cannot be, and so what stays a fresh process:

* **An environment libraries read when imported.** The zygote imported torch under the
  suite's environment. A command whose environment differs from it gets a fresh
  interpreter (`MAGNETON_STEADY` cleared, `OMP_NUM_THREADS`, a `PYTHONPATH`), unless
  the difference is only in what is read as the command runs: the test workloads' own
  knobs (`MAGNETON_TEST_*`), the terminal width, TensorFlow's log level (which a
  TensorFlow zygote is started with).
* **What a test checks about the process itself**: which modules a command imports
  (tests/test_torch_free.py), what importing magneton does to the environment
  (test_record_imports.py), signals and a terminal (those tests start their own
  processes with `subprocess.Popen`), the CI gate's A/A beside a busy core
  (test_ci_gate_aa.py), the program A/A (test_aa_program.py) and the case suite's
  `magneton eval`, which keep processes of their own. `fresh=True` asks for one. The
  A/A of tests/test_aa_e2e.py compares two forked recordings with each other.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import gc
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
# variables read as the command runs, never by what the base zygote imports (TensorFlow's
# C++ log level: a zygote that imports TensorFlow is started with the command's, below)
RUN_TIME = frozenset({"COLUMNS", "TF_CPP_MIN_LOG_LEVEL"})
# A script that imports transformers or TensorFlow (2.8 s and 2.3 s of CPU per recording)
# is recorded in a zygote that imported it too, with the variables the library reads when
# imported as the command has them; the others in one that did not, so that their runs'
# config rows (which list the libraries loaded) and sys.modules stay a fresh process's.
HEAVY = {"transformers": (), "tensorflow": ("TF_CPP_MIN_LOG_LEVEL",)}
_workers: dict[tuple, Any] = {}  # WarmWorkers by their extra imports and variables


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
    args, full = _command(argv, env)
    if fresh or not _warm_env(full):
        return subprocess.run(
            args, capture_output=True, text=True, env=full, cwd=cwd, input=input, timeout=timeout
        )
    with Forked(args, full, os.fspath(cwd or os.getcwd()), input) as child:
        out, err = child.communicate(timeout)
        return subprocess.CompletedProcess(args, child.returncode, out, err)


def start(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Forked | subprocess.Popen:
    """`magneton ARGV` started and left running, as `subprocess.Popen(..., stdout=PIPE,
    stderr=PIPE, text=True)`: `communicate(timeout)` and `returncode` when it is done."""
    args, full = _command(argv, env)
    if not _warm_env(full):
        pipe = subprocess.PIPE
        return subprocess.Popen(args, stdout=pipe, stderr=pipe, text=True, env=full)
    return Forked(args, full, os.getcwd(), None)


def _command(
    argv: Sequence[str], env: Mapping[str, str] | None
) -> tuple[list[str], dict[str, str]]:
    """The command line a fresh process would run, and its whole environment."""
    return [sys.executable, "-m", "magneton", *map(str, argv)], dict(
        os.environ if env is None else env
    )


def _warm_env(env: Mapping[str, str]) -> bool:
    """Whether `env` differs from this process's only in the workloads' run-time knobs."""
    keys = set(env) ^ set(os.environ) | {k for k in env if env[k] != os.environ.get(k)}
    return all(k.startswith("MAGNETON_TEST_") or k in RUN_TIME for k in keys)


class Forked:
    """One command running in a fork of the warm interpreter; its output goes to files."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: str, input: str | None):
        self.args, self.returncode = args, None
        self._dir = tempfile.TemporaryDirectory(prefix="warm-cli-")
        self._io = {k: os.path.join(self._dir.name, k) for k in ("stdin", "stdout", "stderr")}
        Path(self._io["stdin"]).write_text(input or "")
        job = {"argv": args[3:], "env": env, "io": self._io}
        self._worker = _zygote(_heavy_imports(args[3:], cwd), env)
        self._job = self._worker.submit("warm_cli:command", job, cwd=cwd)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the command (killed at `timeout`: TimeoutExpired); (stdout, stderr)."""
        from magneton.model import WorkerError

        try:
            res = self._worker.result(self._job, timeout_s=3600.0 if timeout is None else timeout)
        except WorkerError as e:
            if "timed out" in str(e):
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from e
            raise
        out, err = (Path(self._io[k]).read_text(errors="replace") for k in ("stdout", "stderr"))
        if not res.ok:  # the child died outside the command (a crash of the interpreter)
            raise AssertionError(f"warm `magneton` child failed: {res.error}\n{err}")
        self.returncode = int(res.value)
        return out, err

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        self._dir.cleanup()


def _heavy_imports(argv: Sequence[str], cwd: str) -> tuple[str, ...]:
    """The `HEAVY` libraries the command's script (its first `.py` argument: `record
    SCRIPT`, `record -- python SCRIPT`) imports among its leading imports."""
    from magneton.tracer.timing.warm import leading_imports

    script = next((a for a in argv if a.endswith(".py")), None)
    if script is None or not os.path.isfile(os.path.join(cwd, script)):
        return ()
    names = set()
    for stmt in leading_imports(os.path.join(cwd, script)):
        if isinstance(stmt, ast.Import):
            names.update(a.name.split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            names.add(stmt.module.split(".")[0])
    return tuple(h for h in HEAVY if h in names)


def _zygote(extra: tuple[str, ...], env: Mapping[str, str]) -> Any:
    from magneton.tracer.timing.warm import WarmWorker

    read = {v: env[v] for lib in extra for v in HEAVY[lib] if v in env}
    key = (extra, tuple(sorted(read.items())))
    w = _workers.get(key)
    if w is None or w.proc.poll() is not None:
        # the zygote finds this module through PYTHONPATH; each job takes the folder out
        # of sys.path again and runs in the test's own environment
        path = os.pathsep.join(filter(None, (TESTS, os.environ.get("PYTHONPATH"))))
        w = _workers[key] = WarmWorker(
            [],
            env={"PYTHONPATH": path, **read},
            preload=(*PRELOAD, *extra),
            tmp_prefix="magneton-warm-cli-",
        )
        atexit.register(w.close)
    return w


def command(job: dict) -> int:
    """In the forked child: be `python -m magneton ARGV` run in the job's environment."""
    # What the zygote imported stays out of this child's collections, as `magneton record`
    # leaves what is alive before its script out of them (tracer/programs/record.py
    # `own_objects_frozen`, which finds this freeze and keeps it): the full collection as
    # the command ends (magneton/cli.py `console`) walked torch's 170,000 objects again
    # in every fork, about 0.1 s each.
    gc.freeze()
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
