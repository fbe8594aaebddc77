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

import json
from dataclasses import dataclass, field

# Re-exported: the operator vocabularies live in `vocab.py`; much code imports this one here.
from .vocab import BOOKKEEPING_OPS  # noqa: F401

SCHEMA_VERSION = 2

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
    divergence: dict | None = None
    root_cause: dict | None = None
    fix: dict | None = None
    occurrences: int = 1  # matched region pairs folded into this finding (one per layer)
    interval: SavingInterval | None = None  # the confidence interval the verdict rests on

    def to_json(self) -> dict:
        return {
            "interval": None if self.interval is None else self.interval.to_json(),
            "id": self.id,
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
            "category": self.category,
            "divergence": self.divergence,
            "root_cause": self.root_cause,
            "fix": self.fix,
        }


@dataclass
class DiffResult:
    a: RunSummary
    b: RunSummary
    findings: list[Finding] = field(default_factory=list)  # sorted by saving_j, descending
    matched_pairs: int = 0
    threshold: float = 0.10
    message: str = ""  # e.g. why nothing could be compared
    # how the runs were matched when not by value (diagnose/pathmatch.py), "" = by value;
    # printed by `magneton diff`, not part of to_json (findings' divergence says it)
    match_note: str = ""

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
    record that gives every region an uncertainty (diagnose/detect.py). `interp_j[i]` is
    the part of op i's energy spent in the interpreter before it was called (Python
    between aten operators), shown by `report` as rows of kind "python".
    """

    note: str = ""
    clock: str = ""  # what priced time: "process-cpu" (CPU seconds consumed) or "wall"
    span_s: float = 0.0  # mean iteration span (seconds charged per call)
    charged_s: list[float] = field(default_factory=list)  # per op: own + interpreter time
    interp_j: list[float] = field(default_factory=list)  # per op: interpreter share
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
    confidence interval from the regions' per-iteration energies (diagnose/detect.py)."""

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

    def to_json(self) -> dict:
        return dict(self.__dict__)


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
