"""Tracing overhead: a Hugging Face GPT-2 forward loop untraced vs traced, in one run.

Measures the three ways Magneton can observe a forward call:
  * untraced            — plain eager PyTorch (the baseline);
  * empty mode          — a dispatch mode that only calls the operator (Magneton's
                          `RecorderMode` base): the floor any Python dispatch mode pays;
  * timing pass         — `TimingCapture`, the only instrumentation present while energy is
                          measured (what the paper's 4.4% overhead figure is about);
  * timing pass + CPU   — `CpuTimingCapture` (tracer/timing/passes.py), which also reads the process
                          CPU clock around each op: what the model-priced recorder runs;
  * Kineto, CPU only    — the profiler's C++ `RecordFunction` path with CPU activity only
                          (no shapes, no stacks), started before and stopped after the
                          timed call: the alternative the issue proposed for the timing
                          pass. It records wall windows only; it cannot read the process
                          CPU clock per operator, which the timing pass prices under load;
  * structure pass      — full dataflow/values/stacks/profiler capture (runs once per
                          recording, separately, so its cost never reaches energy numbers).
Calls are interleaved (A B C A B C ...), in an order rotated each round so no variant
always follows the same one, and summarised by the median, so drift in machine load hits
all variants equally; results are ratios against the untraced median, and for the timing
passes also the median of each round's ratio to that round's untraced call (paired).

The structure pass is measured as a recording pays for it: each run starts with an empty
summary cache (a recording summarizes every parameter once), and it is paired with an
untraced call right before it. Both wall and process CPU time (`time.process_time`) are
reported: on a shared machine CPU time is far less disturbed by other processes' load.
The 1-minute load average at the start and end is printed with the results.

The untraced call is timed twice. In this process it runs with the OpenMP policy of the
environment it was started in (`MAGNETON_STEADY=1` applies the steady mode's
`OMP_WAIT_POLICY=PASSIVE`, as `magneton record --steady` does); that is the baseline of
the passes' own cost. A second process that never imports magneton (the same model and
seed, OMP_WAIT_POLICY as the user set it) times one untraced call whenever this one does,
interleaved over a pipe, and the ratios against it are what a user's program pays.

With `--ablate`, each structure pass is followed by passes with parts of it switched off
(quantiles, spectra, all summaries, the profiler), in the same interleaving: what each
part costs, and what a design without it would gain at most; and by one with a single
intra-op thread, what the summary thread loses to PyTorch's spinning OpenMP workers.

With `--summary-parts`, one more structure pass (after the timed ones, not in any ratio)
counts what the value summaries read: how many tensors and elements, their bytes (the
memory a design that summarized after the call returned would have to hold), and the
CPU time of the summaries' worker threads per part (`time.thread_time` around the
quantiles, the spectra, the stats).

    python benchmarks/tracing_overhead.py [--layers 12] [--seq 128] [--iters 20] [--ablate]
                                          [--summary-parts] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from unittest import mock

# torch is imported after magneton (in `main`), as under `magneton record`: OpenMP reads
# its wait policy when torch loads, and spinning OpenMP workers compete with the
# structure pass's summary threads (1 s more CPU per GPT-2 12L pass, measured)


# --ablate: structure passes with parts switched off, to see what each part costs. The
# values such a pass stores are wrong (zeros); only its time means anything.
ABLATIONS = {
    "no quantiles": ("quantiles",),
    "no spectra": ("spectra",),
    "no quantiles, no spectra (stats only)": ("quantiles", "spectra"),
    "no summaries": ("summaries",),
    "no summaries, no profiler": ("summaries", "profiler"),
    # not a part but a setting: the pass with one intra-op thread, so PyTorch's OpenMP
    # workers do not spin against the summary thread (a change to the program's threads
    # that Magneton does not make; measured to know what it would buy)
    "one intra-op thread": ("threads",),
}


class ProgramBaseline:
    """The untraced call as the user's program makes it: a child process that never
    imports magneton (so OpenMP keeps its default wait policy), holds the same model,
    and times one forward per request."""

    def __init__(self, layers: int, seq: int, batch: int, user_policy: str | None):
        """`user_policy`: the OMP_WAIT_POLICY the user set before magneton set its own."""
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if user_policy:
            env["OMP_WAIT_POLICY"] = user_policy
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--baseline-child", f"{layers},{seq},{batch}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.policy = self.proc.stdout.readline().strip()  # "ready <OMP_WAIT_POLICY>"

    def call(self) -> tuple[float, float]:
        """(wall s, CPU s) of one untraced forward in the child."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        wall, cpu = self.proc.stdout.readline().split()
        return float(wall), float(cpu)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _baseline_child(shape: str) -> None:
    import sys

    import torch

    layers, seq, batch = (int(x) for x in shape.split(","))
    model, ids = build(layers, seq, batch)
    with torch.no_grad():
        for _ in range(3):
            model(ids)
    print("ready", os.environ.get("OMP_WAIT_POLICY", "unset"), flush=True)
    for _ in sys.stdin:
        c0, t0 = time.process_time(), time.perf_counter()
        with torch.no_grad():
            model(ids)
        print(time.perf_counter() - t0, time.process_time() - c0, flush=True)


