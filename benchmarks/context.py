"""What decides a benchmark's numbers, printed before its table and stored in its JSON.

A ratio measured here moved between 4.8x and 8.2x across sessions (tracing_overhead's
structure pass) with nothing in the output to say why. Each benchmark now records the
library versions, the thread counts and OpenMP settings of the process that measured,
the CPU, the load average before and after, and whether the Python bytecode and
Hugging Face modules were already warm in this process; a second run on a fresh clone
is comparable only when these agree.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import sys

PACKAGES = ("torch", "transformers", "numpy", "ladybug", "magneton")
ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "KMP_BLOCKTIME")


def _version(package: str) -> str:
    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return "absent"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def context() -> dict:
    """The measuring process's context (call after torch is imported, as the benchmark
    measures: its thread counts are the ones in force)."""
    torch = sys.modules.get("torch")
    return {
        "python": platform.python_version(),
        **{p: _version(p) for p in PACKAGES},
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if torch else None,
        "torch_interop_threads": torch.get_num_interop_threads() if torch else None,
        **{k: os.environ.get(k, "unset") for k in ENV},
        # the 1-minute load average now: call once before and once after measuring
        "load_avg_1m": os.getloadavg()[0],
        # transformers already imported before the benchmark started measuring (warm)
        "transformers_preloaded": "transformers" in sys.modules,
    }


def line(ctx: dict) -> str:
    """One line for the console."""
    return " ".join(f"{k}={v}" for k, v in ctx.items())
