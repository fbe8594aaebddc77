"""Differential results (matching → detection → diagnosis). `DiffResult.to_json()` is the
`magneton diff --json` contract other tools depend on; keep its keys stable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .diagnosis import Divergence, Fix, RootCause
from .energy import SavingInterval
from .job import JobInfo


@dataclass
class RunSummary:
    run: str
    energy_j: float
    time_s: float
    power_source: str
    energy_method: str = ""


@dataclass
class Region:
    """A matched subgraph of one run: its operators and the tensors on its boundary."""

    ops: list[int] = field(default_factory=list)  # op idx in that run, execution order
    inputs: list[int] = field(default_factory=list)  # tensor idx entering the region
    outputs: list[int] = field(default_factory=list)  # tensor idx leaving the region
    energy_j: float = 0.0
    time_s: float = 0.0


@dataclass
class Finding:
    id: int
    wasteful: str  # "a" | "b"
    verdict: str  # "waste" | "trade-off" | "noise" (diagnosis: nothing differs but timing)
    region_a: Region
    region_b: Region
    saving_j: float  # energy of the wasteful side minus the efficient side
    saving_share: float  # saving_j / total energy of the wasteful run
    output_rel_diff: float  # max element-wise relative difference proxy of region outputs
    ops_a: list[str] = field(default_factory=list)  # operator names, execution order
    ops_b: list[str] = field(default_factory=list)
    modules_a: list[str] = field(default_factory=list)
    modules_b: list[str] = field(default_factory=list)
    # filled by diagnosis (None until then)
    category: str | None = None  # "api-misuse" | "misconfiguration" | "redundant"
    divergence: Divergence | None = None
    root_cause: RootCause | None = None
    fix: Fix | None = None
    occurrences: int = 1  # matched region pairs folded into this finding (one per layer)
    interval: SavingInterval | None = None  # the confidence interval the verdict rests on
    # which ranks of a multi-rank job the finding concerns (job diffs only); its keys
    # travel inside the JSON "divergence" object
    job: JobInfo | None = None
    # "region": matched operators differ; "interpreter": the Python that ran between
    # operators at one place differs (diagnose/matching/interpreter.py). Its regions hold the ops
    # that Python led to, with the interpreter's energy and time only
    kind: str = "region"
    # interpreter findings: the frames that ran on each side ("a.py:12 build_mask"),
    # largest share first
    frames_a: list[str] = field(default_factory=list)
    frames_b: list[str] = field(default_factory=list)

    def divergence_json(self) -> dict | None:
        """The JSON "divergence": the divergence point plus the job keys, if any."""
        if self.divergence is None and self.job is None:
            return None
        d = self.divergence.to_json() if self.divergence is not None else {}
        if self.job is not None:
            d.update(self.job.to_json())
        return d

    def diagnosis_json(self) -> dict:
        """The diagnosis fields as JSON (the keys of `to_json` and of stored diffs)."""
        return {
            "category": self.category,
            "divergence": self.divergence_json(),
            "root_cause": self.root_cause.to_json() if self.root_cause is not None else None,
            "fix": self.fix.to_json() if self.fix is not None else None,
        }

    def set_diagnosis_json(self, d: dict) -> None:
        """Fill the diagnosis fields from their JSON (inverse of `diagnosis_json`)."""
        self.category = d.get("category")
        div = d.get("divergence")
        self.divergence = Divergence.from_json(div) if div and "level" in div else None
        self.job = JobInfo.from_json(div) if div else None
        rc, fx = d.get("root_cause"), d.get("fix")
        self.root_cause = RootCause.from_json(rc) if rc else None
        self.fix = Fix.from_json(fx) if fx else None

    def to_json(self) -> dict:
        return {
            "interval": None if self.interval is None else self.interval.to_json(),
            "id": self.id,
            "kind": self.kind,
            "frames": {"a": self.frames_a, "b": self.frames_b},
            "wasteful": self.wasteful,
            "verdict": self.verdict,
            "energy_j": {"a": self.region_a.energy_j, "b": self.region_b.energy_j},
            "time_s": {"a": self.region_a.time_s, "b": self.region_b.time_s},
            "saving_j": self.saving_j,
            "saving_share": self.saving_share,
            "output_rel_diff": self.output_rel_diff,
            "ops": {"a": self.ops_a, "b": self.ops_b},
            "op_idx": {"a": self.region_a.ops, "b": self.region_b.ops},
            "modules": {"a": self.modules_a, "b": self.modules_b},
            **self.diagnosis_json(),
        }


@dataclass
class DiffResult:
    a: RunSummary
    b: RunSummary
    findings: list[Finding] = field(default_factory=list)  # sorted by saving_j, descending
    matched_pairs: int = 0
    threshold: float = 0.10
    message: str = ""  # e.g. why nothing could be compared
    # how the runs were matched when not by value (diagnose/matching/pathmatch.py), "" = by value;
    # printed by `magneton diff`, not part of to_json (findings' divergence says it)
    match_note: str = ""
    # what interleaved confirmation did (diagnose/matching/confirm.py), printed by `magneton diff`;
    # each finding's interval says whether it was confirmed
    confirm_note: str = ""
    # confirmed differences that diagnosis found no software cause for (verdict "noise":
    # the same kernels, call paths, arguments and settings on both sides): what two
    # processes running identical work measured apart, so not findings. `diff` says how
    # many in one line; --json lists them under "dismissed".
    dismissed: list[Finding] = field(default_factory=list)
    # the findings one group per cause (diagnose/cause/grouping.py `CauseGroup`), set by
    # diagnose/pipeline.py `run_diff`; what `diff` prints one row each for. Not part of
    # to_json (`diff --json` adds them under "groups")
    groups: list[Any] = field(default_factory=list)

    def dismiss_noise(self) -> None:
        """Move the findings diagnosed as noise from `findings` to `dismissed`."""
        self.dismissed += [f for f in self.findings if f.verdict == "noise"]
        self.findings = [f for f in self.findings if f.verdict != "noise"]

    def ordered(self) -> list[Finding]:
        """Findings to act on first (by id = largest saving), then those judged noise:
        how `diff` prints them and the TUI lists them."""
        return sorted(self.findings, key=lambda f: (f.verdict == "noise", f.id))

    def to_json(self) -> dict:
        def run(s: RunSummary) -> dict:
            return {
                "run": s.run,
                "energy_j": s.energy_j,
                "time_s": s.time_s,
                "power_source": s.power_source,
                "energy_method": s.energy_method,
            }

        return {
            "a": run(self.a),
            "b": run(self.b),
            "threshold": self.threshold,
            "matched_pairs": self.matched_pairs,
            "message": self.message,
            "findings": [f.to_json() for f in self.findings],
            "dismissed": [f.to_json() for f in self.dismissed],
        }
