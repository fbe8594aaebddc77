"""Read torch.profiler (Kineto) Chrome traces into Profiles: `magneton import-trace`.

Users who already profile on GPU clusters have folders of `*.pt.trace.json(.gz)`, one per
rank. This module turns one such file into one `Profile` (no tensor values: the profiler
never saw them) so that runs, reports, diffs and the TUI work on it.

What becomes what:

* Operators: every *top-level* `cpu_op` of a thread (one not nested in another `cpu_op`)
  is an `OpRecord`; the `cpu_op`s nested under it give its `call_paths` (root → leaf
  chains, "aten::linear > aten::addmm"), as the recorder's dispatch chains do. Taking only
  top-level ops keeps every microsecond of host time in one operator, so energy is never
  counted twice for a parent and its children.
* GPU work: every `kernel`, `gpu_memcpy` and `gpu_memset` is an `OpRecord` of its own on
  device `cuda:<device>` with `thread` = its CUDA stream, its own duration and energy, and a
  `Kernel` node. Its launch is found by `args.correlation` (the `cuda_runtime`/`cuda_driver`
  event with the same correlation), and the launching operator by nesting: the innermost
  `cpu_op` on the launch's thread that contains the launch. `External id` is used only when
  it names a `cpu_op` that does contain the launch: in older Kineto output (the trace_diff
  traces in ../shared/traces/hta) `External id` of a launch equals its correlation, and a
  lookup by it lands on unrelated operators. The kernel's call path is the launching
  operator's path plus the kernel name; `scalar_args` keeps stream, correlation and the
  launching operator's idx. The CPU operator itself lists no kernels, so per-kernel energy
  is never also charged to the operator that launched it.
* Python stacks: `python_function` events (with_stack=True) enclosing an operator become
  its `frames` ("file.py(12): fn" → FrameRecord), entry first.
* Host events that are not operators but that trace tools need are kept as they were:
  the `ProfilerStep#N` annotations (HTA's iterations: it leaves the last one out of its
  temporal breakdown, so without them it summed twice the kernel time) and every
  `cuda_runtime`/`cuda_driver`/`cuda_sync` call (HTA's launch statistics pair each kernel
  with its launch by correlation). They are stored in the run's config under
  `HOST_EVENTS_KEY` as compact JSON (`HostEvents`), not as operators: a launch lies inside
  the operator that made it, and an operator row for it would count that time twice.
  `magneton export-trace` writes them back.
* `distributedInfo` gives rank, world size and backend (`RunInfo.rank/world_size`,
  `Profile.dist`); `deviceProperties` the GPU name.

Energy (see docs/traces.md, docs/energy.md "Imported traces"): a power log given with
`--power meter:FILE[@OFFSET_S]` (a `timestamp_s,watts` CSV or nvidia-smi's
`--query-gpu=timestamp,power.draw --format=csv` output) is charged to the operators and GPU
activities by the same attribution as recorded runs (`measured`). Without one each GPU
activity is priced on the GPU's model profile (tracer/energy/power/model.py `MODELS`, picked from the
trace's device name): a kernel `E = (P_static + (TDP − P_static)·u)·t`, u = its
`est. achieved occupancy %`/100 when the trace has it, else 1; a memcpy/memset
`E = P_static·t + e_byte·bytes moved` (`copy_dynamic_j`: what a board draws during a copy,
not its rated power); host operators are not priced. Those figures are labelled `estimated` and name the profile.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from magneton.model import (
    DistInfo,
    FrameRecord,
    KernelRecord,
    MagnetonError,
    OpRecord,
    PowerSeries,
    Profile,
    RunInfo,
    gc_paused,
)

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
# host events kept verbatim for export (module docstring): the launch categories, the
# synchronisations, and the profiler's step annotations
KEPT_CATS = (*LAUNCH_CATS, "cuda_sync")
HOST_EVENTS_KEY = "trace.host_events"
TRACE_SUFFIXES = (".json", ".json.gz")
_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
# A child may end up to this many µs after its parent: both are rounded to whole µs.
_NEST_SLACK_US = 1.0
_OCC_RE = re.compile(r"occupancy=([0-9.eE+-]+)%")


@dataclass
class ImportStats:
    """What one trace held and how much of it could be linked."""

    cpu_ops: int = 0
    operators: int = 0  # top-level cpu_ops (OpRecords)
    kernels: int = 0
    memcpys: int = 0
    memsets: int = 0
    launched: int = 0  # GPU activities whose launch was found by correlation
    from_operator: int = 0  # ... and whose launch lies inside a cpu_op
    frames: int = 0
    # GPU activities whose correlation id is not unique (several launches carry it, or
    # several kernels of one launch that is not a CUDA graph's): which launch made which
    # is unknown, so none is taken (all-equal ids linked every kernel to one launch)
    ambiguous: int = 0
    shared_ids: int = 0  # the correlation ids that collide so
    shared_launches: int = 0  # the launches that carry them

    def collision_line(self, path: str) -> str:
        """One line saying that correlation ids collide and how many, "" when none do:
        said on stderr by `import-trace` (the count on stdout was easy to miss)."""
        if not self.shared_ids:
            return ""
        ids = "1 id" if self.shared_ids == 1 else f"{self.shared_ids} ids"
        launches = "launch" if self.shared_launches == 1 else "launches"
        return (
            f"{path}: correlation ids are not unique: {self.shared_launches} {launches} and "
            f"{self.ambiguous} GPU activities share {ids}, so which launch made which kernel "
            f"is unknown; those {self.ambiguous} are imported without a launching operator"
        )

    @property
    def gpu_activities(self) -> int:
        return self.kernels + self.memcpys + self.memsets


@dataclass
class HostEvents:
    """Host events kept for export (`HOST_EVENTS_KEY`), one row per event:
    (category idx, name idx, thread, start ns, duration ns, correlation, External id),
    times on the operators' clock (`OpRecord.start_ns`), names and categories interned so
    that 25k `cudaLaunchKernel` rows cost a few bytes each."""

    cats: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    rows: list[list[int]] = field(default_factory=list)
    _name_idx: dict[str, int] = field(init=False, repr=False, compare=False)

    def add(self, e: dict, thread: int) -> None:
        a = _args(e)
        cat, name = str(e.get("cat", "")), str(e.get("name", ""))
        if cat not in self.cats:
            self.cats.append(cat)
        if name not in self._name_idx:
            self._name_idx[name] = len(self.names)
            self.names.append(name)
        self.rows.append(
            [
                self.cats.index(cat),
                self._name_idx[name],
                thread,
                _ns(float(e["ts"])),
                _ns(float(e.get("dur", 0) or 0)),
                _int(a.get("correlation")),
                _int(a.get("External id")),
            ]
        )

    def __post_init__(self) -> None:
        self._name_idx = {n: i for i, n in enumerate(self.names)}

    def to_json(self) -> str:
        return json.dumps(
            {"cats": self.cats, "names": self.names, "rows": self.rows}, separators=(",", ":")
        )

    @classmethod
    def from_config(cls, config: dict[str, str]) -> HostEvents:
        """The kept events of a run ("" or unreadable: none; a run recorded by Magneton
        has none)."""
        try:
            d = json.loads(config.get(HOST_EVENTS_KEY) or "{}")
            return cls(list(d.get("cats", [])), list(d.get("names", [])), list(d.get("rows", [])))
        except (ValueError, TypeError, AttributeError):
            return cls()


@dataclass
class TraceFile:
    path: Path
    doc: dict
    rank: int = 0
    world_size: int = 1
    backend: str = ""
    base_time_ns: int = 0  # `baseTimeNanoseconds`, checked (0 when absent)


@dataclass
class _Node:
    """One host-side interval event during nesting (cpu_op, python_function or launch)."""

    e: dict
    kind: str
    start: float
    end: float
    parent_op: _Node | None = None  # innermost enclosing cpu_op
    frames: list[int] = field(default_factory=list)  # enclosing python frames, entry first
    children: list[_Node] = field(default_factory=list)  # nested cpu_ops (cpu_op nodes only)
    own_frame: int = -1  # FrameRecord idx of a python_function node
    pos: int = -1  # position among the top-level operators (top-level cpu_op nodes)


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def find_trace_files(path: str | Path) -> list[Path]:
    """A trace file as given, or the traces (*.json, *.json.gz) directly in a directory."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
        if not found:
            raise MagnetonError(f"no trace files (*.json, *.json.gz) in {p}")
        return found
    raise MagnetonError(f"no such trace file or directory: {p}")


