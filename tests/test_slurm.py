"""Ranks started by Slurm's `srun` are recognised like torchrun's: two real processes with
only the variables srun sets (no RANK/WORLD_SIZE) record a gloo job through
`magneton record`, each into its shard, and `magneton merge` loads them as one job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from magneton.graphdb import open_db
from magneton.tracer.distributed.rankenv import rank_env

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    from datetime import timedelta

    import torch
    import torch.distributed as dist


    def setup():
        # the default env:// rendezvous: RANK/WORLD_SIZE must come from Magneton under srun
        dist.init_process_group("gloo", timeout=timedelta(seconds=30))
        return (torch.arange(64, dtype=torch.float32),)


    def main(x):
        y = x * (dist.get_rank() + 1)
        dist.all_reduce(y)
        return y.sum()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _srun_env(rank: int, ntasks: int, port: int) -> dict:
    """What `srun --ntasks 2` gives each task on one node (plus the user's MASTER_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MAGNETON_LAUNCHER"):
        env.pop(k, None)
    env.update(
        SLURM_PROCID=str(rank),
        SLURM_NTASKS=str(ntasks),
        SLURM_LOCALID=str(rank),
        SLURM_JOB_ID="4242",
        SLURM_STEP_ID="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
    )
    return env


def test_srun_ranks_record_and_merge_as_one_job(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT)
    db, port = tmp_path / "db", _free_port()
    cmd = [sys.executable, "-m", "magneton", "record", str(script), "--db", str(db)]
    cmd += ["--run", "sjob", "--warmup", "1", "--repeat", "1", "--no-call-paths"]
    procs = [
        subprocess.Popen(
            cmd,
            env=_srun_env(r, 2, port),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"{out}\n{err}"
    shards = db / "shards" / "sjob"
    assert sorted(p.name for p in shards.iterdir()) == [
        "rank0.shard.json.gz",
        "rank1.shard.json.gz",
    ]
    merge = subprocess.run(
        [sys.executable, "-m", "magneton", "merge", "--db", str(db), str(shards)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert merge.returncode == 0, merge.stderr
    assert "job 'sjob': 2 of 2 ranks merged" in merge.stdout
    with open_db(db, read_only=True) as h:
        for r in range(2):
            p = h.load_profile(f"sjob/rank{r}")
            assert (p.run.rank, p.run.world_size, p.run.status) == (r, 2, "ok")
            assert p.dist.launcher == "slurm" and p.dist.job_id == "4242"
            assert p.dist.local_rank == r and p.dist.backend == "gloo"
            assert [c.name for c in p.dist.collectives] == ["c10d::allreduce_"]


def test_which_environment_names_a_rank():
    srun = {"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0"}
    env = rank_env({**srun, "SLURM_JOB_ID": "77"})
    assert (env.rank, env.world_size, env.local_rank, env.launcher, env.job_id) == (
        3,
        8,
        1,
        "slurm",
        "77",
    )
    # the batch shell of `sbatch --ntasks 8` has PROCID/NTASKS but is no step: not a rank
    assert rank_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "77"}) is None
    # `srun torchrun ...`: torchrun's worker variables win over the agent's task id
    both = rank_env({**srun, "RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "5"})
    assert (both.rank, both.world_size, both.launcher) == (5, 16, "torchrun")
    assert rank_env({}) is None
