"""Reading a recording from a file builds its records with the cyclic collector paused
(`gc_paused`, model/run.py): a torch.profiler trace (`magneton import-trace`) and a rank's
shard (`magneton merge`) are hundreds of thousands of small dicts and lists, parsed into
records that hold no reference cycles, so every full collection their allocations trip
rescans the whole process and frees nothing. Without it, reading trace_diff_control took
1.5 s of its 2.7 s of CPU in eight full collections, and a 10,000-operator shard 0.24-0.43 s
of 1.0-1.2 s in two to four."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builders import synthetic_profile
from test_import_trace import HTA, needs_hta

from magneton.model import Profile
from magneton.tracer.capture.kineto import profile_from_trace, read_trace
from magneton.tracer.distributed.shards import Shard, read_shard, write_shard


def collections_during(read: Callable[[], Any]) -> tuple[Any, list[int]]:
    """What `read()` returns, and the generation of each collection that ran meanwhile."""
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    # From empty generations: the few allocations around the read (this call, the
    # decorator's context) must not find the young generation at its threshold and
    # trip a collection that belongs to neither reader.
    gc.collect()
    gc.callbacks.append(note)
    try:
        return read(), seen
    finally:
        gc.callbacks.remove(note)


@needs_hta
def test_a_trace_is_read_without_full_collections() -> None:
    (profile, _), seen = collections_during(
        lambda: profile_from_trace(read_trace(HTA / "trace_diff_test.json.gz"), "t")
    )
    # young collections walk only what was just allocated; none reaches older objects
    assert len(profile.ops) > 10_000 and max(seen, default=0) == 0


def test_a_shard_is_read_without_full_collections(tmp_path: Path) -> None:
    prof = synthetic_profile("big", 10_000, 1)
    path = write_shard(tmp_path / "rank0.shard.json.gz", Shard("j", 0, 1, prof.run, prof))
    shard, seen = collections_during(lambda: read_shard(path))
    assert isinstance(shard.profile, Profile) and len(shard.profile.ops) == 10_000
    assert max(seen, default=0) == 0