# Deepest nesting of host events on one thread that is read: a Python stack cannot be
# deeper than the interpreter's recursion limit (1000) and the operators within it are a
# few levels; a trace of 30k events nested in each other took 1.5-3 GB and a recursion
# error (each event keeps the frames enclosing it).
MAX_NESTING = 1024


def read_trace(path: str | Path, max_bytes: int | None = None) -> TraceFile:
    """Load one Chrome/Kineto JSON trace, gzipped or not (told apart by content).

    `max_bytes` bounds the JSON text (after inflating): a 2 MB gzip that inflates to
    2 GiB is refused as soon as it passes the bound, not after inflating it all."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = _inflate(raw, path, max_bytes)
        elif max_bytes is not None and len(raw) > max_bytes:
            raise _too_big(path, max_bytes)
        with gc_paused():  # a trace is hundreds of thousands of small dicts and lists
            doc = json.loads(raw)
    except (OSError, EOFError, ValueError, zlib.error) as e:
        raise MagnetonError(f"{path} is not a readable JSON trace ({e})") from None
    except RecursionError:
        raise MagnetonError(
            f"{path} is not a readable JSON trace (its JSON is nested too deep)"
        ) from None
    if isinstance(doc, list):  # the Chrome format also allows a bare event array
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise MagnetonError(f"{path} is not a Chrome trace (no traceEvents list)")
    from magneton.tracer.capture.validate import BadValue

    try:
        return _trace_file(path, doc)
    except BadValue as e:
        raise MagnetonError(f"{path}: {e}; nothing was stored") from None


def _too_big(path: Path, max_bytes: int) -> MagnetonError:
    return MagnetonError(
        f"{path}: its JSON is larger than {max_bytes >> 20} MB, more than the import's "
        "memory limit allows (--memory-mb raises it); nothing was stored",
        exit_code=1,
    )


def _inflate(raw: bytes, path: Path, max_bytes: int | None) -> bytes:
    """The gzip member(s) of `raw`, inflated in chunks up to `max_bytes`."""
    out: list[bytes] = []
    total = 0
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)
    data = raw
    while data:
        chunk = d.decompress(data, 1 << 20)
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise _too_big(path, max_bytes)
        out.append(chunk)
        data = d.unconsumed_tail
        if not data and d.eof and d.unused_data:  # a second gzip member
            data, d = d.unused_data, zlib.decompressobj(zlib.MAX_WBITS | 16)
    out.append(d.flush())  # what zlib still holds of the consumed input (< its window)
    if not d.eof:
        raise EOFError("the gzip stream ends early")
    return b"".join(out)


def _trace_file(path: Path, doc: dict) -> TraceFile:
    """The trace's top-level fields, each checked (tracer/capture/validate.py): a field of
    the wrong type (`deviceProperties` "x", `baseTimeNanoseconds` "abc") was a traceback."""
    from magneton.tracer.capture.validate import BadValue, integer

    dist = doc.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        raise BadValue("distributedInfo: expected an object")
    rank = dist.get("rank")
    if rank is None:
        m = re.search(r"rank[-_]?(\d+)", path.name)
        rank = int(m.group(1)) if m else 0
    rank = integer(rank, "distributedInfo.rank", low=0)
    world = integer(dist.get("world_size", 1) or 1, "distributedInfo.world_size", low=1)
    backend = dist.get("backend", "")
    if not isinstance(backend, str):
        raise BadValue(f"distributedInfo.backend: expected a string, got {backend!r:.40}")
    props = doc.get("deviceProperties")
    if props is not None and not (
        isinstance(props, list) and all(isinstance(p, dict) for p in props)
    ):
        raise BadValue(f"deviceProperties: expected a list of objects, got {props!r:.40}")
    base = doc.get("baseTimeNanoseconds")
    base = 0 if base is None else integer(base, "baseTimeNanoseconds", low=0)
    return TraceFile(
        path=path, doc=doc, rank=rank, world_size=world, backend=backend, base_time_ns=base
    )


# --------------------------------------------------------------------------------------
# Events → Profile
# --------------------------------------------------------------------------------------


def _args(e: dict) -> dict:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _int(v: Any, default: int = -1) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _ns(t_us: float) -> int:
    """µs → ns without the float error of `t_us * 1000` (Unix µs need 51 bits already)."""
    whole = int(t_us)
    return whole * 1000 + round((t_us - whole) * 1000)


def _check_event(e: dict, i: int, path: Path) -> None:
    """The fields of event `i` that become stored numbers (tracer/capture/validate.py): `ts` a
    finite µs time whose ns fit INT64, `dur` a finite, non-negative µs span (a negative
    one was stored as an `ok` operator of negative energy), `pid`/`tid` an integer or a
    string, and the `args` that are priced (`bytes`, occupancy)."""
    from magneton.tracer.capture.validate import MAX_TRACE_US, BadValue, number

    where = f"traceEvents[{i}]"

    def us(key: str, v: Any, low: float) -> float:
        x = number(v, f"{where}.{key}")
        if not math.isfinite(x) or not low <= x <= MAX_TRACE_US:
            what = "a non-negative" if low == 0 else "a"
            raise BadValue(f"{where}.{key}: {v!r} is not {what} finite time in µs")
        return x

    try:
        cat = e.get("cat")
        if cat is not None and not isinstance(cat, str):
            raise BadValue(f"{where}.cat: expected a string, got {cat!r:.40}")
        ts = us("ts", e["ts"], -MAX_TRACE_US)
        dur = us("dur", e.get("dur", 0) or 0, 0)
        if abs(ts) + dur > MAX_TRACE_US:
            raise BadValue(f"{where}.dur: {dur:g} µs is out of range")
        for key in ("pid", "tid"):
            v = e.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
                raise BadValue(f"{where}.{key}: expected an integer or a string, got {v!r:.40}")
        a = _args(e)
        for key in ("bytes", "est. achieved occupancy %"):
            v = a.get(key)
            if v is not None:
                x = number(v, f"{where}.args.{key}")
                if not (math.isfinite(x) and x >= 0):
                    raise BadValue(f"{where}.args.{key}: {v!r} is not a finite number >= 0")
    except BadValue as err:
        raise MagnetonError(f"{path}: {err}; nothing was stored") from None


def _tid(v: Any) -> int:
    """Thread/stream ids are ints in Kineto output but strings in some writers."""
    i = _int(v, None)  # type: ignore[arg-type]
    return i if i is not None else abs(hash(str(v))) % (1 << 31)


def _nest(nodes: list[_Node], frames: dict[tuple, int], frame_list: list[FrameRecord]) -> bool:
    """Link each node of one thread to its innermost enclosing cpu_op and python frames;
    False (and nothing linked further) once events nest deeper than `MAX_NESTING`.

    Sorted by (start, longer first) and swept with a stack of open intervals: O(n log n)."""
    nodes.sort(key=lambda n: (n.start, -(n.end - n.start), n.kind != "python"))
    stack: list[_Node] = []
    for n in nodes:
        while stack and not (n.start < stack[-1].end or n.start == stack[-1].start):
            stack.pop()
        while stack and n.end > stack[-1].end + _NEST_SLACK_US:
            stack.pop()
        if len(stack) >= MAX_NESTING:
            return False
        for s in reversed(stack):
            if s.kind == "cpu_op":
                n.parent_op = s
                break
        n.frames = [s.own_frame for s in stack if s.own_frame >= 0]
        if n.kind == "python":
            m = _FRAME_RE.match(str(n.e.get("name", "")))
            if m:  # "file.py(12): fn"; "<built-in ...>" and "nn.Module: X" are not frames
                key = (m.group(1), int(m.group(2)), m.group(3))
                if key not in frames:
                    frames[key] = len(frame_list)
                    frame_list.append(FrameRecord(len(frame_list), *key))
                n.own_frame = frames[key]
        if n.kind == "cpu_op" and n.parent_op is not None:
            n.parent_op.children.append(n)
        if n.kind != "launch":
            stack.append(n)
    return True


def _chains(n: _Node, prefix: list[str], out: list[str], limit: int = 64) -> None:
    """Root → leaf name chains of a cpu_op subtree (at most `limit`, first seen first)."""
    path = [*prefix, str(n.e.get("name", ""))]
    if not n.children:
        if len(out) < limit:
            out.append(" > ".join(path))
        return
    for c in n.children:
        _chains(c, path, out, limit)


def _op_path(n: _Node | None) -> list[str]:
    names = []
    while n is not None:
        names.append(str(n.e.get("name", "")))
        n = n.parent_op
    return names[::-1]


def _top(n: _Node) -> _Node:
    while n.parent_op is not None:
        n = n.parent_op
    return n


def _cpu_op_record(n: _Node) -> OpRecord:
    a = _args(n.e)
    dims = a.get("Input Dims")
    shapes = (
        [list(d) if isinstance(d, list) else [] for d in dims] if isinstance(dims, list) else []
    )
    types = a.get("Input type")
    paths: list[str] = []
    _chains(n, [], paths)
    start, end = _ns(n.start), _ns(n.end)
    return OpRecord(
        idx=-1,
        name=str(n.e.get("name", "")),
        seq=_int(a.get("Sequence number")),
        thread=_tid(n.e.get("tid")),
        device="cpu",
        start_ns=start,
        end_ns=end,
        module=str(a.get("Module Hierarchy") or ""),
        input_shapes=shapes,
        input_dtypes=[str(t) for t in types] if isinstance(types, list) else [],
        frames=list(n.frames),
        api=str(n.e.get("name", "")),
        call_paths=list(dict.fromkeys(paths)),
        time_s=(end - start) / 1e9,
        windows_ns=[(start, end)],
    )


def _gpu_record(e: dict, launch: _Node | None) -> OpRecord:
    a = _args(e)
    name = str(e.get("name", ""))
    start = _ns(float(e["ts"]))
    end = start + _ns(float(e.get("dur", 0) or 0))
    op = launch.parent_op if launch is not None else None
    occ = a.get("est. achieved occupancy %")
    via = _op_path(op) if op is not None else [str(launch.e.get("name", ""))] if launch else []
    return OpRecord(
        idx=-1,
        name=name,
        thread=_int(a.get("stream"), 0),
        device=f"cuda:{_int(a.get('device'), 0)}",
        start_ns=start,
        end_ns=end,
        api=via[0] if via else "",
        call_paths=[" > ".join([*via, name])],
        scalar_args=f"stream={a.get('stream')}, correlation={a.get('correlation')}"
        + (f", occupancy={occ}%" if occ is not None else ""),
        time_s=(end - start) / 1e9,
        bytes=float(a.get("bytes", 0) or 0),
        windows_ns=[(start, end)],
    )


@gc_paused()
def profile_from_trace(tf: TraceFile, run: str) -> tuple[Profile, ImportStats]:
    """One trace file as a Profile with GPU activities linked to their launching ops.

    Energy is not filled here (see `estimate_energy` / `meter_energy`)."""
    stats = ImportStats()
    threads: dict[tuple, list[_Node]] = {}
    gpu: list[dict] = []
    launches: dict[int, _Node] = {}
    shared: set[int] = set()  # correlation ids of more than one launch
    launch_count: dict[int, int] = {}  # launches per correlation id
    kept = HostEvents()
    for i, e in enumerate(tf.doc["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        cat = e.get("cat")
        if cat is not None and not isinstance(cat, str):
            _check_event(e, i, tf.path)  # names the field and refuses the trace
        if cat in KEPT_CATS or (
            cat == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep")
        ):
            _check_event(e, i, tf.path)
            kept.add(e, _tid(e.get("tid")))
        kind = {"cpu_op": "cpu_op", "python_function": "python"}.get(cat or "")
        if kind is None and cat in LAUNCH_CATS:
            kind = "launch"
        if kind is None and cat not in GPU_CATS:
            continue  # events Magneton does not read are not checked either
        _check_event(e, i, tf.path)
        if cat in GPU_CATS:
            gpu.append(e)
            continue
        assert kind is not None  # events of no kind were skipped above
        start = float(e["ts"])
        node = _Node(e, kind, start, start + float(e.get("dur", 0) or 0))
        threads.setdefault((e.get("pid"), e.get("tid")), []).append(node)
        if kind == "launch":
            corr = _int(_args(e).get("correlation"))
            if corr >= 0:
                if corr in launches:
                    shared.add(corr)
                launches[corr] = node
                launch_count[corr] = launch_count.get(corr, 0) + 1
    # Several kernels of one correlation id: a CUDA graph's launch makes many, any other
    # launch one (CUPTI numbers each launch call). More than one kernel of one
    # cudaLaunchKernel is a trace whose ids collide (merged or rewritten traces), and
    # the same holds for a memcpy or memset beside a kernel of its id.
    per_corr: dict[int, list[str]] = {}
    for e in gpu:
        corr = _int(_args(e).get("correlation"))
        if corr >= 0:
            per_corr.setdefault(corr, []).append(str(e.get("cat")))
    for corr, cats in per_corr.items():
        launch = launches.get(corr)
        if launch is None or corr in shared or "Graph" in str(launch.e.get("name", "")):
            continue
        if "kernel" in cats and len(cats) > 1:
            shared.add(corr)
    stats.shared_ids = sum(corr in per_corr for corr in shared)
    stats.shared_launches = sum(launch_count[corr] for corr in shared if corr in per_corr)
    for corr in shared:  # which launch made which of its GPU activities is unknown
        launches.pop(corr, None)
    frame_keys: dict[tuple, int] = {}
    profile = Profile(run=RunInfo(name=run))
    for (pid, tid), nodes in threads.items():
        if not _nest(nodes, frame_keys, profile.frames):
            raise MagnetonError(
                f"{tf.path}: host events nested more than {MAX_NESTING} deep on thread "
                f"{tid!r:.40} of process {pid!r:.40} (no profiler stack is that deep); "
                "nothing was stored"
            )
    cpu_ops = [n for nodes in threads.values() for n in nodes if n.kind == "cpu_op"]
    _relink_by_external_id(cpu_ops, launches)
    stats.cpu_ops = len(cpu_ops)
    stats.frames = len(profile.frames)
    # (record, position of the launching top-level operator or -1); tops come first, so
    # a top's position is also its record's position
    records: list[tuple[OpRecord, int]] = []
    tops = [n for n in cpu_ops if n.parent_op is None]
    for pos, n in enumerate(tops):
        n.pos = pos
        records.append((_cpu_op_record(n), -1))
    stats.operators = len(tops)
    for e in gpu:
        corr = _int(_args(e).get("correlation"))
        launch = launches.get(corr)
        stats.ambiguous += corr in shared
        stats.launched += launch is not None
        stats.from_operator += launch is not None and launch.parent_op is not None
        cat = e.get("cat")
        stats.kernels += cat == "kernel"
        stats.memcpys += cat == "gpu_memcpy"
        stats.memsets += cat == "gpu_memset"
        launcher = _top(launch.parent_op).pos if launch and launch.parent_op else -1
        records.append((_gpu_record(e, launch), launcher))
    _assign(profile, records)
    _fill_run(profile.run, tf, profile)
    profile.config.update(_config(tf, stats))
    if kept.rows:
        profile.config[HOST_EVENTS_KEY] = kept.to_json()
    if tf.backend or tf.world_size > 1:
        # distributedInfo: the rank's place in its job, typed like a recorded rank's
        profile.dist = DistInfo(rank=tf.rank, world_size=tf.world_size, backend=tf.backend)
    return profile, stats


def _relink_by_external_id(cpu_ops: list[_Node], launches: dict[int, _Node]) -> None:
    """Prefer the op named by a launch's `External id` when it contains the launch (newer
    Kineto); otherwise keep the nesting result (see the module docstring)."""
    by_ext = {}
    for n in cpu_ops:
        ext = _int(_args(n.e).get("External id"))
        if ext >= 0:
            by_ext[ext] = n
    for launch in launches.values():
        op = by_ext.get(_int(_args(launch.e).get("External id")))
        if (
            op is not None
            and op.e.get("tid") == launch.e.get("tid")
            and op.start <= launch.start <= op.end
        ):
            launch.parent_op = op


def _assign(profile: Profile, records: list[tuple[OpRecord, int]]) -> None:
    """Dense idx in start order, kernels deduplicated per (name, device), and each GPU
    activity's launching operator idx appended to its scalar_args."""
    order = sorted(range(len(records)), key=lambda i: (records[i][0].start_ns, i))
    new_idx = {old: new for new, old in enumerate(order)}
    kernels: dict[tuple[str, str], int] = {}
    for old in order:
        op, launcher = records[old]
        op.idx = new_idx[old]
        if op.device != "cpu":
            k = (op.name, op.device)
            if k not in kernels:
                kernels[k] = len(profile.kernels)
                profile.kernels.append(KernelRecord(kernels[k], *k))
            op.kernels = [kernels[k]]
            if launcher >= 0:
                op.scalar_args += f", launched_by={new_idx[launcher]}"
        profile.ops.append(op)


