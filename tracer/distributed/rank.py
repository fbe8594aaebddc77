"""Recording one rank of a launched job as run `JOB/rank<r>` and writing its shard.

The rank runs the usual two-pass recorder (`record_callable`) around the script's entry,
with the collective rules of `collectives.py` installed on its modes. Choices, and the
failure each prevents:

* Before every entry call the rank passes a `dist.barrier()` outside the dispatch modes
  and outside the measured window: without it the first timed call of a fast rank would
  include waiting for a slow peer's structure pass, and per-call skew would accumulate.
  The run's `time_s` is the entry's own wall time (barrier excluded); the time a rank
  then waits for the slowest rank is reported by `magneton report` as its idle tail.
* A rank that fails records itself as a failed run with its error, so it lands in the DB
  with the others (a rank that dies without a word is written by the launcher).
* SIGTERM from the agent (sent to the surviving ranks when one rank fails) is turned into
  a failed-run record while the rank may still need its peers, but is *deferred* once the
  last measured call has returned: from then on the rank needs nobody, so it finishes
  attribution and writes its shard instead of losing a complete recording.
* `--replay` is refused: replaying a collective on one rank blocks waiting for peers that
  are not replaying.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magneton.model import DistInfo, MagnetonError, Profile, RunInfo
from magneton.tracer.distributed.collectives import CollectiveRecorder, collective_times
from magneton.tracer.distributed.rankenv import RankEnv, rank_env
from magneton.tracer.distributed.shards import Shard, rank_run_name, shard_path, write_shard

REPLAY_REFUSED = (
    "--replay cannot record a multi-rank job: replaying a collective on one rank "
    "blocks waiting for peers that are not replaying"
)


class _Terminated(BaseException):
    """SIGTERM from the launcher while this rank may still need its peers."""


class _SigtermPolicy:
    """Raise on SIGTERM while measuring; defer it once the last measured call returned."""

    def __init__(self) -> None:
        self.deferring = False
        self.pending = False
        self._old: Any = None

    def _handler(self, signum, frame):
        if self.deferring:
            self.pending = True
            return
        raise _Terminated()

    def __enter__(self) -> _SigtermPolicy:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


@dataclass
class _CallLog:
    """Per entry call: the entry's own wall window, CPU time and the barrier release."""

    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    ref_ns: list[int] = field(default_factory=list)  # right after the pre-call barrier


def _make_entry(
    entry_fn: Callable,
    recorder: CollectiveRecorder,
    total_calls: int,
    structure_call: int,
    policy: _SigtermPolicy,
    log: _CallLog,
) -> Callable:
    import torch.distributed as dist
    from torch.utils._python_dispatch import _disable_current_modes

    state = {"n": 0}

    def magneton_rank_entry(*args: Any, **kwargs: Any) -> Any:
        n = state["n"]
        state["n"] += 1
        recorder.call = n
        recorder.wait_all = n == structure_call
        if dist.is_available() and dist.is_initialized():
            # outside every dispatch mode: not an operator of the run, not in its window
            with _disable_current_modes():
                dist.barrier()
        log.ref_ns.append(time.perf_counter_ns())
        c0 = time.process_time_ns()
        t0 = time.perf_counter_ns()
        try:
            return entry_fn(*args, **kwargs)
        finally:
            log.end_ns.append(time.perf_counter_ns())
            log.start_ns.append(t0)
            log.cpu_ns.append(time.process_time_ns() - c0)
            recorder.wait_all = False
            if n + 1 >= total_calls:
                policy.deferring = True  # no peer is needed any more

    return magneton_rank_entry


