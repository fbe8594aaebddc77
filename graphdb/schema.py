"""The Kùzu schema of a Magneton DB: node and rel tables, their properties and units.

Users write Cypher against these names (`Operator.name`, `Module.name`, `Frame.file`,
`Kernel.name`, `Run.name`, ...), so they are a contract: renaming one breaks saved
queries and docs/schema.md. Every table is declared once here as data (`NodeTable`,
`RelTable`) and the DDL statements are generated from it, which keeps three things from
drifting apart: the DDL, the column order `COPY` needs (Kùzu copies by position, not by
name), and the Arrow types of the bulk loader (a wrong Arrow type makes `COPY` fail or
silently widen).

Key conventions
- Every per-run node has `uid = f"{run}/{idx}"` (primary key) plus `run` and `idx`.
  `idx` is the run-local index of the model (`magneton.model`); the integer suffix keeps uids
  unique across runs even when a run name contains "/".
- Rel tables between per-run nodes never cross runs.
- Changing a *core* table needs a bump of `SCHEMA_VERSION` (below) (old DBs are refused
  rather than misread). Tables in the extension section are created on open when
  missing (`CREATE ... IF NOT EXISTS`), so adding one needs no version bump.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyarrow is imported where a table is built: a reader that only
    import pyarrow as pa  # lists runs or queries does not pay its ~0.14 s import

# The layout of the core tables below; a DB of another version is refused (or converted
# by `magneton migrate`), never misread.
SCHEMA_VERSION = 5


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Kùzu type: STRING, INT64, DOUBLE, BOOL, or one of those with "[]"
    doc: str = ""


@dataclass(frozen=True)
class NodeTable:
    name: str
    columns: tuple[Column, ...]  # the first column is the primary key
    doc: str = ""

    @property
    def primary_key(self) -> str:
        return self.columns[0].name

    @property
    def per_run(self) -> bool:
        """Rows belong to one run (deleted with it) when the table has a `run` column."""
        return any(c.name == "run" for c in self.columns)

    def ddl(self) -> str:
        cols = ", ".join(f"{c.name} {c.type}" for c in self.columns)
        return (
            f"CREATE NODE TABLE IF NOT EXISTS {self.name}({cols}, PRIMARY KEY ({self.primary_key}))"
        )


@dataclass(frozen=True)
class RelTable:
    name: str
    src: str
    dst: str
    columns: tuple[Column, ...] = ()
    doc: str = ""
    # Every rel table is stored in both directions (the engine's default). Kùzu 0.11 runs
    # stored five of them forward-only to halve COPY costs, but a node that a forward-only
    # table points at cannot be deleted at all ("Failed to get bwd data", still so in
    # LadybugDB: graphdb/engine_checks.py), and on LadybugDB both directions cost no more
    # per save (docs/benchmarks.md), so runs are now deleted in place.

    @property
    def per_run(self) -> bool:
        return False

    def ddl(self) -> str:
        cols = "".join(f", {c.name} {c.type}" for c in self.columns)
        return f"CREATE REL TABLE IF NOT EXISTS {self.name}(FROM {self.src} TO {self.dst}{cols})"


Table = NodeTable | RelTable

_ARROW_SCALARS = {
    "STRING": "string",
    "INT64": "int64",
    "DOUBLE": "float64",
    "BOOL": "bool_",
    "BLOB": "binary",
}


def arrow_type(kuzu_type: str) -> pa.DataType:
    import pyarrow as pa

    if kuzu_type.endswith("[]"):
        return pa.list_(arrow_type(kuzu_type[:-2]))
    return getattr(pa, _ARROW_SCALARS[kuzu_type])()


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema `COPY <table> FROM` expects, in property order.

    Rel tables start with the primary keys of the two end nodes (named `from`, `to`).
    """
    import pyarrow as pa

    fields = []
    if isinstance(table, RelTable):
        fields += [
            pa.field("from", arrow_type(key_type(table.src))),
            pa.field("to", arrow_type(key_type(table.dst))),
        ]
    fields += [pa.field(c.name, arrow_type(c.type)) for c in table.columns]
    return pa.schema(fields)