def summary_parts(structure_pass) -> dict:
    """One structure pass with the summary parts timed on the threads that run them."""
    import threading

    from magneton.tracer.capture import invariants

    lock = threading.Lock()
    cpu = {"quantiles": 0.0, "spectra": 0.0, "stats": 0.0}
    seen = {"tensors": 0, "elements": 0}

    def timed(name: str, fn):
        def wrapper(*args):
            t0 = time.thread_time()
            out = fn(*args)
            with lock:
                cpu[name] += time.thread_time() - t0
                if name == "stats":  # once per float tensor
                    seen["tensors"] += 1
                    seen["elements"] += args[0].size
            return out

        return wrapper

    with contextlib.ExitStack() as stack:
        for name in cpu:
            fn = getattr(invariants, f"_{name}")
            stack.enter_context(mock.patch.object(invariants, f"_{name}", timed(name, fn)))
        structure_pass()
    return {**seen, "bytes": 4 * seen["elements"], "thread_cpu_s": cpu}


def boundary_share(forward) -> dict:
    """Of the tensors a recording stores a value summary for, those that leave the leaf
    module that made them (consumed in another module, or returned): what a design that
    summarized only module boundaries would still summarize."""
    import magneton

    opts = magneton.RecordOptions(warmup=0, repeat=1, power="model")
    p = magneton.record(forward, (), run="boundary-share", options=opts)
    consumers: dict[int, set[str]] = {}
    for o in p.ops:
        for t in o.inputs:
            consumers.setdefault(t, set()).add(o.module)
    summarized = [t for t in p.tensors if t.stats and t.producer >= 0]
    leaving = [
        t
        for t in summarized
        if consumers.get(t.idx, set()) - {p.ops[t.producer].module} or t.idx not in consumers
    ]
    return {
        "tensors": [len(leaving), len(summarized)],
        "elements": [sum(t.numel for t in leaving), sum(t.numel for t in summarized)],
    }