def _fill_run(info: RunInfo, tf: TraceFile, profile: Profile) -> None:
    starts = [op.start_ns for op in profile.ops]
    ends = [op.end_ns for op in profile.ops]
    info.script = str(tf.path.resolve())
    info.entry = "torch.profiler trace"
    info.started_at = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    info.time_s = (max(ends) - min(starts)) / 1e9 if starts else 0.0
    info.rank, info.world_size = tf.rank, tf.world_size
    gpus = sorted({op.device for op in profile.ops if op.device != "cpu"})
    info.device = gpus[0] if gpus else "cpu"
    info.timing = "imported"


def _config(tf: TraceFile, stats: ImportStats) -> dict[str, str]:
    props = tf.doc.get("deviceProperties") or []  # a list of objects (`_trace_file`)
    cfg = {
        "trace.file": str(tf.path),
        "trace.gpu": str(props[0].get("name", "")) if props else "",
        "trace.counts": json.dumps(stats.__dict__, sort_keys=True),
    }
    return cfg


# --------------------------------------------------------------------------------------
# Energy
# --------------------------------------------------------------------------------------


def gpu_model_name(gpu: str) -> str:
    """tracer/energy/power/model.py model profile for a GPU name ("gpu-default" when not known)."""
    from magneton.tracer.energy.power import MODELS

    low = gpu.lower()
    for key in ("h200", "h100", "a100"):
        if key in low and key in MODELS:
            return key
    return "gpu-default"


