"""Interleaved confirmation: re-measure both sides of every candidate finding in alternating
rounds before reporting it.

Detection (detect.py) judges a difference from two recordings made at different times.
Load, clock frequency and a busy neighbour change between them, and identical code has
drifted 10-30% between two recordings on a shared 2-core machine; detection's between-runs
term widens the interval by the drift that identical work showed, but it cannot tell a
setting that slows every kernel alike from load. So a candidate is confirmed before it is
reported: one warm worker per side (tracer/timing/remeasure.py, loaded like `magneton record`
loads the script, forked from the diff's zygote as below) runs the entry once per round, the rounds alternate between the sides
(A B, B A, A B, ... so neither side always runs second), and each round's operator
windows are priced with the recording's own pricing (tracer/energy/pricing.py `reprice`). A round
gives each candidate one log ratio ln(E_wasteful / E_efficient) of two measurements taken
seconds apart, so drift and load hit both sides alike and cancel in the ratio.

The test is a paired t on those per-round log ratios, one-sided at the detection's
confidence (95%); a candidate is kept only when the lower bound of its saving still
reaches the threshold. Its energies, times, saving and interval are then the confirmed
ones (geometric means over the rounds, so the energy ratio is the paired test's own and
the saving lies in its interval; the recording's "cheapest iteration" rule would give a
point outside it), and the verdict rules (waste vs trade-off) are applied to those.

Rounds are adaptive like the timing pass: at least `MIN_ROUNDS`, then until every
candidate is decided (confirmed, or its upper bound cannot reach the threshold) or its
interval is narrow, bounded by `MAX_ROUNDS` and `BUDGET_S`. The repeated look at the
interval costs some confidence in principle; the minimum of rounds and the distance
between "no difference" and a 10% threshold keep it small in practice.
A candidate is also decided, as not confirmed, once the rounds left cannot be expected to
confirm it (`chance_to_confirm`: the predictive probability that its lower bound reaches the
threshold by the last round it can reach, given the rounds so far, is under `FUTILITY`). Without that
stop, a region of a few operators whose per-round ratio scatters by a factor of three
(dtype_setup's relu: 1.2x [0.34, 4.5] after 5 rounds) or one that differs by less than
the threshold (1.07x [0.98, 1.16] after 20) held the diff to `MAX_ROUNDS`, to be
dropped at the end all the same. The rounds it predicts are those confirmation can
still reach (`horizon`): `MAX_ROUNDS`, or fewer where `BUDGET_S` ends them first at the
pace so far (a program's round runs both programs' windows afresh, 2-5 s, so its
rounds end at the budget long before `MAX_ROUNDS`). The stop applies from half the
horizon on, not from the first look: the prediction assumes the rounds to come measure
like those so far, and a burst of load breaks that. On a loaded CI machine, the first
five rounds of a real 8x GELU difference measured 0.78x [0.37, ...], and a stop at
round five dropped it; by round ten of twenty the rounds after such a burst outweigh
it. What the stop costs is a share of the borderline candidates that the full rounds
would still have confirmed, under `FUTILITY` (`benchmarks/confirm_rounds.py`).

Candidates the recordings left undecided (detect.py `undecided`: the point estimate
passes, the interval neither reaches the threshold nor rules it out) come here too when
re-measurement will run: for them the rounds are the only test, so each is held to a
stricter confidence (`confidences`: Bonferroni over their number), and one that is not
confirmed, or cannot be re-measured, is dropped rather than reported unconfirmed.

What is not confirmed keeps detection's verdict and says why (`SavingInterval.unconfirmed`):
re-running disabled (`--no-rerun`); a script missing or changed since it was recorded; a run
measured by a power sensor (the re-measurement prices the energy model only); a worker
that raised, timed out or ran other operators than the recording. Runs priced on FLOPs and
bytes alone (a model with no static power) have nothing to re-measure. A worker can never
hang the diff: every wait has a deadline, Ctrl-C, SIGTERM and errors stop both workers
and remove their directory, and a worker whose diff died (even SIGKILLed) ends itself.

A program run (`magneton record -- python ...`) is confirmed too, but it cannot be held
warm: its model and its steps live in its `__main__`. Each of its rounds runs the program
afresh up to the end of its recorded window (`ProgramWorker`, tracer/programs/program.py
`time_window`: the same steps, timed as the recording timed them), a round's value is
the median over the window's timed steps, and the paired test runs on those. A round
then costs the program's start-up (its model build and WAIT/WARMUP steps), not an import.

Where the workers come from, and the failure each choice prevents:

* **Jobs of the diff's warm worker, not fresh interpreters.** Each side's worker is a
  job (`remeasure.serve`) forked from a zygote (tracer/timing/warm.py `WarmPool`, one per
  recorded environment) that the diff starts as soon as detection has candidates and
  that the key-variable re-run of diagnosis reuses: a fresh interpreter per side, then
  another zygote for the re-run, imported transformers three times per diff (5-7 s of
  CPU each). warm.py gives the fork a fresh process's torch thread count, so its rounds
  measure like one. Without a pool (or one started for other scripts) confirmation
  starts its own and ends it.
* **A Unix socket per side** in the zygote's private directory carries the commands and
  answers: a fork of the zygote cannot inherit the diff's pipes. The diff listens before
  it submits the job, waits for the connection with the startup deadline, and watches
  the job's exit meanwhile, so a job that dies before connecting is an "unconfirmed
  (side x stopped: ...)" at once, not a four-minute wait.
* **Ending.** Closing the socket ends the job after its round; one that lingers (a hung
  round) is killed by the zygote; a diff that dies outright closes the zygote's command
  pipe and the zygote kills its process group. SIGTERM unwinds through the `finally`s
  that do this (`sigterm_unwinds`, also around the pipeline's pool).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from scipy import special  # t/normal quantiles; scipy.stats costs 0.6 s more to import

from magneton.model import Finding, Profile, Region, SavingInterval, WorkerError
from magneton.tracer.timing.warm import WarmHold, WarmPool, WarmWorker, unix_address

from .detect import CONFIDENCE, cannot_reach, confident, ranked, undecided, verdict_of

TEST = "paired t on interleaved log ratios"
MIN_ROUNDS = 5
MAX_ROUNDS = 20
BUDGET_S = 30.0  # wall seconds of rounds after which confirmation stops (once at MIN_ROUNDS)
NARROW_LOG = 0.02  # half-width of the paired interval (log units) that is narrow enough
FUTILITY = 0.05  # predictive probability of a confirmation under which the rounds stop
STARTUP_TIMEOUT_S = 240.0  # import + setup() + warm-up of a worker
ROUND_TIMEOUT_MIN_S = 30.0


# --------------------------------------------------------------------------------------
# The paired test
# --------------------------------------------------------------------------------------


def paired_interval(
    wasteful_j: np.ndarray, efficient_j: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float, float] | None:
    """(ratio, low, high) of E_wasteful / E_efficient from paired rounds: the geometric
    mean of the per-round ratios and its one-sided bounds at `confidence` (Student's t on
    the per-round log ratios, n - 1 degrees of freedom). None below two usable rounds."""
    w, e = np.asarray(wasteful_j, float), np.asarray(efficient_j, float)
    if not (e > 0).any():
        return _efficient_side_idle(w)
    ok = (w > 0) & (e > 0)
    d = np.log(w[ok]) - np.log(e[ok])
    n = len(d)
    if n < 2:
        return None
    mean = float(d.mean())
    se = float(d.std(ddof=1)) / np.sqrt(n)
    q = float(special.stdtrit(n - 1, confidence))
    return float(np.exp(mean)), float(np.exp(mean - q * se)), float(np.exp(mean + q * se))


def _efficient_side_idle(w: np.ndarray) -> tuple[float, float, float] | None:
    """The efficient side spends nothing here (it runs no operator in the region: a copy
    it avoids), so the ratio is unbounded as soon as the wasteful side spent energy in
    every round; None (no evidence) when it did not. The saving's bounds then come from
    the wasteful side's rounds alone (`wasteful_bounds_j`)."""
    pos = w[w > 0]
    if len(pos) < 2 or len(pos) < len(w):
        return None
    return math.inf, math.inf, math.inf


