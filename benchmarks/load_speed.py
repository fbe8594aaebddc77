"""How fast a recorded run goes into and out of the Kùzu DB (`save_profile` / `load_profile`).

Builds a synthetic GPT-2-shaped profile of N operators (default 10k; realistic tensor,
dataflow, frame and kernel counts: see tests/test_graphdb.py::synthetic_profile), saves
it into a fresh DB next to an already stored run (so COPY appends to non-empty tables,
as in real use), loads it back, checks the round trip, and times a replace (delete by
rebuild + save). Prints a rich table; `--json OUT` writes the numbers.

    python benchmarks/load_speed.py [--ops 10000] [--repeat 3] [--json OUT] [--real]

`--real` records the profile instead: a Hugging Face GPT-2 forward (from `GPT2Config`,
random weights, enough layers for about `--ops` operators) through `magneton.record`, so
the row counts are what the tracer really produces (more call-stack rows per operator,
fewer modules than the synthetic shape).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from magneton.graphdb import open_db

ROOT = Path(__file__).resolve().parents[1]


def _synthetic():
    # the generator lives with the tests that pin its shape; load it by path (tests/ is
    # not a package)
    spec = importlib.util.spec_from_file_location(
        "_graphdb_tests", ROOT / "tests" / "test_graphdb.py"
    )
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _recorded_gpt2(n_ops: int):
    """A real recording of about `n_ops` operators (a GPT-2 forward is ~39 per layer)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import magneton

    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=max(1, round(n_ops / 39)), n_embd=64, n_head=4, n_positions=64, vocab_size=512
    )
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 512, (1, 32))

    def forward(model, ids):
        with torch.no_grad():
            return model(input_ids=ids).logits

    opts = magneton.RecordOptions(warmup=1, repeat=1, power="model")
    return magneton.record(forward, (model, ids), run="big", options=opts)


def _cpu_ref() -> float:
    """Seconds for a fixed pure-Python loop (sum(range(10**7)); ~0.15 s on an idle
    modern core): scale the other numbers by it to compare machines."""
    t0 = time.perf_counter()
    sum(range(10**7))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000, help="operators in the profile")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions (median)")
    ap.add_argument("--fill", type=int, default=5, help="runs of the same size stored first")
    ap.add_argument("--json", metavar="OUT", help="write the numbers as JSON")
    ap.add_argument("--real", action="store_true", help="record a HF GPT-2 run instead")
    args = ap.parse_args(argv)

    t = _synthetic()
    prof = _recorded_gpt2(args.ops) if args.real else t.synthetic_profile("big", args.ops, 1)
    rows = {
        "operators": len(prof.ops),
        "tensors": len(prof.tensors),
        "modules": len(prof.modules),
        "flows": len(prof.flows()),
        "inputs": sum(len(o.inputs) for o in prof.ops),
        "called_from": sum(len(o.frames) for o in prof.ops),
        "launched": sum(len(o.kernels) for o in prof.ops),
        "power_samples": sum(len(s.t_ns) for s in prof.power),
    }
    total_rows = sum(rows.values())
    from magneton.graphdb.db import _gc_paused, _profile_tables

    # Python -> Arrow conversion alone (part of every save)
    build_s = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        with _gc_paused():  # as save_profile runs it
            _profile_tables(prof)
        build_s.append(time.perf_counter() - t0)

    # Kùzu's cost of a COPY into a non-empty table grows with what the table's last node
    # group (131,072 rows) already holds, so a save is timed in three DB states
    def twin(k: int):
        p = copy.deepcopy(prof)
        p.run.name = f"fill{k}"
        return p

    save_s, save_cpu, empty_s, nth_s = [], [], [], []
    load_s, load_cpu, replace_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            with open_db(Path(tmp) / f"empty{i}") as db:
                t0 = time.perf_counter()
                db.save_profile(prof)
                empty_s.append(time.perf_counter() - t0)
            with open_db(Path(tmp) / f"nth{i}") as db:
                for k in range(args.fill):
                    db.save_profile(twin(k))
                t0 = time.perf_counter()
                db.save_profile(prof)
                nth_s.append(time.perf_counter() - t0)
            with open_db(Path(tmp) / f"db{i}") as db:
                db.save_profile(t.synthetic_profile("other", n_ops=200, seed=2))
                t0, c0 = time.perf_counter(), time.process_time()
                db.save_profile(prof)
                save_s.append(time.perf_counter() - t0)
                save_cpu.append(time.process_time() - c0)
                t0, c0 = time.perf_counter(), time.process_time()
                back = db.load_profile("big")
                load_s.append(time.perf_counter() - t0)
                load_cpu.append(time.process_time() - c0)
                if not t.same(back, t.without_windows(prof)):
                    print("round trip differs", file=sys.stderr)
                    return 1
                if i == 0:
                    t0 = time.perf_counter()
                    db.save_profile(prof, replace=True)
                    replace_s.append(time.perf_counter() - t0)
    med = statistics.median
    save, load = statistics.median(save_s), statistics.median(load_s)
    result = {
        "ops": args.ops,
        "save_10k_s": save,
        "load_10k_s": load,
        "replace_s": replace_s[0],
        "build_arrow_s": med(build_s),
        "save_into_empty_db_s": med(empty_s),
        f"save_after_{args.fill}_same_size_runs_s": med(nth_s),
        # CPU seconds of this process (Kùzu's threads included): on a shared machine wall
        # time also counts waiting for a core, CPU time does not
        "save_10k_cpu_s": statistics.median(save_cpu),
        "load_10k_cpu_s": statistics.median(load_cpu),
        "loadavg_1min": os.getloadavg()[0],
        "cpu_ref_s": _cpu_ref(),
        "cpus": os.cpu_count(),
        "save_rows_per_s": total_rows / save,
        "load_rows_per_s": total_rows / load,
        "rows": rows,
        "repeat": args.repeat,
    }
    result["profile"] = "recorded HF GPT-2" if args.real else "synthetic GPT-2 shape"
    if len(prof.ops) != 10_000:  # the keys name 10k; say what was measured
        result["note"] = f"measured with {len(prof.ops)} operators"

    table = Table(
        title=f"Kùzu load speed, {len(prof.ops)} operators ({total_rows} node+rel rows, "
        f"{result['profile']})"
    )
    table.add_column("step")
    table.add_column("wall s (median)", justify="right")
    table.add_column("CPU s", justify="right")
    table.add_column("rows/s (wall)", justify="right")
    table.add_row(
        "save_profile beside one small run",
        f"{save:.3f}",
        f"{result['save_10k_cpu_s']:.3f}",
        f"{total_rows / save:,.0f}",
    )
    table.add_row("  of which Python -> Arrow", f"{med(build_s):.3f}", "", "")
    table.add_row("save_profile into an empty DB", f"{med(empty_s):.3f}", "", "")
    table.add_row(
        f"save_profile after {args.fill} runs of this size",
        f"{med(nth_s):.3f}",
        "",
        f"{total_rows / med(nth_s):,.0f}",
    )
    table.add_row(
        "load_profile",
        f"{load:.3f}",
        f"{result['load_10k_cpu_s']:.3f}",
        f"{total_rows / load:,.0f}",
    )
    table.add_row("replace (rebuild + save)", f"{replace_s[0]:.3f}", "", "")
    Console().print(table)
    Console().print(", ".join(f"{k}={v}" for k, v in rows.items()))
    Console().print(
        f"load average {result['loadavg_1min']:.1f} on {result['cpus']} CPUs; "
        f"reference loop {result['cpu_ref_s']:.3f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
