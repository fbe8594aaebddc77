"""Confirmation's rounds: what the futility stop saves and what it costs.

Interleaved confirmation (diagnose/matching/confirm.py) runs rounds until every candidate
is decided. From round `MAX_ROUNDS / 2` on, a candidate whose rounds can no longer be
expected to confirm it by `MAX_ROUNDS` is decided as not confirmed (`FUTILITY`; rounds
fast enough that the time budget does not end them first, as a script's are). This
simulates candidates of a known true ratio (wasteful / efficient) whose per-round log
ratios scatter with a known standard deviation, and candidates whose first five rounds
a burst of load garbled (0.8x, scattering by 80%) before their true ratio shows; it runs
the product's own stopping rule (`confirm.decided` on `confirm.paired_interval`, 95%,
threshold 10%) with and without the futility stop, and prints for each population how
often the candidate is confirmed and how many rounds it took. Nothing is timed: the
figures are exact for a seed and do not depend on the machine.

    python benchmarks/confirm_rounds.py [--trials 1000] [--seed 0] [--json OUT]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from rich.console import Console
from rich.table import Table

from magneton.diagnose.matching.confirm import (
    FUTILITY,
    MAX_ROUNDS,
    MIN_ROUNDS,
    decided,
    paired_interval,
)
from magneton.diagnose.matching.detect import CONFIDENCE, confident

THRESHOLD = 0.10
RATIOS = (1.0, 1.05, 1.111, 1.22, 1.35, 1.65)
SDS = (0.1, 0.2, 0.4, 0.8)
BURST_ROUNDS, BURST_RATIO, BURST_SD = 5, 0.8, 0.8  # a burst of load over the first rounds


def one_candidate(log_ratios: np.ndarray, futility: float) -> tuple[bool, int]:
    """(confirmed, rounds) of one candidate whose rounds measure `log_ratios` in turn."""
    ones = np.ones(MAX_ROUNDS)
    for n in range(MIN_ROUNDS, MAX_ROUNDS + 1):
        iv = paired_interval(np.exp(log_ratios[:n]), ones[:n], CONFIDENCE)
        if n == MAX_ROUNDS or decided(iv, THRESHOLD, n, CONFIDENCE, futility):
            return iv is not None and confident(iv[1], THRESHOLD), n
    raise AssertionError("unreachable")


def log_ratios(rng: np.random.Generator, ratio: float, sd: float, burst: bool) -> np.ndarray:
    """One candidate's per-round log ratios; with `burst`, the first rounds garbled."""
    d = rng.normal(np.log(ratio), sd, MAX_ROUNDS)
    if burst:
        d[:BURST_ROUNDS] = rng.normal(np.log(BURST_RATIO), BURST_SD, BURST_ROUNDS)
    return d


def population(
    ratio: float, sd: float, burst: bool, trials: int, seed: int, futility: float
) -> dict:
    rng = np.random.default_rng(seed)
    runs = [one_candidate(log_ratios(rng, ratio, sd, burst), futility) for _ in range(trials)]
    return {
        "confirmed": float(np.mean([c for c, _ in runs])),
        "rounds": float(np.mean([n for _, n in runs])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000, help="candidates per population")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = []
    populations = [(r, sd, False) for sd in SDS for r in RATIOS]
    populations += [(r, 0.2, True) for r in (1.5, 3.0, 8.0)]
    for ratio, sd, burst in populations:
        without = population(ratio, sd, burst, args.trials, args.seed, 0.0)
        with_stop = population(ratio, sd, burst, args.trials, args.seed, FUTILITY)
        rows.append(
            {"ratio": ratio, "sd_log": sd, "burst": burst, "without": without, "with": with_stop}
        )
    table = Table(
        title=f"confirmation of one candidate, threshold {THRESHOLD:.0%}, "
        f"{args.trials} trials per row, seed {args.seed}, futility stop under {FUTILITY} "
        f"from round {MAX_ROUNDS // 2}"
    )
    # true ratio, sd of its per-round log ratio, the garbled first rounds; then without
    # and with the stop: the share confirmed, the mean rounds
    for col in ("ratio", "sd ln", "burst", "confirmed", "+ stop", "rounds", "+ stop"):
        table.add_column(col, justify="right")
    for r in rows:
        w, s = r["without"], r["with"]
        table.add_row(
            f"{r['ratio']:.3f}",
            f"{r['sd_log']:.2f}",
            f"{BURST_ROUNDS}@{BURST_RATIO}x" if r["burst"] else "",
            f"{w['confirmed']:.1%}",
            f"{s['confirmed']:.1%}",
            f"{w['rounds']:.1f}",
            f"{s['rounds']:.1f}",
        )
    Console().print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trials": args.trials, "seed": args.seed, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
