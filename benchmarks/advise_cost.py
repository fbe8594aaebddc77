"""What `magneton advise` costs per variant, as a multiple of what a user pays for one
hand-written comparison (one `record` of the second program plus one `diff`).

The program is a 12-layer GPT-2 training loop (examples/advise/attn_impl/train.py with
`--layers 12`: AdamW, warm-up, clipping, a logged loss; a model built from a config, no
download) recorded over a window of steps, as a user records it. The benchmark measures,
each as its wall time in its own `magneton` process:

* `record`: the base program (the base of the advise run too);
* `record + diff`: the efficient variant recorded and diffed against the base by hand,
  the cost a user pays today for one comparison they wrote themselves;
* `advise`: `magneton advise --max-variants N` over the stored base (so the base is
  not recorded again), its JSON's tried variants counted.

The ratio printed is (advise wall / variants tried) / (record + diff wall): what each
variant advise tries costs against one comparison by hand. A variant costs more than a
hand-made one where it is also re-measured in interleaved rounds and checked for the
same outputs, and less where it fails fast ("changes results" spends no rounds).

    python benchmarks/advise_cost.py [--layers 12] [--max-variants 3] [--steps 1:1:9]
        [--db-dir DIR] [--json OUT]

Timings on a shared machine mean little; run it alone (the load average before and after
is printed with the versions and threads that decide the figures).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from context import OtherCpu, context  # noqa: E402

PROGRAM = ROOT / "examples" / "advise" / "attn_impl"


def _magneton(args: list[str], cwd: Path) -> float:
    """Wall seconds of one `magneton` command (a failure ends the benchmark)."""
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "magneton", *args], cwd=cwd, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 3):  # 3: advise's --fail-on gate, not used here
        raise SystemExit(f"magneton {' '.join(args)} failed:\n{p.stderr.strip()[-2000:]}")
    return wall


def measure(layers: int, max_variants: int, steps: str, work: Path) -> dict:
    folder = work / "prog"
    shutil.copytree(PROGRAM, folder)
    db = str(work / "db")
    program = ["python", "train.py", "--layers", str(layers), "--block-size", "256"]
    common = ["--db", db, "--steps", steps, "-q"]
    t_record = _magneton(
        ["record", *common, "--run", "base", "--", *program, "--attn-implementation", "eager"],
        folder,
    )
    t_variant = _magneton(
        ["record", *common, "--run", "hand", "--", *program, "--attn-implementation", "sdpa"],
        folder,
    )
    t_diff = _magneton(["diff", "--db", db, "base", "hand"], folder)
    out = work / "advice.json"
    t_advise = _magneton(
        ["advise", *common, "--run", "base", "--max-variants", str(max_variants),
         "--json", str(out), "--", *program, "--attn-implementation", "eager"],
        folder,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    tried = len(doc["tried"])
    one = t_variant + t_diff
    per_variant = t_advise / max(tried, 1)
    return {
        "layers": layers,
        "steps": steps,
        "record_s": round(t_record, 1),
        "hand_record_s": round(t_variant, 1),
        "hand_diff_s": round(t_diff, 1),
        "advise_s": round(t_advise, 1),
        "variants_tried": tried,
        "statuses": [t["status"] for t in doc["tried"]],
        "per_variant_s": round(per_variant, 1),
        "per_variant_over_record_plus_diff": round(per_variant / one, 2),
        "top": doc["suggestions"][0]["setting"] if doc["suggestions"] else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--max-variants", type=int, default=3)
    ap.add_argument("--steps", default="1:1:9")
    ap.add_argument("--db-dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    import torch  # noqa: F401  (the context reports its threads)

    before = context()
    other = OtherCpu()
    work = Path(tempfile.mkdtemp(prefix="advise-cost-", dir=a.db_dir))
    try:
        row = measure(a.layers, a.max_variants, a.steps, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "context": before,
        "load_avg_1m_after": context()["load_avg_1m"],
        **other.report(),
        "result": row,
    }
    _print(result)
    if a.json:
        a.json.write_text(json.dumps(result, indent=2) + "\n")


def _print(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c, r = result["context"], result["result"]
    t = Table(title=f"advise cost: GPT-2 {r['layers']}L training, steps {r['steps']}")
    for col in ("measured", "wall s"):
        t.add_column(col)
    t.add_row("record (base)", f"{r['record_s']}")
    t.add_row("record + diff (one variant by hand)", f"{r['hand_record_s'] + r['hand_diff_s']:.1f}")
    t.add_row(
        f"advise ({r['variants_tried']} variants: {', '.join(r['statuses'])})", f"{r['advise_s']}"
    )
    t.add_row("advise per variant", f"{r['per_variant_s']}")
    t.add_row("per variant / (record + diff)", f"{r['per_variant_over_record_plus_diff']}x")
    Console().print(t)
    print(
        f"torch {c['torch']} transformers {c['transformers']} ladybug {c['ladybug']}, "
        f"{c['torch_threads']} threads, {c['cpus']} CPUs ({c['cpu']}), "
        f"load {c['load_avg_1m']:.2f} -> {result['load_avg_1m_after']:.2f}; "
        f"other processes' CPU {result['other_cpu_s']} s (largest: {result['other_cpu_top']})"
    )


if __name__ == "__main__":
    main()
