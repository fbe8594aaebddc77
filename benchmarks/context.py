"""What decides a benchmark's numbers, printed before its table and stored in its JSON.

A ratio measured here moved between 4.8x and 8.2x across sessions (tracing_overhead's
structure pass) with nothing in the output to say why. Each benchmark now records the
library versions, the thread counts and OpenMP settings of the process that measured,
the CPU, the load average before and after, and whether the Python bytecode and
Hugging Face modules were already warm in this process; a second run on a fresh clone
is comparable only when these agree.

The load average does not say *who* held a core. In the seventh session a `magneton
record` left running by an interrupted test run took a quarter of a core for 25 minutes
at a load average of 1.1-1.5, which read as "idle" next to the fifth and sixth sessions'
series. `OtherCpu` therefore counts the CPU time every process outside the benchmark's
own process tree used while it measured (from /proc), and names the largest one.
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


def _cpu_by_process() -> dict[int, tuple[int, str, float]]:
    """{pid: (parent pid, command name, CPU seconds so far)} of every process (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # exited since the listing
            continue
        # the command name is in parentheses and may itself hold spaces or ")"
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2 :].split()
        # after the name: state, ppid, ..., utime (12th), stime (13th) in clock ticks
        out[int(entry)] = (int(rest[1]), name, (int(rest[11]) + int(rest[12])) / tick)
    return out


class OtherCpu:
    """CPU seconds used by processes outside this one and its descendants between
    construction and `report()`: what the load average cannot tell apart from the
    benchmark's own threads. Processes that started and exited in between are missed."""

    def __init__(self) -> None:
        self.available = os.path.isdir("/proc")
        self.start = _cpu_by_process() if self.available else {}

    def used(self) -> dict[int, tuple[str, float]]:
        """{pid: (command name, CPU seconds since construction)} of every process outside
        this one's tree."""
        now = _cpu_by_process()
        ours: set[int] = set()
        grown = {os.getpid()}
        while grown:  # descendants: children of what is already ours
            ours |= grown
            grown = {pid for pid, (ppid, _, _) in now.items() if ppid in ours} - ours
        return {
            pid: (name, cpu - self.start.get(pid, (0, "", 0.0))[2])
            for pid, (_, name, cpu) in now.items()
            if pid not in ours
        }

    def report(self) -> dict:
        if not self.available:
            return {"other_cpu_s": None, "other_cpu_top": "no /proc on this system"}
        used = self.used()
        top_pid, (top_name, top_s) = max(used.items(), key=lambda kv: kv[1][1])
        return {
            "other_cpu_s": round(sum(s for _, s in used.values()), 2),
            "other_cpu_top": f"{top_name} (pid {top_pid}) {top_s:.2f} s",
        }


def line(ctx: dict) -> str:
    """One line for the console."""
    return " ".join(f"{k}={v}" for k, v in ctx.items())
