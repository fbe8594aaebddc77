"""How an energy figure was obtained, in words: the one phrase every view prints.

Every energy number Magneton shows carries its method (`ENERGY_METHODS` in model/energy.py) and
power source, so an estimate never passes for a measurement. The TUI, `magneton diff`,
`magneton report` and the multi-rank report used to word this separately, and the three
versions drifted (one said "estimated by" where another said "estimated from" for the
same run). They all call `energy_wording` now. Torch-free, like the data model.
"""

from __future__ import annotations

# what each method does, for readers who want to know how far to trust the number
_HOW = {
    "measured": "side-thread sampling, trapezoid/counter integration",
    "replayed": "operator loops, paper §5.2",
    "solved": "least squares over operator windows, per-type power",
}


def energy_wording(method: str, source: str, *, note: str = "", how: bool = False) -> str:
    """One phrase: `measured by nvml:0`, `replayed per operator on nvml:0`, `solved by
    least squares from rapl:package-0`, `estimated by model:cpu-default — no power
    sensor`. `note`: the recorder's remark on the estimate (replaces the default one);
    `how`: add how the method works (reports)."""
    src = source or "an unknown source"
    if method == "measured":
        text = f"measured by {src}"
    elif method == "replayed":
        text = f"replayed per operator on {src}"
    elif method == "solved":
        text = f"solved by least squares from {src}"
    elif method == "estimated":
        model = src.startswith("model")
        text = f"estimated by {src}" if model else f"estimated from {src}"
        remark = note or ("no power sensor" if model else "")
        return f"{text} — {remark}" if remark else text
    else:
        return f"{method or 'method not recorded'} ({src})"
    return f"{text} ({_HOW[method]})" if how else text


# Config key of a run: how many operator calls ran in threads the recording did not trace.
UNRECORDED_THREAD_OPS = "record.unrecorded_thread_ops"


def unrecorded_threads_warning(config: dict[str, str]) -> str:
    """The warning `record` and `report` print for operators run outside the recorded
    thread ('' when none): a graph and energy that leave work out must say so."""
    n = int(config.get(UNRECORDED_THREAD_OPS, "0") or 0)
    if not n:
        return ""
    return (
        f"warning: {n} operator call(s) ran in other threads and were NOT recorded "
        "(Magneton records the thread that calls the entry); the run's graph and energy "
        "leave them out"
    )
