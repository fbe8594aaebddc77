"""A warm worker: import a recorded run's libraries once, then fork a fresh child per job.

Re-running a recorded script (the key-variable re-run, an A/B re-measurement) in a fresh
`python` costs the interpreter start plus the script's imports — for an HF model,
`import transformers` is 5–7 s of CPU, over 90% of a re-run. A `WarmWorker` is one
process (the *zygote*) that does those imports once, then `os.fork()`s one child per job:
each child starts with the libraries already in `sys.modules` and runs one function.

    with WarmWorker([script_a, script_b], env=env, preload=["magneton.diagnose.cause.keyvar"],
                    tmp_prefix="magneton-rerun-") as w:
        ja = w.submit("magneton.diagnose.cause.keyvar:run_side", spec_a, cwd=dir_a)
        jb = w.submit("magneton.diagnose.cause.keyvar:run_side", spec_b, cwd=dir_b)
        ra, rb = w.result(ja, timeout_s=240), w.result(jb, timeout_s=240)

`submit` returns at once (the zygote may still be importing: jobs queue), so a caller
can start the worker before its own preparation and overlap the two.

A diff holds one `WarmPool` (a `WarmWorker` per recorded environment) from detection to
the end: confirmation's per-side re-measurement workers (tracer/timing/remeasure.py, long-lived
jobs that talk to the diff over a socket of their own, using `finished(job)` to notice a
job that died) and the key-variable re-run are jobs of the same zygotes, so the libraries
are imported once per diff, not once per stage (three imports of transformers were most
of a diff of an HF pair). A caller that runs a diff's scripts once more after the diff
(`magneton eval`'s check of a patched script) keeps its workers in a `WarmHold`. A job is
`"module:function"` called with one JSON value; it returns a JSON value (`JobResult.value`)
or raises (`JobResult.error`, one line). The function's module must be importable in the
child: a package module (name it in `preload` too, so the zygote imports it once) or a
module in the job's `cwd`. Jobs run in parallel; a caller that times its jobs (an A/B
re-measurement) waits for each result before submitting the next, and can interleave
sides in one worker when both were recorded in the same environment. `JobResult.seconds`
and `cpu_s` are the child's own, from the fork; `WarmWorker.ready()` gives the zygote's
import time (`WorkerStats`).

What the zygote imports, and why the children are as good as fresh processes:

* Only the module-level import statements that *every* script starts with (the common
  prefix, compared as parsed code), plus torch and `preload`. A statement one script
  lacks (`import intel_extension_for_pytorch` patches torch when imported) must not leak
  into the other side's child, and the same statements in the same order leave the same
  state. Each child then runs its own script as a fresh process would; the cached modules
  make its imports cheap.
* One environment per worker (`env` on top of ours): libraries read it when imported
  (libgomp reads `OMP_NUM_THREADS` when loaded, transformers its `HF_*` settings), so jobs
  with different recorded environments need different workers. The zygote runs in an
  empty directory with nothing of the scripts' folders on `sys.path`, so no user module
  is imported there; a child gets its job's `cwd` as working directory and `sys.path[0]`,
  as `python -m` there would.
* OpenMP: GNU libgomp (torch's OpenMP runtime) is not fork-safe once it has started its
  thread pool — a child whose parent ran a parallel region hangs in its own first one.
  libgomp starts pool threads only for a team larger than one, so the zygote sets torch's
  intra-op threads to 1 (`torch.set_num_threads(1)`, which sets OpenMP's and MKL's)
  *before* any other import, and each child restores the value the zygote read first (the
  default a fresh process computes from the same environment; confirmation's timed rounds
  depend on it: a child left at one thread would measure another program). If an
  import changed the
  setting, or initialised CUDA (`torch.cuda.is_initialized()`; the CUDA driver does not
  survive a fork), the zygote does not fork: it runs each job in a fresh interpreter
  (`python -m magneton.tracer.timing.warm --job ...`) instead, with the same protocol — correct,
  only without the saving (`WarmWorker.forking` says which). During the imports the zygote
  sets `PYTORCH_NVML_BASED_CUDA_CHECK=1` so that `torch.cuda.is_available()` asks NVML
  instead of initialising the driver; the children get the variable back as it was.
  OpenBLAS (numpy, scipy) starts its threads at import but stops them around a fork
  (it registers `pthread_atfork` handlers).
* The allocator is the one thing a fork does not start fresh: glibc raises its mmap
  threshold whenever a large mmapped block is freed, so a zygote's import history would
  decide whether a child's large tensors are mmapped or come from the heap (it moved
  single operators by up to ±18% against a fresh process, docs/benchmarks.md). The
  zygote pins both thresholds before it imports anything (tracer/programs/allocator.py), as
  `magneton record` does in a fresh process, so forks and fresh recordings allocate
  alike; confirmation still only compares forks of the same zygote (or of zygotes that
  imported alike).
* The zygote's imports are not frozen out of the cyclic collector (`gc.freeze()`), though
  each confirmation round's timing pass then starts with a full collection that walks
  them (0.1-0.2 s): that walk is the busy time before the round's timed call, and without
  it the rounds of short calls scattered (a 2.7 ms against a 0.6 ms GELU pair went
  unconfirmed); only a busy wait as long steadied them again (docs/benchmarks.md,
  `diagnosis_time.py`).
* The zygote has no Python threads: it waits on its command pipe and the children's
  pidfds with `select`, so nothing holds a lock when it forks.

Cleanup: the zygote is the leader of its own process group and every child stays in it,
so `close()` (also on Ctrl-C in the caller and on timeouts, through the context manager)
kills the whole group with SIGKILL and removes the worker's temporary directory; if the
caller dies (even by SIGKILL), the zygote sees its command pipe close, removes the
directory and kills its group itself. Children
run with stdout on /dev/null and stderr in a file, whose last line explains a crash.
When both die (`kill -9` of both, the OOM killer), the directory and its sockets stayed
in /tmp for good: each directory names its owner (pid and start time, `owner.json`), and
every new worker first removes this user's directories whose owner is gone
(`remove_stale_dirs`).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from magneton.model import WorkerError

# set in the zygote while it imports (see the module docstring), never leaked to a job
_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"

# False: every job runs in a fresh interpreter and the zygote imports nothing — the cost
# of a re-run without this module, for benchmarks/diagnosis_time.py's comparison
FORK = True


@dataclass
class JobResult:
    """What one job produced. `seconds` is the child's wall time from fork (or spawn) to
    exit; `cpu_s` its CPU time; `value` the job function's return value."""

    ok: bool
    value: Any = None
    error: str = ""
    seconds: float = 0.0
    cpu_s: float = 0.0