def _per_run(*cols: Column) -> tuple[Column, ...]:
    return (
        Column("uid", "STRING", 'unique key: "<run>/<idx>"'),
        Column("run", "STRING", "name of the run this node belongs to"),
        *cols,
    )


def _idx(what: str) -> Column:
    return Column("idx", "INT64", f"run-local {what} index (0..n-1)")


# --------------------------------------------------------------------------------------
# Core tables (changing these needs a SCHEMA_VERSION bump)
# --------------------------------------------------------------------------------------

META = NodeTable(
    "Meta",
    (
        Column("key", "STRING", "setting name"),
        Column("value", "STRING", "setting value"),
    ),
    'Identifies the DB: `app` = "magneton", `schema_version` = the schema it was written with.',
)

RUN = NodeTable(
    "Run",
    (
        Column("name", "STRING", "run name (unique in the DB)"),
        Column("script", "STRING", 'absolute path of the recorded script ("" for a Python block)'),
        Column("script_sha256", "STRING", "SHA-256 of the script file when recorded"),
        Column("entry", "STRING", '"main" or the qualified name of the profiled callable'),
        Column("setup", "STRING", 'setup function run outside the measurement ("" = none)'),
        Column("started_at", "STRING", "ISO-8601 wall clock when recording started"),
        Column("status", "STRING", '"ok", "failed" (script raised/interrupted) or "loading"'),
        Column("error", "STRING", "one-line error of a failed run"),
        Column("warmup", "INT64", "warm-up calls before measuring"),
        Column("repeat", "INT64", "measured calls"),
        Column("time_s", "DOUBLE", "mean wall time of one entry call, seconds"),
        Column("energy_j", "DOUBLE", "energy of one entry call, joules"),
        Column("energy_above_idle_j", "DOUBLE", "energy_j minus the idle baseline, joules"),
        Column("idle_w", "DOUBLE", "idle power baseline, watts"),
        Column("power_source", "STRING", 'power source, e.g. "nvml:0", "model:cpu-default"'),
        Column("energy_method", "STRING", "measured | replayed | solved | estimated"),
        Column("timing", "STRING", '"separate" (own timing pass) or "combined"'),
        Column("host", "STRING", "host name"),
        Column("rank", "INT64", "distributed rank"),
        Column("world_size", "INT64", "distributed world size"),
        Column("device", "STRING", 'main device, e.g. "cpu", "cuda:0"'),
        Column("op_count", "INT64", "number of Operator nodes of the run"),
        Column("checksum", "STRING", "SHA-256 of the run's rows as saved (damage check on load)"),
    ),
    "One recorded run.",
)

OPERATOR = NodeTable(
    "Operator",
    _per_run(
        _idx("operator (execution order)"),
        Column("name", "STRING", 'aten operator name, e.g. "aten::addmm"'),
        Column("overload", "STRING", 'overload name, e.g. "default", "Tensor"'),
        Column("seq", "INT64", "autograd sequence number (-1 when none)"),
        Column("thread", "INT64", "thread id that ran it"),
        Column("device", "STRING", 'device, e.g. "cpu", "cuda:0"'),
        Column("start_ns", "INT64", "start, perf_counter_ns of the recording process"),
        Column("end_ns", "INT64", "end, perf_counter_ns of the recording process"),
        Column("module", "STRING", 'qualified module path it ran in, e.g. "h.0.mlp.act"'),
        Column("input_shapes", "STRING", "JSON list of input shapes, argument order"),
        Column("input_dtypes", "STRING[]", "input dtypes, argument order"),
        Column("output_shapes", "STRING", "JSON list of output shapes"),
        Column("output_dtypes", "STRING[]", "output dtypes"),
        Column("input_contiguous", "BOOL[]", "whether each input is contiguous"),
        Column("scalar_args", "STRING", 'non-tensor arguments, e.g. "dim=-1"'),
        Column("api", "STRING", 'outermost aten op entered from Python, e.g. "aten::linear"'),
        Column("call_paths", "STRING[]", 'dispatch chains "aten::linear > aten::addmm > ..."'),
        Column(
            "time_s",
            "DOUBLE",
            "duration per iteration, seconds: the mean over iterations; for estimated "
            "energy, the fastest iteration (the one its energy is priced on)",
        ),
        Column("energy_j", "DOUBLE", "energy per iteration, joules"),
        Column("energy_method", "STRING", "measured | replayed | solved | estimated"),
        Column("flops", "DOUBLE", "floating point operations per call (0 if unknown)"),
        Column("bytes", "DOUBLE", "bytes read + written per call (0 if unknown)"),
    ),
    "One operator call (one node per call, not per operator type).",
)

