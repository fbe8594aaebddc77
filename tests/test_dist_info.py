"""`Profile.dist`: a rank's typed job metadata survives shards and the DB unchanged, and is
stored as the same `dist.*` config rows as before it was typed (so older DBs and shards
still load, and the on-disk formats did not change)."""

from __future__ import annotations

import json

from magneton.diagnose.jobs.ranks import timeline
from magneton.graphdb import open_db
from magneton.model import (
    CollectiveTimes,
    DistInfo,
    OpRecord,
    Profile,
    RunInfo,
    split_stored_config,
    stored_config,
)
from magneton.tracer.distributed.shards import Shard, read_shard, write_shard


def _ranked_profile() -> Profile:
    run = RunInfo(name="j/rank1", rank=1, world_size=2, status="ok", host="node7")
    op = OpRecord(idx=0, name="c10d::allreduce_", outputs=[])
    info = DistInfo(
        rank=1,
        world_size=2,
        local_rank=1,
        host="node7",
        initialized=True,
        backend="gloo",
        master="127.0.0.1:29500",
        iterations=[0, 1],
        mismatched_iterations=1,
        collectives=[
            CollectiveTimes(
                op=0,
                name="c10d::allreduce_",
                group="0",
                group_size=2,
                sync=True,
                size_bytes=4096,
                start_ns=[100, 300],
                end_ns=[150, 360],
                done_ns=[140, 0],
                wait_ns=[20, 30],
                wait_cpu_ns=[1, 2],
            )
        ],
        call_start_ns=[90, 290],
        call_end_ns=[200, 400],
        call_cpu_ns=[80, 85],
        call_ref_ns=[88, 288],
    )
    return Profile(run=run, ops=[op], config={"torch.k": "v"}, dist=info)


def test_dist_info_round_trips_through_shard_and_db(tmp_path):
    p = _ranked_profile()
    shard = read_shard(write_shard(tmp_path / "rank1.shard.json.gz", Shard("j", 1, 2, p.run, p)))
    assert shard.profile.dist == p.dist and shard.profile.config == {"torch.k": "v"}
    with open_db(tmp_path / "db") as db:
        db.save_profile(shard.profile)
        back = db.load_profile("j/rank1")
    assert back.dist == p.dist
    assert back.config == {"torch.k": "v"}  # no dist.* rows left in the plain config
    tl = timeline(back)
    assert tl.host == "node7" and tl.wall_ns == [110, 110] and tl.ref_ns == [88, 288]
    assert tl.collectives[0].span_ns == [40, 0]  # unknown completion stays 0


def test_stored_rows_keep_the_pre_typed_format():
    rows = stored_config(_ranked_profile())
    doc = json.loads(rows["dist.collectives"])
    assert doc["iterations"] == [0, 1] and doc["mismatched_iterations"] == 1
    assert doc["ops"][0]["bytes"] == 4096 and doc["ops"][0]["wait_ns"] == [20, 30]
    assert json.loads(rows["dist.calls"])["ref_ns"] == [88, 288]
    assert rows["dist.backend"] == "gloo" and rows["dist.world_size"] == "2"
    assert rows["dist.initialized"] == "True" and rows["torch.k"] == "v"


def test_single_process_run_has_no_dist_info():
    config, info, _ = split_stored_config({"torch.k": "v"})
    assert info is None and config == {"torch.k": "v"}
    assert timeline(Profile(run=RunInfo(name="solo"))) is None
