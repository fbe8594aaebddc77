"""The in-memory data model every stage exchanges: one recorded run as plain dataclasses.

The tracer builds a `Profile`, the graph DB stores it (and gives it back with
`magneton.graphdb.load_profile`), and diagnosis reads it. Keeping this module free of
torch and kuzu imports is deliberate: diagnosis, reports and the TUI must be able to work
on a saved profile on a machine that cannot run the workload.

Indices (`idx`) are run-local and dense (0..n-1); the DB prefixes them with the run name
to make node keys unique across runs. Timestamps are `time.perf_counter_ns()` of the
recording process: one monotonic clock shared by operators, power samples and modules,
so attribution never has to reconcile two clocks.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

# Re-exported: the operator vocabularies live in `vocab.py`; much code imports this one here.
from .vocab import BOOKKEEPING_OPS  # noqa: F401

SCHEMA_VERSION = 4


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while many small records are built or read (a
    structure pass, a profile converted for the DB, two runs matched).

    Every stage here allocates records by the hundred thousand and no reference cycles,
    so each allocation-triggered collection only rescans every live object of the
    process (torch and transformers' included) and frees nothing: a full collection
    cost 0.19 s during a GPT-2 12L structure pass, 35% of `load_profile`, a third of
    matching a 32-layer model (measured). A collector the caller disabled stays off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# How an energy figure was obtained. Every energy number shown to a user carries one.
ENERGY_METHODS = ("measured", "replayed", "solved", "estimated")


@dataclass
class RunInfo:
    name: str
    script: str = ""  # absolute path of the recorded script ("" for a Python block)
    script_sha256: str = ""
    entry: str = ""  # "main" or the callable's qualified name
    setup: str = ""  # name of the setup function called outside the measured region ("" none)
    started_at: str = ""  # ISO-8601 wall clock, for people; never used for attribution
    status: str = "ok"  # "ok" | "failed" | "loading" (a crash mid-load leaves "loading")
    error: str = ""  # one line for failed runs
    warmup: int = 0
    repeat: int = 1
    time_s: float = 0.0  # mean wall time of one measured entry call (timing pass)
    energy_j: float = 0.0  # energy of one entry call; per-operator energies sum to it
    energy_above_idle_j: float = 0.0
    idle_w: float = 0.0  # idle baseline measured before the run
    power_source: str = ""  # e.g. "model:cpu-default", "nvml:0", "rapl:package-0"
    energy_method: str = ""  # one of ENERGY_METHODS (dominant method of the run)
    timing: str = "separate"  # "separate": light timing pass; "combined": one pass w/ overhead
    host: str = ""
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"


@dataclass
class FrameRecord:
    """One Python source location. Deduplicated per run by (file, line, function)."""

    idx: int
    file: str
    line: int
    function: str


@dataclass
class ModuleRecord:
    """One nn.Module instance seen during the run, by qualified path (`h.0.mlp.act`).

    The root module has name "" and its class in `type`.
    """

    idx: int
    name: str
    type: str
    parent: int = -1  # idx of the parent module, -1 for a root


@dataclass
class KernelRecord:
    """What did the work for an operator: on CPU the leaf aten op of the dispatch chain
    (`aten::mkldnn_convolution`), on CUDA the device kernel name. Deduplicated per
    (run, name, device)."""

    idx: int
    name: str
    device: str


@dataclass
class TensorRecord:
    """One tensor *value* (a version): in-place writes create a new record.

    Sources (`producer == -1`) are parameters, buffers, the entry's inputs and constants.
    Never holds the data itself; only a compact, layout-robust summary.
    """

    idx: int
    producer: int = -1  # op idx that produced this value, -1 for sources
    out_index: int = 0  # which output of the producer
    kind: str = "activation"  # "activation" | "param" | "buffer" | "input" | "constant"
    name: str = ""  # parameter/buffer qualified name, or "args[0]" for inputs
    shape: list[int] = field(default_factory=list)
    dtype: str = ""
    stride: list[int] = field(default_factory=list)
    contiguous: bool = True
    device: str = "cpu"
    numel: int = 0
    is_view: bool = False
    # [sum, abs_sum, min, max, mean, std] in float64; empty for non-float tensors
    stats: list[float] = field(default_factory=list)
    # exact content hash for integer/bool tensors (they compare exactly), "" otherwise
    value_hash: str = ""
    # multi-mode SVD invariants (paper §4.2): sorted singular values of each unfolding,
    # concatenated; `invariant_splits[i]` is the length of unfolding i's spectrum
    invariant: list[float] = field(default_factory=list)
    invariant_splits: list[int] = field(default_factory=list)
    # evenly spaced quantiles of the values (layout-invariant sketch of the contents)
    quantiles: list[float] = field(default_factory=list)


@dataclass
class OpRecord:
    idx: int
    name: str  # aten name, "aten::addmm"
    overload: str = "default"
    seq: int = -1  # autograd sequence number (-1 when none)
    thread: int = 0
    device: str = "cpu"
    start_ns: int = 0  # window in the timing pass (first measured iteration)
    end_ns: int = 0
    module: str = ""  # qualified module path it ran in
    module_idx: int = -1
    inputs: list[int] = field(default_factory=list)  # tensor idx, flattened argument order
    outputs: list[int] = field(default_factory=list)
    input_shapes: list[list[int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    input_contiguous: list[bool] = field(default_factory=list)
    scalar_args: str = ""  # non-tensor arguments, repr'd compactly (e.g. "dim=-1")
    frames: list[int] = field(default_factory=list)  # call stack, entry first, op site last
    api: str = ""  # outermost aten op entered from Python, e.g. "aten::conv2d"
    call_paths: list[str] = field(default_factory=list)  # "aten::conv2d > ... > leaf"
    kernels: list[int] = field(default_factory=list)  # kernel idx, launch order
    time_s: float = 0.0  # mean duration per iteration in the timing pass
    energy_j: float = 0.0  # per iteration
    energy_method: str = ""
    flops: float = 0.0
    bytes: float = 0.0
    # every timing-pass window (start_ns, end_ns), one per measured iteration;
    # in memory only, consumed by energy attribution
    windows_ns: list[tuple[int, int]] = field(default_factory=list, repr=False)


@dataclass
class PowerSeries:
    """A power trace for one device, on the recording clock."""

    device: str  # "gpu:0", "cpu:package-0", "model"
    source: str  # "nvml", "rapl", "meter", "model"
    t_ns: list[int] = field(default_factory=list)
    watts: list[float] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)  # sensor errors, marked


@dataclass
class Profile:
    run: RunInfo
    ops: list[OpRecord] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    modules: list[ModuleRecord] = field(default_factory=list)
    frames: list[FrameRecord] = field(default_factory=list)
    kernels: list[KernelRecord] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)
    power: list[PowerSeries] = field(default_factory=list)
    dist: DistInfo | None = None  # set on the ranks of a distributed job
    energy: RunEnergy = field(default_factory=lambda: RunEnergy())

    def flows(self) -> list[tuple[int, int, int, int]]:
        """Dataflow hops as (src_op, dst_op, tensor_idx, arg_index), one per consumer."""
        out = []
        for op in self.ops:
            for arg, t in enumerate(op.inputs):
                producer = self.tensors[t].producer
                if producer >= 0:
                    out.append((producer, op.idx, t, arg))
        return out


class MagnetonError(Exception):
    """A problem with the user's input or environment, shown as one line (no traceback).

    The CLI prints `magneton: <message>` and exits with `exit_code`. Raise it for bad
    input (missing run, foreign DB, sensor without permission); let real bugs raise
    whatever they raise so they keep their tracebacks.
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


