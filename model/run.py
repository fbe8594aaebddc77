"""One recorded run as plain dataclasses: the `Profile` every stage exchanges.

The tracer builds a `Profile`, the graph DB stores it (and gives it back with
`magneton.graphdb.load_profile`), and diagnosis reads it. Keeping this package free of
torch and graph-engine imports is deliberate: diagnosis, reports and the TUI must be able
to work on a saved profile on a machine that cannot run the workload.

Indices (`idx`) are run-local and dense (0..n-1); the DB prefixes them with the run name
to make node keys unique across runs. Timestamps are `time.perf_counter_ns()` of the
recording process: one monotonic clock shared by operators, power samples and modules,
so attribution never has to reconcile two clocks.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from .energy import RunEnergy
from .job import DIST_CONFIG_PREFIX, DistInfo
from .vocab import sha256_file


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while many small records are built or read (a
    structure pass, a profile converted for the DB, two runs matched, a trace or a shard
    read).

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


# a run's config row: the records of the tensors its entry returned (a JSON list), what
# `magneton advise` judges a variant by (diagnose/advice.py `results_of`)
RETURNED_KEY = "entry.returned"


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


def script_unchanged(p: Profile) -> bool:
    """The recorded script is still on disk with the content it was recorded with (its
    recorded sha256): a re-run, a re-measurement or a patch of a changed script would be
    about other code than the recording's."""
    s = p.run.script
    if not s or not os.path.isfile(s):
        return False
    want = p.run.script_sha256 or p.config.get("script.sha256", "")
    return not want or sha256_file(s) == want


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