def record_rank(
    script: str | Path,
    *,
    job: str,
    shard_dir: str | Path,
    entry: str = "main",
    setup: str = "setup",
    options: Any = None,
) -> Shard:
    """Record this process's rank of a launched job (torchrun's or srun's variables in the
    environment) as run `job/rank<r>` and write its shard. Failures are written as failed
    shards and re-raised as MagnetonError."""
    from magneton.tracer.programs.record import RecordOptions

    opts = options or RecordOptions()
    env = rank_env()
    if env is None:
        raise MagnetonError(
            "no rank in the environment (RANK/WORLD_SIZE, or SLURM_PROCID/SLURM_NTASKS in "
            "an srun step): start ranks with `magneton record --nproc N`, torchrun "
            "(`torchrun --nproc-per-node N -m magneton.tracer.distributed.worker ...`) or srun"
        )
    if opts.replay:
        raise MagnetonError(REPLAY_REFUSED)
    env.export()
    script = str(Path(script).resolve())
    run = rank_run_name(job, env.rank)
    info = RunInfo(
        name=run,
        script=script,
        entry=entry,
        setup=setup,
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        status="failed",
        warmup=opts.warmup,
        repeat=opts.repeat,
        host=socket.gethostname(),
        rank=env.rank,
        world_size=env.world_size,
    )
    out = shard_path(shard_dir, env.rank)
    policy = _SigtermPolicy()
    old_argv = sys.argv
    sys.argv = [script]
    try:
        with policy:
            try:
                profile = _record_script(script, entry, setup, run, opts, policy, env)
                policy.deferring = True
                shard = Shard(job, env.rank, env.world_size, profile.run, profile)
                write_shard(out, shard)
                return shard
            except (_Terminated, KeyboardInterrupt, Exception) as e:
                policy.deferring = True
                info.error, message, code = _failure(e, script, env.rank)
                write_shard(out, Shard(job=job, rank=env.rank, world_size=env.world_size, run=info))
                if isinstance(e, MagnetonError):
                    raise
                raise MagnetonError(message, exit_code=code) from None
    finally:
        sys.argv = old_argv


def _failure(e: BaseException, script: str, rank: int) -> tuple[str, str, int]:
    """(error kept in the failed run, one-line message, exit code) for what stopped a rank."""
    if isinstance(e, _Terminated):
        error = (
            "stopped by the launcher (SIGTERM) while recording: another rank failed "
            "or the job was stopped"
        )
        return error, f"rank {rank}: {error}", 143
    if isinstance(e, KeyboardInterrupt):
        error = "interrupted (Ctrl-C) while recording"
        return error, f"rank {rank}: {error}", 130
    if isinstance(e, MagnetonError):
        return str(e), str(e), e.exit_code
    if os.environ.get("MAGNETON_DEBUG"):
        traceback.print_exception(e)
    msg = " ".join(str(e).split()) or "(no message)"
    if len(msg) > 400:
        msg = msg[:397] + "..."
    error = f"{type(e).__name__}{_user_location(e, script)}: {msg}"
    return error, f"rank {rank}: {os.path.basename(script)} raised {error}", 1


def _record_script(
    script: str,
    entry: str,
    setup: str,
    run: str,
    opts: Any,
    policy: _SigtermPolicy,
    env: RankEnv,
) -> Profile:
    """Import the script, run its setup outside the measurement, record its entry."""
    from magneton.tracer.programs.record import load_script, record_callable

    if not os.path.isfile(script):
        raise MagnetonError(f"no such script: {script}")
    module = load_script(script)
    entry_fn = getattr(module, entry, None)
    if not callable(entry_fn):
        raise MagnetonError(f"{script} has no function '{entry}' (use --entry NAME)")
    setup_fn = getattr(module, setup, None) if setup else None
    if setup and setup_fn is None and setup != "setup":
        raise MagnetonError(f"{script} has no function '{setup}' (use --setup NAME)")
    result = setup_fn() if callable(setup_fn) else None
    args = () if result is None else result if isinstance(result, tuple) else (result,)
    return _record_rank_profile(
        record_callable,
        entry_fn,
        args,
        run=run,
        opts=opts,
        script=script,
        entry=entry,
        setup=setup if callable(setup_fn) else "",
        globals_=vars(module),
        policy=policy,
        env=env,
    )