# --------------------------------------------------------------------------------------
# Differential results (matching → detection → diagnosis). `DiffResult.to_json()` is the
# `magneton diff --json` contract other tools depend on; keep its keys stable.
# --------------------------------------------------------------------------------------


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


# --- Distributed job info ---
# What a rank of a distributed job recorded besides its operators: where it ran, how it
# was launched and when each collective started, completed and was waited on. Typed here
# rather than read back as JSON strings from `Profile.config`; the DB and shard files
# still store it as `dist.*` config rows (`to_config`/`from_config`), so neither format
# changed.

DIST_CONFIG_PREFIX = "dist."  # no knob uses it, so config diffs never see these rows
_CALL_CLOCK = "time.perf_counter_ns (CLOCK_MONOTONIC: shared by processes of one host)"


@dataclass
class CollectiveTimes:
    """One collective operator of a rank, with its times in each usable timing iteration.

    Lists are per iteration (`DistInfo.iterations`), all in `perf_counter_ns`. `done_ns`
    is when the work completed (0 when unknown), `wait_ns` how long the rank waited for
    it; `sync` says the caller waited at once (no overlap with compute)."""

    op: int  # OpRecord.idx
    name: str
    group: str = ""
    group_size: int = 0
    sync: bool = False
    size_bytes: int = 0
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    done_ns: list[int] = field(default_factory=list)
    wait_ns: list[int] = field(default_factory=list)
    wait_cpu_ns: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "op": self.op,
            "name": self.name,
            "group": self.group,
            "group_size": self.group_size,
            "sync": self.sync,
            "bytes": self.size_bytes,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "done_ns": self.done_ns,
            "wait_ns": self.wait_ns,
            "wait_cpu_ns": self.wait_cpu_ns,
        }

    @classmethod
    def from_json(cls, d: dict) -> CollectiveTimes:
        def ints(key: str) -> list[int]:
            return [int(x) for x in d.get(key, [])]

        return cls(
            op=int(d["op"]),
            name=str(d["name"]),
            group=str(d.get("group", "")),
            group_size=int(d.get("group_size", 0)),
            sync=bool(d.get("sync")),
            size_bytes=int(d.get("bytes", 0)),
            start_ns=ints("start_ns"),
            end_ns=ints("end_ns"),
            done_ns=ints("done_ns"),
            wait_ns=ints("wait_ns"),
            wait_cpu_ns=ints("wait_cpu_ns"),
        )


