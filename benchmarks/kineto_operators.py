"""Kineto's operators against the dispatch mode's: could the timing pass read Kineto?

The timing pass is a Python dispatch mode (tracer/capture/dispatch.py `TimingCapture`),
and no Python mode costs less than calling each operator through Python (1.03-1.06x of a
GPT-2 forward, docs/benchmarks.md). Kineto's C++ `RecordFunction` path costs 1.00-1.05x
and its raw events are cheap to read, so a timing pass built on it is the way under
1.03x, if its operators can be paired with the ones the structure pass recorded under
its own dispatch mode (tracer/timing/alignment.py pairs them by name, in order).

This script records one call of the benchmark's GPT-2 (a forward, and a training step
with AdamW) under `TimingCapture` and under Kineto with CPU activity only, keeps the
Kineto events a dispatch mode could see (an `aten::`-style operator with no
`CompositeImplicitAutograd` kernel, which is decomposed before the mode, and not inside
another kept operator, whose kernel's inner calls the mode never sees) and compares the
two name sequences: how many operators each has, how many places differ, and which
differences are most common. Whatever differs is what a Kineto timing pass would have to
pair by another rule, or leave unpriced.

    python benchmarks/kineto_operators.py [--layers 12] [--seq 128] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
from collections.abc import Callable
from functools import cache

import magneton  # noqa: F401  (before torch, as a recording imports it)

# isort: split
import torch
from rich.console import Console
from rich.table import Table
from torch.profiler import ProfilerActivity, profile

from magneton.tracer.capture.dispatch import TimingCapture

# RecordFunction scopes that are not operators: autograd nodes, optimizer steps, marks
NOT_OPERATORS = ("autograd::", "torch::autograd::", "Optimizer.", "ProfilerStep")


@cache
def decomposed(name: str) -> bool:
    """Whether an overload of operator `name` has a `CompositeImplicitAutograd` kernel.
    Kineto's names carry no overload, so any overload counts: for a few operators
    (`aten::split`) that is the wrong one, which the comparison then shows."""
    ns, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
        overloads = packet.overloads()
    except (AttributeError, RuntimeError):
        return False
    return any(_implicit(name if o == "default" else f"{name}.{o}") for o in overloads)


def _implicit(qualified: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified, "CompositeImplicitAutograd"
        )
    except RuntimeError:  # a TorchScript-only overload (`aten::select.t`): no dispatcher op
        return False


def mode_operators(call: Callable[[], object]) -> list[str]:
    capture = TimingCapture()
    with capture:
        call()
    return [name for name, _, _ in capture.events]


def kineto_operators(call: Callable[[], object]) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    events = sorted(
        prof.profiler.kineto_results.events(),
        key=lambda e: (e.start_thread_id(), e.start_ns(), -e.duration_ns()),
    )
    kept: list[tuple[int, str]] = []
    open_ends: dict[int, list[int]] = {}  # per thread: ends of the kept ops still open
    for e in events:
        name, start = e.name(), e.start_ns()
        ends = open_ends.setdefault(e.start_thread_id(), [])
        while ends and ends[-1] <= start:
            ends.pop()
        if "::" not in name or name.startswith(NOT_OPERATORS) or decomposed(name) or ends:
            continue
        kept.append((start, name))
        ends.append(start + e.duration_ns())
    return [name for _, name in sorted(kept)]


def compare(mode: list[str], kineto: list[str]) -> dict:
    blocks = [
        (tag, tuple(mode[a0:a1][:3]), tuple(kineto[b0:b1][:3]))
        for tag, a0, a1, b0, b1 in difflib.SequenceMatcher(
            a=mode, b=kineto, autojunk=False
        ).get_opcodes()
        if tag != "equal"
    ]
    common = collections.Counter(blocks).most_common(5)
    return {
        "mode_ops": len(mode),
        "kineto_ops": len(kineto),
        "differing_places": len(blocks),
        "most_common": [
            {"count": n, "mode": list(m), "kineto": list(k), "kind": tag}
            for (tag, m, k), n in common
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    from context import context, line  # benchmarks/ is the script's own directory
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=args.layers, n_embd=768, n_head=12))
    ids = torch.randint(0, 50257, (1, args.seq))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)

    def forward() -> None:
        model.eval()
        with torch.no_grad():
            model(ids)

    def train_step() -> None:
        model.train()
        model(ids).last_hidden_state.square().mean().backward()
        opt.step()
        opt.zero_grad()

    results = {}
    for label, call in (("forward", forward), ("training step", train_step)):
        for _ in range(2):  # warm: lazy initialisation is not the program's steady state
            call()
        results[label] = compare(mode_operators(call), kineto_operators(call))

    table = Table(title=f"GPT-2 {args.layers}L, seq {args.seq}: operators of one call")
    for col in ("call", "dispatch mode", "Kineto, kept", "places that differ"):
        table.add_column(col, justify="right")
    for label, r in results.items():
        table.add_row(label, *(f"{r[k]:,}" for k in ("mode_ops", "kineto_ops", "differing_places")))
    console = Console()
    console.print(table)
    for label, r in results.items():
        console.print(f"most common differences, {label} (dispatch mode -> Kineto):")
        for c in r["most_common"]:
            mode, kineto = " ".join(c["mode"]) or "-", " ".join(c["kineto"]) or "-"
            console.print(f"  {c['count']:>3}x  {mode} -> {kineto}")
    ctx = context()
    console.print(line(ctx))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "context": ctx}, f, indent=1)


if __name__ == "__main__":
    main()
