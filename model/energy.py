"""How a run's energy was obtained and how sure a figure is: the run's energy metadata,
its spread over timed iterations, and a finding's saving interval."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# How an energy figure was obtained. Every energy number shown to a user carries one.
ENERGY_METHODS = ("measured", "replayed", "solved", "estimated")

# --- Run energy metadata ---
# How a run's energy was obtained and how repeatable it was, typed. It used to ride in
# `Profile.config` as JSON strings that every reader parsed on its own (and a typo in one
# key silently read as "absent"). The DB still stores it as `energy.*` config rows
# (`to_config`/`from_config`), so the schema did not change.

_RUN_ENERGY_KEYS = (
    "energy.note",
    "energy.span_s",
    "energy.charged_s",
    "energy.model",
    "energy.lsq",
    "energy.replay",
    "energy.clock",
    "energy.samples_j",
    "energy.interp_j",
    "energy.interp_samples_j",
    "energy.spread",
    "energy.outside",
    "energy.kernel_s",
)


@dataclass
class EnergySpread:
    """Repeatability of the run's energy over its timed iterations."""

    iterations: int = 0
    mean_j: float = 0.0  # mean per-iteration run energy
    std_j: float = 0.0  # sample standard deviation over iterations
    cv: float = 0.0  # std_j / mean_j (the "± x%" printed by `record` and `report`)
    min_j: float = 0.0
    max_j: float = 0.0
    stop_reason: str = ""  # why the timing pass stopped: "stable", "max-iterations", "budget"

    @property
    def unstable(self) -> bool:
        """Too noisy to compare runs at the default 10% threshold."""
        return self.iterations >= 2 and self.cv > UNSTABLE_CV


UNSTABLE_CV = 0.05


@dataclass
class OutsideWork:
    """What a program's timed units ran outside the step's common work: operators no
    aligned counterpart in the structure unit has (an evaluation, `loss.item()` for a log
    line, a checkpoint save; tracer/timing/alignment.py). Charged with the units, kept
    out of the step's graph and its figures."""

    energy_j: float = 0.0  # per timed unit, averaged over all of them
    time_s: float = 0.0  # per timed unit, averaged over all of them
    operators: int = 0  # in all timed units together
    units: list[int] = field(default_factory=list)  # which timed units ran some (1-based)
    of_units: int = 0  # timed units in all
    top: list[list] = field(default_factory=list)  # [name, count, energy_j], costliest first