def estimate_energy(profile: Profile, model: str = "") -> None:
    """Price each GPU activity on a GPU model profile (module docstring); label `estimated`."""
    from magneton.tracer.energy.power import load_model

    coeff = load_model(model or gpu_model_name(profile.config.get("trace.gpu", "")), "cuda")
    above = 0.0
    for op in profile.ops:
        op.energy_method = "estimated"
        if op.device == "cpu":
            continue
        if op.name.startswith(_COPY_PREFIXES):
            dyn = copy_dynamic_j(op, coeff.e_byte_pj)
        else:
            dyn = (coeff.tdp_w - coeff.p_static_w) * _occupancy(op) * op.time_s
        op.energy_j = coeff.p_static_w * op.time_s + dyn
        above += dyn
    run = profile.run
    run.energy_j = sum(op.energy_j for op in profile.ops)
    run.energy_above_idle_j = above
    run.idle_w = coeff.p_static_w
    run.power_source = f"model:{coeff.name}"
    run.energy_method = "estimated"
    profile.energy.note = (
        f"no power log: kernels priced at P_static {coeff.p_static_w:g} W + "
        f"(TDP {coeff.tdp_w:g} W − P_static)·occupancy over their durations; copies and "
        f"memsets at P_static + {coeff.e_byte_pj:g} pJ per byte of device memory they "
        f"move ({coeff.name}: {coeff.citation}), the SMs idle; host ops not priced"
    )
    profile.energy.model = dict(sorted(coeff.__dict__.items()))


