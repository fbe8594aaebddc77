"""An external meter's CSV (timestamp_s, watts), read after the run and aligned to the
recording clock (`meter_to_perf_ns`; `estimate_meter_offset` when the clocks differ).
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from magneton.model import MagnetonError
from magneton.tracer.energy.power.base import Channel, PowerSource, SensorError


@dataclass
class MeterTrace:
    t_s: np.ndarray  # meter timestamps as written in the file
    watts: np.ndarray


def parse_meter_spec(spec: str) -> tuple[Path, float | None]:
    """`meter:FILE[@OFFSET_S]` -> (path, offset or None)."""
    body = spec.split(":", 1)[1] if ":" in spec else ""
    if not body:
        raise MagnetonError("meter source needs a file: --power meter:FILE[@OFFSET_S]")
    offset = None
    m = re.fullmatch(r"(.*)@([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", body)
    if m:
        body, offset = m.group(1), float(m.group(2))
    return Path(body).expanduser(), offset


def read_meter_csv(path: Path) -> MeterTrace:
    """Read (timestamp_s, watts) rows; a header row and extra columns are allowed."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise MagnetonError(f"cannot read meter file {path}: {e.strerror or e}") from None
    ts, ws = [], []
    for row in rows:
        if len(row) < 2:
            continue
        try:
            t, w = float(row[0]), float(row[1])
        except ValueError:
            continue  # header or comment
        if math.isfinite(t) and math.isfinite(w):
            ts.append(t)
            ws.append(w)
    if len(ts) < 2:
        raise MagnetonError(f"meter file {path} has fewer than 2 (timestamp_s, watts) rows")
    order = np.argsort(ts, kind="stable")
    return MeterTrace(np.asarray(ts, float)[order], np.asarray(ws, float)[order])


class MeterSource(PowerSource):
    """An external meter's CSV. Nothing is polled live: the file is read (and aligned to the
    recording clock) after the run, when the meter has written it."""

    kind = "meter"
    settle_s = 0.0
    update_period_s = 0.0

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.channels = [Channel("meter", False)]
        self.name = f"meter:{self.path.name}"

    def read(self) -> list[float]:
        raise SensorError("an external meter is read from its file after the run")


# Meter timestamps above this are Unix time; below it they count from the session start.
UNIX_TIME_THRESHOLD_S = 1e8


def meter_to_perf_ns(
    t_s: np.ndarray, offset_s: float, epoch_at_start_s: float, perf_at_start_ns: int
) -> np.ndarray:
    """Map meter timestamps onto the perf_counter_ns clock.

    Unix-time meters: host_unix = t + offset, then shifted by the (time.time(),
    perf_counter_ns) pair captured when the session started. Relative meters
    (t < 1e8 s): t + offset counts seconds from that same start instant.
    """
    t = np.asarray(t_s, float) + offset_s
    if len(t) and float(np.median(t)) > UNIX_TIME_THRESHOLD_S:
        t = t - epoch_at_start_s
    return (perf_at_start_ns + t * 1e9).astype(np.int64)


def estimate_meter_offset(
    meter_t_ns: np.ndarray,
    meter_w: np.ndarray,
    template_t_ns: np.ndarray,
    template_w: np.ndarray,
    max_shift_s: float = 5.0,
    step_s: float | None = None,
) -> float:
    """Shift (s) to add to the meter's times so its trace best matches `template`.

    Both traces are resampled on a uniform grid (step = the meter's median interval,
    at least 1 ms) and the shift maximising the normalised cross-correlation of their
    mean-removed values is returned. The template is the expected power shape of the run
    (the model's per-operator power, idle at 0 between operators), so the idle-to-busy
    edges of the run - including the idle measurement before it - pin the alignment.
    """
    if len(meter_t_ns) < 4 or len(template_t_ns) < 2:
        return 0.0
    if step_s is None:
        step_s = max(1e-3, float(np.median(np.diff(meter_t_ns))) / 1e9)
    step_ns = step_s * 1e9
    lo = min(meter_t_ns[0], template_t_ns[0]) - max_shift_s * 1e9
    hi = max(meter_t_ns[-1], template_t_ns[-1]) + max_shift_s * 1e9
    grid = np.arange(lo, hi, step_ns)
    if len(grid) > 2_000_000:
        raise MagnetonError("meter trace too long to align automatically; give @OFFSET_S")
    m = np.interp(grid, meter_t_ns, meter_w, left=meter_w[0], right=meter_w[-1])
    tpl = np.interp(grid, template_t_ns, template_w, left=0.0, right=0.0)
    m = m - m.mean()
    tpl = tpl - tpl.mean()
    max_lag = int(max_shift_s * 1e9 / step_ns)
    n = len(grid)
    # FFT cross-correlation: corr[k] = sum_i m[i + k] * tpl[i]
    size = 1 << int(math.ceil(math.log2(2 * n)))
    fm = np.fft.rfft(m, size)
    ft = np.fft.rfft(tpl, size)
    corr = np.fft.irfft(fm * np.conj(ft), size)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    vals = np.concatenate([corr[: max_lag + 1], corr[size - max_lag :]])
    best = int(lags[int(np.argmax(vals))])
    # meter[i + best] matches template[i]: the meter runs `best` steps late
    return -best * step_s