def build(layers: int, seq: int, batch: int):
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=layers, n_embd=768, n_head=12)).eval()
    ids = torch.randint(0, 50257, (batch, seq))
    return model, ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--structure-iters", type=int, default=3)
    ap.add_argument("--ablate", action="store_true", help="also time passes with parts off")
    ap.add_argument(
        "--summary-parts", action="store_true", help="count what the summaries read and cost"
    )
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--baseline-child", metavar="L,S,B", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_child:
        _baseline_child(args.baseline_child)
        return
    user_policy = os.environ.get("OMP_WAIT_POLICY")  # before magneton's import sets its own

    import magneton  # noqa: F401  (before torch: see the imports above)

    # isort: split
    import torch
    from rich.console import Console
    from rich.table import Table
    from torch.autograd.profiler import profile

    from magneton.tracer.capture import invariants
    from magneton.tracer.capture.dispatch import (
        ModuleTracker,
        RecorderMode,
        StructureCapture,
        TimingCapture,
        _fd2_silenced,
        run_structure_pass,
    )
    from magneton.tracer.programs.record import _roots_and_sources

    class EmptyMode(RecorderMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **kwargs) if kwargs else func(*args)

    from context import OtherCpu, context, line

    ctx = context()
    load_start = ctx["load_avg_1m"]
    others = OtherCpu()
    model, ids = build(args.layers, args.seq, args.batch)

    def forward():
        with torch.no_grad():
            return model(ids)

    for _ in range(3):
        forward()

    from magneton.tracer.timing.passes import CpuTimingCapture

    program = ProgramBaseline(args.layers, args.seq, args.batch, user_policy)
    untraced, program_untraced, empty, timing, timing_cpu, kineto = [], [], [], [], [], []
    ops = 0

    def run_untraced() -> float:
        t0 = time.perf_counter()
        forward()
        return time.perf_counter() - t0

    def run_empty() -> float:
        t0 = time.perf_counter()
        with EmptyMode():
            forward()
        return time.perf_counter() - t0

    def run_captured(capture) -> float:
        nonlocal ops
        t0 = time.perf_counter()
        with capture:
            forward()
        wall = time.perf_counter() - t0
        ops = len(capture.events)
        return wall

    def run_kineto() -> float:
        prof = profile(use_cpu=True, use_kineto=True)
        with _fd2_silenced():
            prof.__enter__()
        t0 = time.perf_counter()
        forward()
        wall = time.perf_counter() - t0
        with _fd2_silenced():
            prof.__exit__(None, None, None)
        return wall

    light = [
        (untraced, run_untraced),
        (empty, run_empty),
        (timing, lambda: run_captured(TimingCapture())),
        (timing_cpu, lambda: run_captured(CpuTimingCapture())),
        (kineto, run_kineto),
    ]
    for i in range(args.iters):
        program_untraced.append(program.call()[0])
        # the in-process variants in a rotated order each round: no variant always runs
        # right after the program's process (or any other) and inherits its cache state
        for series, fn in light[i % len(light) :] + light[: i % len(light)]:
            series.append(fn())

    def structure_pass(parts_off: tuple[str, ...] = ()) -> tuple[float, float]:
        """One structure pass as a recording runs it, with `parts_off` switched off
        (an ablation: what each part costs): (wall s, CPU s)."""
        invariants._cache.clear()  # a recording starts with no summaries
        # the modules and source kinds (input, param, buffer) a recording passes
        roots, sources = _roots_and_sources(forward, (), {}, None)
        cap = StructureCapture(
            ModuleTracker(roots), sources=sources, summaries="summaries" not in parts_off
        )
        with contextlib.ExitStack() as stack:
            if "quantiles" in parts_off:
                zeros = [0.0] * invariants.N_QUANTILES
                stack.enter_context(mock.patch.object(invariants, "_quantiles", lambda a: zeros))
            if "spectra" in parts_off:
                stack.enter_context(
                    mock.patch.object(invariants, "_spectra", lambda x, sp, sc: ([], []))
                )
            if "threads" in parts_off:
                stack.callback(torch.set_num_threads, torch.get_num_threads())
                torch.set_num_threads(1)
            c0, t0 = time.process_time(), time.perf_counter()
            run_structure_pass(forward, cap, profile_calls="profiler" not in parts_off)
            return time.perf_counter() - t0, time.process_time() - c0

    structure, struct_base, structure_cpu, struct_base_cpu = [], [], [], []
    struct_program, struct_program_cpu = [], []
    ablated: dict[str, list[float]] = {name: [] for name in ABLATIONS} if args.ablate else {}
    for _ in range(args.structure_iters):
        # each pass is paired with untraced calls just before it (same load): this
        # process's and the program's
        for name in [None, *ablated]:
            c0, t0 = time.process_time(), time.perf_counter()
            forward()
            struct_base.append(time.perf_counter() - t0)
            struct_base_cpu.append(time.process_time() - c0)
            if name is None:
                wall, cpu = program.call()
                struct_program.append(wall)
                struct_program_cpu.append(cpu)
            wall, cpu = structure_pass(ABLATIONS[name] if name else ())
            if name:
                ablated[name].append(wall)
            else:
                structure.append(wall)
                structure_cpu.append(cpu)

    program.close()
    ctx.update(others.report())
    parts = summary_parts(structure_pass) if args.summary_parts else None
    if parts:
        parts["module_boundaries"] = boundary_share(forward)
    base = statistics.median(untraced)
    prog = statistics.median(program_untraced)
    res = {
        "model": f"gpt2 {args.layers}L seq{args.seq} batch{args.batch}",
        "operators_per_call": ops,
        "untraced_s": base,
        "empty_mode_s": statistics.median(empty),
        "empty_mode_ratio": statistics.median(empty) / base,
        "timing_pass_s": statistics.median(timing),
        "structure_pass_s": statistics.median(structure),
        "timing_overhead_ratio": statistics.median(timing) / base,
        "timing_cpu_pass_s": statistics.median(timing_cpu),
        "timing_cpu_overhead_ratio": statistics.median(timing_cpu) / base,
        # each pass over the untraced call of its own round: the window's speed cancels
        "timing_paired_ratio": statistics.median(
            t / u for t, u in zip(timing, untraced, strict=True)
        ),
        "timing_cpu_paired_ratio": statistics.median(
            t / u for t, u in zip(timing_cpu, untraced, strict=True)
        ),
        "kineto_cpu_only_s": statistics.median(kineto),
        "kineto_cpu_only_ratio": statistics.median(kineto) / base,
        "structure_overhead_ratio": statistics.median(structure) / statistics.median(struct_base),
        "structure_untraced_cpu_s": statistics.median(struct_base_cpu),
        "structure_pass_cpu_s": statistics.median(structure_cpu),
        "structure_overhead_cpu_ratio": statistics.median(structure_cpu)
        / statistics.median(struct_base_cpu),
        # against the user's program (default OpenMP policy, its own process)
        "program_untraced_s": prog,
        "program_omp_wait_policy": program.policy.removeprefix("ready "),
        "timing_vs_program_ratio": statistics.median(timing) / prog,
        "timing_cpu_vs_program_ratio": statistics.median(timing_cpu) / prog,
        "structure_vs_program_ratio": statistics.median(structure)
        / statistics.median(struct_program),
        # each pass over the program's call just before it: the window's speed cancels
        "structure_vs_program_paired_ratio": statistics.median(
            s / p for s, p in zip(structure, struct_program, strict=True)
        ),
        "structure_vs_program_paired_cpu_ratio": statistics.median(
            s / p for s, p in zip(structure_cpu, struct_program_cpu, strict=True)
        ),
        "structure_vs_program_cpu_ratio": statistics.median(structure_cpu)
        / statistics.median(struct_program_cpu),
        "ablations": {
            name: {
                "structure_pass_s": statistics.median(v),
                "ratio": statistics.median(v) / statistics.median(struct_base),
            }
            for name, v in ablated.items()
        },
        "summary_parts": parts,
        "load_avg_1m": [load_start, os.getloadavg()[0]],
        "torch_threads": torch.get_num_threads(),
        "context": ctx,
    }
    print(line(ctx))
    table = Table(title=f"Tracing overhead — {res['model']}, {ops} ops/call")
    for col in ("variant", "median s/call", "ratio vs untraced", "vs the program's own"):
        table.add_column(col, justify="right" if col != "variant" else "left")
    table.add_row("untraced", f"{base:.4f}", "1.000", f"{base / prog:.3f}")
    table.add_row(
        f"untraced, the program's own (OMP_WAIT_POLICY {res['program_omp_wait_policy']})",
        f"{prog:.4f}",
        f"{prog / base:.3f}",
        "1.000",
    )
    table.add_row(
        "empty dispatch mode (floor)",
        f"{res['empty_mode_s']:.4f}",
        f"{res['empty_mode_ratio']:.3f}",
        f"{res['empty_mode_s'] / prog:.3f}",
    )
    table.add_row(
        "timing pass",
        f"{res['timing_pass_s']:.4f}",
        f"{res['timing_overhead_ratio']:.3f}",
        f"{res['timing_vs_program_ratio']:.3f}",
    )
    table.add_row(
        "timing pass + CPU clock",
        f"{res['timing_cpu_pass_s']:.4f}",
        f"{res['timing_cpu_overhead_ratio']:.3f}",
        f"{res['timing_cpu_vs_program_ratio']:.3f}",
    )
    table.add_row(
        "Kineto, CPU only (no per-op CPU clock)",
        f"{res['kineto_cpu_only_s']:.4f}",
        f"{res['kineto_cpu_only_ratio']:.3f}",
        f"{res['kineto_cpu_only_s'] / prog:.3f}",
    )
    table.add_row(
        "structure pass (once per recording)",
        f"{res['structure_pass_s']:.4f}",
        f"{res['structure_overhead_ratio']:.2f}",
        f"{res['structure_vs_program_ratio']:.2f}",
    )
    for name, row in res["ablations"].items():
        table.add_row(
            f"  ablation: {name}",
            f"{row['structure_pass_s']:.4f}",
            f"{row['ratio']:.2f}",
            f"{row['structure_pass_s'] / statistics.median(struct_program):.2f}",
        )
    Console().print(table)
    print(
        f"timing pass paired round by round with the untraced call: "
        f"{res['timing_paired_ratio']:.3f}x, with the CPU clock {res['timing_cpu_paired_ratio']:.3f}x"
    )
    print(
        f"structure pass CPU time: {res['structure_pass_cpu_s']:.3f} s vs untraced "
        f"{res['structure_untraced_cpu_s']:.3f} s = {res['structure_overhead_cpu_ratio']:.2f}x "
        f"({res['structure_vs_program_cpu_ratio']:.2f}x the program's own); "
        f"paired pass by pass with the program's call: "
        f"{res['structure_vs_program_paired_ratio']:.2f}x wall, "
        f"{res['structure_vs_program_paired_cpu_ratio']:.2f}x CPU; "
        f"load average (1 min) {load_start:.2f} at start, {res['load_avg_1m'][1]:.2f} at end"
    )
    if parts:
        print(
            f"summaries of one pass: {parts['tensors']} tensors, {parts['elements'] / 1e6:.1f} M "
            f"elements ({parts['bytes'] / 2**20:.0f} MiB as float32); worker-thread CPU s: "
            + ", ".join(f"{k} {v:.3f}" for k, v in parts["thread_cpu_s"].items())
        )
        (bt, st), (be, se) = parts["module_boundaries"].values()
        print(
            f"of a recording's {st} summarized operator outputs, {bt} leave the leaf module "
            f"that made them: {be / 1e6:.1f} of {se / 1e6:.1f} M elements ({be / se:.0%})"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