@dataclass
class WorkerStats:
    """Where a worker's time went: the zygote's start and imports (wall and CPU seconds,
    measured in the zygote), and whether its children are forks or fresh processes."""

    ready_s: float = 0.0  # zygote: interpreter start excluded, imports included
    ready_cpu_s: float = 0.0
    forking: bool = False
    why_not_forking: str = ""
    imported: list[str] = field(default_factory=list)  # the import statements it ran


# --------------------------------------------------------------------------------------
# Which imports the zygote may run
# --------------------------------------------------------------------------------------


def leading_imports(script: str) -> list[ast.stmt]:
    """The script's module-level import statements (those alone on their lines), in order."""
    try:
        tree = ast.parse(Path(script).read_text(encoding="utf-8"), script)
    except (OSError, SyntaxError, ValueError):
        return []
    lines: dict[int, int] = {}
    for node in tree.body:
        for ln in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            lines[ln] = lines.get(ln, 0) + 1
    return [
        n
        for n in tree.body
        if isinstance(n, ast.Import)
        or (isinstance(n, ast.ImportFrom) and n.level == 0)  # relative: the script's package
        if all(lines[ln] == 1 for ln in range(n.lineno, (n.end_lineno or n.lineno) + 1))
    ]


def common_imports(scripts: Sequence[str]) -> list[str]:
    """The import statements every script begins its list of imports with (the common
    prefix), as source text the zygote can run."""
    lists = [leading_imports(s) for s in scripts]
    if not lists:
        return []
    out: list[str] = []
    for stmts in zip(*lists, strict=False):
        dumps = {ast.dump(s) for s in stmts}
        if len(dumps) != 1:
            break
        out.append(ast.unparse(stmts[0]))
    return out