def wasteful_bounds_j(w: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """One-sided bounds at `confidence` of the geometric-mean energy of the rounds."""
    d = np.log(w[w > 0])
    se = float(d.std(ddof=1)) / np.sqrt(len(d))
    q = float(special.stdtrit(len(d) - 1, confidence))
    return float(np.exp(d.mean() - q * se)), float(np.exp(d.mean() + q * se))


# --------------------------------------------------------------------------------------
# Which runs can be confirmed
# --------------------------------------------------------------------------------------


def unconfirmable(p: Profile) -> str:
    """Why run `p` cannot be re-measured in a warm worker ('' when it can)."""
    from magneton.model import script_unchanged

    name = p.run.name
    if not p.run.script:
        return f"'{name}' was recorded from Python, with no script to re-run"
    if not os.path.isfile(p.run.script):
        return f"the script of '{name}' is gone ({p.run.script})"
    if not script_unchanged(p):
        return f"{os.path.basename(p.run.script)} changed since '{name}' was recorded"
    if p.run.energy_method != "estimated" or not p.energy.model:
        return f"'{name}' was measured by {p.run.power_source or 'a sensor'} (re-measurement prices the energy model only)"
    if p.run.timing != "separate":
        return f"the timing pass of '{name}' did not align with its operators"
    if compiled_program_step(p):
        return (
            f"'{name}' is a step of a {p.config['framework']} program, whose rounds would re-run "
            "the program's compiled step: not re-measured yet"
        )
    return ""


def compiled_program_step(p: Profile) -> bool:
    """Run `p` is a step of a JAX or TensorFlow program: its operators ran inside one
    compiled call, so no warm worker can re-time them one by one."""
    from magneton.tracer.programs.program import program_config

    return bool(program_config(p.config)) and p.config.get("framework", "torch") != "torch"


def work_only(p: Profile) -> bool:
    """Priced on FLOPs and bytes alone (no static power): time plays no part."""
    m = p.energy.model
    return m is not None and bool(m) and float(m.get("p_static_w", 1.0)) == 0.0


# --------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------


# the modules a diff's warm workers preload: the jobs of confirmation and of the
# key-variable re-run (diagnose/cause/keyvar.py), so neither imports Magneton's side in a child
PRELOAD = (
    "magneton.tracer.timing.remeasure",
    "magneton.tracer.programs.record",
    "magneton.tracer.programs.program",
    "magneton.diagnose.cause.keyvar",
)


def start_pool(
    pa: Profile, pb: Profile, tmp_prefix: str = "magneton-diff-", hold: WarmHold | None = None
) -> WarmPool:
    """The warm workers for re-running both sides of a diff (one per recorded
    environment), importing their libraries from now on; `hold` keeps them after it."""
    from magneton.tracer.programs.program import env_of

    return WarmPool(
        {s: (p.run.script, env_of(p.config)) for s, p in (("a", pa), ("b", pb))},
        preload=PRELOAD,
        tmp_prefix=tmp_prefix,
        hold=hold,
    )


def _covers(pool: WarmPool, profiles: dict[str, Profile]) -> bool:
    from magneton.tracer.programs.program import env_of

    return all(pool.worker([p.run.script], env_of(p.config)) for p in profiles.values())


def _warm_of(side: str, p: Profile, pool: WarmPool) -> WarmWorker:
    """The diff's warm worker that serves run `p`'s script and environment."""
    from magneton.tracer.programs.program import env_of

    warm = pool.worker([p.run.script], env_of(p.config))
    if warm is None:
        raise WorkerError(f"side {side} has no warm worker started for its script")
    return warm


def _aligned_wall(side: str, unit: dict, p: Profile) -> np.ndarray:
    """A program's timed unit as (ops, 2) windows of the recording's operators. Its steps
    need not repeat exactly (a step that logs, evaluates or saves): the unit is aligned
    with the recording's operators as the recording aligned its own units
    (tracer/timing/alignment.py); an operator this unit skipped gets an empty window where
    its predecessor ended, and what the unit ran besides is left out. WorkerError when
    the unit is not the kind of unit the recording recorded."""
    from magneton.tracer.timing.alignment import MIN_SHARED, align

    names = [op.name for op in p.ops]
    ua = align(names, unit["names"])
    if ua.shared < MIN_SHARED * len(names):
        raise WorkerError(
            f"side {side} ran other operators than its recording ({ua.shared} of its "
            f"{len(names)} in a timed step)"
        )
    wall = np.asarray(unit["wall"], np.int64).reshape(-1, 2)
    out = np.zeros((len(names), 2), np.int64)
    last = int(wall[0, 0]) if len(wall) else 0
    for i, j in enumerate(ua.matched):
        if j is None:
            out[i] = (last, last)
        else:
            out[i] = wall[j]
            last = int(wall[j, 1])
    return out


def _check_ops(side: str, names: list[str], p: Profile) -> None:
    """WorkerError unless a re-measured iteration ran the recording's operators."""
    if names != [op.name for op in p.ops]:
        raise WorkerError(
            f"side {side} ran other operators than its recording ({len(names)} vs {len(p.ops)})"
        )


class Worker:
    """One side's re-measurement job (tracer/timing/remeasure.py `serve`), forked from the
    diff's warm worker, and the Unix socket it answers on."""

    def __init__(self, side: str, p: Profile, pool: WarmPool):
        from magneton.tracer.programs.program import env_of

        self.side, self.profile = side, p
        self.warm = warm = _warm_of(side, p, pool)
        self.pid = 0  # the job's process, once it answered
        self.sock_path = os.path.join(warm.tmp, f"confirm-{side}.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn: socket.socket | None = None
        try:
            with unix_address(self.sock_path) as address:  # in the worker's 0700 directory
                self._listener.bind(address)
            self._listener.listen(1)
            spec = {
                "script": p.run.script,
                "entry": p.run.entry,
                "setup": p.run.setup,
                "env": env_of(p.config),
                "warmup": max(1, p.run.warmup),
                "sync": p.run.device == "cuda",
                "cpu_clock": p.energy.clock == "process-cpu",
                "socket": self.sock_path,
            }
            self.job = warm.submit(
                "magneton.tracer.timing.remeasure:serve",
                spec,
                cwd=os.path.dirname(p.run.script) or None,
            )
        except BaseException:
            self._listener.close()
            raise
        self._buf = b""
        self.round_timeout_s = max(ROUND_TIMEOUT_MIN_S, 30.0 * max(p.run.time_s, 0.0))
        self._silent = False  # a read timed out: the job hangs, and close kills it at once

    def _accept(self, deadline: float, timeout_s: float) -> socket.socket:
        """The job's connection; WorkerError when it exited first or never connected."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"side {self.side} did not answer within {timeout_s:.0f} s")
            ready, _, _ = select.select([self._listener], [], [], min(left, 0.25))
            if ready:
                conn, _ = self._listener.accept()
                return conn
            if self.warm.finished(self.job):  # it died before connecting: say why
                raise WorkerError(f"side {self.side} stopped: {self._log_tail()}")

    def read(self, timeout_s: float) -> dict:
        """The worker's next answer; WorkerError on its error, death or silence."""
        deadline = time.monotonic() + timeout_s
        if self._conn is None:
            self._conn = self._accept(deadline, timeout_s)
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._silent = True
                raise WorkerError(f"side {self.side} did not answer within {timeout_s:.0f} s")
            ready, _, _ = select.select([self._conn], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = self._conn.recv(1 << 20)
            if not chunk:
                raise WorkerError(f"side {self.side} stopped: {self._log_tail()}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        msg = json.loads(line)
        if "error" in msg:
            raise WorkerError(f"side {self.side} raised {msg['error']}")
        self.pid = int(msg.get("pid", self.pid))
        return msg

    def round(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """One timed call: [(wall, cpu)], windows per operator, (ops, 2) each."""
        if self._conn is None:
            raise WorkerError(f"side {self.side} has not started")
        try:
            self._conn.sendall(b"round\n")
        except OSError as e:
            raise WorkerError(f"side {self.side} stopped: {self._log_tail()}") from e
        msg = self.read(self.round_timeout_s)
        _check_ops(self.side, msg["names"], self.profile)
        cpu = msg.get("cpu")
        wall = np.asarray(msg["wall"], np.int64)
        return [(wall, None if cpu is None else np.asarray(cpu, np.int64))]

    def _log_tail(self) -> str:
        return self.warm.job_log_tail(self.job)[:300] or "it exited"

    def close(self) -> None:
        """End the job: closing its socket asks it to exit; the zygote kills it if it
        lingers 2 s, and at once if it already let a read time out (a round that hangs
        does not notice the socket close: waiting for it only delayed the diff)."""
        for s in (self._conn, self._listener):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        with contextlib.suppress(OSError):
            os.unlink(self.sock_path)
        with contextlib.suppress(Exception):  # WorkerError: timed out (killed) or died
            self.warm.result(self.job, timeout_s=0.0 if self._silent else 2.0)


class ProgramWorker:
    """One side's program run (`magneton record -- python ...`). A program builds its
    model and runs its steps inside its own `__main__`, so it cannot be held warm and
    called again: each round runs the program afresh as a job of the diff's warm worker
    (forked, so its libraries are imported already) up to the end of its recorded window,
    with the window's timing units timed as the recording timed them
    (tracer/programs/program.py `time_window`), and stops it there. A round therefore gives as many
    rows as the window has timed units; `Rounds` reduces them to one value per round."""

    def __init__(self, side: str, p: Profile, pool: WarmPool):
        from magneton.tracer.programs.program import env_of, program_config

        self.side, self.profile = side, p
        self.warm = _warm_of(side, p, pool)
        self.spec = {"program": program_config(p.config), "env": env_of(p.config)}
        self.cwd = p.config.get("program.cwd") or os.path.dirname(p.run.script) or None
        # the first run waits for the zygote's imports too; later ones are held to a
        # multiple of the first
        self.timeout_s = STARTUP_TIMEOUT_S

    def read(self, timeout_s: float) -> dict:
        """Nothing to wait for before the first round (each round starts the program)."""
        return {}

    def round(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """One run of the program's window: [(wall, None)] per timed unit."""
        t0 = time.monotonic()
        job = self.warm.submit(
            "magneton.tracer.programs.program:time_window", self.spec, cwd=self.cwd
        )
        res = self.warm.result(job, timeout_s=self.timeout_s)
        if not res.ok:
            raise WorkerError(f"side {self.side} raised {res.error}")
        self.timeout_s = max(ROUND_TIMEOUT_MIN_S, 3.0 * (time.monotonic() - t0))
        rows: list[tuple[np.ndarray, np.ndarray | None]] = []
        for unit in res.value["units"]:
            rows.append((_aligned_wall(self.side, unit, self.profile), None))
        if not rows:
            raise WorkerError(f"side {self.side} timed no step of its window")
        return rows

    def close(self) -> None:
        """Nothing runs between rounds."""


def make_worker(side: str, p: Profile, pool: WarmPool) -> Worker | ProgramWorker:
    """The re-measurement worker for one side: a program run's or a script's."""
    from magneton.tracer.programs.program import program_config

    return (ProgramWorker if program_config(p.config) else Worker)(side, p, pool)


# --------------------------------------------------------------------------------------
# Rounds and decisions
# --------------------------------------------------------------------------------------


def _stacked(windows: list[np.ndarray | None]) -> np.ndarray | None:
    """The rounds' CPU-clock windows as one array; None when there are none or a round
    read no CPU clock (then the wall windows price all rounds alike)."""
    read = [w for w in windows if w is not None]
    return np.stack(read) if read and len(read) == len(windows) else None


@dataclass
class Rounds:
    """What the interleaved rounds measured: per side, one row of (ops, 2) windows per
    timed iteration, and the round each row belongs to. A script's round is one call (one
    row); a program's is one run of its window (a row per timed unit)."""

    wall: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"a": [], "b": []})
    # None: that row read no CPU clock
    cpu: dict[str, list[np.ndarray | None]] = field(default_factory=lambda: {"a": [], "b": []})
    round_of: dict[str, list[int]] = field(default_factory=lambda: {"a": [], "b": []})

    def add(self, side: str, rows: list[tuple[np.ndarray, np.ndarray | None]]) -> None:
        """One round of `side`: its rows."""
        r = self.rounds_of(side)
        for wall, cpu in rows:
            self.wall[side].append(wall)
            self.cpu[side].append(cpu)
            self.round_of[side].append(r)

    def rounds_of(self, side: str) -> int:
        return self.round_of[side][-1] + 1 if self.round_of[side] else 0

    @property
    def n(self) -> int:
        """Rounds that both sides completed."""
        return min(self.rounds_of("a"), self.rounds_of("b"))

    def _rows(self, side: str) -> int:
        """Rows of `side` that belong to rounds both sides completed."""
        n = self.n
        return sum(r < n for r in self.round_of[side])

    def priced(self, side: str, p: Profile):
        from magneton.tracer.energy.pricing import reprice

        k = self._rows(side)
        return reprice(p, np.stack(self.wall[side][:k]), _stacked(self.cpu[side][:k]))

    def own_s(self, side: str) -> np.ndarray:
        """(rows, ops) seconds of each op's own window, on the clock that priced it."""
        k = self._rows(side)
        w = _stacked(self.cpu[side][:k])
        if w is None:
            w = np.stack(self.wall[side][:k])
        return np.maximum(0, w[:, :, 1] - w[:, :, 0]) / 1e9

    def per_round(self, side: str, per_row: np.ndarray) -> np.ndarray:
        """One value per round from one per row: the median of the round's rows (a
        program's timed units; the median, so one step with a collection or a data
        reload does not move its round)."""
        of = np.asarray(self.round_of[side][: len(per_row)])
        return np.array([float(np.median(per_row[of == r])) for r in range(self.n)])


def _geomean(x: np.ndarray) -> float:
    x = x[x > 0]
    return float(np.exp(np.log(x).mean())) if len(x) else 0.0


def _region_j(att, ops: list[int], kind: str = "region") -> np.ndarray:
    """Per-row energy of a finding's ops, compared the way detection compared them:
    an operator region on the operators' own energy (the interpreter's share taken out,
    diagnose/matching/interpreter.py), an interpreter finding on the interpreter's share alone."""
    interp = att.interp_samples_j
    if interp is None or interp.shape != att.samples_j.shape:
        interp = np.zeros_like(att.samples_j)
    rows = interp if kind == "interpreter" else np.maximum(att.samples_j - interp, 0.0)
    return rows[:, ops].sum(axis=1)


def confidences(findings: list[Finding], threshold: float) -> list[float]:
    """The paired test's confidence per candidate: `CONFIDENCE` for one the recordings
    already showed, stricter (Bonferroni over their number) for those they left
    undecided (detect.py `undecided`): for them the rounds are the only test, and an A/A
    diff on a loaded machine can leave several, of which none may be confirmed."""
    k = sum(undecided(f, threshold) for f in findings)
    strict = 1.0 - (1.0 - CONFIDENCE) / max(k, 1)
    return [strict if undecided(f, threshold) else CONFIDENCE for f in findings]


def _round_j(rounds: Rounds, att: dict, f: Finding, side: str) -> np.ndarray:
    """Per-round energy of side `side` of finding `f`."""
    region = f.region_a if side == "a" else f.region_b
    return rounds.per_round(side, _region_j(att[side], region.ops, f.kind))


def _intervals(
    findings: list[Finding], att: dict, rounds: Rounds, levels: list[float]
) -> list[tuple[float, float, float] | None]:
    out = []
    for f, level in zip(findings, levels, strict=True):
        ea, eb = _round_j(rounds, att, f, "a"), _round_j(rounds, att, f, "b")
        w, e = (ea, eb) if f.wasteful == "a" else (eb, ea)
        out.append(paired_interval(w, e, confidence=level))
    return out


def decided(
    iv: tuple[float, float, float] | None,
    threshold: float,
    n: int,
    level: float = CONFIDENCE,
    futility: float = FUTILITY,
    last: int = MAX_ROUNDS,
) -> bool:
    """Whether more rounds are not needed for a candidate whose interval after `n`
    rounds is `iv`: confirmed, ruled out, narrow, or futile (from half of the `last`
    round confirmation can reach on, its chance to be confirmed by then under
    `futility`)."""
    if iv is None:
        return False
    _, low, high = iv
    if confident(low, threshold) or cannot_reach(high, threshold):
        return True
    if 0.5 * (np.log(high) - np.log(low)) <= NARROW_LOG:
        return True
    if 2 * n < last:
        return False
    return chance_to_confirm(iv, n, level, threshold, last) < futility


def horizon(n: int, elapsed_s: float, budget_s: float = BUDGET_S) -> int:
    """The rounds confirmation can reach after `n` rounds in `elapsed_s`: `MAX_ROUNDS`,
    or fewer where `budget_s` ends them first at the pace so far (a round that starts
    before the budget is spent still runs)."""
    if n <= 0 or elapsed_s <= 0:
        return MAX_ROUNDS
    more = math.ceil(max(budget_s - elapsed_s, 0.0) * n / elapsed_s)
    return max(n, min(MAX_ROUNDS, n + more))


def chance_to_confirm(
    iv: tuple[float, float, float], n: int, level: float, threshold: float, last: int = MAX_ROUNDS
) -> float:
    """The predictive probability that a candidate whose paired interval after `n`
    rounds is `iv` (at `level`) is confirmed by round `last`: its log ratios' mean and
    spread as measured so far, the mean of the rounds to come drawn around the measured
    one with the uncertainty of both (a flat prior), the spread taken as known. 1.0 when
    nothing is left to predict (no rounds left, or no spread)."""
    ratio, low, _ = iv
    left = last - n
    if left <= 0 or n < 2 or not (0 < low < ratio < math.inf):
        return 1.0
    mean = math.log(ratio)
    sd = (mean - math.log(low)) * math.sqrt(n) / float(special.stdtrit(n - 1, level))
    # confirmed at the horizon when its mean clears the threshold's log ratio by the
    # half-width the interval will then have
    half_width = float(special.stdtrit(last - 1, level)) * sd / math.sqrt(last)
    need = -math.log(1.0 - threshold) + half_width
    # the mean of the rounds to come must reach (last * need - n * mean) / left
    z = last * (need - mean) / (left * sd * math.sqrt(1.0 / left + 1.0 / n))
    return float(special.ndtr(-z))


def interleave(
    workers: dict[str, Worker | ProgramWorker],
    findings: list[Finding],
    profiles: dict[str, Profile],
    threshold: float,
    budget_s: float = BUDGET_S,
) -> tuple[Rounds, dict]:
    """Alternate rounds until every candidate is decided or `budget_s` is spent (module
    docstring); returns the rounds and the last pricing of each side."""
    rounds = Rounds()
    t0 = time.monotonic()
    att: dict = {}
    levels = confidences(findings, threshold)
    for r in range(MAX_ROUNDS):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            rounds.add(side, workers[side].round())
        if rounds.n < MIN_ROUNDS:
            continue
        att = {s: rounds.priced(s, profiles[s]) for s in ("a", "b")}
        ivs = _intervals(findings, att, rounds, levels)
        elapsed_s = time.monotonic() - t0
        last = horizon(rounds.n, elapsed_s, budget_s)
        done = (
            decided(iv, threshold, rounds.n, lv, last=last)
            for iv, lv in zip(ivs, levels, strict=True)
        )
        if all(done) or elapsed_s > budget_s:
            break
    if not att:
        att = {s: rounds.priced(s, profiles[s]) for s in ("a", "b")}
    return rounds, att


def _slower_at_least_s(wasteful_s: np.ndarray, efficient_s: np.ndarray, level: float) -> float:
    """The efficient side's time as far as the rounds show it: the wasteful side's time
    times the lower bound of the paired per-round time ratio (efficient / wasteful).

    "Trade-off" claims that the cheaper side is slower; like the saving, that claim must
    survive the rounds' spread. Taken from the geometric means alone, a region whose
    two sides ran equally fast was a trade-off whenever load made the efficient side's
    rounds 1% slower on average (eager vs SDPA attention of a training program, once
    in seven suite runs). With fewer than two usable rounds the point estimate stands.
    """
    iv = paired_interval(efficient_s, wasteful_s, confidence=level)
    if iv is None or not math.isfinite(iv[1]):
        return _geomean(efficient_s)
    return _geomean(wasteful_s) * iv[1]


def _confirmed(
    f: Finding,
    iv: tuple[float, float, float],
    att: dict,
    rounds: Rounds,
    level: float = CONFIDENCE,
) -> Finding | None:
    """`f` with its confirmed energies, times, saving, interval and verdict; None when the
    rounds do not show the saving. Energies and times are geometric means over the rounds
    of the same pricing, so the energy ratio is the paired test's and lies in its
    interval, and the saving in the saving's."""
    ea, eb = _geomean(_round_j(rounds, att, f, "a")), _geomean(_round_j(rounds, att, f, "b"))
    round_a = rounds.per_round("a", rounds.own_s("a")[:, f.region_a.ops].sum(axis=1))
    round_b = rounds.per_round("b", rounds.own_s("b")[:, f.region_b.ops].sum(axis=1))
    e_w, e_eff = (ea, eb) if f.wasteful == "a" else (eb, ea)
    t_w, t_eff = (round_a, round_b) if f.wasteful == "a" else (round_b, round_a)
    if e_w <= e_eff:
        return None
    ratio, low, high = iv
    f.region_a.energy_j, f.region_b.energy_j = ea, eb
    if f.kind != "interpreter":
        # an interpreter finding's time is the Python's, which the rounds do not
        # separate per place; it keeps the recording's time and its verdict
        f.region_a.time_s, f.region_b.time_s = _geomean(round_a), _geomean(round_b)
        slower_s = _slower_at_least_s(t_w, t_eff, level)
        f.verdict = verdict_of(_geomean(t_w), slower_s, f.occurrences, f.output_rel_diff)
    f.saving_j = e_w - e_eff
    run_j = _geomean(rounds.per_round(f.wasteful, att[f.wasteful].samples_j.sum(axis=1)))
    f.saving_share = f.saving_j / run_j if run_j > 0 else 0.0
    if e_eff > 0:
        saving_low = e_w * (1.0 - 1.0 / low) if low > 0 else 0.0
        saving_high = e_w * (1.0 - 1.0 / high) if high > 0 else 0.0
    else:  # all of the wasteful side's energy is the saving (_efficient_side_idle)
        saving_low, saving_high = wasteful_bounds_j(_round_j(rounds, att, f, f.wasteful))
    f.interval = SavingInterval(
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        saving_j_low=saving_low,
        saving_j_high=saving_high,
        confidence=level,
        iterations_a=rounds.n,
        iterations_b=rounds.n,
        test=TEST,
        confirmed=True,
        rounds=rounds.n,
    )
    return f


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While workers run, SIGTERM (the TUI ending its diff child, a CI cancel) exits
    through the `finally` blocks that stop the workers and remove their directory,
    instead of killing the process where it stands. Only from the main thread, and only
    where nobody else handles SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def mark_unconfirmed(findings: list[Finding], why: str, threshold: float) -> list[Finding]:
    """The findings the recordings showed, labelled unconfirmed with `why`; those they
    left undecided (detect.py `undecided`) are not findings without the rounds."""
    kept = [f for f in findings if not undecided(f, threshold)]
    for f in kept:
        if f.interval is not None:
            f.interval.confirmed = False
            f.interval.unconfirmed = why
    return kept


def not_confirmable(pa: Profile, pb: Profile, rerun: bool = True) -> str:
    """Why confirmation will not re-measure this pair ('' when it will)."""
    if not rerun:
        return "re-measurement disabled (--no-rerun)"
    if work_only(pa) and work_only(pb):
        return "energies priced on FLOPs and bytes alone: re-measuring cannot change them"
    return unconfirmable(pa) or unconfirmable(pb)


def confirm_findings(
    pa: Profile,
    pb: Profile,
    findings: list[Finding],
    threshold: float,
    *,
    rerun: bool = True,
    pool: WarmPool | None = None,
) -> tuple[list[Finding], str]:
    """The findings that interleaved re-measurement confirms (re-ranked), and a one-line
    note of what it did. Findings it cannot confirm are returned as they are, marked
    unconfirmed with the reason (module docstring). `pool`: the diff's warm workers
    (`start_pool`), left open for the diagnosis; without one (or one started for other
    scripts) confirmation starts its own and closes it."""
    if not findings:
        return findings, ""
    why = not_confirmable(pa, pb, rerun)
    if why:
        return mark_unconfirmed(findings, why, threshold), f"findings unconfirmed: {why}"
    try:
        rm = remeasure(pa, pb, findings, threshold, pool)
    except WorkerError as e:
        why = str(e)
        return mark_unconfirmed(findings, why, threshold), f"findings unconfirmed: {why}"
    rounds, att = rm.rounds, rm.att
    n = rounds.n
    kept, dropped = [], []
    levels = confidences(findings, threshold)
    k = sum(undecided(f, threshold) for f in findings)
    for f, iv, level in zip(
        findings, _intervals(findings, att, rounds, levels), levels, strict=True
    ):
        g = _confirmed(f, iv, att, rounds, level) if iv and confident(iv[1], threshold) else None
        if g is not None:
            kept.append(g)
        else:
            dropped.append((f, iv))
    note = (
        f"interleaved re-measurement ({n} rounds per side in {rm.seconds:.1f} s, "
        f"{rm.how}): {len(kept)} of {len(findings)} candidate(s) confirmed at {CONFIDENCE:.0%}"
        + (f" ({k} left undecided by the recordings, tested at {max(levels):.1%})" if k else "")
        + _dropped_note(dropped)
    )
    return ranked(kept), note


def _dropped_note(dropped: list[tuple[Finding, tuple[float, float, float] | None]]) -> str:
    """What the rounds measured for candidates they did not confirm (at most three): the
    energy ratio wasteful / efficient and its lower bound, so a dropped finding says
    whether the rounds saw no difference or one too small or too noisy to claim."""
    parts = []
    for f, iv in dropped[:3]:
        name = (f.ops_a or f.ops_b or ["?"])[0]
        if iv is None:
            parts.append(f"{name}: fewer than two usable rounds")
        else:
            parts.append(f"{name}: {iv[0]:.2f}x, lower bound {iv[1]:.2f}x")
    more = f" and {len(dropped) - 3} more" if len(dropped) > 3 else ""
    return f"; not confirmed: {', '.join(parts)}{more}" if parts else ""


@dataclass
class Remeasured:
    """Both runs re-measured in interleaved rounds (`remeasure`)."""

    rounds: Rounds
    att: dict  # side -> the last pricing of its rounds
    seconds: float  # the rounds' wall time
    how: str  # where the rounds ran, in words


def remeasure(
    pa: Profile,
    pb: Profile,
    findings: list[Finding],
    threshold: float,
    pool: WarmPool | None = None,
    budget_s: float = BUDGET_S,
) -> Remeasured:
    """Run and re-price both sides in interleaved rounds until every one of `findings`
    is decided (module docstring). WorkerError when a worker fails or the rounds cannot
    be priced."""
    profiles = {"a": pa, "b": pb}
    t0 = time.monotonic()
    workers: dict[str, Worker | ProgramWorker] = {}
    own: WarmPool | None = None
    try:
        with sigterm_unwinds():
            try:
                if pool is None or not _covers(pool, profiles):
                    pool = own = start_pool(pa, pb, tmp_prefix="magneton-confirm-")
                for side in ("a", "b"):
                    workers[side] = make_worker(side, profiles[side], pool)
                for w in workers.values():
                    w.read(STARTUP_TIMEOUT_S)
                t_ready = time.monotonic()
                rounds, att = interleave(workers, findings, profiles, threshold, budget_s)
            finally:
                for w in workers.values():
                    w.close()
                if own is not None:
                    own.close()
    except (OSError, ValueError) as e:  # ValueError: garbled
        raise WorkerError(str(e) or type(e).__name__) from None
    if att["a"] is None or att["b"] is None:
        raise WorkerError("the runs' energy could not be re-priced")
    forked = all(w.warm.stats is not None and w.warm.stats.forking for w in workers.values())
    where = f"{_zygotes(workers)} warm worker(s){'' if forked else ', fresh processes'}"
    if any(isinstance(w, ProgramWorker) for w in workers.values()):
        how = f"each round runs the programs' windows afresh in {where}"
    else:
        how = f"after {t_ready - t0:.0f} s loading both scripts in {where}"
    return Remeasured(rounds, att, time.monotonic() - t_ready, how)


def whole_run_saving(
    before: Profile, after: Profile, threshold: float, budget_s: float = BUDGET_S
) -> tuple[tuple[float, float, float] | None, Remeasured]:
    """What `after` saves over `before`, every operator of each: (E_before / E_after and
    its confidence interval, or None) from interleaved rounds of the two, for at most
    `budget_s` of rounds. WorkerError when they cannot be re-measured."""
    whole = Finding(
        id=0,
        wasteful="a",
        verdict="waste",
        region_a=Region(ops=[op.idx for op in before.ops]),
        region_b=Region(ops=[op.idx for op in after.ops]),
        saving_j=before.run.energy_j - after.run.energy_j,
        saving_share=0.0,
        output_rel_diff=0.0,
    )
    why = not_confirmable(before, after, True)
    if why:
        raise WorkerError(why)
    rm = remeasure(before, after, [whole], threshold, budget_s=budget_s)
    return _intervals([whole], rm.att, rm.rounds, [CONFIDENCE])[0], rm


def _zygotes(workers: dict[str, Worker | ProgramWorker]) -> int:
    return len({id(w.warm) for w in workers.values()})
