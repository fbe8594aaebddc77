"""Collectives of a rank: what the recorder's dispatch modes see of them, and what not.

Collectives are operators already: c10d ops (`c10d::allreduce_`, `c10d::broadcast_`,
`c10d::barrier`, the DDP reducer's bucket all-reduces launched from C++) go through the
dispatcher, so both recorder passes see them. `CollectiveRecorder` registers a
`torch.library.register_torch_dispatch` rule for every collective on the recorder's mode
classes and adds what the dispatcher alone does not show:

- the process group and bytes of each collective, and its issue instant per timing
  iteration (compared across ranks to estimate peer waits, diagnose/jobs/ranks.py);
- for collectives the Python caller waits on right away (`dist.all_reduce(t)` with
  `async_op=False`), it calls `work.wait()` itself, inside the mode's timing window, so
  the operator's window - and the energy charged to it - covers the wait instead of
  leaving it in the gap after the op. Python's own `wait()` then returns at once;
- process CPU time during that wait, which tells a blocked wait (idle) from a spinning
  one (busy-wait).

Rules, unlike a second dispatch mode, cost nothing for the other operators, whose timed
windows therefore stay as tight as in a single-process recording. Async collectives
(DDP's buckets, `async_op=True`) are left async: their completion is not timed, because
the only hook, a Python callback on the Work's future, runs on the backend's worker
thread and must take the GIL - it delayed gloo's next collective by up to the
interpreter's 5 ms switch interval and perturbed exactly what is measured.
`collective_times` turns the events into the `CollectiveTimes` of `Profile.dist`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from magneton.model import CollectiveTimes, Profile
from magneton.model.vocab import is_collective


@dataclass
class CollectiveEvent:
    call: int  # which entry call (0-based, warmup first)
    name: str
    group: str  # process group name ("0" = default group)
    group_size: int
    start_ns: int  # issued (perf_counter_ns)
    end_ns: int  # dispatcher returned (the op's own issue cost)
    done_ns: int = 0  # completed (end of our wait); 0 = unknown (async, waited on later)
    sync: bool = False  # the Python caller waits right away; we waited inside the window
    wait_ns: int = 0  # time in work.wait() (sync only)
    wait_cpu_ns: int = 0  # process CPU time during that wait
    nbytes: int = 0


def _c10d_file() -> str:
    import torch.distributed.distributed_c10d as c10d

    return c10d.__file__  # (imports are cached: this is a dict lookup after the first)


class _CollectiveCall:
    """Stands in for a collective operator inside a recorder mode's `__torch_dispatch__`:
    calling it runs the operator through `CollectiveRecorder.run` (which may wait); every
    other attribute (`_schema`, `name`, ...) is the operator's, so the mode records it
    exactly as it would record the operator itself."""

    __slots__ = ("_op", "_recorder")

    def __init__(self, op: Any, recorder: CollectiveRecorder):
        self._op = op
        self._recorder = recorder

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._recorder.run(self._op, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._op, name)


class CollectiveRecorder:
    """Sees every collective the recorder's dispatch modes see, and nothing else.

    It registers, with `torch.library.register_torch_dispatch`, a rule for each collective
    operator (namespaces c10d and _c10d_functional) on the recorder's mode classes
    (TimingCapture, StructureCapture). The rule hands the mode a `_CollectiveCall` in
    place of the operator, so the mode's own window around "the operator" covers what
    `run` does: issue, and for collectives the caller waits on at once, the wait. A second
    dispatch mode would do the same but cost every operator of the run another Python
    dispatch inside its timed window (measured on the c9 MLP: +33% CPU time per call over
    the timing mode alone); rules cost nothing for operators that are not collectives.
    """

    def __init__(self) -> None:
        self.call = -1  # which entry call is running (set by the rank's entry wrapper)
        self.wait_all = False  # structure pass: settle values before they are summarized
        self.events: list[CollectiveEvent] = []
        self._libs: list[Any] = []
        self._lock = threading.Lock()

    # -- registration ------------------------------------------------------------------

    def install(self, mode_classes: list[type]) -> CollectiveRecorder:
        import torch

        names = sorted(
            n
            for n in torch._C._dispatch_get_all_op_names()
            if "." not in n and is_collective(n) and not n.endswith("::check_for_nan")
        )
        libs: dict[str, Any] = {}
        for qualname in names:
            ns = qualname.split("::", 1)[0]
            if ns not in libs:
                libs[ns] = torch.library.Library(ns, "FRAGMENT")
            for cls in mode_classes:
                torch.library.register_torch_dispatch(qualname, cls, self._rule, lib=libs[ns])
        self._libs = list(libs.values())
        return self

    def remove(self) -> None:
        for lib in self._libs:
            with contextlib.suppress(Exception):
                lib._destroy()  # drops the rules registered through it
        self._libs = []

    def __enter__(self) -> CollectiveRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _rule(self, mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return type(mode).__torch_dispatch__(mode, _CollectiveCall(func, self), types, args, kwargs)

    # -- one collective ----------------------------------------------------------------

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        import torch
        import torch.distributed as dist
        from torch.utils._pytree import tree_flatten

        flat = tree_flatten((args, kwargs))[0]
        group, size = _group_of(flat, torch, dist)
        nbytes = sum(a.numel() * a.element_size() for a in flat if isinstance(a, torch.Tensor))
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        t1 = time.perf_counter_ns()
        ev = CollectiveEvent(
            call=self.call,
            name=func._schema.name,
            group=group,
            group_size=size,
            start_ns=t0,
            end_ns=t1,
            nbytes=nbytes,
        )
        work = _work_of(out, getattr(dist.distributed_c10d, "Work", None), torch)
        if work is not None:
            if self.wait_all or _caller_waits_now(_c10d_file(), dist):
                c0, w0 = time.process_time_ns(), time.perf_counter_ns()
                work.wait()
                w1 = time.perf_counter_ns()
                ev.sync = True
                ev.wait_ns = w1 - w0
                ev.wait_cpu_ns = time.process_time_ns() - c0
                ev.done_ns = w1
        else:
            ev.done_ns = t1  # no work handle: the op itself was the whole collective
        with self._lock:
            self.events.append(ev)
        return out


def _group_of(flat: list, torch: Any, dist: Any) -> tuple[str, int]:
    """(name, size) of the process group a collective's arguments name."""
    pg_cls = getattr(dist, "ProcessGroup", None)
    for a in flat:
        try:
            if isinstance(a, torch.ScriptObject) and pg_cls is not None:
                pg = pg_cls.unbox(a)
            elif isinstance(a, str) and a:  # functional collectives name their group
                pg = dist.distributed_c10d._resolve_process_group(a)
            else:
                continue
            return (str(pg.group_name), int(pg.size()))
        except Exception:  # a ReduceOp, or a string that names no group
            continue
    return ("", 0)