# --------------------------------------------------------------------------------------
# The caller's side
# --------------------------------------------------------------------------------------


# the prefixes of this module's temporary directories (WarmWorker `tmp_prefix`)
@contextlib.contextmanager
def unix_address(path: str) -> Iterator[str]:
    """An AF_UNIX address for the socket file `path` that fits the kernel's 107 bytes.

    A worker directory under a long TMPDIR (pytest's per-worker temp dirs, a deep
    $TMPDIR) made `bind` fail with "AF_UNIX path too long" and every finding came back
    unconfirmed. A longer path is reached through an open descriptor of its directory
    (`/proc/self/fd/N/name`), which both the diff (bind) and its job (connect) use."""
    if len(os.fsencode(path)) <= 100:
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


TMP_PREFIXES = ("magneton-diff-", "magneton-warm-", "magneton-rerun-")
_OWNER = "owner.json"
# a directory without an owner file (an older Magneton's) is stale after this long
_UNOWNED_STALE_S = 24 * 3600.0


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with
    the pid it names one process, not a later one that reuses the number. "" off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _write_owner(tmp: str) -> None:
    with contextlib.suppress(OSError):
        Path(tmp, _OWNER).write_text(
            json.dumps({"pid": os.getpid(), "start": _process_start(os.getpid())})
        )