@dataclass
class DistInfo:
    """A rank's place in its job and the timings of its timing-pass iterations.

    `call_*_ns` are per timing iteration of the entry function: its start and end, its
    CPU time, and `call_ref_ns` the release from the barrier before it (the common
    reference point that makes the ranks' timelines comparable)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    host: str = ""
    initialized: bool = False  # whether the script had a process group
    backend: str = ""  # of that process group ("" when none)
    master: str = ""  # MASTER_ADDR:MASTER_PORT
    launcher: str = ""  # "torchrun" | "slurm": whose environment named the rank
    job_id: str = ""  # the launcher's job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID)
    iterations: list[int] = field(default_factory=list)  # usable timing iterations
    mismatched_iterations: int = 0  # iterations whose collectives did not line up
    collectives: list[CollectiveTimes] = field(default_factory=list)
    call_start_ns: list[int] = field(default_factory=list)
    call_end_ns: list[int] = field(default_factory=list)
    call_cpu_ns: list[int] = field(default_factory=list)
    call_ref_ns: list[int] = field(default_factory=list)

    def to_config(self) -> dict[str, str]:
        """The `dist.*` config rows this info is stored as (DB and shard files)."""

        def dumps(doc: dict) -> str:
            return json.dumps(doc, separators=(",", ":"))

        p = DIST_CONFIG_PREFIX
        cfg = {
            p + "collectives": dumps(
                {
                    "iterations": self.iterations,
                    "mismatched_iterations": self.mismatched_iterations,
                    "ops": [c.to_json() for c in self.collectives],
                }
            ),
            p + "calls": dumps(
                {
                    "start_ns": self.call_start_ns,
                    "end_ns": self.call_end_ns,
                    "cpu_ns": self.call_cpu_ns,
                    "ref_ns": self.call_ref_ns,
                    "clock": _CALL_CLOCK,
                }
            ),
            p + "rank": str(self.rank),
            p + "world_size": str(self.world_size),
            p + "local_rank": str(self.local_rank),
            p + "host": self.host,
            p + "initialized": str(self.initialized),
        }
        if self.backend:
            cfg[p + "backend"] = self.backend
        cfg[p + "master"] = self.master
        if self.launcher:
            cfg[p + "launcher"] = self.launcher
        if self.job_id:
            cfg[p + "job_id"] = self.job_id
        return cfg

    @classmethod
    def from_config(cls, config: dict[str, str]) -> DistInfo | None:
        """Inverse of `to_config`; None when the rows are not there (not a rank)."""
        p = DIST_CONFIG_PREFIX
        if not any(k.startswith(p) for k in config):
            return None
        colls = json.loads(config.get(p + "collectives") or "{}")
        calls = json.loads(config.get(p + "calls") or "{}")

        def ints(doc: dict, key: str) -> list[int]:
            return [int(x) for x in doc.get(key, [])]

        return cls(
            rank=int(config.get(p + "rank", "0")),
            world_size=int(config.get(p + "world_size", "1")),
            local_rank=int(config.get(p + "local_rank", "0")),
            host=config.get(p + "host", ""),
            initialized=config.get(p + "initialized") == "True",
            backend=config.get(p + "backend", ""),
            master=config.get(p + "master", ""),
            launcher=config.get(p + "launcher", ""),
            job_id=config.get(p + "job_id", ""),
            iterations=ints(colls, "iterations"),
            mismatched_iterations=int(colls.get("mismatched_iterations", 0)),
            collectives=[CollectiveTimes.from_json(r) for r in colls.get("ops", [])],
            call_start_ns=ints(calls, "start_ns"),
            call_end_ns=ints(calls, "end_ns"),
            call_cpu_ns=ints(calls, "cpu_ns"),
            call_ref_ns=ints(calls, "ref_ns"),
        )


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


# --- Typed metadata as stored config rows ---
# The DB and shard files store a profile's typed metadata (distributed info, run energy)
# as prefixed config rows, so neither format changed when they became typed. These two
# functions are the only place that knows the mapping.


def stored_config(profile: Profile) -> dict[str, str]:
    """The config rows a profile is stored as: its config plus its typed metadata."""
    rows = {**profile.config, **profile.energy.to_config()}
    if profile.dist is not None:
        rows.update(profile.dist.to_config())
    return rows


def split_stored_config(
    rows: dict[str, str],
) -> tuple[dict[str, str], DistInfo | None, RunEnergy]:
    """Inverse of `stored_config`: the plain config and the typed metadata it held."""
    energy, rest = RunEnergy.from_config(rows)
    config = {k: v for k, v in rest.items() if not k.startswith(DIST_CONFIG_PREFIX)}
    return config, DistInfo.from_config(rows), energy


# --- Diagnosis results ---
# What diagnosis (diagnose/cause/rootcause.py, diagnose/jobs/ranks.py) attaches to a finding. Every
# class has `to_json`, which writes the keys of the `magneton diff --json` contract and of
# stored diffs (docs/diagnosis.md), and `from_json`, its inverse; code everywhere else
# reads attributes, so a key is spelled in exactly one place.


def _pick(cls: type, d: dict) -> dict:
    """The entries of `d` that are fields of dataclass `cls` (unknown keys are ignored, so
    JSON written by a newer version still loads)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class PathElement:
    """One element of a kernel call path, as divergence analysis reports it.

    kind "frame": a Python frame (`file`, `line`, `function`, `code`; in a common prefix
    `function` and the per-side locations `a`/`b` as "file:line"); "op": an aten operator
    (`name`); "kernel": a device kernel (`name`); "args": the same kernel reached the same
    way with different arguments (`op`, `kernel`, `diff`: OpRecord field -> this side's
    value); "none": nothing on this side (it ran extra work on the other).
    """

    kind: str
    file: str | None = None
    line: int | None = None
    function: str | None = None
    code: str | None = None
    name: str | None = None
    op: str | None = None
    kernel: str | None = None
    diff: dict[str, Any] | None = None
    a: str | None = None
    b: str | None = None
    branch: bool = False  # a divergence site: the two sides branched inside this function

    def to_json(self) -> dict:
        d: dict[str, Any] = {"kind": self.kind}
        for f in fields(self)[1:]:
            v = getattr(self, f.name)
            if v is not None and v is not False:
                d[f.name] = v
        return d

    @classmethod
    def from_json(cls, d: dict) -> PathElement:
        return cls(**_pick(cls, d))


