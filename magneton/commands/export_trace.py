"""`magneton export-trace --db DIR RUN -o OUT`: Kineto-style Chrome traces of a run or job,
or (`--format folded`) its energy as folded stacks for a flame graph (`folded_stacks`).

The output is written whole (a temporary file renamed over it) and never through a
symbolic link out of the folder named: OUT's folder for a run, OUT for a job
(graphdb/files.py).

The files follow torch.profiler's (Kineto's) trace format, so Perfetto, chrome://tracing
and Holistic Trace Analysis (HTA) read them as they read a profiler trace:

* `distributedInfo` {rank, world_size, backend} at the top: HTA finds each file's rank
  there. A job recorded or imported rank by rank (`NAME/rank<r>`) is written as one file
  per rank, `OUT/rank<r>.json`, which is the directory layout HTA's multi-rank analyses
  load; a single run is written to the file OUT.
* Host operators are `cpu_op` events on their thread's track, with their module, shapes,
  FLOPs, bytes, energy and how it was obtained in `args`: `energy_j` is the DB's figure
  (with the interpreter time before the operator), `python_j` that interpreter part, so
  `energy_j − python_j` is what `report` shows for the operator (docs/schema.md "One
  operator, two views of its energy"); module spans are
  `user_annotation` events on a "modules" track (energy summed over their ops).
* GPU activities with their own device timing (runs imported from a GPU trace) are
  `kernel` / `gpu_memcpy` / `gpu_memset` events on process = device, thread = stream, with
  `stream`, `device` and `correlation` args. The host events an import kept
  (tracer/capture/kineto.py `HostEvents`: `ProfilerStep#N` annotations, `cuda_runtime` /
  `cuda_driver` / `cuda_sync` calls) are written back on their threads with their
  correlations, so HTA finds the same iterations and pairs the same launches with the
  same kernels as in the original trace (without the steps it counted the last, partial
  iteration too: twice the kernel time; without the launches its launch statistics were
  empty).
* A recorded run's kernels have no device timing of their own (the recorder times
  operators), so they are listed in the operator's `args.kernels` and no kernel event is
  invented. What the recorder did time is each operator's execution on its device: those
  windows are an "operator execution" track per device (category `kernel`, one stream,
  `args.timing` = "operator window"), which is what HTA's temporal and idle breakdowns
  read (busy = inside an operator, idle = the interpreter between operators). Without it
  a CPU run had no stream at all and both breakdowns failed (IndexError, "No objects to
  concatenate").
* Power: one counter ("C") per device from `profile.power` (recorded runs, and imported
  runs given a power log), sensor gaps as instants.

Timestamps are microseconds from the earliest event of the run (the idle measurement
before the first operator can appear, so it is kept rather than clipped). The JSON is
written with ": " separators because HTA finds a file's rank with the pattern
`"rank":\\s+N` before it parses the file.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magneton.model import OpRecord, Profile

if TYPE_CHECKING:
    from magneton.tracer.api import HostEvents

_CPU_PID = 1_000_000  # host process id; device ids (0..n) are the GPU "processes"
_CORRELATION = re.compile(r"correlation=(\d+)")
_LAUNCHED_BY = re.compile(r"launched_by=(\d+)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export-trace",
        help="write a run (or a job, one file per rank) as Kineto-style Chrome traces",
        description=(
            "Export a run as Chrome trace-event JSON in torch.profiler's (Kineto) layout: open "
            "it in ui.perfetto.dev or load it with Holistic Trace Analysis. For a job "
            "(runs NAME/rank<r>) OUT is a directory with one rank<r>.json per rank."
        ),
    )
    p.add_argument("run", help="run name, or job name for a multi-rank job")
    p.add_argument("--db", required=True, help="profile DB directory")
    p.add_argument("-o", "--output", required=True, help="output .json file (directory for a job)")
    p.add_argument(
        "--format",
        choices=("kineto", "folded"),
        default="kineto",
        help="kineto: Chrome trace JSON (default); folded: one `frame;frame;op value` line "
        "per stack, the value its energy in µJ (flamegraph.pl, speedscope, inferno)",
    )
    p.add_argument(
        "--folded", dest="format", action="store_const", const="folded", help="= --format folded"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.api import job_runs
    from magneton.graphdb import open_db, write_confined
    from magneton.model import MagnetonError
    from magneton.tracer.api import KEPT_CATS

    with open_db(args.db, read_only=True) as db:
        ranks = {} if db.has_run(args.run) else job_runs(db, args.run)
        names = {r: row.name for r, row in ranks.items()} if ranks else {-1: args.run}
        for name in names.values():
            db.require_run(name)
        profiles = {r: db.load_profile(n) for r, n in names.items()}
    for p in profiles.values():
        if p.run.status != "ok" or not p.ops:
            raise MagnetonError(f"run '{p.run.name}' has no operators to export")
    out = Path(args.output)
    # a job's files stay inside the folder named, a run's file inside its own folder;
    # a link out of it is refused, never followed (graphdb/files.py)
    root = out if ranks else None
    if args.format == "folded":
        suffix = ".folded"
        targets = {r: out / f"rank{r}{suffix}" for r in profiles} if ranks else {-1: out}
        for r, p in profiles.items():
            lines = folded_stacks(p)
            write_confined(targets[r], "".join(f"{k} {v}\n" for k, v in lines.items()), root)
            total = sum(lines.values())
            print(f"wrote {targets[r]}: {len(lines)} stacks, {total} µJ per call")
        print("render with flamegraph.pl --countname uJ, or open in https://www.speedscope.app")
        return 0
    targets = {r: out / f"rank{r}.json" for r in profiles} if ranks else {-1: out}
    for r, p in profiles.items():
        trace = build_trace(p)
        write_confined(targets[r], json.dumps(trace), root)
        ev = trace["traceEvents"]
        n_ops = sum(1 for e in ev if e.get("cat") == "cpu_op")
        on_device = [e for e in ev if e.get("cat") in _GPU_CATS.values()]
        windows = sum(1 for e in on_device if e["args"].get("timing") == "operator window")
        kept = sum(
            1
            for e in ev
            if e.get("cat") in KEPT_CATS
            or e.get("cat") == "user_annotation"
            and str(e.get("name", "")).startswith("ProfilerStep")
        )
        what = (
            f"{windows} operator windows on the execution track"
            if windows
            else f"{len(on_device)} GPU activities, {kept} launches and step markers"
        )
        print(f"wrote {targets[r]}: {n_ops} operators, {what}")
    print("open in https://ui.perfetto.dev, or load the directory with HTA's TraceAnalysis")
    return 0


def _frame_label(p: Profile, fidx: int) -> str:
    """`forward (modeling_gpt2.py:312)`, as py-spy names frames in its folded output."""
    fr = p.frames[fidx]
    return f"{fr.function} ({Path(fr.file).name}:{fr.line})"


def _clean_frame(text: str) -> str:
    # `;` separates frames and the last space the value: neither may end a name early
    return text.replace(";", ",").replace("\n", " ").strip() or "?"


def folded_stacks(p: Profile) -> dict[str, int]:
    """A run as folded stacks, flamegraph.pl's "collapsed" format: for each operator its
    Python frames (entry first; where none were recorded, its module path, one frame per
    level), then the operator, valued at its energy per call in integer µJ. Interpreter
    time kept apart (`RunEnergy.interp_j`, report's python rows) is a `[python]` leaf
    beside the operator, so the flame graph's width is the run's energy, split as
    `report` splits it. A GPU activity stands under the operator that launched it.
    Integer µJ because the format's counts are integers; stacks that round to 0 are left
    out (a flame graph cannot draw them either)."""
    from magneton.diagnose.api import interp_energy

    interp = interp_energy(p)

    def stack(op: OpRecord, depth: int = 0) -> list[str]:
        launcher = _LAUNCHED_BY.search(op.scalar_args) if op.device.startswith("cuda") else None
        if launcher and depth < 2:
            k = int(launcher.group(1))
            if 0 <= k < len(p.ops) and k != op.idx:
                parent = p.ops[k]
                return [*stack(parent, depth + 1), parent.name]
        if op.frames:
            return [_frame_label(p, f) for f in op.frames if 0 <= f < len(p.frames)]
        if op.module:
            segs = op.module.split(".")
            return [".".join(segs[: i + 1]) for i in range(len(segs))]
        return []

    out: dict[str, float] = {}
    for op in p.ops:
        frames = [_clean_frame(f) for f in stack(op)]
        py = float(interp[op.idx]) if interp is not None else 0.0
        own = max(op.energy_j - py, 0.0)
        for leaf, e in ((_clean_frame(op.name), own), ("[python]", py)):
            if e > 0:
                key = ";".join([*frames, leaf])
                out[key] = out.get(key, 0.0) + e * 1e6
    return {k: round(v) for k, v in out.items() if round(v) > 0}


def _module_spans(ops) -> list[tuple[str, int, int, float, int]]:
    """(path, start_ns, end_ns, energy_j, depth) spans from consecutive ops' module paths.

    A module call is a maximal run of consecutive ops whose path starts with it; walking
    a stack of open modules yields properly nested spans (a module called twice gives two
    spans)."""
    spans = []
    stack: list[list] = []  # [path, start, end, energy]
    for op in sorted(ops, key=lambda o: (o.start_ns, o.idx)):
        segs = op.module.split(".") if op.module else []
        chain = [".".join(segs[: i + 1]) for i in range(len(segs))]
        keep = 0
        while keep < len(stack) and keep < len(chain) and stack[keep][0] == chain[keep]:
            keep += 1
        while len(stack) > keep:
            path, s, e, en = stack.pop()
            spans.append((path, s, e, en, len(stack)))
        for path in chain[keep:]:
            stack.append([path, op.start_ns, op.end_ns, 0.0])
        for entry in stack:
            entry[2] = max(entry[2], op.end_ns)
            entry[3] += op.energy_j
    while stack:
        path, s, e, en = stack.pop()
        spans.append((path, s, e, en, len(stack)))
    return spans


_GPU_CATS = {"Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "": "kernel"}


def _clock(profile: Profile, kept: HostEvents):
    starts = [op.start_ns for op in profile.ops if op.start_ns]
    starts += [s.t_ns[0] for s in profile.power if s.t_ns]
    if kept.rows:
        starts.append(min(r[3] for r in kept.rows))
    t0 = min(starts) if starts else 0
    return lambda t_ns: (t_ns - t0) / 1000.0


def _is_device_activity(op: OpRecord) -> bool:
    """A GPU activity with its own device timing (imported), not a host operator."""
    return op.device.startswith("cuda") and "stream=" in op.scalar_args


def _device_index(device: str) -> int:
    tail = device.split(":", 1)[1] if ":" in device else "0"
    return int(tail) if tail.isdigit() else 0


def _host_events(profile: Profile, us, tid_of: dict[int, int]) -> list[dict]:
    from magneton.diagnose.api import interp_energy

    interp = interp_energy(profile)
    events = []
    for op in profile.ops:
        if _is_device_activity(op):
            continue
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": op.name,
                "pid": _CPU_PID,
                "tid": tid_of[op.thread],
                "ts": us(op.start_ns),
                "dur": max(0, op.end_ns - op.start_ns) / 1000.0,
                "args": {
                    "External id": op.idx + 1,
                    "idx": op.idx,
                    "module": op.module,
                    "Input Dims": op.input_shapes,
                    "input_shapes": op.input_shapes,
                    "output_shapes": op.output_shapes,
                    "dtypes": op.input_dtypes,
                    "scalar_args": op.scalar_args,
                    "Sequence number": op.seq,
                    "kernels": [profile.kernels[k].name for k in op.kernels],
                    "time_s": op.time_s,
                    "energy_j": op.energy_j,
                    "python_j": float(interp[op.idx]) if interp is not None else 0.0,
                    "method": op.energy_method,
                    "flops": op.flops,
                    "bytes": op.bytes,
                },
            }
        )
    return events


def _device_events(profile: Profile, us) -> list[dict]:
    events = []
    for op in profile.ops:
        if not _is_device_activity(op):
            continue
        corr = _CORRELATION.search(op.scalar_args)
        launcher = _LAUNCHED_BY.search(op.scalar_args)
        cat = next(c for prefix, c in _GPU_CATS.items() if op.name.startswith(prefix))
        args = {
            "device": _device_index(op.device),
            "stream": op.thread,
            "correlation": int(corr.group(1)) if corr else op.idx + 1,
            "External id": int(launcher.group(1)) + 1 if launcher else -1,
            "energy_j": op.energy_j,
            "method": op.energy_method,
        }
        if op.bytes:
            args["bytes"] = op.bytes
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": op.name,
                "pid": _device_index(op.device),
                "tid": op.thread,
                "ts": us(op.start_ns),
                "dur": max(0, op.end_ns - op.start_ns) / 1000.0,
                "args": args,
            }
        )
    return events


def _kept_events(kept: HostEvents, us, tid_of: dict[int, int], ext_of: dict[int, int]) -> list:
    """The host events an import kept, on their threads (module docstring). A launch's
    `External id` is that of the operator our export says launched its kernel, so the
    three (operator, launch, kernel) agree within the file."""
    events = []
    for cat_i, name_i, thread, ts_ns, dur_ns, corr, ext in kept.rows:
        if thread not in tid_of:
            tid_of[thread] = max(tid_of.values(), default=0) + 1
        args: dict[str, Any] = {}
        if corr >= 0:
            args["correlation"] = corr
            args["External id"] = ext_of.get(corr, ext)
        events.append(
            {
                "ph": "X",
                "cat": kept.cats[cat_i],
                "name": kept.names[name_i],
                "pid": _CPU_PID,
                "tid": tid_of[thread],
                "ts": us(ts_ns),
                "dur": dur_ns / 1000.0,
                "args": args,
            }
        )
    return events


def _execution_events(profile: Profile, us) -> list[dict]:
    """A recorded run's operator windows as an execution track per device (module
    docstring): one `kernel`-category event per operator, on stream 0 of the device's
    process, pointing back at the operator by `External id`."""
    events = []
    for op in profile.ops:
        pid = _execution_pid(op.device)
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": op.name,
                "pid": pid,
                "tid": 0,
                "ts": us(op.start_ns),
                "dur": max(0, op.end_ns - op.start_ns) / 1000.0,
                "args": {
                    "device": pid if pid < _CPU_PID else -1,
                    "stream": 0,
                    "External id": op.idx + 1,
                    "timing": "operator window",
                    "kernels": [profile.kernels[k].name for k in op.kernels],
                    "energy_j": op.energy_j,
                },
            }
        )
    return events


def _execution_pid(device: str) -> int:
    """The device's process: its index for a GPU, a process after the host's for the CPU."""
    return _device_index(device) if device.startswith("cuda") else _CPU_PID + 1


def _module_events(profile: Profile, us, tid: int) -> list[dict]:
    host = [op for op in profile.ops if not _is_device_activity(op)]
    return [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": path,
            "pid": _CPU_PID,
            "tid": tid,
            "ts": us(s),
            "dur": max(0, e - s) / 1000.0,
            "args": {"energy_j": energy, "depth": depth},
        }
        for path, s, e, energy, depth in _module_spans(host)
    ]


def _power_events(profile: Profile, us) -> list[dict]:
    events: list[dict] = []
    for series in profile.power:
        name = f"power {series.device} (W)"
        for t, w in zip(series.t_ns, series.watts, strict=True):
            events.append({"ph": "C", "pid": _CPU_PID, "name": name, "ts": us(t), "args": {"W": w}})
        for a, b in series.gaps:
            events.append(
                {
                    "ph": "i",
                    "s": "p",
                    "pid": _CPU_PID,
                    "name": f"sensor gap {series.device} ({(b - a) / 1e6:.1f} ms)",
                    "ts": us(a),
                }
            )
    return events


def _track_names(profile: Profile, threads: list[int], mod_tid: int) -> list[dict]:
    def meta(pid: int, name: str, label: str, tid: int | None = None) -> dict:
        e = {"ph": "M", "pid": pid, "name": name, "args": {"name": label}}
        if tid is not None:
            e["tid"] = tid
        return e

    run = profile.run
    events = [meta(_CPU_PID, "process_name", f"magneton: {run.name}")]
    for i, t in enumerate(threads):
        label = "operators" if len(threads) == 1 else f"operators (thread {t})"
        events.append(meta(_CPU_PID, "thread_name", label, i + 1))
    events.append(meta(_CPU_PID, "thread_name", "modules", mod_tid))
    gpus = sorted({op.device for op in profile.ops if _is_device_activity(op)})
    events += [meta(_device_index(d), "process_name", f"GPU {_device_index(d)}") for d in gpus]
    if not gpus:  # the execution tracks of a recorded run
        for d in sorted({op.device for op in profile.ops}):
            pid = _execution_pid(d)
            label = f"GPU {pid}" if pid < _CPU_PID else "CPU"
            events.append(meta(pid, "process_name", label))
            events.append(meta(pid, "thread_name", "operator execution (recorder-timed)", 0))
    return events


def build_trace(profile: Profile) -> dict:
    """The Kineto-style trace dict for a profile (see the module docstring)."""
    from magneton.tracer.api import HostEvents

    run = profile.run
    kept = HostEvents.from_config(profile.config)
    us = _clock(profile, kept)
    threads = sorted({op.thread for op in profile.ops if not _is_device_activity(op)})
    tid_of = {t: i + 1 for i, t in enumerate(threads)}
    mod_tid = len(tid_of) + 1
    tid_of_all = {**tid_of, -(2**62): mod_tid}  # later threads get ids after the modules'
    events = _track_names(profile, threads, mod_tid)
    events += _host_events(profile, us, tid_of)
    device = _device_events(profile, us)
    events += device
    ext_of = {e["args"]["correlation"]: e["args"]["External id"] for e in device}
    events += _kept_events(kept, us, tid_of_all, ext_of)
    if not device:
        events += _execution_events(profile, us)
    events += _module_events(profile, us, mod_tid)
    events += _power_events(profile, us)
    dist: dict[str, Any] = {"rank": run.rank, "world_size": run.world_size}
    if profile.dist is not None and profile.dist.backend:
        dist["backend"] = profile.dist.backend
    return {
        "schemaVersion": 1,
        "distributedInfo": dist,
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run": run.name,
            "power_source": run.power_source,
            "energy_method": run.energy_method,
            "energy_j": run.energy_j,
            "idle_w": run.idle_w,
            "time_s": run.time_s,
        },
    }