def _owner_alive(tmp: str) -> bool:
    """Whether the process that made `tmp` may still use it (unknown: assume it may)."""
    try:
        owner = json.loads(Path(tmp, _OWNER).read_text())
        pid, start = int(owner["pid"]), str(owner.get("start", ""))
    except FileNotFoundError:
        try:
            return time.time() - os.stat(tmp).st_mtime < _UNOWNED_STALE_S
        except OSError:
            return True
    except (OSError, ValueError, KeyError, TypeError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process with that pid: not ours, but alive
    now = _process_start(pid)
    return not (start and now and now != start)  # the pid was reused: the owner is gone


def remove_stale_dirs(prefix: str = "") -> list[str]:
    """Remove this user's warm-worker directories whose owner died without cleaning up
    (`kill -9` of a diff left `/tmp/magneton-diff-*/` with its sockets, forever; the
    zygote removes the directory only when it outlives its caller long enough to notice).
    Returns what was removed."""
    removed: list[str] = []
    base = tempfile.gettempdir()
    prefixes = tuple(dict.fromkeys((*TMP_PREFIXES, *([prefix] if prefix else []))))
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefixes)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        # only our own real directories (never follow a link planted in /tmp)
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
            continue
        if not _owner_alive(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class WarmWorker:
    """A zygote process for one environment; see the module docstring.

    `scripts`: the scripts the jobs will run (their common imports are done once).
    `env`: variables set on top of this process's environment, for the zygote and every
    job. `preload`: modules the jobs need besides the scripts' (the job functions' own
    modules). `tmp_prefix`: prefix of the worker's temporary directory (removed by
    `close()`). `fork=False` runs every job in a fresh interpreter (default: `FORK`).
    The zygote starts at once and imports in the background.
    """

    def __init__(
        self,
        scripts: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        preload: Iterable[str] = (),
        tmp_prefix: str = "magneton-warm-",
        fork: bool | None = None,
    ):
        remove_stale_dirs(tmp_prefix)
        self.tmp = tempfile.mkdtemp(prefix=tmp_prefix)
        _write_owner(self.tmp)
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.env.setdefault("KINETO_LOG_LEVEL", "5")  # torch.profiler's banner on stderr
        zenv = dict(self.env)
        zenv.setdefault(_NVML_CHECK, "1")
        self.imports = common_imports(scripts)  # what the zygote runs (WarmHold.last_for)
        config = {
            "imports": self.imports,
            "preload": list(preload),
            "env": self.env,
            "tmp": self.tmp,
            "fork": FORK if fork is None else fork,
        }
        cfg = os.path.join(self.tmp, "zygote.json")
        try:
            Path(cfg).write_text(json.dumps(config))
            self._err = open(os.path.join(self.tmp, "zygote.err"), "wb")  # noqa: SIM115
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "magneton.tracer.timing.warm", "--zygote", cfg],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
                env=zenv,
                cwd=self.tmp,  # nothing of the scripts' folders is importable there
                start_new_session=True,  # its own process group: close() kills all of it
            )
        except BaseException:  # no process to clean up after: only the directory
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        # the zygote's job queue and report pipes (PIPE above: never None)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._to_zygote: IO[bytes] = self.proc.stdin
        self._from_zygote: IO[bytes] = self.proc.stdout
        self.stats: WorkerStats | None = None
        self._next = 0
        self._done: dict[int, dict] = {}
        self._buf = b""
        self._closed = False

    # -- jobs -------------------------------------------------------------------------

    def submit(self, target: str, arg: Any, *, cwd: str | None = None) -> int:
        """Queue `target(arg)` ("package.module:function") to run in a child with working
        directory `cwd`; returns the job's id for `result`."""
        jid = self._next
        self._next += 1
        job = {"id": jid, "target": target, "cwd": cwd or os.getcwd()}
        Path(self._path(jid, "in.json")).write_text(json.dumps(arg))
        self._send(job)
        return jid

    def result(self, job: int, *, timeout_s: float) -> JobResult:
        """Wait for a job; on timeout the job's child is killed and WorkerError raised."""
        deadline = time.monotonic() + timeout_s
        while job not in self._done:
            left = deadline - time.monotonic()
            if left <= 0:
                self._send({"kill": job})
                raise WorkerError(f"timed out after {timeout_s:.0f} s")
            if not self._pump(left):
                raise WorkerError(self._died())
        status = self._done[job]
        out = self._path(job, "out.json")
        if not os.path.exists(out):
            tail = self._err_tail(f"{job}.err")
            code = status.get("exit")
            return JobResult(False, error=f"crashed (exit status {code}): {tail}"[:500])
        data = json.loads(Path(out).read_text())
        return JobResult(
            ok=bool(data["ok"]),
            value=data.get("value"),
            error=data.get("error", ""),
            seconds=float(data.get("seconds", 0.0)),
            cpu_s=float(data.get("cpu_s", 0.0)),
        )

    def finished(self, job: int, *, timeout_s: float = 0.0) -> bool:
        """Whether the job's process has exited, reading the zygote's reports for up to
        `timeout_s`; WorkerError when the zygote itself died. For a caller that talks to
        a running job over a channel of its own and must not wait on a dead one."""
        deadline = time.monotonic() + timeout_s
        while job not in self._done:
            if not self._pump(max(0.0, deadline - time.monotonic())):
                raise WorkerError(self._died())
            if time.monotonic() >= deadline:
                break
        return job in self._done

    def job_log_tail(self, job: int) -> str:
        """The last line the job wrote to its stderr (its crash report, if any)."""
        return self._err_tail(f"{job}.err")

    def ready(self, *, timeout_s: float) -> WorkerStats:
        """Wait until the zygote has done its imports; its statistics."""
        deadline = time.monotonic() + timeout_s
        while self.stats is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"the worker was not ready after {timeout_s:.0f} s")
            if not self._pump(left):
                raise WorkerError(self._died())
        return self.stats

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Kill the zygote and every child (one process group) and remove the files."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self._to_zygote.close()
        self.proc.wait()
        with contextlib.suppress(Exception):
            self._from_zygote.close()
        self._err.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> WarmWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------

    def _path(self, job: int, suffix: str) -> str:
        return os.path.join(self.tmp, f"{job}.{suffix}")

    def _send(self, msg: dict) -> None:
        with contextlib.suppress(BrokenPipeError):  # a dead zygote shows up in _pump
            self._to_zygote.write((json.dumps(msg) + "\n").encode())
            self._to_zygote.flush()

    def _pump(self, timeout_s: float) -> bool:
        """Read the zygote's reports for up to `timeout_s`; False once it has exited."""
        r, _, _ = select.select([self._from_zygote], [], [], timeout_s)
        if not r:
            return True
        chunk = os.read(self._from_zygote.fileno(), 65536)
        if not chunk:
            return False
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "ready" in msg:
                self.stats = WorkerStats(**msg["ready"])
            elif "exit" in msg:
                self._done[msg["id"]] = msg
        return True

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        return f"the worker process died (exit status {code}): {self._err_tail('zygote.err')}"

    def _err_tail(self, name: str) -> str:
        try:
            text = Path(self.tmp, name).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return (text[-1:] or [""])[0][:300]


