"""Which rank of which job this process is, from the environment its launcher set.

Two launchers start the ranks of a job Magneton records:

* torchrun (and `magneton record --nproc`, which uses torchrun's elastic agent) sets
  RANK, WORLD_SIZE and LOCAL_RANK, plus TORCHELASTIC_RUN_ID;
* Slurm's `srun` sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_JOB_ID.

Choices, and the failure each prevents:

* torchrun's variables win when both are present: `srun torchrun ...` starts one agent
  per node, so SLURM_PROCID is the node's index there, not the worker's rank.
* A Slurm task is recognised only inside a job *step* (SLURM_STEP_ID, which `srun` sets):
  the batch shell of `sbatch --ntasks N` also carries SLURM_PROCID=0 and SLURM_NTASKS=N,
  and a plain `magneton record` there must not become rank 0 of N and wait for peers that
  never start.
* `export()` copies a Slurm task's identity to RANK/WORLD_SIZE/LOCAL_RANK (unless set),
  so the script's `init_process_group()` with the default `env://` rendezvous works under
  `srun` as it does under torchrun (MASTER_ADDR/MASTER_PORT still come from the user's
  batch script, as for any srun-launched PyTorch job).

Torch-free: `magneton record` asks "am I a rank?" before deciding what to import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "torchrun" | "slurm"
    job_id: str = ""  # TORCHELASTIC_RUN_ID or SLURM_JOB_ID ("" when unset)

    def export(self) -> None:
        """Make the rank visible to torch.distributed's `env://` rendezvous."""
        os.environ.setdefault("RANK", str(self.rank))
        os.environ.setdefault("WORLD_SIZE", str(self.world_size))
        os.environ.setdefault("LOCAL_RANK", str(self.local_rank))


def _ints(env: dict[str, str], *names: str) -> list[int] | None:
    values = [env.get(n, "") for n in names]
    if not all(v.isdigit() for v in values):
        return None
    return [int(v) for v in values]


def rank_env(environ: dict[str, str] | None = None) -> RankEnv | None:
    """This process's rank from torchrun's or srun's variables, or None (not a rank)."""
    env = dict(os.environ if environ is None else environ)
    torchrun = _ints(env, "RANK", "WORLD_SIZE")
    if torchrun is not None:
        rank, world = torchrun
        local = env.get("LOCAL_RANK", "")
        return RankEnv(
            rank=rank,
            world_size=world,
            local_rank=int(local) if local.isdigit() else rank,
            launcher="torchrun",
            job_id=env.get("TORCHELASTIC_RUN_ID", ""),
        )
    slurm = _ints(env, "SLURM_PROCID", "SLURM_NTASKS")
    if slurm is None or not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        return None
    rank, world = slurm
    local = env.get("SLURM_LOCALID", "")
    return RankEnv(
        rank=rank,
        world_size=world,
        local_rank=int(local) if local.isdigit() else rank,
        launcher="slurm",
        job_id=env.get("SLURM_JOB_ID", ""),
    )
