"""Launching the ranks of a job on this host: `magneton record SCRIPT --nproc N`.

The ranks are started by torch.distributed's own launcher (the elastic agent behind
`torchrun`) on loopback; each records itself (`rank.py`) into a shard, and after the job
the launcher merges the shards into the DB (`merge.py`). Choices, and the failure each
prevents:

* The workers get `GLOO_SOCKET_IFNAME` set to the loopback interface (unless set) and the
  rendezvous on 127.0.0.1, so a local job never listens on or talks to another address.
* A rank that dies without a word (os._exit, SIGKILL, OOM) gets a failed run written by
  the launcher from the agent's exit status; the other ranks' runs still land.
* Shards left over from an aborted attempt are deleted before the job starts, so a merge
  never mixes in stale ranks.
* `JobSpec` is typed, so the launcher does not depend on the CLI's argparse namespace
  (the CLI builds one; so can any other caller).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magneton.model import MagnetonError, RunInfo, WorkloadError
from magneton.tracer.distributed.merge import MergedRun, merge_shards, opened_db
from magneton.tracer.distributed.rank import REPLAY_REFUSED, run_worker
from magneton.tracer.distributed.rankenv import rank_env
from magneton.tracer.distributed.shards import (
    SHARD_SUFFIX,
    Shard,
    default_shard_dir,
    rank_run_name,
    read_shard,
)


@dataclass(frozen=True)
class JobSpec:
    """What to record as a multi-rank job: ranks become runs `name/rank<r>` in `db`."""

    script: str
    db: str
    name: str
    nproc: int = 1  # ranks to launch on this host
    entry: str = "main"
    setup: str = "setup"


def record_distributed(job: JobSpec, opts: Any) -> int:
    """`magneton record ... --nproc N` (N > 1): launch N local ranks and merge them; inside
    a rank started by torchrun or srun, record this rank's shard instead."""
    if rank_env() is not None and not os.environ.get("MAGNETON_LAUNCHER"):
        return run_worker(
            job.script,
            job=job.name,
            shard_dir=default_shard_dir(job.db, job.name),
            entry=job.entry,
            setup=job.setup,
            opts=opts,
        )
    merged = launch(job, opts)
    failed = [m for m in merged if m.status != "ok"]
    for m in merged:
        if m.status == "ok":
            print(
                f"recorded run '{m.run}': {m.ops} operators, {m.time_s * 1e3:.2f} ms/call, "
                f"{m.energy_j:.4g} J/call ({m.energy_method}, {m.power_source})"
            )
        else:
            print(f"run '{m.run}' failed: {m.error}")
    print(
        f"{len(merged) - len(failed)} of {len(merged)} ranks recorded as '{job.name}/rank*' "
        f"-> {job.db}"
    )
    if failed:
        others = "the others are in the DB" if len(failed) < len(merged) else "none recorded"
        raise WorkloadError(
            f"{len(failed)} of {len(merged)} ranks failed ({', '.join(m.run for m in failed)}; "
            f"errors kept in the DB, see `magneton runs`); {others}"
        )
    return 0


def launch(job: JobSpec, opts: Any, *, shutdown_timeout_s: int = 30) -> list[MergedRun]:
    """Start `job.nproc` ranks on this host, wait for them, merge their shards."""
    import torch.distributed as dist

    if not dist.is_available():
        raise MagnetonError("this PyTorch build has no torch.distributed")
    script = Path(job.script).resolve()
    if not script.is_file():
        raise MagnetonError(f"no such script: {script}")
    if opts.replay:
        raise MagnetonError(REPLAY_REFUSED)
    _refuse_existing_runs(job, opts.replace)  # and a DB that cannot be written, up front
    shard_dir = default_shard_dir(job.db, job.name)
    shard_dir.mkdir(parents=True, exist_ok=True)
    for old in shard_dir.glob(f"rank*{SHARD_SUFFIX}"):
        old.unlink()  # left over from an aborted attempt: never merge stale ranks
    argv = _worker_argv(job, opts, shard_dir)
    failures, interrupted = _run_agent(job.nproc, argv, shutdown_timeout_s)

    shards: list[Shard] = []
    for p in sorted(shard_dir.glob(f"rank*{SHARD_SUFFIX}")):
        with contextlib.suppress(MagnetonError):
            shards.append(read_shard(p))
    have = {s.rank for s in shards}
    for r in range(job.nproc):
        if r not in have:
            why = (
                "interrupted before writing its profile"
                if interrupted
                else _failure_text(failures.get(r))
            )
            shards.append(_missing_rank(job, opts, r, why))
    merged = merge_shards(job.db, shards, replace=opts.replace, world_sizes={job.name: job.nproc})
    _remove_shards(shards, shard_dir)
    if interrupted:
        raise MagnetonError(
            f"interrupted; {sum(m.status == 'ok' for m in merged)} of {job.nproc} ranks "
            "recorded (a rank that was not is stored as failed, saying why), earlier runs intact",
            exit_code=130,
        )
    return merged