class WarmPool:
    """The warm workers of one diff: one zygote per recorded environment, shared by every
    stage that runs the diff's scripts (confirmation's re-measurement workers, the
    key-variable re-run), so each library is imported once per diff instead of once per
    stage (three imports of transformers were most of a diff of an HF pair).

    `sides`: side name -> (script, env). Sides with the same environment share a worker
    whose zygote imports the statements all of their scripts begin with; `worker(script,
    env)` is the one to submit a job of that script to. `starts` counts the zygotes this
    pool launched. `close()` (or leaving the `with`) ends every worker.
    """

    def __init__(
        self,
        sides: Mapping[str, tuple[str, Mapping[str, str]]],
        *,
        preload: Iterable[str] = (),
        tmp_prefix: str = "magneton-warm-",
        hold: WarmHold | None = None,
    ):
        groups: dict[tuple, list[str]] = {}
        envs: dict[tuple, dict[str, str]] = {}
        for script, env in sides.values():
            key = _env_key(env)
            envs[key] = dict(env)
            if script not in groups.setdefault(key, []):
                groups[key].append(script)
        self.workers: dict[tuple, tuple[WarmWorker, list[str]]] = {}
        self._hold = hold  # its workers are the hold's to end
        if hold is not None:
            hold.release()  # an earlier diff's: never two diffs' zygotes alive
        try:
            for key, scripts in groups.items():
                worker = WarmWorker(scripts, env=envs[key], preload=preload, tmp_prefix=tmp_prefix)
                self.workers[key] = (worker, scripts)
        except BaseException:  # not yet the hold's: end what started
            for worker, _ in self.workers.values():
                worker.close()
            raise
        if hold is not None:
            hold.take(w for w, _ in self.workers.values())

    @property
    def starts(self) -> int:
        """How many zygotes this pool started (one per recorded environment)."""
        return len(self.workers)

    def worker(self, scripts: Iterable[str], env: Mapping[str, str]) -> WarmWorker | None:
        """The worker for jobs of `scripts` in environment `env`; None when this pool has
        none whose zygote was started for all of them (its imports were chosen for its
        own scripts: another script's job could inherit a module that script lacks)."""
        entry = self.workers.get(_env_key(env))
        if entry is None or not set(scripts) <= set(entry[1]):
            return None
        return entry[0]

    def close(self) -> None:
        if self._hold is not None:
            return  # held: the hold ends them
        for worker, _ in self.workers.values():
            worker.close()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _env_key(env: Mapping[str, str]) -> tuple:
    return tuple(sorted(env.items()))