def _el(d: dict | None) -> PathElement | None:
    return PathElement.from_json(d) if d else None


@dataclass
class OperandProperty:
    """A kernel-argument divergence: the same operator reached the same way, one operand
    property differs (diagnose/cause/divergence.py), and where each side's value was set
    (diagnose/source/argflow.py, the backward walk over the recorded dataflow)."""

    name: str  # "device" | "dtype" | "shape" | "strides"
    operand: int  # input position of the operator (output position when `output`)
    values: dict[str, Any] = field(default_factory=dict)  # side -> the operand's value
    # side -> where the walk stopped: {"tensor", "kind" ("param" | "input" | ... | "op"),
    # "name" (parameter name or operator), "op" (idx, for kind "op"), "hops"}
    set_by: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the operator's inputs agree and its output differs: the operator set the property
    # from an argument (`x.to(dtype=...)` converting to another dtype on one side)
    output: bool = False

    def to_json(self) -> dict:
        d = {
            "name": self.name,
            "operand": self.operand,
            "values": dict(self.values),
            "set_by": dict(self.set_by),
        }
        if self.output:
            d["output"] = True
        return d

    @classmethod
    def from_json(cls, d: dict) -> OperandProperty:
        return cls(**_pick(cls, d))


@dataclass
class Divergence:
    """Where the two sides of a finding stop doing the same thing (diagnose/cause/divergence.py).

    Its `kind` (derived from the elements): "path" (different frames, ops or kernels),
    "extra" (one side ran work the other did not), "args" (same kernels, different
    arguments; `prop` names the operand property when a tensor's differs), "same"
    (same kernels, same arguments)."""

    level: str  # "python" | "dispatch" | "kernel"
    op_a: int | None
    op_b: int | None
    a: PathElement  # first differing element per side
    b: PathElement
    site_a: PathElement | None = None  # last Python frame both sides agree on
    site_b: PathElement | None = None
    common_prefix: list[PathElement] = field(default_factory=list)
    identical_paths: int = 0  # kernel paths found on both sides
    prop: OperandProperty | None = None  # kind "args": the operand property that differs
    # in memory only (not in the JSON): the common prefix length and the two paths
    common: int = 0
    path_a: tuple[str, ...] = ()
    path_b: tuple[str, ...] = ()
    # runs without tensor values (imported traces, diagnose/matching/pathmatch.py) are matched by
    # call path: the region's path and its largest kernel differences (JSON only when set)
    matched_by: str | None = None
    region_path: str | None = None
    kernels: list[dict] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.a.kind == "none" or self.b.kind == "none":
            return "extra"
        if self.a.kind == "args":
            return "args" if self.a.diff else "same"
        return "path"

    def to_json(self) -> dict:
        d = {
            "level": self.level,
            "ops": {"a": self.op_a, "b": self.op_b},
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "site": {
                "a": self.site_a.to_json() if self.site_a else None,
                "b": self.site_b.to_json() if self.site_b else None,
            },
            "common_prefix": [e.to_json() for e in self.common_prefix],
            "identical_paths": self.identical_paths,
        }
        if self.prop is not None:  # new keys, written only where they carry something
            d["kind"] = self.kind
            d["property"] = self.prop.to_json()
        if self.matched_by is not None:
            d.update(matched_by=self.matched_by, path=self.region_path, kernels=self.kernels)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Divergence:
        ops, site = d.get("ops") or {}, d.get("site") or {}
        return cls(
            level=d["level"],
            op_a=ops.get("a"),
            op_b=ops.get("b"),
            a=_el(d.get("a")) or PathElement("none"),
            b=_el(d.get("b")) or PathElement("none"),
            site_a=_el(site.get("a")),
            site_b=_el(site.get("b")),
            common_prefix=[PathElement.from_json(e) for e in d.get("common_prefix") or []],
            identical_paths=d.get("identical_paths", 0),
            prop=OperandProperty.from_json(d["property"]) if d.get("property") else None,
            matched_by=d.get("matched_by"),
            region_path=d.get("path"),
            kernels=list(d.get("kernels") or []),
        )

    def element(self, side: str) -> PathElement:
        return self.a if side == "a" else self.b

    def site(self, side: str) -> PathElement | None:
        return self.site_a if side == "a" else self.site_b

    def same_everything(self) -> bool:
        """Same kernels reached the same way with the same arguments on both sides."""
        return self.a.kind == "args" and not self.a.diff