def _refuse_existing_runs(job: JobSpec, replace: bool = False) -> None:
    """A writable open before the ranks run: a taken name (unless `replace`), a DB that
    cannot be written fails now, not after the job."""
    with opened_db(job.db) as handle:
        taken = [] if replace else [rank_run_name(job.name, r) for r in range(job.nproc)]
        taken = [n for n in taken if handle.has_run(n)]
    if taken:
        raise MagnetonError(
            f"run(s) {', '.join(taken)} already exist in the DB; pick another --run "
            "name or pass --replace"
        )


def _run_agent(nproc: int, argv: list[str], shutdown_timeout_s: int) -> tuple[dict, bool]:
    """Run the elastic agent over `nproc` workers `python ARGV`; returns the agent's
    failures by rank and whether the job was interrupted."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    env_set = {
        "MAGNETON_LAUNCHER": "1",
        "KINETO_LOG_LEVEL": os.environ.get("KINETO_LOG_LEVEL") or "5",  # no USDT lines
        # torchrun's default for more than one rank per node: no thread oversubscription
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or "1",
    }
    lo = _loopback_ifname()
    if lo and not os.environ.get("GLOO_SOCKET_IFNAME"):
        env_set["GLOO_SOCKET_IFNAME"] = lo
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"magneton-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        # port 0: the agent's store binds a free port itself, as `torchrun --standalone`
        # does; a port picked here first could be taken by another job's rank before
        # the store bound it (EADDRINUSE: the launch failed)
        rdzv_endpoint="127.0.0.1:0",
        rdzv_configs={"timeout": 120},
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        local_addr="127.0.0.1",
        logs_specs=DefaultLogsSpecs(log_dir=os.devnull),
        shutdown_timeout=shutdown_timeout_s,
    )
    saved = {k: os.environ.get(k) for k in env_set}
    os.environ.update(env_set)
    try:
        with _quiet_elastic_logs():
            elastic_launch(config, sys.executable)(*argv)
    except ChildFailedError as e:
        return dict(e.failures), False
    except KeyboardInterrupt:
        return {}, True
    except Exception as e:  # rendezvous/agent errors: nothing recorded
        if type(e).__name__ == "SignalException":
            return {}, True
        raise MagnetonError(f"could not launch {nproc} ranks: {e}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {}, False


def _missing_rank(job: JobSpec, opts: Any, rank: int, error: str) -> Shard:
    """The failed-run shard of a rank that wrote none, from what the agent saw."""
    run = RunInfo(
        name=rank_run_name(job.name, rank),
        script=str(Path(job.script).resolve()),
        entry=job.entry,
        setup=job.setup,
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        status="failed",
        error=error,
        warmup=opts.warmup,
        repeat=opts.repeat,
        host=socket.gethostname(),
        rank=rank,
        world_size=job.nproc,
    )
    return Shard(job=job.name, rank=rank, world_size=job.nproc, run=run)


def _remove_shards(shards: list[Shard], shard_dir: Path) -> None:
    for s in shards:
        if s.path:
            with contextlib.suppress(OSError):
                Path(s.path).unlink()
    with contextlib.suppress(OSError):
        shard_dir.rmdir()
        shard_dir.parent.rmdir()  # DIR/shards, when empty


def _worker_argv(job: JobSpec, opts: Any, shard_dir: Path) -> list[str]:
    """The worker command line (`python -m magneton.tracer.distributed.worker ...`)."""
    argv = [
        "-m",
        "magneton.tracer.distributed.worker",
        str(Path(job.script).resolve()),
        "--job",
        job.name,
        "--shards",
        str(shard_dir),
        "--entry",
        job.entry,
        "--setup",
        job.setup,
        "--warmup",
        str(opts.warmup),
        "--repeat",
        str(opts.repeat),
        "--power",
        opts.power,
        "--interval-ms",
        repr(opts.interval_s * 1000.0),
    ]
    if not opts.call_paths:
        argv.append("--no-call-paths")
    return argv


def _loopback_ifname() -> str:
    with contextlib.suppress(OSError, AttributeError):
        for _, name in socket.if_nameindex():
            if name in ("lo", "lo0"):
                return name
    return ""


@contextlib.contextmanager
def _quiet_elastic_logs() -> Iterator[None]:
    """The agent logs each SIGTERM it sends and each failure it sees; Magneton reports the
    outcome per rank itself (MAGNETON_DEBUG=1 keeps the agent's lines)."""
    if os.environ.get("MAGNETON_DEBUG"):
        yield
        return
    # each elastic module's logger has a level of its own (torch's elastic `get_logger`
    # sets it), so the package's level alone silenced none of them: a Ctrl-C printed the
    # agent's "Received 2 death signal, shutting down workers" above Magneton's line
    name = "torch.distributed.elastic"
    loggers = [logging.getLogger(name)] + [
        lg
        for n, lg in logging.root.manager.loggerDict.items()
        if n.startswith(name + ".") and isinstance(lg, logging.Logger)
    ]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, old, strict=True):
            lg.setLevel(level)


def _failure_text(failure: Any) -> str:
    code = getattr(failure, "exitcode", None)
    if code is None:
        return "exited without writing its profile"
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        return f"killed by {sig} before writing its profile"
    return f"exited with code {code} before writing its profile"