def _work_of(out: Any, work_cls: Any, torch: Any) -> Any:
    """The Work handle a c10d op returned (boxed as a ScriptObject), or None."""
    if work_cls is None or not hasattr(work_cls, "unbox"):
        return None
    items = out if isinstance(out, (tuple, list)) else (out,)
    for o in items:
        if isinstance(o, torch.ScriptObject):
            try:
                return work_cls.unbox(o)
            except Exception:
                continue
    return None


def _caller_waits_now(c10d_file: str, dist: Any) -> bool:
    """Whether the Python c10d wrapper that issued this op will `wait()` right after it
    returns (`async_op=False`), so waiting here changes nothing but where the time lands.
    Never inside a coalescing manager, whose works complete together at its end."""
    f: FrameType | None = sys._getframe(1)
    depth = 0
    while f is not None and depth < 64:
        if f.f_code.co_filename == c10d_file:
            if "async_op" not in f.f_code.co_varnames:
                f = f.f_back
                depth += 1
                continue
            if f.f_locals.get("async_op") is not False:
                return False
            world = getattr(dist.distributed_c10d, "_world", None)
            coalescing = getattr(world, "pg_coalesce_state", None)
            return not coalescing
        f = f.f_back
        depth += 1
    return False


def collective_times(
    profile: Profile, events: list[CollectiveEvent], timing_calls: list[int]
) -> tuple[list[CollectiveTimes], list[int]]:
    """Per-iteration issue/completion times of each collective op (timing pass), and the
    timing iterations (indices into `timing_calls`) whose collectives lined up with the
    structure pass's operators; only those are kept."""
    coll_ops = [op for op in profile.ops if is_collective(op.name)]
    per_call: dict[int, list[CollectiveEvent]] = {c: [] for c in timing_calls}
    for ev in events:
        if ev.call in per_call:
            per_call[ev.call].append(ev)
    usable = [
        c
        for c in timing_calls
        if len(per_call[c]) == len(coll_ops)
        and all(e.name == op.name for e, op in zip(per_call[c], coll_ops, strict=True))
    ]
    rows = []
    for k, op in enumerate(coll_ops):
        evs = [per_call[c][k] for c in usable]
        if not evs:
            first = next((e for e in events if e.name == op.name), None)
            group, size = (first.group, first.group_size) if first else ("", 0)
        else:
            group, size = evs[0].group, evs[0].group_size
        rows.append(
            CollectiveTimes(
                op=op.idx,
                name=op.name,
                group=group,
                group_size=size,
                sync=bool(evs and evs[0].sync),
                size_bytes=evs[0].nbytes if evs else 0,
                start_ns=[e.start_ns for e in evs],
                end_ns=[e.end_ns for e in evs],
                done_ns=[e.done_ns for e in evs],
                wait_ns=[e.wait_ns for e in evs],
                wait_cpu_ns=[e.wait_cpu_ns for e in evs],
            )
        )
    return rows, [timing_calls.index(c) for c in usable]
