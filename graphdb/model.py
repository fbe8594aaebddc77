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

from dataclasses import dataclass, field, fields
from typing import Any

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
    # which ranks of a multi-rank job the finding concerns (job diffs only); its keys
    # travel inside the JSON "divergence" object
    job: JobInfo | None = None

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


# --- Diagnosis results ---
# What diagnosis (diagnose/rootcause.py, diagnose/ranks.py) attaches to a finding. Every
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
class Divergence:
    """Where the two sides of a finding stop doing the same thing (diagnose/divergence.py)."""

    level: str  # "python" | "dispatch" | "kernel"
    op_a: int | None
    op_b: int | None
    a: PathElement  # first differing element per side
    b: PathElement
    site_a: PathElement | None = None  # last Python frame both sides agree on
    site_b: PathElement | None = None
    common_prefix: list[PathElement] = field(default_factory=list)
    identical_paths: int = 0  # kernel paths found on both sides
    # in memory only (not in the JSON): the common prefix length and the two paths
    common: int = 0
    path_a: tuple[str, ...] = ()
    path_b: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
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

    kind: str  # "config" | "api-argument" | "global-flag" | "env" | "code"
    variable: str
    file: str | None = None
    line: int | None = None
    code: str | None = None
    value: str | None = None  # source text of the value
    library_default: bool = False  # file/line point at the library's default
    env_var: str | None = None
    assigned_to: str | None = None  # the user's name that carries the value
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
    """The variable whose value differs at the deviation site (diagnose/keyvar.py)."""

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

    kind: str  # "config" | "api-argument" | "global-flag" | "env" | "code" | "unknown"
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
