"""Multi-rank recording: every rank of a torch.distributed job becomes its own run, and
this module is the worker command line the ranks run.

`magneton record SCRIPT --nproc N --db DIR --run NAME` starts N ranks on this host
(`launch.py`); each rank records `NAME/rank<r>` with the usual two-pass recorder
(`rank.py`, with the collective rules of `collectives.py`) and writes a *shard* (gzipped
JSON of its Profile, `shards.py`); after the job the shards are merged into the DB
(`merge.py`). For jobs on many nodes each rank is started by torchrun or Slurm's srun
(`rankenv.py` reads either's variables):

    torchrun --nnodes M --nproc-per-node N ... -m magneton.tracer.distributed.worker SCRIPT \
        --db DIR --job NAME
    srun --ntasks M*N ... python -m magneton.tracer.distributed.worker SCRIPT --db DIR --job NAME

and the shards (DIR/shards/NAME/, on a shared filesystem or copied to one machine) are
loaded with `magneton merge --db DIR SHARD_DIR...` (docs/distributed.md).

The option is `--job`, not `--run`: torchrun's own parser (Python 3.11 argparse) takes
`--run` after the script name for an abbreviation of its `--run-path` and refuses to
start. After the shard is written the process leaves with `os._exit`, skipping the
interpreter's teardown of torch (seconds per rank on small machines, during which the
launcher waits before it can merge).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from magneton.tracer.distributed.rank import run_worker
from magneton.tracer.distributed.shards import default_shard_dir


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m magneton.tracer.distributed.worker",
        description=(
            "Record this rank of a torch.distributed job (started by torchrun, srun or "
            "`magneton record --nproc`) as run NAME/rank<RANK> and write its shard; load "
            "the shards with `magneton merge --db DIR SHARD_DIR...`."
        ),
    )
    p.add_argument("script")
    # not `--run`: torchrun's own parser (Python 3.11 argparse) takes it for an abbreviation
    # of its `--run-path` even after the script name, and refuses to start
    p.add_argument(
        "--job", required=True, metavar="NAME", help="job name; ranks become NAME/rank<r>"
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="DB directory; shards go to DB/shards/NAME/")
    where.add_argument("--shards", help="directory for the shards")
    p.add_argument("--entry", default="main")
    p.add_argument("--setup", default="setup")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--power", default="auto")
    p.add_argument("--interval-ms", type=float, default=5.0)
    p.add_argument("--no-call-paths", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    from magneton.tracer.programs.record import RecordOptions

    a = build_parser().parse_args(argv)
    if a.warmup < 0 or a.repeat < 1:
        print("magneton: --warmup must be >= 0 and --repeat >= 1", file=sys.stderr)
        return 2
    opts = RecordOptions(
        warmup=a.warmup,
        repeat=a.repeat,
        power=a.power,
        interval_s=a.interval_ms / 1000.0,
        call_paths=not a.no_call_paths,
    )
    shard_dir = Path(a.shards) if a.shards else default_shard_dir(a.db, a.job)
    return run_worker(
        a.script, job=a.job, shard_dir=shard_dir, entry=a.entry, setup=a.setup, opts=opts
    )


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:
        # a Ctrl-C before the rank's recorder holds it (torch still importing) printed a
        # traceback of torch's import; `magneton record --nproc` says what became of the
        # job, a rank that torchrun or srun started says it for itself
        if not os.environ.get("MAGNETON_LAUNCHER"):
            print("magneton: interrupted before this rank recorded anything", file=sys.stderr)
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the shard is on disk and the process group destroyed (see above)
