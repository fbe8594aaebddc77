"""`magneton export-trace --db DIR RUN -o trace.json`: a Chrome/Perfetto trace of one run.

Tracks: one per recording thread with every operator as a complete ("X") event - its
module, shapes, FLOPs, bytes, energy and how that energy was obtained in `args`; one
"modules" track with nested module spans (energy summed over their ops); one power
counter ("C") per device from `profile.power`, with sensor gaps as instant events.
Timestamps are microseconds from the earliest event of the run (the idle measurement
before the first operator can appear, so it is kept rather than clipped).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export-trace",
        help="write a run as a Chrome/Perfetto JSON trace",
        description=(
            "Export one run as Chrome trace-event JSON (open in ui.perfetto.dev or "
            "chrome://tracing): operators, module spans and power counters."
        ),
    )
    p.add_argument("run", help="run name")
    p.add_argument("--db", required=True, help="profile DB directory")
    p.add_argument("-o", "--output", required=True, help="output .json file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import open_db
    from magneton.graphdb.model import MagnetonError

    with open_db(args.db, read_only=True) as db:
        db.require_run(args.run)
        profile = db.load_profile(args.run)
    if profile.run.status != "ok" or not profile.ops:
        raise MagnetonError(f"run '{args.run}' has no operators to export")
    trace = build_trace(profile)
    out = Path(args.output)
    try:
        out.write_text(json.dumps(trace))
    except OSError as e:
        raise MagnetonError(f"cannot write {out}: {e.strerror or e}") from None
    n_ops = sum(1 for e in trace["traceEvents"] if e.get("cat") == "operator")
    print(f"wrote {out}: {n_ops} operators, open it in https://ui.perfetto.dev")
    return 0


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


def build_trace(profile) -> dict:
    """The Chrome trace-event dict for a profile (see the module docstring)."""
    run = profile.run
    starts = [op.start_ns for op in profile.ops if op.start_ns]
    starts += [s.t_ns[0] for s in profile.power if s.t_ns]
    t0 = min(starts) if starts else 0
    pid = 1

    def us(t_ns: int) -> float:
        return (t_ns - t0) / 1000.0

    events: list[dict] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"magneton: {run.name}"}},
    ]
    threads = sorted({op.thread for op in profile.ops})
    tid_of = {t: i + 1 for i, t in enumerate(threads)}
    for t, tid in tid_of.items():
        label = "operators" if len(threads) == 1 else f"operators (thread {t})"
        events.append(
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": label}}
        )
    mod_tid = len(tid_of) + 1
    events.append(
        {"ph": "M", "pid": pid, "tid": mod_tid, "name": "thread_name", "args": {"name": "modules"}}
    )
    for op in profile.ops:
        dur_ns = max(0, op.end_ns - op.start_ns)
        events.append(
            {
                "ph": "X",
                "cat": "operator",
                "name": op.name,
                "pid": pid,
                "tid": tid_of[op.thread],
                "ts": us(op.start_ns),
                "dur": dur_ns / 1000.0,
                "args": {
                    "idx": op.idx,
                    "module": op.module,
                    "input_shapes": op.input_shapes,
                    "output_shapes": op.output_shapes,
                    "dtypes": op.input_dtypes,
                    "scalar_args": op.scalar_args,
                    "time_s": op.time_s,
                    "energy_j": op.energy_j,
                    "method": op.energy_method,
                    "flops": op.flops,
                    "bytes": op.bytes,
                },
            }
        )
    for path, s, e, energy, depth in _module_spans(profile.ops):
        events.append(
            {
                "ph": "X",
                "cat": "module",
                "name": path,
                "pid": pid,
                "tid": mod_tid,
                "ts": us(s),
                "dur": max(0, e - s) / 1000.0,
                "args": {"energy_j": energy, "depth": depth},
            }
        )
    for series in profile.power:
        name = f"power {series.device} (W)"
        for t, w in zip(series.t_ns, series.watts, strict=True):
            events.append({"ph": "C", "pid": pid, "name": name, "ts": us(t), "args": {"W": w}})
        for a, b in series.gaps:
            events.append(
                {
                    "ph": "i",
                    "s": "p",
                    "pid": pid,
                    "name": f"sensor gap {series.device} ({(b - a) / 1e6:.1f} ms)",
                    "ts": us(a),
                }
            )
    return {
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