@dataclass
class CollectiveInfo:
    """Collectives of one rank with no counterpart on the other side (job diffs)."""

    count: int
    phases: dict[str, int]  # phase of the issuing API ("shadow", ...) -> collectives
    ops: list[int]
    energy_j: float
    time_s: float
    measured_wait_s: float  # per call, in work.wait() (measured)
    busy_wait_share: float | None  # share of that wait that burned CPU

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: dict) -> CollectiveInfo:
        return cls(**_pick(cls, d))


_JOB_KEYS = ("rank", "runs", "collectives", "saving_basis", "rank_time_s", "rank_energy_j", "notes")


@dataclass
class JobInfo:
    """Which ranks of two multi-rank jobs a finding concerns, and the ranks' totals.
    Its keys are written into the JSON "divergence" object (the contract since job diffs
    existed); keys left None are not written."""

    rank: int | None = None
    runs: dict[str, str] | None = None  # side -> the rank's run ("job/rank0")
    collectives: CollectiveInfo | None = None
    saving_basis: str | None = None  # how the saving of a redundant collective is priced
    rank_time_s: dict[str, float] | None = None  # side -> the rank's time per call
    rank_energy_j: dict[str, float] | None = None
    notes: list[str] | None = None  # what could not be compared

    def to_json(self) -> dict:
        d: dict[str, Any] = {}
        for k in _JOB_KEYS:
            v = getattr(self, k)
            if v is not None:
                d[k] = v.to_json() if isinstance(v, CollectiveInfo) else v
        return d

    @classmethod
    def from_json(cls, d: dict) -> JobInfo | None:
        """The job keys of a JSON "divergence", or None when it has none."""
        kw = {k: d[k] for k in _JOB_KEYS if d.get(k) is not None}
        if not kw:
            return None
        if "collectives" in kw:
            kw["collectives"] = CollectiveInfo.from_json(kw["collectives"])
        return cls(**kw)


