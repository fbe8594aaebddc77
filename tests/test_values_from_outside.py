"""Values from outside are checked at the boundary (issue 28, item 6; tracer/capture/validate.py).

A torch.profiler trace and a shard are files anyone can write. Each bad value the issue
found is fed through the CLI: `import-trace` of events with `"ts": "abc"`, NaN, 1e308, a
`tid` given as an object, a negative `dur`; `merge` of shards with rank "zero" or of the
wrong type, NaN, 1e300 or negative energies. Each must give one line that names the
offending field, a non-zero exit, and nothing stored. The cases run through
`magneton.cli.main` in this process (torch is loaded once); one case of each command runs
as a real process, to see that no traceback reaches the terminal.
"""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from magneton.cli import main as cli
from magneton.graphdb import open_db
from magneton.tracer.capture.validate import BOUNDS
from magneton.tracer.distributed.shards import Shard, write_shard


def _run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _runs(db: Path) -> set[str]:
    if not db.exists():
        return set()
    with open_db(db, read_only=True) as h:
        return {r for (r,) in h.query("MATCH (r:Run) RETURN r.name").rows}


# ---- import-trace -------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace_doc(tmp_path_factory) -> dict:
    """A real CPU trace written by this machine's torch.profiler."""
    path = tmp_path_factory.mktemp("trace") / "cpu.pt.trace.json"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts) as prof:
        model(torch.randn(8, 16)).sum()
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())


def _first_cpu_op(doc: dict) -> int:
    return next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "cpu_op")


BAD_EVENTS = [
    ("ts", "abc", "expected a number, got 'abc'"),
    ("ts", float("nan"), "nan is not a finite time in µs"),
    ("ts", 1e308, "1e+308 is not a finite time in µs"),
    ("dur", -20_000_000, "is not a non-negative finite time in µs"),
    ("dur", float("inf"), "is not a non-negative finite time in µs"),
    ("tid", {"x": 1}, "expected an integer or a string"),
    ("pid", [1], "expected an integer or a string"),
]


@pytest.mark.parametrize("field, value, says", BAD_EVENTS)
def test_a_bad_trace_event_is_named_and_nothing_is_stored(
    trace_doc, tmp_path, capsys, field, value, says
):
    doc = copy.deepcopy(trace_doc)
    i = _first_cpu_op(doc)
    doc["traceEvents"][i][field] = value
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
    db = tmp_path / "db"
    code, out, err = _run_cli(capsys, "import-trace", str(trace), "--db", str(db), "--run", "x")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("magneton: ")
    assert f"traceEvents[{i}].{field}: " in err and says in err, err
    assert "x" not in _runs(db)


def test_a_rank_that_is_not_an_integer_is_named(trace_doc, tmp_path, capsys):
    doc = copy.deepcopy(trace_doc)
    doc["distributedInfo"] = {"rank": "zero", "world_size": 2}
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps(doc))
    db = tmp_path / "db"
    code, _, err = _run_cli(capsys, "import-trace", str(trace), "--db", str(db), "--run", "x")
    assert code == 2 and "distributedInfo.rank: expected an integer, got 'zero'" in err
    assert _runs(db) == set()


def test_the_good_trace_imports_and_a_bad_one_fails_as_a_process(trace_doc, tmp_path):
    """The control (the same trace unchanged imports), then the negative duration the
    issue stored as an `ok` run of -20 J, in a real process: one line, no traceback."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(trace_doc))
    doc = copy.deepcopy(trace_doc)
    doc["traceEvents"][_first_cpu_op(doc)]["dur"] = -20_000_000
    bad.write_text(json.dumps(doc))
    db = tmp_path / "db"
    for trace, run in ((good, "good"), (bad, "neg")):
        p = subprocess.run(
            [sys.executable, "-m", "magneton", "import-trace", str(trace)]
            + ["--db", str(db), "--run", run],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if run == "good":
            assert p.returncode == 0, p.stderr
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and ".dur: " in p.stderr
    assert _runs(db) == {"good"}


# ---- merge --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shard_doc(tiny_db: Path, tmp_path_factory) -> dict:
    """A real recording (workloads/tiny.py) as rank 0 of a one-rank job's shard."""
    with open_db(tiny_db, read_only=True) as h:
        profile = h.load_profile("a")
    profile.run.name = "j/rank0"
    path = tmp_path_factory.mktemp("shard") / "rank0.shard.json.gz"
    write_shard(path, Shard("j", 0, 1, profile.run, profile))
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _set(path: str, value):
    def edit(doc: dict) -> None:
        keys = path.split(".")
        node = doc
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


BAD_SHARDS = [
    ("rank", "zero", "rank: expected an integer, got 'zero'"),
    ("rank", 0.5, "rank: expected an integer, got 0.5"),
    ("world_size", "1", "world_size: expected an integer, got '1'"),
    ("rank", 3, "rank: 3 is not below world_size 1"),
    ("profile.run.energy_j", float("nan"), "run.energy_j: nan is not a finite number"),
    ("profile.ops.1.energy_j", 1e300, "ops[1].energy_j: 1e+300 is out of range"),
    ("profile.ops.0.energy_j", -20.0, "ops[0].energy_j: -20 is negative"),
    ("profile.ops.0.time_s", -1.0, "ops[0].time_s: -1 is negative"),
    ("profile.ops.0.thread", {"x": 1}, "ops[0].thread: expected an integer"),
    ("profile.run.status", 7, "run.status: expected a string"),
]


def _write(doc: dict, path: Path) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


@pytest.mark.parametrize("where, value, says", BAD_SHARDS)
def test_a_bad_shard_value_is_named_and_nothing_is_merged(
    shard_doc, tmp_path, capsys, where, value, says
):
    doc = copy.deepcopy(shard_doc)
    _set(where, value)(doc)
    bad = _write(doc, tmp_path / "rank0.shard.json.gz")
    db = tmp_path / "db"
    code, out, err = _run_cli(capsys, "merge", "--db", str(db), str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err and "nothing was merged" in err, err
    assert _runs(db) == set()


def test_one_bad_shard_keeps_the_good_ones_out_too(shard_doc, tmp_path):
    """A good rank 0 beside a rank 1 with a NaN energy: nothing of the job is merged
    (in a real process: one line, no traceback); the good shard alone merges."""
    good_doc = copy.deepcopy(shard_doc)
    good_doc["world_size"] = 2
    bad_doc = copy.deepcopy(good_doc)
    bad_doc["rank"] = 1
    bad_doc["profile"]["run"]["name"] = bad_doc["run"]["name"] = "j/rank1"
    bad_doc["profile"]["run"]["energy_j"] = float("nan")
    (tmp_path / "s").mkdir()
    good = _write(good_doc, tmp_path / "s" / "rank0.shard.json.gz")
    _write(bad_doc, tmp_path / "s" / "rank1.shard.json.gz")
    db = tmp_path / "db"

    def merge(*paths: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "magneton", "merge", "--db", str(db), *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=300,
        )

    p = merge(tmp_path / "s")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "run.energy_j: nan" in p.stderr
    assert _runs(db) == set()
    p = merge(good)
    assert p.returncode == 0, p.stderr
    assert _runs(db) == {"j/rank0"}


def test_bounds_are_those_the_db_checks_on_load():
    """What merge admits, a later load must not call damaged (graphdb/codec.py
    `_check_plausible`)."""
    from magneton.graphdb import codec

    assert BOUNDS["_j"] <= codec._MAX_ENERGY_J and BOUNDS["_s"] <= codec._MAX_TIME_S