_COPY_PREFIXES = ("Memcpy", "Memset")


def copy_dynamic_j(op: OpRecord, e_byte_pj: float) -> float:
    """Energy above the static floor of a copy or memset: the device-memory traffic it
    causes, at the model's energy per byte (the e_byte of the energy roofline, a
    published HBM/DRAM energy per bit; tracer/energy/power/model.py names the source).

    A copy runs on a copy engine while the SMs idle, so the board draws about its static
    power plus the memory traffic, not its rated power: priced at TDP, a 100 MB
    host-to-device copy on an A100 (8 ms) cost 3.2 J, more than the kernels around it,
    and `Memcpy HtoD` topped GPU reports. Traffic: a device-to-device copy reads and
    writes each byte (2×), a copy to or from the host and a memset touch device memory
    once (1×). A copy with no `bytes` in its trace is priced at the static floor."""
    factor = 2.0 if "DtoD" in op.name else 1.0
    return factor * op.bytes * e_byte_pj * 1e-12


def _occupancy(op: OpRecord) -> float:
    m = _OCC_RE.search(op.scalar_args)
    return min(1.0, max(0.0, float(m.group(1)) / 100.0)) if m else 1.0


def read_power_log(path: Path):
    """A `timestamp_s,watts` CSV (tracer/energy/power/meter.py `read_meter_csv`), or nvidia-smi's
    `timestamp, power.draw [W]` CSV (local wall-clock dates, "123.45 W")."""
    from magneton.tracer.energy.power import MeterTrace, read_meter_csv

    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise MagnetonError(f"cannot read power log {path}: {e.strerror or e}") from None
    ts, ws = [], []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        try:
            when = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            watts = float(parts[1].split()[0])
        except (ValueError, IndexError):
            continue
        ts.append(when.timestamp())
        ws.append(watts)
    if len(ts) >= 2:
        order = np.argsort(ts, kind="stable")
        return MeterTrace(np.asarray(ts, float)[order], np.asarray(ws, float)[order])
    return read_meter_csv(path)


