"""`magneton merge --db DIR SHARD...`: load per-rank shards into the DB.

The multi-node recipe (docs/distributed.md): the ranks are started by torchrun
(`torchrun ... -m magneton.tracer.distributed.worker SCRIPT --db DIR --job NAME`) or srun
(`srun magneton record SCRIPT --db DIR --run NAME`), which leaves one shard per rank under
DIR/shards/NAME/; with DIR on a shared filesystem merge them here once the job is done,
else copy those directories to one machine first. Shards are files or directories (searched recursively). Nothing is written when
a run of the same name already exists, unless --replace; merging node by node is fine
(ranks already in the DB stay). Shards are read and checked under the import limits
(`--memory-mb`, `--time-limit-s`; graphdb/limits.py), one line when passed.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from magneton.model import MagnetonError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "merge",
        help="load per-rank shards of a distributed recording into the DB",
        description=(
            "Load the shards written by the ranks of a torch.distributed job (one per rank, "
            "*.shard.json.gz; a rank that failed left a failed-run shard) into the DB as runs "
            "NAME/rank<r>. SHARD may be a file or a directory searched recursively."
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory (created if missing)")
    p.add_argument("shards", nargs="+", metavar="SHARD", help="shard file or directory")
    p.add_argument("--replace", action="store_true", help="overwrite runs of the same names")
    p.add_argument(
        "--delete", action="store_true", help="delete the shard files once they are merged"
    )
    from magneton.commands.query import add_limit_args

    add_limit_args(p, "import", "4096", "1800")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import import_limits, limited
    from magneton.tracer.api import find_shards, merge_shards, read_shard

    limits = import_limits(args.memory_mb, args.time_limit_s)
    paths = find_shards(args.shards)
    with limited(limits):  # reading and checking the shards; the DB write is not starved
        shards = [read_shard(p, max_bytes=(limits.memory_mb << 20) // 4) for p in paths]
    if not shards:
        raise MagnetonError("no shards to merge")
    merged = merge_shards(args.db, shards, replace=args.replace)
    for m in merged:
        if m.status == "ok":
            print(
                f"merged run '{m.run}': {m.ops} operators, {m.time_s * 1e3:.2f} ms/call, "
                f"{m.energy_j:.4g} J/call ({m.energy_method}, {m.power_source})"
            )
        else:
            print(f"merged run '{m.run}' (failed: {m.error})")
    jobs: dict[str, tuple[set[int], int]] = {}
    for s in shards:
        ranks, size = jobs.get(s.job, (set(), s.world_size))
        ranks.add(s.rank)
        jobs[s.job] = (ranks, max(size, s.world_size))
    for job, (ranks, size) in sorted(jobs.items()):
        missing = sorted(set(range(size)) - ranks)
        word = "ranks" if len(missing) > 1 else "rank"
        note = f"; {word} {', '.join(map(str, missing))} not in these shards" if missing else ""
        print(f"job '{job}': {len(ranks)} of {size} ranks merged -> {args.db}{note}")
    if args.delete:
        for p in paths:
            with contextlib.suppress(OSError):
                Path(p).unlink()
    return 0
