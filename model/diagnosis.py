"""What diagnosis attaches to a finding: divergence, key variable, root cause and fix."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from .jsonfields import pick_fields

# --- Diagnosis results ---
# What diagnosis (diagnose/cause/rootcause.py, diagnose/jobs/ranks.py) attaches to a finding. Every
# class has `to_json`, which writes the keys of the `magneton diff --json` contract and of
# stored diffs (docs/diagnosis.md), and `from_json`, its inverse; code everywhere else
# reads attributes, so a key is spelled in exactly one place.


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
        return cls(**pick_fields(cls, d))


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
        return cls(**pick_fields(cls, d))


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
        return cls(**pick_fields(cls, d))


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
        return cls(**pick_fields(cls, d))


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
        return cls(**pick_fields(cls, d))

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
        return cls(**pick_fields(cls, d))


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
        kw = pick_fields(cls, d)
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
class Verification:
    """A fix tried: applied to a scratch copy of the wasteful side's program, which was
    recorded again beside an unpatched copy and re-measured against it in interleaved
    rounds (`magneton export-patch --verify`, diagnose/fix/verify.py)."""

    verified: bool  # the saving's interval lies above zero
    saving_share: float | None = None  # 1 - E_patched / E_unpatched, whole run
    low: float | None = None  # its confidence interval
    high: float | None = None
    rounds: int = 0  # interleaved rounds per side
    note: str = ""  # why it is not verified, or how it was measured

    def line(self) -> str:
        """ "verified: saves 41% ± 3% (...)" or "not verified: ..."."""
        if self.saving_share is None or self.low is None or self.high is None:
            return f"not verified: {self.note}"
        pm = 100 * max(self.saving_share - self.low, self.high - self.saving_share)
        figure = f"saves {100 * self.saving_share:.0f}% ± {pm:.0f}%"
        how = f"re-measured against the unpatched program in {self.rounds} interleaved rounds"
        if self.verified:
            return f"verified: {figure} ({how})"
        return f"not verified: {figure} ({how}){'; ' + self.note if self.note else ''}"

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict) -> Verification:
        return cls(**pick_fields(cls, d))


@dataclass
class Fix:
    """What to change: a summary, and a unified diff when the change is mechanical."""

    summary: str = ""
    patch: str | None = None  # unified diff, paths relative to base_dir
    file: str | None = None  # the patched file (relative to base_dir)
    base_dir: str | None = None
    snippet: str | None = None  # the efficient side's code, as guidance
    # a command line to run the wasteful program with instead (`python train.py ...`),
    # checked against the program's recorded parser (tracer/programs/cmdline.py)
    command: str | None = None
    rule: str | None = None  # id of the rule the summary quotes
    references: list[str] = field(default_factory=list)
    # the text the fix replaces and its replacement, so checks can refuse a fix that would
    # change nothing (diagnose/fix/plan.py) or go the wrong way (diagnose/fix/direction.py)
    old_text: str | None = None
    new_text: str | None = None
    # True when new_text is a value of the root cause's variable (a literal, an option,
    # an env value), in the JSON as "sets"; False when it is ported code, of which the
    # variable's value is only a part (`model = model.to(memory_format=...)`)
    sets_variable: bool = False
    verification: Verification | None = None  # `export-patch --verify` tried it

    def sets_value(self) -> bool:
        return self.sets_variable and self.new_text is not None

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "summary": self.summary,
            "patch": self.patch,
            "file": self.file,
            "base_dir": self.base_dir,
        }
        if self.snippet is not None:
            d["snippet"] = self.snippet
        if self.command is not None:
            d["command"] = self.command
        if self.sets_value():
            d["sets"] = {"from": self.old_text, "to": self.new_text}
        if self.verification is not None:
            d["verification"] = self.verification.to_json()
        if self.rule is not None or self.references:
            d["rule"] = self.rule
            d["references"] = list(self.references)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Fix:
        kw = pick_fields(cls, d)
        kw["references"] = list(d.get("references") or [])
        sets = d.get("sets") or {}
        kw["old_text"], kw["new_text"] = sets.get("from"), sets.get("to")
        kw["sets_variable"] = bool(sets)
        v = d.get("verification")
        kw["verification"] = Verification.from_json(v) if v else None
        return cls(**kw)