@dataclass
class OriginInfo:
    """Where one side's value of the key variable is set: what a user edits."""

    kind: str  # "config" | "api-argument" | "global-flag" | "env" | "command-line" | "code"
    variable: str
    file: str | None = None
    line: int | None = None
    code: str | None = None
    value: str | None = None  # source text of the value
    library_default: bool = False  # file/line point at the library's default
    env_var: str | None = None
    assigned_to: str | None = None  # the user's name that carries the value
    option: str | None = None  # kind "command-line": the argparse option ("--attn-implementation")
    note: str = ""

    def to_json(self) -> dict:
        d = {
            "kind": self.kind,
            "variable": self.variable,
            "file": self.file,
            "line": self.line,
            "code": self.code,
            "value": self.value,
            "library_default": self.library_default,
        }
        if self.env_var:
            d["env_var"] = self.env_var
        if self.assigned_to:
            d["assigned_to"] = self.assigned_to
        if self.option:
            d["option"] = self.option
        if self.note:
            d["note"] = self.note
        return d

    @classmethod
    def from_json(cls, d: dict) -> OriginInfo:
        return cls(**_pick(cls, d))


@dataclass
class FlowHop:
    """One step of the backward data flow from the key variable to its origin."""

    file: str
    line: int
    code: str
    expr: str
    note: str = ""
    values: dict[str, str] = field(default_factory=dict)  # side -> observed (re-run)

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "file": self.file,
            "line": self.line,
            "code": self.code,
            "expr": self.expr,
            "note": self.note,
        }
        if self.values:
            d["values"] = dict(self.values)
        return d

    @classmethod
    def from_json(cls, d: dict) -> FlowHop:
        return cls(**_pick(cls, d))


@dataclass
class KeyVariableInfo:
    """The variable whose value differs at the deviation site (diagnose/cause/keyvar.py)."""

    kind: str  # "call-target" | "branch" | "knob" | "code" | "args" | "unknown"
    expr: str | None = None
    file: str | None = None
    line: int | None = None
    values: dict[str, Any] = field(default_factory=dict)
    knob: str | None = None  # the knowledge base's knob key
    rerun: dict[str, Any] = field(default_factory=dict)  # how the re-run went ("ran", ...)
    note: str = ""

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "kind": self.kind,
            "expr": self.expr,
            "file": self.file,
            "line": self.line,
            "values": self.values,
        }
        if self.knob is not None:
            d["knob"] = self.knob
        if self.rerun:
            d["rerun"] = self.rerun
        if self.note:
            d["note"] = self.note
        return d

    @classmethod
    def from_json(cls, d: dict) -> KeyVariableInfo:
        return cls(**_pick(cls, d))

    @property
    def rerun_ran(self) -> bool:
        return bool(self.rerun.get("ran"))

    @property
    def rerun_seconds(self) -> float:
        return float(self.rerun.get("seconds") or 0)