# A tensor's value summaries are float64 arrays stored as BLOBs of their little-endian
# bytes, not DOUBLE[] (schema v4): the engine's checkpoint of DOUBLE[] columns took 3-4 s
# of a 10k-operator save, every other checkpoint 8x the one before it, and a BLOB of the
# same values 0.05 s (docs/benchmarks.md). Nothing queries them element by element;
# Python reads one with numpy.frombuffer(value, "<f8").
_F64 = " (float64 little-endian bytes)"

TENSOR = NodeTable(
    "Tensor",
    _per_run(
        _idx("tensor value"),
        Column("producer", "INT64", "idx of the producing operator, -1 for sources"),
        Column("out_index", "INT64", "which output of the producer"),
        Column("kind", "STRING", "activation | param | buffer | input | constant"),
        Column("name", "STRING", 'parameter/buffer qualified name or "args[0]"'),
        Column("shape", "INT64[]", "shape"),
        Column("dtype", "STRING", 'dtype, e.g. "torch.float32"'),
        Column("stride", "INT64[]", "stride, elements"),
        Column("contiguous", "BOOL", "is contiguous"),
        Column("device", "STRING", "device"),
        Column("numel", "INT64", "number of elements"),
        Column("is_view", "BOOL", "is a view of another tensor"),
        Column("stats", "BLOB", "[sum, abs_sum, min, max, mean, std] (float tensors)" + _F64),
        Column("value_hash", "STRING", "exact content hash (integer/bool tensors)"),
        Column("invariant", "BLOB", "multi-mode SVD invariant (spectra, concatenated)" + _F64),
        Column("invariant_splits", "INT64[]", "length of each unfolding's spectrum"),
        Column("quantiles", "BLOB", "evenly spaced quantiles of the values" + _F64),
    ),
    "One tensor value (in-place writes make a new one). Holds summaries, never data.",
)

MODULE = NodeTable(
    "Module",
    _per_run(
        _idx("module"),
        Column("name", "STRING", 'qualified path, e.g. "h.0.mlp.act" ("" = root)'),
        Column("type", "STRING", 'class name, e.g. "GPT2MLP"'),
    ),
    "One nn.Module instance.",
)

FRAME = NodeTable(
    "Frame",
    _per_run(
        _idx("frame"),
        Column("file", "STRING", "source file path"),
        Column("line", "INT64", "line number (1-based)"),
        Column("function", "STRING", "function name"),
    ),
    "One Python source location, shared by all operators of the run that pass through it.",
)

CALL_STACK = NodeTable(
    "CallStack",
    _per_run(_idx("call stack (first use order)")),
    "One distinct Python call stack of the run, shared by every operator called through it.",
)

KERNEL = NodeTable(
    "Kernel",
    _per_run(
        _idx("kernel"),
        Column("name", "STRING", "CUDA kernel name, or the leaf aten op on CPU"),
        Column("device", "STRING", "device it ran on"),
    ),
    "What did the work for an operator. Deduplicated per (run, name, device).",
)