class WarmHold:
    """The warm workers of the last diff, held open after it for one-off runs of its
    scripts: `magneton eval` checks that a case's patched script still runs in a child of
    the zygote the case's diff re-ran its scripts in (`last_for`), not in a fresh
    interpreter importing torch again, then `release`s them before the next case.

    A diff never takes an earlier diff's zygote, though one with the same imports and
    environment would do the same imports: lent from case to case, zygotes measured
    differently. The corpus's negative control neg_refactor, diffed after
    clone_detach_copy (the same imports) from the same recordings, had its rounds confirm
    a 1.5-1.7x GELU difference in 3 of 6 evaluations with the earlier case's zygote, in
    1 of 14 with a zygote of its own and 0 of 14 with each diff ending its own workers.
    """

    def __init__(self) -> None:
        self._held: list[WarmWorker] = []

    def take(self, workers: Iterable[WarmWorker]) -> None:
        """Hold `workers` (a diff's, started by its pool) until `release`."""
        self._held.extend(workers)

    def last_for(self, script: str) -> WarmWorker | None:
        """The held worker whose imports `script` begins with, for a one-off run of it (a
        job there is the fresh process of that script); None when none is."""
        lead = common_imports([script])  # one script: all its leading imports
        for worker in reversed(self._held):
            if worker.proc.poll() is None and lead[: len(worker.imports)] == worker.imports:
                return worker
        return None

    def release(self) -> None:
        """End every held worker."""
        while self._held:
            self._held.pop().close()

    def __enter__(self) -> WarmHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# --------------------------------------------------------------------------------------
# The zygote (python -m magneton.tracer.timing.warm --zygote CONFIG)
# --------------------------------------------------------------------------------------


def _zygote_imports(config: dict) -> WorkerStats:
    """Import torch with one intra-op thread, then the common imports and preloads."""
    t0, c0 = time.perf_counter(), time.process_time()
    config["path0"] = sys.path[0]  # the zygote's own folder, replaced by each job's
    from magneton.tracer.programs import steady

    if steady.requested():  # a steady recording's re-run: before anything allocates
        steady.apply()  # every fork inherits it (tracer/programs/steady.py)
    stats = WorkerStats()
    if not config.get("fork", True):
        stats.why_not_forking = "disabled (fork=False)"
        return stats
    why = ""
    have_torch = False
    try:
        import torch

        have_torch = True
        config["threads"] = torch.get_num_threads()  # the fresh-process default
        torch.set_num_threads(1)  # libgomp starts no pool for a team of one
    except ImportError:
        pass
    scratch: dict = {"__name__": "magneton_zygote"}
    for stmt in config["imports"]:
        try:
            exec(compile(stmt, "<zygote>", "exec"), scratch)
            stats.imported.append(stmt)
        except Exception:  # the child's own import raises it properly if it matters
            pass
    for mod in config["preload"]:
        importlib.import_module(mod)
    if have_torch:
        if torch.get_num_threads() != 1:
            why = "an import changed torch's thread count (OpenMP may have started threads)"
        elif torch.cuda.is_initialized():
            why = "an import initialised CUDA, which does not survive a fork"
    stats.forking = not why and hasattr(os, "fork")
    stats.why_not_forking = why or ("" if hasattr(os, "fork") else "no os.fork here")
    stats.ready_s = round(time.perf_counter() - t0, 3)
    stats.ready_cpu_s = round(time.process_time() - c0, 3)
    return stats


def _run_job(tmp: str, jid: int, target: str) -> None:
    """In the child: run one job and write `{jid}.out.json`."""
    t0, c0 = time.perf_counter(), time.process_time()
    result: dict = {"ok": False}
    try:
        mod, _, fn = target.partition(":")
        arg = json.loads(Path(tmp, f"{jid}.in.json").read_text())
        result["value"] = getattr(importlib.import_module(mod), fn)(arg)
        result["ok"] = True
    except BaseException as e:  # the job failed: report it, never hang the caller
        result["error"] = f"{type(e).__name__}: {e}"[:500]
    result["seconds"] = time.perf_counter() - t0
    result["cpu_s"] = time.process_time() - c0
    out = Path(tmp, f"{jid}.out.json")
    tmp_out = out.with_suffix(".part")
    tmp_out.write_text(json.dumps(result))
    tmp_out.rename(out)  # complete or absent: a child killed mid-write leaves no result