def meter_energy(profile: Profile, spec: str, base_time_ns: int = 0) -> None:
    """Charge a power log to the profile's operators (`measured`).

    Kineto timestamps are Unix µs (plus `baseTimeNanoseconds` when the trace has one);
    log timestamps above 1e8 s are Unix seconds, smaller ones count from the trace's
    first event. `@OFFSET_S` is added to the log's timestamps."""
    from magneton.tracer.energy.power import UNIX_TIME_THRESHOLD_S, parse_meter_spec
    from magneton.tracer.energy.session import Trace, attribute_traces

    path, offset = parse_meter_spec(spec)
    log = read_power_log(path)
    t0 = min(op.start_ns for op in profile.ops)
    t1 = max(op.end_ns for op in profile.ops)
    t = log.t_s + (offset or 0.0)
    if float(np.median(t)) > UNIX_TIME_THRESHOLD_S:
        t_ns = (t * 1e9).astype(np.int64) - base_time_ns
    else:
        t_ns = (t0 + t * 1e9).astype(np.int64)
    if t_ns[-1] < t0 or t_ns[0] > t1:
        raise MagnetonError(
            f"power log {path} does not overlap the trace ({len(t_ns)} samples outside its "
            "time span); give the shift as --power meter:FILE@OFFSET_S"
        )
    att = attribute_traces(profile.ops, [Trace(t_ns, log.watts, device="meter")])
    for op, e in zip(profile.ops, att.energy_j, strict=True):
        op.energy_j = float(e)
        op.energy_method = "measured"
    run = profile.run
    run.energy_j = att.run_energy_j
    run.power_source = f"meter:{path.name}"
    run.energy_method = "measured"
    keep = (t_ns >= t0 - 10**9) & (t_ns <= t1 + 10**9)
    profile.power.append(
        PowerSeries(
            device="meter",
            source="meter",
            t_ns=[int(x) for x in t_ns[keep]],
            watts=[float(x) for x in log.watts[keep]],
        )
    )
    profile.energy.note = f"power log {path.name} charged over operator windows"