CONFIG_ENTRY = NodeTable(
    "ConfigEntry",
    _per_run(
        _idx("config entry (recording order)"),
        Column("key", "STRING", 'setting, e.g. "torch.backends.cudnn.benchmark"'),
        Column("value", "STRING", "its value, as text"),
    ),
    "One configuration setting captured at record time.",
)

POWER_SERIES = NodeTable(
    "PowerSeries",
    _per_run(
        _idx("power series"),
        Column("device", "STRING", 'measured device, e.g. "gpu:0", "cpu:package-0"'),
        Column("source", "STRING", "nvml | rapl | meter | model"),
        Column("gap_start_ns", "INT64[]", "starts of sensor-error gaps, perf_counter_ns"),
        Column("gap_end_ns", "INT64[]", "ends of sensor-error gaps, perf_counter_ns"),
    ),
    "One power trace of the run. Gaps (sensor errors) are parallel start/end lists.",
)

POWER_SAMPLE = NodeTable(
    "PowerSample",
    _per_run(
        Column("series", "INT64", "idx of its PowerSeries"),
        Column("idx", "INT64", "sample index within the series"),
        Column("device", "STRING", "measured device (copied from the series)"),
        Column("source", "STRING", "sensor kind (copied from the series)"),
        Column("t_ns", "INT64", "sample time, perf_counter_ns of the recording process"),
        Column("watts", "DOUBLE", "power, watts"),
    ),
    'One power sample. uid = "<run>/<series>/<idx>".',
)

FLOWS = RelTable(
    "FLOWS",
    "Operator",
    "Operator",
    (
        Column("tensor", "INT64", "idx of the tensor carried"),
        Column("arg", "INT64", "input position at the consumer"),
    ),
    "Dataflow: producer → consumer, one per tensor hop.",
)
INPUT = RelTable(
    "INPUT",
    "Tensor",
    "Operator",
    (Column("arg", "INT64", "input position (flattened argument order)"),),
    "Tensor was consumed by this operator.",
)
IN_MODULE = RelTable(
    "IN_MODULE",
    "Operator",
    "Module",
    (),
    "Operator ran in this module.",
)
CHILD_OF = RelTable(
    "CHILD_OF",
    "Module",
    "Module",
    (),
    "Module is a child of that module.",
)
# where a frame sits in an operator's stack (HAS_FRAME, and CALLED_FROM before v5)
_STACK_DEPTH = Column("depth", "INT64", "0 = entry frame, increasing toward the op's call site")
ON_STACK = RelTable(
    "ON_STACK",
    "Operator",
    "CallStack",
    (),
    "Operator was called through this Python call stack (none: no Python frame recorded).",
)
HAS_FRAME = RelTable(
    "HAS_FRAME",
    "CallStack",
    "Frame",
    (_STACK_DEPTH,),
    "A frame of the call stack.",
)
# An operator's stack is one rel to a shared `CallStack`, not a rel per frame: deleting a
# run deletes its rels one by one, and a rel per frame (134k for a 10k-operator GPT-2
# recording) made `record --replace` cost 2.6x a save and `rm` 1.8x (docs/benchmarks.md).
# Before v5 it was a rel per frame, `CALLED_FROM` (Operator -> Frame, `depth`): run
# checksums are still taken over that layout (`graphdb.codec.digest_layout`), so a
# run saved before v5 still verifies after `magneton migrate`.
LEGACY_CALLED_FROM = RelTable(
    "CALLED_FROM",
    "Operator",
    "Frame",
    (_STACK_DEPTH,),
    "Before schema v5: one rel per frame of the operator's stack (not created).",
)
LAUNCHED = RelTable(
    "LAUNCHED",
    "Operator",
    "Kernel",
    (Column("launch_order", "INT64", "position in the operator's launch order"),),
    "Operator launched this kernel.",
)
# No Run → node rel tables: every per-run node has a `run` property to filter on, and
# each rel table costs one COPY (60-200 ms fixed into a non-empty DB) per save.

