"""Scalability of differential matching (paper §6.4, "Efficiency and Scalability").

Records two pairs of real Hugging Face models with the real recorder
(`magneton.tracer.programs.record.record_callable`, built from config with random weights, no
download) and times `match_runs` on them — recording excluded:

  gpt2_12l   GPT2Model, 12 layers, eager vs sdpa attention   (paper: 167 ms)
  llama_32l  LlamaModel, 32 layers, small hidden, eager vs sdpa (paper: 1.4 s)

Targets here (issue 16): ≤ 0.05 s and ≤ 0.25 s. Reported per pair: operators per side, matched
region pairs, best-of-N wall time and CPU time of `match_runs` (a shared machine's
wall time includes other processes' load; CPU time does not), its phases, and a
brute-force strawman: every (input pair, output pair) of equivalent tensors whose
between-subgraphs have equivalent boundaries on both sides, enumerated with bitset
reachability until `--strawman-timeout` seconds.

It also reports the cost of `summarize` (the per-tensor invariant computed during the
structure pass) for the tensor shapes of a real GPT-2 (124M, batch 1, 128 tokens), in µs
per tensor, fresh tensors so the view cache does not hide the work.

    python benchmarks/matching_scale.py [--json OUT] [--repeat N] [--strawman-timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from magneton.diagnose.matching.equivalence import TensorIndex, match_tensors
from magneton.diagnose.matching.match import build_graph, match_runs
from magneton.model import Profile
from magneton.tracer.capture.invariants import summarize
from magneton.tracer.programs.record import RecordOptions, record_callable

SEQ = 16


def gpt2(attn: str):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=12,
        n_embd=64,
        n_head=4,
        vocab_size=1000,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2Model._from_config(cfg, attn_implementation=attn).eval()


def llama(attn: str):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    return LlamaModel._from_config(cfg, attn_implementation=attn).eval()


def forward(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state


def record_pair(build) -> tuple[Profile, Profile]:
    ids = torch.randint(0, 1000, (1, SEQ), generator=torch.Generator().manual_seed(1))
    opts = RecordOptions(warmup=0, repeat=1, power="model", call_paths=False)
    return tuple(
        record_callable(forward, (build(attn), ids), run=attn, options=opts)
        for attn in ("eager", "sdpa")
    )


def time_match(pa: Profile, pb: Profile, repeat: int) -> dict:
    best_wall, best_cpu, res = float("inf"), float("inf"), None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        res = match_runs(pa, pb)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    assert res is not None
    sizes_a = [len(rp.a.ops) for rp in res.pairs]
    return {
        "wall_s": best_wall,
        "cpu_s": best_cpu,
        "ops_a": len(pa.ops),
        "ops_b": len(pb.ops),
        "pairs": len(res.pairs),
        "avg_region_ops_a": sum(sizes_a) / max(len(sizes_a), 1),
        "max_region_ops_a": max(sizes_a, default=0),
        "unmatched_ops": len(res.unmatched_ops_a) + len(res.unmatched_ops_b),
        "phases_s": res.timings_s,
    }


def strawman(pa: Profile, pb: Profile, timeout_s: float) -> dict:
    """All subgraph pairs by boundary: for every equivalent output pair and every
    equivalent input pair upstream of it, take the ops between input and output on each
    side and accept the pair when every other tensor entering either subgraph is a source
    or has an equivalent entering the other one."""
    t0 = time.perf_counter()
    ga, gb = build_graph(pa), build_graph(pb)
    ia = TensorIndex(t for t in pa.tensors if ga.data_tensors[t.idx])
    ib = TensorIndex(t for t in pb.tensors if gb.data_tensors[t.idx])
    eq = {a: {b for _, b in v} for a, v in match_tensors(ia, ib).items()}

    def reach(p: Profile):
        anc = [0] * len(p.tensors)  # ops on some path into tensor t (bitset)
        for op in p.ops:
            bits = 1 << op.idx
            for t in op.inputs:
                bits |= anc[t]
            for t in op.outputs:
                anc[t] = bits
        desc = [0] * len(p.tensors)  # ops on some path out of tensor t
        for op in reversed(p.ops):
            bits = 1 << op.idx
            for t in op.outputs:
                bits |= desc[t]
            for t in op.inputs:
                desc[t] |= bits
        return anc, desc

    anc_a, desc_a = reach(pa)
    anc_b, desc_b = reach(pb)

    def entering(p: Profile, bits: int) -> set[int]:
        ops = [o for o in range(len(p.ops)) if bits >> o & 1]
        made = {t for o in ops for t in p.ops[o].outputs}
        return {t for o in ops for t in p.ops[o].inputs if t not in made}

    pairs = [(a, b) for a, bs in eq.items() for b in bs]
    checked = found = 0
    timed_out = False
    for ta, tb in pairs:
        for sa, sb in pairs:
            if time.perf_counter() - t0 > timeout_s:
                timed_out = True
                break
            sub_a, sub_b = desc_a[sa] & anc_a[ta], desc_b[sb] & anc_b[tb]
            if not sub_a or not sub_b:
                continue
            checked += 1
            ea, eb = entering(pa, sub_a), entering(pb, sub_b)
            ok = all(
                pa.tensors[t].producer < 0 or not ga.data_tensors[t] or eq.get(t, set()) & eb
                for t in ea
            )
            found += ok
        if timed_out:
            break
    return {
        "seconds": time.perf_counter() - t0,
        "timed_out": timed_out,
        "candidate_pairs": len(pairs) ** 2,
        "checked": checked,
        "found": found,
    }


GPT2_SHAPES = {
    "hidden (1,128,768)": (1, 128, 768),
    "mlp (1,128,3072)": (1, 128, 3072),
    "qkv (1,128,2304)": (1, 128, 2304),
    "heads (1,12,128,64)": (1, 12, 128, 64),
    "scores (1,12,128,128)": (1, 12, 128, 128),
    "ln weight (768,)": (768,),
    "c_attn weight (768,2304)": (768, 2304),
    "c_fc weight (768,3072)": (768, 3072),
    "wte (50257,768)": (50257, 768),
}


def summarize_cost(repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """Best-of-`repeat` wall and CPU µs of `summarize` per GPT-2 tensor shape."""
    g = torch.Generator().manual_seed(0)
    wall, cpu = {}, {}
    for name, shape in GPT2_SHAPES.items():
        n = 1 if shape[0] > 10000 else repeat
        best, best_cpu = float("inf"), float("inf")
        for _ in range(n):
            t = torch.randn(shape, generator=g)
            c0, t0 = time.process_time(), time.perf_counter()
            summarize(t)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        wall[name], cpu[name] = best * 1e6, best_cpu * 1e6
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON")
    ap.add_argument("--repeat", type=int, default=5, help="match_runs repetitions (best kept)")
    ap.add_argument("--strawman-timeout", type=float, default=60.0, help="seconds per pair")
    args = ap.parse_args()

    out: dict = {"load_avg_1m": [os.getloadavg()[0]]}
    for key, build, paper_s, target_s in (
        ("gpt2_12l", gpt2, 0.167, 0.05),
        ("llama_32l", llama, 1.4, 0.25),
    ):
        t0 = time.perf_counter()
        pa, pb = record_pair(build)
        rec_s = time.perf_counter() - t0
        res = time_match(pa, pb, args.repeat)
        res.update(record_s=rec_s, paper_s=paper_s, target_s=target_s)
        res["strawman"] = strawman(pa, pb, args.strawman_timeout)
        out[key] = res
        out[f"{key}_s"] = res["wall_s"]

    out["summarize_us"], out["summarize_cpu_us"] = summarize_cost(args.repeat)
    out["load_avg_1m"].append(os.getloadavg()[0])

    from rich.console import Console
    from rich.table import Table

    table = Table(title="differential matching: eager vs sdpa attention (recording excluded)")
    for c in (
        "pair",
        "ops a/b",
        "pairs",
        "avg/max ops",
        "wall s",
        "cpu s",
        "target s",
        "paper s",
        "strawman",
    ):
        table.add_column(c, justify="left" if c == "pair" else "right")
    for key in ("gpt2_12l", "llama_32l"):
        r = out[key]
        s = r["strawman"]
        straw = (
            f"timeout {s['seconds']:.0f} s ({s['checked']:,} of {s['candidate_pairs']:,} checked)"
            if s["timed_out"]
            else f"{s['seconds']:.1f} s, {s['found']:,} pairs"
        )
        table.add_row(
            key,
            f"{r['ops_a']}/{r['ops_b']}",
            str(r["pairs"]),
            f"{r['avg_region_ops_a']:.1f}/{r['max_region_ops_a']}",
            f"{r['wall_s']:.3f}",
            f"{r['cpu_s']:.3f}",
            f"{r['target_s']:.2f}",
            f"{r['paper_s']:.3f}",
            straw,
        )
    con = Console()
    if not con.is_terminal:
        con = Console(width=max(con.width, 150))
    con.print(table)
    cost = Table(title="summarize() per tensor, GPT-2 124M shapes (batch 1, 128 tokens)")
    cost.add_column("tensor")
    cost.add_column("wall µs", justify="right")
    cost.add_column("CPU µs", justify="right")
    for name, us in out["summarize_us"].items():
        cost.add_row(name, f"{us:,.0f}", f"{out['summarize_cpu_us'][name]:,.0f}")
    con.print(cost)
    for key in ("gpt2_12l", "llama_32l"):
        phases = ", ".join(f"{k[:-2]} {v * 1e3:.0f} ms" for k, v in out[key]["phases_s"].items())
        con.print(f"{key} phases (last run): {phases}")
    start, end = out["load_avg_1m"]
    con.print(f"load average (1 min): {start:.2f} at start, {end:.2f} at end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
