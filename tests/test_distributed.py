"""Multi-rank recording and analysis with real 2-rank gloo jobs on loopback.

Three jobs run concurrently in one module fixture (each is mostly process start-up and
imports, so overlapping them keeps the module fast on two cores):

* case c9, Join side: `magneton record examples/ddp_join/join.py --nproc 2` (the launcher
  path: elastic agent, shards, merge);
* case c9, manual side: `torchrun ... -m magneton.tracer.distributed.worker ... --job manual`
  (the multi-node recipe on one node), then `magneton merge`;
* a job whose rank 1 dies (`os._exit`) after its last collective.

Unit tests of the pure parts (shards, the peer-wait estimate, cause attribution) need no
processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from builders import profile

from magneton.cli import main as cli_main
from magneton.diagnose.jobs.collectives import JOIN_API, collective_cause
from magneton.diagnose.jobs.ranks import (
    CollectiveTiming,
    RankTimeline,
    estimate_peer_waits,
    rank_report,
)
from magneton.diagnose.pipeline import diff_jobs
from magneton.graphdb import open_db
from magneton.model import (
    FrameRecord,
    MagnetonError,
    OpRecord,
    PowerSeries,
    Profile,
    RunInfo,
    TensorRecord,
)
from magneton.tracer.distributed.shards import (
    Shard,
    find_shards,
    profile_from_dict,
    profile_to_dict,
    read_shard,
    write_shard,
)

ROOT = Path(__file__).resolve().parent.parent
C9 = ROOT / "examples" / "ddp_join"
FAST = ["--warmup", "1", "--repeat", "1", "--no-call-paths"]

CRASH = textwrap.dedent(
    """
    import os
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    CALLS = 0


    def setup():
        # a short gloo timeout: a rank blocked on a dead peer gives up instead of hanging
        dist.init_process_group("gloo", timeout=timedelta(seconds=10))
        return (torch.ones(256),)


    def main(x):
        global CALLS
        CALLS += 1
        y = x * 2
        dist.all_reduce(y)
        if dist.get_rank() == 1 and CALLS == 3:  # warmup, structure pass, timing pass
            os._exit(7)
        return y.sum()
    """
)


def _env() -> dict:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    env.pop("MAGNETON_LAUNCHER", None)
    return env


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )


def _finish(p: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    base = tmp_path_factory.mktemp("dist")
    db, crash_db, shards = base / "db", base / "crash_db", base / "shards"
    crash = base / "crash.py"
    crash.write_text(CRASH)
    join = _start(
        ["-m", "magneton", "record", str(C9 / "join.py"), "--db", str(db)]
        + "--nproc 2 --run join".split()
        + FAST
    )
    manual = _start(
        ["-m", "torch.distributed.run"]
        # --standalone: torchrun's store binds a free port itself; a port picked here was
        # taken by the other jobs' ranks before torchrun bound it (EADDRINUSE)
        + "--standalone --nproc-per-node 2".split()
        + ["-m", "magneton.tracer.distributed.worker", str(C9 / "manual.py")]
        + ["--job", "manual", "--shards", str(shards)]
        + FAST
    )
    # the failing job runs in this process while the others run in theirs (one interpreter
    # fewer importing torch on two cores)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(
            ["record", str(crash), "--db", str(crash_db)]
            + "--nproc 2 --run crash --warmup 1 --repeat 1".split()
        )
    res = {"join": _finish(join), "manual": _finish(manual)}
    res["crash"] = (code, out.getvalue(), err.getvalue())
    for name in ("join", "manual"):
        rc, out, err = res[name]
        assert rc == 0, f"{name} failed:\n{out}\n{err}"
    shard_files = sorted(p.name for p in shards.rglob("*.shard.json.gz"))
    merge = subprocess.run(
        [sys.executable, "-m", "magneton", "merge", "--db", str(db), str(shards)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    assert merge.returncode == 0, merge.stderr
    return {
        "db": db,
        "crash_db": crash_db,
        "shards": shards,
        "res": res,
        "shard_files": shard_files,
        "merge": merge,
    }


def _runs(db: Path) -> dict:
    with open_db(db, read_only=True) as h:
        rows = h.query(
            "MATCH (r:Run) RETURN r.name AS name, r.status AS status, r.rank AS rank, "
            "r.world_size AS world, r.error AS error, r.op_count AS ops, r.host AS host"
        ).records()
    return {r["name"]: r for r in rows}


# ---- recording ------------------------------------------------------------------------


def test_every_rank_lands_as_its_own_run(jobs):
    runs = _runs(jobs["db"])
    for job in ("join", "manual"):
        for rank in (0, 1):
            r = runs[f"{job}/rank{rank}"]
            assert r["status"] == "ok" and r["rank"] == rank and r["world"] == 2
            assert r["ops"] > 100 and r["host"] == socket.gethostname()
    # the launcher merged and removed its shards; the torchrun recipe left one per rank
    assert not (jobs["db"] / "shards" / "join").exists()
    assert jobs["shard_files"] == ["rank0.shard.json.gz", "rank1.shard.json.gz"]
    assert "2 of 2 ranks merged" in jobs["merge"].stdout


def test_collectives_are_operators_with_measured_waits(jobs):
    with open_db(jobs["db"], read_only=True) as h:
        p = h.load_profile("join/rank0")
    colls = [op for op in p.ops if op.name.startswith("c10d::")]
    assert {"c10d::allreduce_", "c10d::broadcast_"} <= {op.name for op in colls}
    # DDP's reducer all-reduces its gradient bucket from C++ inside backward: captured too
    frames = {f.idx: f for f in p.frames}
    from_backward = [op for op in colls if any(frames[i].function == "backward" for i in op.frames)]
    assert len(from_backward) == 10  # one bucket per batch of rank 0
    info = p.dist
    assert info.mismatched_iterations == 0 and len(info.collectives) == len(colls)
    sync = [row for row in info.collectives if row.sync]
    # Join's "how many ranks still train?" all-reduce is waited on at once: its wait
    # (for rank 1's extra batches) is measured inside the operator's window
    assert sync and all(w > 0 for row in sync for w in row.wait_ns)
    by_idx = {op.idx: op for op in colls}
    row = max(sync, key=lambda r: r.wait_ns[0])
    assert by_idx[row.op].time_s * 1e9 >= row.wait_ns[0] * 0.9
    assert info.backend == "gloo" and info.world_size == 2


def test_failed_rank_is_recorded_and_the_other_rank_lands(jobs):
    rc, out, err = jobs["res"]["crash"]
    assert rc == 1
    assert "1 of 2 ranks failed" in err and "the others are in the DB" in err
    runs = _runs(jobs["crash_db"])
    assert runs["crash/rank0"]["status"] == "ok" and runs["crash/rank0"]["ops"] == 3
    assert runs["crash/rank1"]["status"] == "failed"
    assert "exited with code 7" in runs["crash/rank1"]["error"]
    assert runs["crash/rank1"]["rank"] == 1 and runs["crash/rank1"]["world"] == 2


def test_merge_refuses_to_overwrite_existing_runs(jobs, capsys):
    assert cli_main(["merge", "--db", str(jobs["db"]), str(jobs["shards"])]) == 2
    assert "already in the DB" in capsys.readouterr().err


def test_replay_is_refused_before_anything_starts(tmp_path, capsys):
    code = cli_main(
        [
            "record",
            str(C9 / "join.py"),
            "--nproc",
            "2",
            "--db",
            str(tmp_path / "db"),
            "--run",
            "x",
            "--replay",
        ]
    )
    assert code == 2 and "--replay cannot record a multi-rank job" in capsys.readouterr().err
    assert not (tmp_path / "db" / "shards").exists()


# ---- analysis ---------------------------------------------------------------------------


def test_rank_report_over_all_ranks(jobs):
    rep = rank_report(jobs["db"], "join")
    assert rep is not None and rep.world_size == 2
    r0, r1 = rep.ranks
    assert r0.status == r1.status == "ok"
    assert r0.collective_count == r1.collective_count > 30  # a collective exists on all ranks
    assert r0.collective_energy_j > 0 and r0.energy_method == "estimated"
    # rank 0 ran out of data first and waited for rank 1 in Join's blocking all-reduces
    # which rank waits more is timing-dependent on a shared 2-core box; both are measured
    assert r0.wait_s >= 0 and r1.wait_s >= 0 and r0.peer_wait_s >= 0 and r1.peer_wait_s >= 0
    assert r0.cpu_s is not None and r0.blocked_s is not None and r0.busy_basis == "cpu time"
    # 13 vs 10 batches: rank 1 has the work, 1.3x (forward/backward FLOPs counted per op)
    assert rep.busiest_rank == 1 and 1.25 < rep.work_ratio < 1.35
    assert rep.imbalance_ratio >= 1.0
    assert rep.job_time_s == max(r0.time_s, r1.time_s)
    assert rep.job_energy_j >= r0.energy_j + r1.energy_j
    assert any("share host" in n for n in rep.notes)
    assert rank_report(jobs["db"], "join/rank0") is None  # a single run, not a job
    assert rank_report(jobs["db"], "nope") is None


def test_c9_join_shadow_collectives_are_redundant_and_blame_join(jobs):
    res = diff_jobs(jobs["db"], "join", "manual", match_values=False)
    assert res.a.run == "join" and res.b.run == "manual"
    early = [f for f in res.findings if f.job.rank == 0]
    assert len(early) == 1
    f = early[0]
    assert f.wasteful == "a" and f.category == "redundant" and f.verdict == "waste"
    coll = f.job.collectives.to_json()
    # 3 extra batches of rank 1 -> 3 shadow iterations of (all-reduce for "who still
    # trains?", gradient-sync flag, gradient bucket)
    assert coll["phases"]["shadow"] == 9
    assert coll["energy_j"] > 0 and f.region_a.energy_j >= coll["energy_j"]
    assert all(f.ops_a[0:1]) and "c10d::allreduce_" in f.ops_a
    rc = f.root_cause.to_json()
    assert rc["kind"] == "code" and rc["variable"] == JOIN_API
    src = (C9 / "join.py").read_text().splitlines()
    assert rc["file"] == str(C9 / "join.py") and "with Join([model])" in src[rc["line"] - 1]
    assert rc["rule"]["id"] == "join-redundant-allreduce"
    assert f.fix.summary
    # the late rank's own all-reduces of its extra batches were partnered by the shadows
    late = [g for g in res.findings if g.job.rank == 1]
    assert late and late[0].job.collectives.phases["partner of rank 0 shadow"] == 3
    assert not res.message  # findings were made: printers show the table
    assert f.job.rank_time_s["a"] > 0 and f.job.runs["b"] == "manual/rank0"
    assert json.dumps(res.to_json())  # the `magneton diff --json` contract holds


def test_diff_jobs_rejects_single_runs(jobs):
    with pytest.raises(MagnetonError, match="not a multi-rank job"):
        diff_jobs(jobs["db"], "join/rank0", "manual")


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
def test_job_names_work_in_diff_gate_and_export_patch(jobs):
    """Jobs go through the one diff pipeline: `diff` (and its CI gate) and `export-patch`
    take job names as they take run names."""
    db = str(jobs["db"])
    code, out, err = _cli("diff", "--db", db, "join", "manual", "--json", "--fail-on", "waste")
    assert code == 3, err
    res = json.loads(out)
    assert res["a"]["run"] == "join"
    join = next(f for f in res["findings"] if f["category"] == "redundant")
    assert join["divergence"]["rank"] in (0, 1) and join["verdict"] == "waste"
    # the finding has guidance but no mechanical patch: export-patch says so for the job
    fid = str(join["id"])
    code, _, err = _cli("export-patch", "--db", db, "join", "manual", "--finding", fid)
    assert code == 1 and "no mechanical patch" in err and "shadow collectives" in err, err
    code, _, err = _cli("export-patch", "--db", db, "join", "manual", "--finding", "99")
    assert code == 2 and "no finding 99 in the diff of 'join' and 'manual'" in err


def test_tui_opens_a_job_diff_and_its_finding(jobs):
    """`magneton-tui --db D join manual`: the findings of the job diff, and a finding's
    screen with the profiles of the ranks it concerns."""
    import asyncio

    from magneton.tui.app import MagnetonApp
    from magneton.tui.data import Store
    from magneton.tui.screens import FindingScreen, FindingsScreen

    store = Store(jobs["db"])
    app = MagnetonApp(store, store.check(), "join", "manual", diagnose=True, rerun=False)

    async def wait(pilot, cond, what: str, timeout: float = 240) -> None:
        import time

        t0 = time.monotonic()
        while not cond():
            assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
            await pilot.pause(0.1)

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait(pilot, lambda: isinstance(app.screen, FindingsScreen), "findings")
            screen = app.screen
            await wait(pilot, lambda: screen.result is not None, "the job diff")
            await wait(pilot, lambda: not screen.diagnosing, "the job diff to finish")
            assert screen.result.a.run == "join" and screen.result.findings
            await pilot.press("enter")
            await wait(pilot, lambda: isinstance(app.screen, FindingScreen), "the finding")
            detail = app.screen
            await wait(pilot, lambda: detail.prof["a"] is not None, "the rank profiles")
            f = detail.finding
            assert detail.prof["a"].run.name == f.job.runs["a"]
            assert detail.prof["a"].run.name.startswith("join/rank")

    asyncio.run(go())


# ---- pure parts -------------------------------------------------------------------------


def _profile() -> Profile:
    op = OpRecord(idx=0, name="c10d::allreduce_", windows_ns=[(10, 20), (30, 45)], outputs=[0])
    t = TensorRecord(idx=0, producer=0, stats=[float("nan"), 1.0], shape=[2])
    ps = PowerSeries(device="model", source="model", t_ns=[1, 2], watts=[3.0, 4.0], gaps=[(1, 2)])
    return profile(
        "j/rank1",
        rank=1,
        world_size=2,
        status="ok",
        energy_j=1.5,
        ops=[op],
        tensors=[t],
        config={"k": "v"},
        power=[ps],
    )


def test_shard_round_trip_keeps_in_memory_windows(tmp_path):
    p = _profile()
    back = profile_from_dict(json.loads(json.dumps(profile_to_dict(p))))
    assert back.ops[0].windows_ns == [(10, 20), (30, 45)]
    assert back.power[0].gaps == [(1, 2)] and back.run == p.run
    path = write_shard(tmp_path / "s" / "rank1.shard.json.gz", Shard("j", 1, 2, p.run, p))
    s = read_shard(path)
    assert s.ok and s.profile.ops[0].windows_ns == [(10, 20), (30, 45)]
    assert find_shards([tmp_path]) == [path]
    bad = tmp_path / "bad.shard.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(MagnetonError, match="not a readable Magneton shard"):
        read_shard(bad)


def _tl(rank, host, starts, sync, spans=None, refs=(0,)):
    colls = [
        CollectiveTiming(
            op=k,
            name="c10d::allreduce_",
            group="0",
            sync=sync[k],
            start_ns=[s],
            span_ns=[(spans or {}).get(k, 0)],
            wait_ns=[0],
            wait_cpu_ns=[0],
        )
        for k, s in enumerate(starts)
    ]
    return RankTimeline(rank=rank, host=host, iterations=[0], ref_ns=list(refs), collectives=colls)


def test_peer_wait_estimate_counts_blocking_collectives_only():
    ms = 1_000_000
    waits, notes = estimate_peer_waits(
        {
            0: _tl(0, "h", [0, 10 * ms], [True, False], spans={0: 3 * ms}),
            1: _tl(1, "h", [5 * ms, 12 * ms], [True, True]),
        }
    )
    assert not notes
    assert waits[0] == {0: pytest.approx(0.003)}  # clamped to its own 3 ms wait
    assert waits[1] == {0: 0.0, 1: 0.0}  # the later arrival waited for nobody
    # across hosts, instants are taken relative to each rank's release from the barrier
    waits, _ = estimate_peer_waits(
        {
            0: _tl(0, "a", [100 * ms], [True], refs=[95 * ms]),
            1: _tl(1, "b", [7 * ms], [True], refs=[0]),
        }
    )
    assert waits[0][0] == pytest.approx(0.002) and waits[1][0] == 0.0
    # ranks that disagree on the number of collectives cannot be aligned
    _, notes = estimate_peer_waits(
        {0: _tl(0, "h", [0], [True]), 1: _tl(1, "h", [0, 1], [True, True])}
    )
    assert notes and "different numbers of collectives" in notes[0]


def test_cause_of_a_collective_comes_from_its_library_frames():
    import torch

    tdir = os.path.dirname(torch.__file__)
    frames = [
        FrameRecord(0, "/u/train.py", 50, "main"),
        FrameRecord(1, os.path.join(tdir, "distributed", "algorithms", "join.py"), 274, "__exit__"),
        FrameRecord(2, os.path.join(tdir, "nn", "parallel", "distributed.py"), 452, "main_hook"),
        FrameRecord(3, os.path.join(tdir, "autograd", "__init__.py"), 395, "backward"),
    ]
    p = Profile(run=RunInfo(name="x", script="/u/train.py"), frames=frames)
    shadow = OpRecord(idx=0, name="c10d::allreduce_", frames=[0, 1, 2])
    assert collective_cause(p, shadow).api == JOIN_API
    assert collective_cause(p, shadow).phase == "shadow"
    bucket = OpRecord(idx=1, name="c10d::allreduce_", frames=[0, 3])
    assert collective_cause(p, bucket).api == "torch.autograd.backward"