CORE_TABLES: list[Table] = [
    META,
    RUN,
    OPERATOR,
    TENSOR,
    MODULE,
    FRAME,
    CALL_STACK,
    KERNEL,
    CONFIG_ENTRY,
    POWER_SERIES,
    POWER_SAMPLE,
    FLOWS,
    INPUT,
    IN_MODULE,
    CHILD_OF,
    ON_STACK,
    HAS_FRAME,
    LAUNCHED,
]

# --------------------------------------------------------------------------------------
# EXTENSION SECTION — matching / detection / diagnosis stages append their tables here
# (e.g. `Match`/`Finding` nodes, `MATCHED` rels). They are created on every writable open
# when missing, so no SCHEMA_VERSION bump is needed. Give per-run node tables a `run`
# column (and `uid` first, as the primary key) so `ProfileDB.delete_run` removes their
# rows with the run; load rows with `ProfileDB.bulk_insert(table_name, rows)`, and remove
# rows with `ProfileDB.delete_where(nodes={...}, rels={...}, params)`. Rows that replace
# deleted ones go in the same call (`add=[(table, rows), ...]`): one transaction, so a
# crash leaves the old rows or the new ones, never neither.
# --------------------------------------------------------------------------------------

# ---- differential matching (graphdb/matches.py writes these; `magneton diff`) --------
# Keyed by the ordered run pair; they have run_a/run_b rather than `run`, so deleting one
# run leaves them, and graphdb/matches.py ignores a stored diff whose runs are gone or
# were re-recorded (started_at differs). Diff → region/finding links are the run_a/run_b
# properties, not rels: each rel table costs a COPY per stored diff.

DIFF = NodeTable(
    "Diff",
    (
        Column("uid", "STRING", 'key of the ordered run pair: "<len(a)>:<a>|<b>"'),
        Column("run_a", "STRING", "run on side a"),
        Column("run_b", "STRING", "run on side b"),
        Column("started_a", "STRING", "started_at of run a when diffed (staleness check)"),
        Column("started_b", "STRING", "started_at of run b when diffed"),
        Column("threshold", "DOUBLE", "flagging threshold, fraction of the larger side's energy"),
        Column("tau", "DOUBLE", "tensor-equivalence tolerance used for matching"),
        Column("matched_pairs", "INT64", "number of matched region pairs"),
        Column("findings", "INT64", "number of findings"),
        Column("message", "STRING", 'why nothing could be compared ("" when compared)'),
        Column("created_at", "STRING", "ISO-8601 wall clock of the diff"),
        Column("result_json", "STRING", "the full stored result (DiffResult with regions)"),
    ),
    "One `magneton diff A B` result; re-running the diff of that pair replaces it.",
)

MATCHED_REGION = NodeTable(
    "MatchedRegion",
    (
        Column("uid", "STRING", 'key: "<Diff uid>|<region>"'),
        Column("run_a", "STRING", "run on side a"),
        Column("run_b", "STRING", "run on side b"),
        Column("region", "INT64", "region pair number (execution order of side a)"),
        Column("kind", "STRING", "matched | empty-a | empty-b (that side computes nothing)"),
        Column("energy_a_j", "DOUBLE", "energy of the region's ops in run a, joules per call"),
        Column("energy_b_j", "DOUBLE", "energy of the region's ops in run b, joules per call"),
        Column("time_a_s", "DOUBLE", "time of the region's ops in run a, seconds per call"),
        Column("time_b_s", "DOUBLE", "time of the region's ops in run b, seconds per call"),
        Column("ops_a", "INT64[]", "operator idx in run a, execution order"),
        Column("ops_b", "INT64[]", "operator idx in run b, execution order"),
        Column("inputs_a", "INT64[]", "tensor idx entering the region in run a"),
        Column("outputs_a", "INT64[]", "tensor idx leaving the region in run a"),
        Column("inputs_b", "INT64[]", "tensor idx entering the region in run b"),
        Column("outputs_b", "INT64[]", "tensor idx leaving the region in run b"),
        Column("finding", "INT64", "id of the finding it belongs to, -1 when not flagged"),
    ),
    "A pair of subgraphs, one per run, that compute equivalent values from equivalent inputs.",
)

