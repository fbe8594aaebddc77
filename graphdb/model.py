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

from dataclasses import dataclass, field

SCHEMA_VERSION = 2

# How an energy figure was obtained. Every energy number shown to a user carries one.
ENERGY_METHODS = ("measured", "replayed", "solved", "estimated")

# Operators that only allocate, alias or bookkeep, or are pure wrappers whose real work
# (if any) shows up as a child op (`clone` → `copy_`). Divergence analysis and kernel
# extraction ignore them (paper §4.3: differences that do not reach a different kernel
# are noise).
BOOKKEEPING_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::as_strided",
        "aten::resize_",
        "aten::detach",
        "aten::detach_",
        "aten::lift_fresh",
        "aten::alias",
        "aten::view",
        "aten::_unsafe_view",
        "aten::_reshape_alias",
        "aten::t",
        "aten::transpose",
        "aten::expand",
        "aten::permute",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::slice",
        "aten::select",
        "aten::result_type",
        "aten::is_nonzero",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::set_",
        "aten::zero_",
        "aten::fill_",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::as_strided_",
        "aten::_nnpack_available",
        "aten::reshape",
        "aten::contiguous",
        "aten::clone",
        "aten::to",
        "aten::_to_copy",
        "aten::lift_fresh_copy",
        "aten::numpy_T",
        "aten::view_as",
        "aten::flatten",
        "aten::unflatten",
        "aten::split",
        "aten::chunk",
        "aten::narrow",
        "aten::split_with_sizes",
        "aten::unbind",
    }
)


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
