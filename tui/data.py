"""What the TUI reads and how it words it: DB access, profile cache and display helpers.

The screens never talk to Kùzu directly; they go through `Store`, which

- opens the DB read-only for each operation and closes it again, so `magneton record`
  in another terminal can add runs while the TUI stays open (Kùzu lets one writer in only
  when no process holds the file) — `refresh` then shows the new run;
- serialises access with a lock, because screens call it from several worker threads and
  one Kùzu connection must not be used by two threads at once;
- caches loaded profiles by run name, so going back and forth between a finding and the
  energy view does not reload a 10k-operator run each time;
- reads the diff `magneton diff` stored (`stored_diff`), so the findings are the ones
  the CLI table and the HTML page show, not a measurement of the TUI's own.

The formatting helpers keep one wording for energy provenance ("estimated by
model:cpu-default — no power sensor") across every screen: a figure without its method
would read as a measurement.
"""

from __future__ import annotations

import bisect
import contextlib
import linecache
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magneton.model import (
    DiffResult,
    Finding,
    MagnetonError,
    Profile,
)
from magneton.model.vocab import BOOKKEEPING_OPS
from magneton.model.wording import energy_wording
from magneton.render.view import joules, seconds

if TYPE_CHECKING:
    from magneton.graphdb import ProfileDB, QueryStream, RunRow