DIFF_FINDING = NodeTable(
    "DiffFinding",
    (
        Column("uid", "STRING", 'key: "<Diff uid>|<id>"'),
        Column("run_a", "STRING", "run on side a"),
        Column("run_b", "STRING", "run on side b"),
        Column("id", "INT64", "finding id, 1 = largest saving"),
        Column("wasteful", "STRING", '"a" or "b": the side that spends more'),
        Column("verdict", "STRING", "waste | trade-off | noise"),
        Column("energy_a_j", "DOUBLE", "energy of side a, joules per call"),
        Column("energy_b_j", "DOUBLE", "energy of side b, joules per call"),
        Column("time_a_s", "DOUBLE", "time of side a, seconds per call"),
        Column("time_b_s", "DOUBLE", "time of side b, seconds per call"),
        Column("saving_j", "DOUBLE", "wasteful minus efficient energy, joules per call"),
        Column("saving_share", "DOUBLE", "saving_j / energy of the wasteful run"),
        Column("output_rel_diff", "DOUBLE", "proxy of the max element-wise output difference"),
        Column("occurrences", "INT64", "matched region pairs folded into it (e.g. one per layer)"),
        Column("ops_a", "STRING[]", "operator names of side a, execution order"),
        Column("ops_b", "STRING[]", "operator names of side b, execution order"),
        Column("modules_a", "STRING[]", "module paths of side a"),
        Column("modules_b", "STRING[]", "module paths of side b"),
        Column("json", "STRING", "Finding.to_json() (diagnosis fields included when filled)"),
    ),
    "A matched region pair (or folded repeats) whose energies differ by ≥ the threshold.",
)

IN_REGION = RelTable(
    "IN_REGION",
    "Operator",
    "MatchedRegion",
    (Column("side", "STRING", '"a" or "b"'),),
    "Operator belongs to this matched region (side a or b).",
)
FLAGS = RelTable(
    "FLAGS", "DiffFinding", "MatchedRegion", (), "Finding consists of this region pair."
)

# ---- knowledge rules (graphdb/rules.py writes these; knowledge/rules/*.toml) ---------
# Shared by all runs (no `run` column): one copy of the shipped rules, replaced when the
# rule files change (KnowledgeVersion.hash). EXPLAINS links a rule to the operators of a
# diagnosed finding, so Cypher can ask "which operators did rule X explain".

KNOWLEDGE_VERSION = NodeTable(
    "KnowledgeVersion",
    (
        Column("key", "STRING", '"rules"'),
        Column("hash", "STRING", "SHA-256 of the loaded rule files' content"),
        Column("rules", "INT64", "number of rules"),
        Column("knobs", "INT64", "number of knobs"),
    ),
    "Which version of the knowledge files is loaded.",
)

RULE = NodeTable(
    "Rule",
    (
        Column("id", "STRING", "rule id, e.g. mkldnn-conv-disabled"),
        Column("title", "STRING", "one line"),
        Column("category", "STRING", "api-misuse | misconfiguration | redundant"),
        Column("description", "STRING", "what happens and why it costs energy"),
        Column("knob", "STRING", 'key of the knob that steers it ("" none)'),
        Column("efficient_value", "STRING", 'the knob value of the efficient side ("" unknown)'),
        Column("symmetric", "BOOL", "either side may be the wasteful one"),
        Column("levels", "STRING[]", "divergence levels it applies to (empty: any)"),
        Column("devices", "STRING[]", "device types it applies to (empty: any)"),
        Column("fix", "STRING", "fix template"),
        Column("refs", "STRING[]", "references: paper case, docs or issue URLs"),
        Column("grounding", "STRING", "where the rule comes from"),
        Column("file", "STRING", "rule file"),
        Column("line", "INT64", "line of its [[rule]] header"),
    ),
    "A known energy-waste pattern (knowledge/rules/*.toml).",
)