@dataclass
class RuleRef:
    """The knowledge rule that names a finding's pattern (knowledge/rules/*.yaml)."""

    id: str
    title: str
    category: str
    knob: str | None
    references: list[str]
    grounding: str
    orientation: str = "as-written"  # "reversed": the pattern was on the efficient side
    fix: str | None = None  # the rule's fix text (job diffs carry it)

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "category": self.category,
            "knob": self.knob,
            "references": list(self.references),
            "grounding": self.grounding,
            "orientation": self.orientation,
        }
        if self.fix is not None:
            d["fix"] = self.fix
        return d

    @classmethod
    def from_json(cls, d: dict) -> RuleRef:
        return cls(**_pick(cls, d))


_ROOT_CAUSE_OPTIONAL = ("unresolved", "note", "error", "traceback", "api", "rank", "summary")


@dataclass
class RootCause:
    """Why a finding's two sides differ: the variable, its values and where it is set."""

    kind: str  # "config" | "api-argument" | "global-flag" | "env" | "command-line" | "code" | "unknown"
    variable: str | None = None
    values: dict[str, str | None] = field(default_factory=lambda: {"a": None, "b": None})
    file: str | None = None  # where the wasteful side's value is set
    line: int | None = None
    code: str | None = None
    library_default: bool = False
    origins: dict[str, OriginInfo | None] = field(default_factory=dict)
    key_variable: KeyVariableInfo | None = None
    data_flow: list[FlowHop] = field(default_factory=list)
    rule: RuleRef | None = None  # the best explaining rule
    rules: list[str] = field(default_factory=list)  # every explaining rule, best first
    # written only when set
    unresolved: str | None = None  # where the data-flow walk stopped, and why
    note: str | None = None
    error: str | None = None  # diagnosis failed with this (kind "unknown")
    traceback: str | None = None
    api: str | None = None  # job diffs: the API that issued redundant collectives
    rank: int | None = None
    summary: str | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "kind": self.kind,
            "variable": self.variable,
            "values": dict(self.values),
            "file": self.file,
            "line": self.line,
            "code": self.code,
            "library_default": self.library_default,
            "origins": {s: (o.to_json() if o else None) for s, o in self.origins.items()},
            "key_variable": self.key_variable.to_json() if self.key_variable else None,
            "data_flow": [h.to_json() for h in self.data_flow],
            "rule": self.rule.to_json() if self.rule else None,
            "rules": list(self.rules),
        }
        for k in _ROOT_CAUSE_OPTIONAL:
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_json(cls, d: dict) -> RootCause:
        kw = _pick(cls, d)
        kw["origins"] = {
            s: (OriginInfo.from_json(o) if o else None) for s, o in (d.get("origins") or {}).items()
        }
        kv = d.get("key_variable")
        kw["key_variable"] = KeyVariableInfo.from_json(kv) if kv else None
        kw["data_flow"] = [FlowHop.from_json(h) for h in d.get("data_flow") or []]
        kw["rule"] = RuleRef.from_json(d["rule"]) if d.get("rule") else None
        kw["values"] = dict(d.get("values") or {"a": None, "b": None})
        kw["rules"] = list(d.get("rules") or [])
        return cls(**kw)

    def origin(self, side: str) -> OriginInfo | None:
        return self.origins.get(side)


@dataclass
class Fix:
    """What to change: a summary, and a unified diff when the change is mechanical."""

    summary: str = ""
    patch: str | None = None  # unified diff, paths relative to base_dir
    file: str | None = None  # the patched file (relative to base_dir)
    base_dir: str | None = None
    snippet: str | None = None  # the efficient side's code, as guidance
    rule: str | None = None  # id of the rule the summary quotes
    references: list[str] = field(default_factory=list)
    # in memory only (not in the JSON): the text the fix replaces and its replacement,
    # so one check (diagnose/fix/plan.py) can refuse a fix that would change nothing
    old_text: str | None = None
    new_text: str | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "summary": self.summary,
            "patch": self.patch,
            "file": self.file,
            "base_dir": self.base_dir,
        }
        if self.snippet is not None:
            d["snippet"] = self.snippet
        if self.rule is not None or self.references:
            d["rule"] = self.rule
            d["references"] = list(self.references)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Fix:
        kw = _pick(cls, d)
        kw["references"] = list(d.get("references") or [])
        return cls(**kw)