class Store:
    """Read-only access to one Magneton DB directory, shared by all screens."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._profiles: dict[str, Profile] = {}
        self._diffs: dict[tuple[str, str], DiffResult] = {}

    @contextlib.contextmanager
    def db(self) -> Iterator[ProfileDB]:
        from magneton.graphdb import open_db

        with self._lock:
            pdb = open_db(self.path, read_only=True)
            try:
                yield pdb
            finally:
                pdb.close()

    def check(self) -> list[RunRow]:
        """Open the DB once and list its runs; raises MagnetonError if it cannot be read."""
        return self.list_runs()

    def list_runs(self) -> list[RunRow]:
        with self.db() as pdb:
            return pdb.list_runs()

    def profile(self, run: str) -> Profile:
        with self._lock:
            if run not in self._profiles:
                with self.db() as pdb:
                    self._profiles[run] = pdb.load_profile(run)
            return self._profiles[run]

    def forget(self) -> None:
        """Drop cached profiles and diffs (after `refresh`: a run may have been re-recorded)."""
        with self._lock:
            self._profiles.clear()
            self._diffs.clear()

    def query(self, cypher: str, limit: int) -> QueryStream:
        """A user's query, run as `magneton query` runs it (graphdb/contained.py: a child
        process, so an engine crash is an error line here, not the end of the TUI)."""
        from magneton.graphdb import stream_query

        res = stream_query(self.path, cypher, limit=limit)
        res.rows = iter(list(res.rows))  # read all (at most `limit`) in the worker thread
        return res

    def stored_diff(self, a: str, b: str, threshold: float) -> tuple[DiffResult | None, str]:
        """The diff of (a, b) stored in the DB and "", or (None, why there is none to
        show): none stored, stale (a run re-recorded since), made at another threshold,
        changed outside Magneton, or not diagnosed. A multi-rank job's diff is never
        stored whole."""
        from magneton.diagnose.api import cause_groups, is_job
        from magneton.graphdb import load_diff

        with self.db() as pdb:
            if is_job(pdb, a):
                return None, "a job's diff is made anew"
            try:
                loaded = load_diff(pdb, a, b)
            except MagnetonError as e:
                return None, str(e)
        if loaded is None:
            return None, "no stored diff"
        result = loaded[0]
        if result.threshold != threshold:
            return None, f"the stored diff is at threshold {fmt_pct(result.threshold)}"
        if any(
            f.kind != "interpreter" and f.category is None and f.root_cause is None
            for f in result.findings
        ):
            return None, "the stored diff was not diagnosed"
        cause_groups(result)
        return result, ""

    def cached_diff(self, a: str, b: str) -> DiffResult | None:
        return self._diffs.get((a, b))

    def remember_diff(self, a: str, b: str, result: DiffResult) -> None:
        self._diffs[(a, b)] = result


def job_row(runs: Sequence[RunRow], name: str) -> RunRow | None:
    """A row standing for multi-rank job `name` (runs `name/rank0`, ...), or None when
    there is no such job: its time is the slowest rank's, its energy the ranks' sum (the
    diff replaces both with the job's own totals once it arrives)."""
    from magneton.graphdb import RunRow

    prefix = f"{name}/rank"
    ranks = [r for r in runs if r.name.startswith(prefix) and r.name[len(prefix) :].isdigit()]
    if not ranks:
        return None
    bad = [r for r in ranks if r.status != "ok"]
    return RunRow(
        name=name,
        script=ranks[0].script,
        started_at=min(r.started_at for r in ranks),
        op_count=sum(r.op_count for r in ranks),
        status=bad[0].status if bad else "ok",
        energy_j=sum(r.energy_j for r in ranks),
        time_s=max(r.time_s for r in ranks),
        power_source=", ".join(sorted({r.power_source for r in ranks if r.power_source})),
        energy_method=", ".join(sorted({r.energy_method for r in ranks if r.energy_method})),
        error=f"{bad[0].name}: {bad[0].error}" if bad else "",
    )


def finding_runs(result: DiffResult, f: Finding) -> tuple[str, str]:
    """The runs whose profiles show finding `f`: the diffed runs, or for a job diff the
    ranks the finding concerns."""
    runs = f.job.runs if f.job is not None and f.job.runs else {}
    return runs.get("a") or result.a.run, runs.get("b") or result.b.run


# --------------------------------------------------------------------------------------
# Energy provenance
# --------------------------------------------------------------------------------------


def describe_energy(method: str, source: str) -> str:
    """How an energy figure was obtained, in one phrase a user can act on."""
    return energy_wording(method, source)


# --------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------


# joules and seconds as every surface words them (render/view.py)
fmt_j = joules
fmt_s = seconds


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%" if math.isfinite(x) else "?"


def ratio(f: Finding) -> float:
    """Wasteful over efficient energy of the matched regions (inf when one side is free)."""
    hi = max(f.region_a.energy_j, f.region_b.energy_j)
    lo = min(f.region_a.energy_j, f.region_b.energy_j)
    return hi / lo if lo > 0 else math.inf


def fmt_ratio(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.2f}×"


def interval_text(f: Finding) -> str:
    """The finding's confidence interval and how it was obtained, in one line: the
    saving's bounds, the ratio's, and whether interleaved re-measurement confirmed it
    (diagnose/matching/confirm.py) or why not. '' when the finding has no interval."""
    iv = f.interval
    if iv is None:
        return ""
    text = (
        f"saving {fmt_j(iv.saving_j_low)} to {fmt_j(iv.saving_j_high)} per call at "
        f"{iv.confidence:.0%} "
        + (
            f"(ratio {iv.ratio_low:.2f}–{iv.ratio_high:.2f}×)"
            if math.isfinite(iv.ratio_high)
            else "(the efficient side runs no operator here)"
        )
    )
    if iv.confirmed:
        return f"{text}, confirmed: {iv.rounds} interleaved rounds per side ({iv.test})"
    return f"{text}, unconfirmed" + (f" ({iv.unconfirmed})" if iv.unconfirmed else "")


_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(fraction: float, width: int = 10) -> str:
    """A left-aligned bar of `width` cells filled to `fraction` (clipped to 0..1)."""
    if not math.isfinite(fraction):
        fraction = 0.0
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(width)


def short_op(name: str) -> str:
    """An operator or kernel name as every view prints it (model/names.py), without
    the `aten::` every operator has."""
    from magneton.model.names import short_name

    return short_name(name.removeprefix("aten::"))


def periodic_unit(seq: Sequence[str]) -> tuple[list[str], int]:
    """The shortest unit `seq` repeats (`[mul, add, mul, add]` → `([mul, add], 2)`).

    Detection folds one finding per repeated layer into one, so a region is often the
    same operator run N times; showing the unit once with ×N keeps it readable."""
    n = len(seq)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and all(seq[i] == seq[i % p] for i in range(n)):
            return list(seq[:p]), n // p
    return list(seq), 1


def _clip(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def ops_summary(names: Sequence[str], limit: int = 8, name_width: int = 24) -> str:
    """`mul pow mul add mul tanh add mul ×4`: a region's operators without bookkeeping,
    each name clipped to `name_width` so one long kernel name cannot push the other
    side's column off an 80-column screen."""
    real = [short_op(n) for n in names if n not in BOOKKEEPING_OPS] or [short_op(n) for n in names]
    unit, times = periodic_unit(real)
    shown = " ".join(_clip(n, name_width) for n in unit[:limit])
    if len(unit) > limit:
        shown += f" …(+{len(unit) - limit})"
    if times > 1:
        shown += f" ×{times}"
    return shown or "-"


# --------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------


def default_patch_path(base_dir: Path | None, finding_id: int) -> Path:
    """`<base dir>/magneton-fix-<id>.patch`: next to the wasteful script, whose folder the
    patch's paths are relative to (the working directory when the run has no script)."""
    return (base_dir or Path.cwd()) / f"magneton-fix-{finding_id}.patch"


@dataclass
class SourceSnippet:
    file: str
    line: int
    first_line: int
    text: str  # the lines first_line.. joined, without trailing newline


def source_snippet(file: str, line: int, context: int = 3) -> SourceSnippet | None:
    """Lines around `file:line` as they are on disk now (None when unreadable)."""
    if not file or line <= 0:
        return None
    linecache.checkcache(file)
    lines = linecache.getlines(file)
    if not lines or line > len(lines):
        return None
    first = max(1, line - context)
    last = min(len(lines), line + context)
    return SourceSnippet(file, line, first, "".join(lines[first - 1 : last]).rstrip("\n"))


@dataclass
class PowerSlice:
    device: str
    source: str
    watts: list[float]
    windows: int  # operator windows the samples come from
    span_s: float  # summed duration of those windows
    bracketing: bool = False  # region shorter than the sampling interval: its neighbours


def power_over(profile: Profile, op_idx: Sequence[int]) -> list[PowerSlice]:
    """Power samples of each series taken while the region's operators ran.

    A folded region (one per layer) is spread over the whole run; taking the samples in
    each operator's window, not in [first start, last end], keeps the other layers'
    operators out of the picture. A region shorter than the sampling interval gets the
    two samples bracketing it instead of nothing."""
    windows = sorted(
        (profile.ops[i].start_ns, profile.ops[i].end_ns)
        for i in op_idx
        if 0 <= i < len(profile.ops) and profile.ops[i].end_ns > profile.ops[i].start_ns
    )
    if not windows:
        return []
    span_s = sum(e - s for s, e in windows) / 1e9
    out = []
    for series in profile.power:
        t = series.t_ns
        if len(t) < 2:
            continue
        idx: list[int] = []
        for t0, t1 in windows:
            idx.extend(range(bisect.bisect_left(t, t0), bisect.bisect_right(t, t1)))
        idx = sorted(set(idx))
        bracketing = False
        if len(idx) < 2:
            lo = bisect.bisect_right(t, windows[0][0]) - 1
            hi = bisect.bisect_left(t, windows[-1][1])
            if lo < 0 or hi >= len(t):
                continue  # the trace does not cover this region
            idx, bracketing = list(range(lo, hi + 1)), True
        out.append(
            PowerSlice(
                series.device,
                series.source,
                [series.watts[i] for i in idx],
                len(windows),
                span_s,
                bracketing,
            )
        )
    return out


def cell(v: Any) -> str:
    """One Cypher result value as table text (nodes as their properties, floats short)."""
    import json

    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):
        v = {k: x for k, x in v.items() if not str(k).startswith("_")}
        return json.dumps(v, default=str, separators=(", ", ": "))
    if isinstance(v, list | tuple):
        return json.dumps(v, default=str, separators=(",", ":"))
    return str(v)


def error_text(e: BaseException) -> str:
    """The one line a user sees for an error raised by a worker."""
    if isinstance(e, MagnetonError):
        return str(e)
    return f"{type(e).__name__}: {e}"