KNOB = NodeTable(
    "Knob",
    (
        Column("key", "STRING", 'config-snapshot key, e.g. "torch.backends.mkldnn.enabled"'),
        Column("kind", "STRING", "global-flag | env | config | api-argument"),
        Column("description", "STRING", "what it controls"),
        Column("default_value", "STRING", 'library default ("" unknown)'),
        Column("snapshot_keys", "STRING[]", "ConfigEntry keys that reflect it"),
        Column("assign", "STRING[]", "dotted attribute targets that set it"),
        Column("calls", "STRING[]", 'setter calls, "qual.name(arg)"'),
        Column("env", "STRING[]", "environment variables that set it"),
        Column("attribute", "STRING", 'settings attribute / keyword name ("" none)'),
        Column("refs", "STRING[]", "documentation"),
    ),
    "A setting that steers kernel selection.",
)

RULE_PATTERN = NodeTable(
    "RulePattern",
    (
        Column("uid", "STRING", 'key: "<rule>|<side>|<field>|<pattern>"'),
        Column("rule", "STRING", "rule id"),
        Column("side", "STRING", "wasteful | efficient"),
        Column(
            "field",
            "STRING",
            "ops | any_ops | absent_ops | call_paths | absent_call_paths | kernels",
        ),
        Column("pattern", "STRING", 'operator name, call-path fragment "A > B" or kernel glob'),
    ),
    "One piece of a rule's evidence (match it against Operator.name / call_paths / Kernel.name).",
)

ABOUT_KNOB = RelTable("ABOUT_KNOB", "Rule", "Knob", (), "Rule is steered by this knob.")
HAS_PATTERN = RelTable("HAS_PATTERN", "Rule", "RulePattern", (), "Rule's evidence.")
EXPLAINS = RelTable(
    "EXPLAINS",
    "Rule",
    "Operator",
    (
        Column("run_a", "STRING", "run on side a of the diff"),
        Column("run_b", "STRING", "run on side b of the diff"),
        Column("finding", "INT64", "finding id"),
        Column("side", "STRING", '"a" or "b": which side\'s operator'),
    ),
    "Diagnosis named this rule for a finding containing the operator.",
)

EXTENSION_TABLES: list[Table] = [
    DIFF,
    MATCHED_REGION,
    DIFF_FINDING,
    IN_REGION,
    FLAGS,
    KNOWLEDGE_VERSION,
    RULE,
    KNOB,
    RULE_PATTERN,
    ABOUT_KNOB,
    HAS_PATTERN,
    EXPLAINS,
]

# --------------------------------------------------------------------------------------


def all_tables() -> list[Table]:
    return CORE_TABLES + EXTENSION_TABLES


def table(name: str) -> Table:
    for t in all_tables():
        if t.name == name:
            return t
    raise KeyError(f"no table {name!r} in the Magneton schema")


def key_type(node_table: str) -> str:
    t = table(node_table)
    assert isinstance(t, NodeTable), node_table
    return t.columns[0].type


def pattern(spec: Table) -> str:
    """A MATCH pattern binding `x` to the rows of `spec` (a node, or a rel)."""
    return f"(x:{spec.name})" if isinstance(spec, NodeTable) else f"()-[x:{spec.name}]->()"


def ddl() -> list[str]:
    """DDL statements, node tables before rel tables (a rel needs its end tables)."""
    tables = all_tables()
    nodes = [t.ddl() for t in tables if isinstance(t, NodeTable)]
    rels = [t.ddl() for t in tables if isinstance(t, RelTable)]
    return nodes + rels


# The DDL as a list of statements (core + extension), for readers of this module.
SCHEMA_DDL: list[str] = ddl()