def _record_rank_profile(
    record_callable: Callable,
    entry_fn: Callable,
    args: tuple,
    *,
    run: str,
    opts: Any,
    script: str,
    entry: str,
    setup: str,
    globals_: dict,
    policy: _SigtermPolicy,
    env: RankEnv,
) -> Profile:
    import torch.distributed as dist

    from magneton.tracer.capture.dispatch import StructureCapture, TimingCapture
    from magneton.tracer.timing.passes import CpuTimingCapture

    log = _CallLog()
    total = opts.warmup + 1 + opts.repeat
    with CollectiveRecorder().install(
        # dispatch rules bind to exact classes: the CPU-clock capture needs its own
        [TimingCapture, CpuTimingCapture, StructureCapture]
    ) as recorder:
        fn = _make_entry(entry_fn, recorder, total, opts.warmup, policy, log)
        profile = record_callable(
            fn,
            args,
            run=run,
            db=None,
            options=dataclasses.replace(opts, adaptive=False),  # ranks pair iterations
            script=script,
            entry=entry,
            setup=setup,
            globals_=globals_,
        )
    timing_calls = list(range(opts.warmup + 1, total))
    # the run's time is the entry's own time, without the alignment barrier
    walls = [(log.end_ns[c] - log.start_ns[c]) / 1e9 for c in timing_calls if c < len(log.end_ns)]
    if walls:
        profile.run.time_s = sum(walls) / len(walls)
    profile.run.rank, profile.run.world_size = env.rank, env.world_size
    colls, iterations = collective_times(profile, recorder.events, timing_calls)
    initialized = dist.is_available() and dist.is_initialized()

    def per_call(values: list[int]) -> list[int]:
        return [values[c] for c in timing_calls if c < len(values)]

    profile.dist = DistInfo(
        rank=profile.run.rank,
        world_size=profile.run.world_size,
        local_rank=env.local_rank,
        host=profile.run.host,
        initialized=initialized,
        backend=str(dist.get_backend()) if initialized else "",
        master=f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}".strip(
            ":"
        ),
        launcher=env.launcher,
        job_id=env.job_id,
        iterations=iterations,
        mismatched_iterations=len(timing_calls) - len(iterations),
        collectives=colls,
        call_start_ns=per_call(log.start_ns),
        call_end_ns=per_call(log.end_ns),
        call_cpu_ns=per_call(log.cpu_ns),
        call_ref_ns=per_call(log.ref_ns),
    )
    return profile


def _user_location(exc: BaseException, script: str) -> str:
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if os.path.abspath(fr.filename) == script:
            return f" at {os.path.basename(fr.filename)}:{fr.lineno}"
    return ""


def _teardown() -> None:
    """Destroy the process group if the script left one (never blocks on dead peers: gloo's
    destroy does not communicate)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def run_worker(
    script: str, *, job: str, shard_dir: str | Path, entry: str, setup: str, opts: Any
) -> int:
    """Record this rank, report it in one line and return the process's exit code."""
    quiet = bool(os.environ.get("MAGNETON_LAUNCHER"))
    try:
        shard = record_rank(
            script, job=job, shard_dir=shard_dir, entry=entry, setup=setup, options=opts
        )
    except MagnetonError as e:
        if not quiet:  # under `magneton record --nproc` the launcher reports every rank
            print(f"magneton: {e}", file=sys.stderr)
        _teardown()
        return e.exit_code
    _teardown()
    if not quiet:
        r = shard.run
        assert shard.profile is not None  # record_rank returns a recorded rank or raises
        print(
            f"rank {shard.rank}: recorded '{r.name}' ({len(shard.profile.ops)} operators, "
            f"{r.time_s * 1e3:.2f} ms/call) -> {shard_path(shard_dir, shard.rank)}"
        )
    return 0