def _become_job(config: dict, job: dict) -> None:
    """In a forked child: look like a fresh `python` started in the job's directory."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    tmp, jid = config["tmp"], job["id"]
    devnull = os.open(os.devnull, os.O_RDWR)
    err = os.open(os.path.join(tmp, f"{jid}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(err, 2)
    os.environ.clear()
    os.environ.update(config["env"])
    os.chdir(job["cwd"])
    # `python -m` put the zygote's folder first; an import may have inserted before it
    sys.path[sys.path.index(config["path0"]) if config["path0"] in sys.path else 0] = job["cwd"]
    if "threads" in config:
        import torch

        torch.set_num_threads(config["threads"])


def _spawn_job(config: dict, job: dict) -> int:
    """Run a job in a fresh interpreter (when forking is unsafe); its pid."""
    tmp, jid = config["tmp"], job["id"]
    with open(os.path.join(tmp, f"{jid}.err"), "wb") as err:
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "magneton.tracer.timing.warm",
                "--job",
                tmp,
                str(jid),
                job["target"],
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=config["env"],
            cwd=job["cwd"],
        )
    p.returncode = 0  # reaped by the zygote's own waitpid, not by Popen
    return p.pid


def _start(config: dict, stats: WorkerStats, job: dict) -> int:
    if not stats.forking:
        return _spawn_job(config, job)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _become_job(config, job)
            _run_job(config["tmp"], job["id"], job["target"])
            code = 0
        except BaseException:  # Magneton's own failure: its traceback is the crash report
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os._exit(code)  # never run the zygote's atexit handlers or its loop
    return pid


def _zygote(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    stats = _zygote_imports(config)
    report = sys.stdout.buffer

    def send(msg: dict) -> None:
        report.write((json.dumps(msg) + "\n").encode())
        report.flush()

    send({"ready": stats.__dict__})
    # job id -> (pid, pidfd): an exited child makes its pidfd readable (Linux >= 5.3);
    # without pidfds the loop polls every 50 ms instead
    children: dict[int, tuple[int, int]] = {}
    pidfds = hasattr(os, "pidfd_open")
    # typeshed has sys.stdin.buffer as a BinaryIO; it is a BufferedReader of a FileIO
    stdin = cast("io.BufferedReader[io.FileIO]", sys.stdin.buffer).raw
    buf = b""
    while True:
        fds = [stdin.fileno(), *(fd for _, fd in children.values() if fd >= 0)]
        readable, _, _ = select.select(fds, [], [], None if pidfds else 0.05)
        for jid, (pid, fd) in list(children.items()):
            if fd >= 0 and fd not in readable:
                continue
            done, status = os.waitpid(pid, 0 if fd >= 0 else os.WNOHANG)
            if done == 0:
                continue
            if fd >= 0:
                os.close(fd)
            del children[jid]
            send({"id": jid, "exit": os.waitstatus_to_exitcode(status)})
        if stdin.fileno() not in readable:
            continue
        chunk = os.read(stdin.fileno(), 65536)
        if not chunk:  # the caller is gone: take every child and the files with us
            for pid, _ in children.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # no child writes once the files go
            shutil.rmtree(config["tmp"], ignore_errors=True)
            os.killpg(0, signal.SIGKILL)
            return 0
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "kill" in msg:
                if msg["kill"] in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(children[msg["kill"]][0], signal.SIGKILL)
                continue
            pid = _start(config, stats, msg)
            children[msg["id"]] = (pid, os.pidfd_open(pid) if pidfds else -1)


def _job_main(tmp: str, jid: str, target: str) -> int:
    """A job in a fresh interpreter (`--job`): the environment and cwd are already set."""
    sys.path[0] = os.getcwd()
    from magneton.tracer.programs import steady

    if steady.requested():  # as a fork has it from the zygote
        steady.apply()
    _run_job(tmp, int(jid), target)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--zygote":
        sys.exit(_zygote(sys.argv[2]))
    sys.exit(_job_main(*sys.argv[2:5]))
