"""Sensitivity of tensor matching to its tolerance τ (paper §6.4, Fig. 8).

Labelled pairs are built so their ground truth is known by construction, each pair
being two real tensors summarized with `magneton.tracer.capture.invariants.summarize` and
compared with `magneton.diagnose.matching.equivalence.distance`:

positives (same value, computed or laid out differently)
  layout      permute / transpose / reshape-refine / contiguous copies of one tensor
  linear      F.linear vs addmm vs x @ Wᵀ with a Conv1D-style stored transpose
  softmax     torch.softmax vs exp(x - max) / sum
  layernorm   F.layer_norm vs the manual formula
  gelu        gelu_new's tanh decomposition vs F.gelu(approximate="tanh")
  attention   eager matmul-softmax-matmul vs F.scaled_dot_product_attention
  deep        a 12-layer residual MLP, float32 vs float64 matmuls (error accumulates)
  bf16        the same linear in bfloat16 vs float32 (dtype-widened tolerance)
  approx      exact GELU vs its tanh approximation (≤1e-3 apart: an implementation
              choice the tool exists to compare; the 1% output check of the verdict
              judges it, matching must not lose the graph after it)
negatives (different values)
  noise       x·(1 + δε), δ ∈ {1e-2, 3e-2, 1e-1}, elementwise
  other       two projections of one input with different weights (q vs k)
  temperature softmax(x) vs softmax(1.01·x)
  shift       x vs x + 1e-2·std(x)
  dropout     x vs x with 1% of its entries zeroed

For τ on a log grid from 1e-8 to 0.2 it reports precision, recall and F1 twice: with
the production rule (distance ≤ tolerance(τ, dtypes), which never goes below a few
machine epsilons of the pair's dtype) and with τ alone for same-dtype pairs (the raw
curve, showing where too small a τ starts to reject rounding). The default τ in
diagnose/matching/equivalence.py is the geometric middle of the raw F1 = 1 plateau, rounded to a
power of ten. Also prints each family's distance range, which the plateau comes from.

    python benchmarks/matching_sensitivity.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

from magneton.diagnose.matching.equivalence import DEFAULT_TAU, distance, signature, tolerance
from magneton.model import TensorRecord
from magneton.tracer.capture.invariants import summarize

SHAPES = [(2, 16, 64), (4, 32, 128), (2, 128, 256)]


def record(t: torch.Tensor, idx: int = 0) -> TensorRecord:
    rec = TensorRecord(
        idx=idx,
        shape=list(t.shape),
        dtype=str(t.dtype).replace("torch.", ""),
        numel=t.numel(),
    )
    for k, v in summarize(t).items():
        setattr(rec, k, v)
    return rec


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


def pairs_for(
    shape: tuple[int, ...], g: torch.Generator
) -> list[tuple[str, bool, torch.Tensor, torch.Tensor]]:
    b, t, d = shape
    x = torch.randn(shape, generator=g)
    w = torch.randn(d, d, generator=g) / math.sqrt(d)
    w2 = torch.randn(d, d, generator=g) / math.sqrt(d)
    bias = torch.randn(d, generator=g) * 0.1
    out: list[tuple[str, bool, torch.Tensor, torch.Tensor]] = []
    # positives --------------------------------------------------------------
    out.append(("layout", True, x, x.permute(2, 0, 1).contiguous()))
    out.append(("layout", True, x, x.transpose(0, 1)))
    h = 4 if d % 4 == 0 else 1
    out.append(("layout", True, x, x.view(b, t, h, d // h).transpose(1, 2).contiguous()))
    y1 = F.linear(x, w, bias)
    y2 = torch.addmm(bias, x.reshape(-1, d), w.t()).view(b, t, d)
    wt = w.t().contiguous()  # Conv1D stores (in, out)
    y3 = x @ wt + bias
    out += [("linear", True, y1, y2), ("linear", True, y1, y3)]
    out.append(("linear", True, w, wt))
    s1 = torch.softmax(x, -1)
    e = torch.exp(x - x.amax(-1, keepdim=True))
    out.append(("softmax", True, s1, e / e.sum(-1, keepdim=True)))
    ln = F.layer_norm(x, (d,))
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    out.append(("layernorm", True, ln, (x - mu) / torch.sqrt(var + 1e-5)))
    out.append(("gelu", True, gelu_new(y1), F.gelu(y1, approximate="tanh")))
    q = x.view(b, t, h, d // h).transpose(1, 2)
    k = (x @ w).view(b, t, h, d // h).transpose(1, 2)
    v = (x @ w2).view(b, t, h, d // h).transpose(1, 2)
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), -1) @ v
    out.append(("attention", True, att, F.scaled_dot_product_attention(q, k, v)))
    za, zb = x, x.clone()
    for _ in range(12):
        wi = torch.randn(d, d, generator=g) / math.sqrt(d)
        za = za + torch.tanh(za @ wi) * 0.5
        zb = zb + torch.tanh((zb.double() @ wi.double()).float()) * 0.5
    out.append(("deep", True, za, zb))
    out.append(
        ("bf16", True, F.linear(x, w, bias), F.linear(x.bfloat16(), w.bfloat16(), bias.bfloat16()))
    )
    # negatives --------------------------------------------------------------
    for delta in (1e-2, 3e-2, 1e-1):
        out.append(("noise", False, y1, y1 * (1 + delta * torch.randn(y1.shape, generator=g))))
    out.append(("other", False, x @ w, x @ w2))
    out.append(("approx", True, F.gelu(y1), F.gelu(y1, approximate="tanh")))
    out.append(("temperature", False, s1, torch.softmax(1.01 * x, -1)))
    out.append(("shift", False, y1, y1 + 1e-2 * y1.std()))
    mask = torch.rand(y1.shape, generator=g) > 0.01
    out.append(("dropout", False, y1, y1 * mask))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="OUT", help="write the sweep as JSON")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    rows = []  # (family, label, distance, dtype_a, dtype_b)
    with torch.no_grad():
        for shape in SHAPES:
            for fam, label, a, b in pairs_for(shape, g):
                ra, rb = record(a, 0), record(b, 1)
                d = distance(signature(ra), signature(rb))
                rows.append((fam, label, d, ra.dtype, rb.dtype))
    taus = [float(x) for x in np.logspace(-8, math.log10(0.2), 29)]
    sweep = []
    for tau in taus:
        entry = {"tau": tau}
        for name, rule in (
            ("", lambda t, da, db: tolerance(t, da, db)),
            ("raw_", lambda t, da, db: t if da == db else tolerance(t, da, db)),
        ):
            tp = fp = fn = 0
            for _, label, d, da, db in rows:
                pred = d <= rule(tau, da, db)
                tp += pred and label
                fp += pred and not label
                fn += (not pred) and label
            prec = tp / (tp + fp) if tp + fp else 1.0
            rec = tp / (tp + fn) if tp + fn else 1.0
            entry[name + "precision"] = prec
            entry[name + "recall"] = rec
            entry[name + "f1"] = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        sweep.append(entry)
    fams: dict[str, list[float]] = {}
    for fam, label, d, _, _ in rows:
        fams.setdefault(f"{'+' if label else '-'} {fam}", []).append(d)

    plateau = [s["tau"] for s in sweep if s["raw_f1"] == 1.0]
    from rich.console import Console
    from rich.table import Table

    con = Console()
    if not con.is_terminal:
        con = Console(width=max(con.width, 120))
    t1 = Table(title="distance per family (+ positive, - negative)")
    for c in ("family", "pairs", "min", "max"):
        t1.add_column(c, justify="right" if c != "family" else "left")
    for fam, ds in sorted(fams.items()):
        t1.add_row(fam, str(len(ds)), f"{min(ds):.2e}", f"{max(ds):.2e}")
    con.print(t1)
    t2 = Table(title="F1 vs τ")
    for c in ("τ", "precision", "recall", "F1", "raw precision", "raw recall", "raw F1"):
        t2.add_column(c, justify="right")
    for s in sweep:
        mark = " ◀ default" if math.isclose(s["tau"], DEFAULT_TAU, rel_tol=0.3) else ""
        t2.add_row(
            f"{s['tau']:.1e}{mark}",
            *(
                f"{s[k]:.3f}"
                for k in ("precision", "recall", "f1", "raw_precision", "raw_recall", "raw_f1")
            ),
        )
    con.print(t2)
    if plateau:
        mid = math.sqrt(min(plateau) * max(plateau))
        con.print(
            f"raw F1 = 1 for τ in [{min(plateau):.1e}, {max(plateau):.1e}] (geometric middle "
            f"{mid:.1e}); default τ = {DEFAULT_TAU:g}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "default_tau": DEFAULT_TAU,
                    "plateau": [min(plateau), max(plateau)] if plateau else None,
                    "sweep": sweep,
                    "families": {k: [min(v), max(v)] for k, v in fams.items()},
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