@dataclass
class RunEnergy:
    """Energy metadata of one run (all energies per entry call).

    `op_samples_j[k][i]` is operator i's energy in timed iteration k: the per-iteration
    record that gives every region an uncertainty (diagnose/matching/detect.py). `interp_j[i]` is
    the part of op i's energy spent in the interpreter before it was called (Python
    between aten operators), shown by `report` as rows of kind "python";
    `interp_samples_j[k][i]` is that share in timed iteration k (what gives a difference
    in interpreter time its uncertainty in `diff`).
    """

    note: str = ""
    clock: str = ""  # what priced time: "process-cpu" (CPU seconds consumed) or "wall"
    span_s: float = 0.0  # mean iteration span (seconds charged per call)
    charged_s: list[float] = field(default_factory=list)  # per op: own + interpreter time
    interp_j: list[float] = field(default_factory=list)  # per op: interpreter share
    interp_samples_j: list[list[float]] = field(default_factory=list)  # [iteration][op]
    op_samples_j: list[list[float]] = field(default_factory=list)  # [iteration][op]
    spread: EnergySpread = field(default_factory=EnergySpread)
    model: dict | None = None  # the energy model's coefficients when "estimated"
    lsq: list[dict] = field(default_factory=list)  # least-squares solutions when "solved"
    replay: list[dict] = field(default_factory=list)  # replay results when "replayed"
    outside: OutsideWork | None = None  # a program's work outside the step's common work
    # per op: seconds its device kernels ran in the structure pass (CUDA; [] on a CPU):
    # how the GPU work still queued after the last launch is shared (session.py)
    kernel_s: list[float] = field(default_factory=list)

    def to_config(self) -> dict[str, str]:
        """The `energy.*` config rows that store this run's metadata in the DB."""
        import json

        def compact(xs: list[float]) -> list[float]:
            return [float(f"{x:.4g}") for x in xs]

        out = {}  # an empty RunEnergy adds no rows
        if self.span_s:
            out["energy.span_s"] = repr(float(self.span_s))
        if self.note:
            out["energy.note"] = self.note
        if self.clock:
            out["energy.clock"] = self.clock
        if self.charged_s:
            out["energy.charged_s"] = json.dumps(compact(self.charged_s))
        if self.kernel_s:
            out["energy.kernel_s"] = json.dumps(compact(self.kernel_s))
        if self.interp_j:
            out["energy.interp_j"] = json.dumps(compact(self.interp_j))
        if self.interp_samples_j:
            out["energy.interp_samples_j"] = json.dumps([compact(r) for r in self.interp_samples_j])
        if self.op_samples_j:
            out["energy.samples_j"] = json.dumps([compact(r) for r in self.op_samples_j])
        if self.spread.iterations:
            out["energy.spread"] = json.dumps(self.spread.__dict__)
        if self.model is not None:
            out["energy.model"] = json.dumps(self.model)
        if self.lsq:
            out["energy.lsq"] = json.dumps(self.lsq)
        if self.replay:
            out["energy.replay"] = json.dumps(self.replay)
        if self.outside is not None:
            out["energy.outside"] = json.dumps(self.outside.__dict__)
        return out

    @classmethod
    def from_config(cls, config: dict[str, str]) -> tuple[RunEnergy, dict[str, str]]:
        """(metadata, the remaining config) from stored config rows."""
        import json

        c = dict(config)
        get = c.pop
        e = cls(note=get("energy.note", ""), clock=get("energy.clock", ""))
        try:
            e.span_s = float(get("energy.span_s", "0") or 0)
        except ValueError:
            e.span_s = 0.0
        for key, attr in (
            ("energy.charged_s", "charged_s"),
            ("energy.kernel_s", "kernel_s"),
            ("energy.interp_j", "interp_j"),
            ("energy.interp_samples_j", "interp_samples_j"),
            ("energy.samples_j", "op_samples_j"),
            ("energy.lsq", "lsq"),
            ("energy.replay", "replay"),
            ("energy.model", "model"),
        ):
            raw = get(key, "")
            if raw:
                setattr(e, attr, json.loads(raw))
        raw = get("energy.spread", "")
        if raw:
            e.spread = EnergySpread(**json.loads(raw))
        raw = get("energy.outside", "")
        if raw:
            e.outside = OutsideWork(**json.loads(raw))
        for k in _RUN_ENERGY_KEYS:
            c.pop(k, None)
        return e, c


@dataclass
class SavingInterval:
    """How sure a finding is: the wasteful side's energy over the efficient side's, with a
    confidence interval from the regions' per-iteration energies (diagnose/matching/detect.py)."""

    ratio: float  # E_wasteful / E_efficient (geometric mean of the iterations)
    ratio_low: float  # lower bound, one-sided at `confidence`
    ratio_high: float  # upper bound, one-sided at `confidence`
    saving_j_low: float  # saving implied by ratio_low (J per call)
    saving_j_high: float
    confidence: float  # e.g. 0.95
    iterations_a: int
    iterations_b: int
    between_runs_log_sd: float = 0.0  # noise between the recordings, from identical work
    test: str = "welch-t on log energies + between-runs variance from identical work"
    # interleaved confirmation (diagnose/matching/confirm.py): True when both sides were re-measured
    # in alternating rounds and the interval above is the paired test's; `rounds` per side;
    # `unconfirmed` says why not ("" when confirmed)
    confirmed: bool = False
    rounds: int = 0
    unconfirmed: str = ""

    def to_json(self) -> dict:
        # an unbounded ratio (the efficient side spends nothing in the region) is null:
        # JSON has no infinity, and `--json` must parse with any strict reader
        return {
            k: (None if isinstance(v, float) and math.isinf(v) else v)
            for k, v in self.__dict__.items()
        }

    @classmethod
    def from_json(cls, d: dict) -> SavingInterval:
        ratios = ("ratio", "ratio_low", "ratio_high")
        vals: dict[str, Any] = {
            k: (math.inf if k in ratios and v is None else v) for k, v in d.items()
        }
        return cls(**vals)
