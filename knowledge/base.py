"""Magneton's domain knowledge: knobs that steer PyTorch's kernel choice and rules that
name known energy-waste patterns. Loaded from declarative TOML files (knowledge/rules/).

Two kinds of records:

* `Knob` — a setting a user can change (a global flag like `torch.backends.mkldnn.enabled`,
  an environment variable, a library config attribute like transformers'
  `activation_function`). It says which config-snapshot keys reflect it and how source code
  sets it (attribute assignments, setter calls, env vars), which is what the backward
  data-flow searches the user's script for.
* `Rule` — a known pattern: evidence on the wasteful and the efficient side (operators,
  dispatch call-path fragments, kernel-name globs), a category, the knob that steers it (if
  any), a fix template and a reference (paper table case, library docs or an issue URL).

Rules never create findings: the differential evidence (a matched region whose energy
differs) always comes first; a rule only names and explains a finding.

Validation happens on load and every error names its file and line: TOML syntax errors
carry tomllib's own position, schema errors point at the `[[rule]]`/`[[knob]]` header of the
offending entry. A malformed rule file must stop the load loudly — silently skipping a rule
would make a diagnosis quietly weaker.
"""

from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from magneton.model import MagnetonError
from magneton.model.frameworks import BY_KEY, framework_of

RULES_DIR = Path(__file__).with_name("rules")

CATEGORIES = ("api-misuse", "misconfiguration", "redundant")
KNOB_KINDS = ("global-flag", "env", "config", "api-argument")
LEVELS = ("python", "dispatch", "kernel")
FIX_FIELDS = {"knob", "efficient_value", "wasteful_value", "setter"}


class RuleError(MagnetonError):
    """A malformed knowledge file; the message starts with `file:line:`."""


@dataclass(frozen=True)
class CallSetter:
    """A call that sets a knob: `torch.set_num_threads(n)` → qualname + which argument."""

    qualname: str  # fully qualified callee, e.g. "torch.set_num_threads"
    arg: int | str | None = None  # position or keyword of the value; None: the call itself

    @classmethod
    def parse(cls, text: str) -> CallSetter:
        """`"torch.backends.mkldnn.flags(enabled)"`, `"torch.set_num_threads(0)"`, `"f()"`."""
        text = text.strip()
        if not text.endswith(")") or "(" not in text:
            raise ValueError(f"call setter {text!r} must look like 'qual.name(arg)'")
        name, _, arg = text[:-1].partition("(")
        arg = arg.strip()
        if not name or not all(p.isidentifier() for p in name.split(".")):
            raise ValueError(f"call setter {text!r}: {name!r} is not a dotted name")
        if arg == "":
            return cls(name, None)
        if arg.isdigit():
            return cls(name, int(arg))
        if not arg.isidentifier():
            raise ValueError(f"call setter {text!r}: argument must be an index or a keyword")
        return cls(name, arg)


@dataclass(frozen=True)
class Knob:
    key: str  # config-snapshot key ("torch.backends.mkldnn.enabled") or "<lib>.<attr>"
    kind: str  # one of KNOB_KINDS
    description: str
    default: str | None = None
    snapshot_keys: tuple[str, ...] = ()  # Profile.config keys that reflect the knob
    assign: tuple[str, ...] = ()  # dotted attribute targets a script assigns
    calls: tuple[CallSetter, ...] = ()
    env: tuple[str, ...] = ()  # environment variables that set it
    attribute: str | None = None  # config-object attribute / keyword name (library knobs)
    references: tuple[str, ...] = ()
    file: str = ""
    line: int = 0


@dataclass(frozen=True)
class Evidence:
    """What one side of a finding must show for a rule to apply.

    `ops`, `any_ops` and `absent_ops` test the side's operators: dispatched op names and
    the APIs they were entered through (so `aten::scaled_dot_product_attention` is found
    even though the dispatcher recorded its CPU decomposition), not the internals of their
    call paths. `call_paths` are contiguous fragments of a chain
    (`"aten::_convolution > aten::mkldnn_convolution"`); `kernels` are fnmatch globs over
    kernel names. Every field that is given must hold.
    """

    ops: tuple[str, ...] = ()
    any_ops: tuple[str, ...] = ()
    absent_ops: tuple[str, ...] = ()
    call_paths: tuple[str, ...] = ()
    absent_call_paths: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return not any(
            (
                self.ops,
                self.any_ops,
                self.absent_ops,
                self.call_paths,
                self.absent_call_paths,
                self.kernels,
            )
        )

    def specificity(self) -> int:
        return (
            2 * len(self.ops)
            + len(self.any_ops)
            + len(self.absent_ops)
            + 3 * len(self.call_paths)
            + len(self.absent_call_paths)
            + 2 * len(self.kernels)
        )


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    description: str
    category: str
    wasteful: Evidence
    efficient: Evidence
    fix: str
    references: tuple[str, ...]
    grounding: str  # "paper Table 1 c10", "PyTorch docs", "issue"
    knob: str | None = None
    efficient_value: str | None = None
    symmetric: bool = False  # either side may be the wasteful one (shape/device dependent)
    levels: tuple[str, ...] = ()  # divergence levels it applies to (empty: any)
    devices: tuple[str, ...] = ()  # device types it applies to (empty: any)
    file: str = ""
    line: int = 0

    def render_fix(self, **values: str | None) -> str:
        known = {k: v for k, v in values.items() if v is not None}
        known.setdefault("knob", self.knob or "")
        known.setdefault("efficient_value", self.efficient_value or "")
        return string.Formatter().vformat(self.fix, (), _Default(known))


class _Default(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


@dataclass
class KnowledgeBase:
    rules: list[Rule] = field(default_factory=list)
    knobs: dict[str, Knob] = field(default_factory=dict)

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def knob(self, key: str) -> Knob | None:
        return self.knobs.get(key)

    def knob_for_snapshot_key(self, key: str) -> Knob | None:
        for k in self.knobs.values():
            if key == k.key or key in k.snapshot_keys:
                return k
        return None

    def knob_for_attribute(self, attribute: str) -> Knob | None:
        name = attribute.lstrip("_")
        for k in self.knobs.values():
            if k.attribute and k.attribute.lstrip("_") == name:
                return k
        return None

    def config_differences(
        self, config_a: dict[str, str], config_b: dict[str, str]
    ) -> list[tuple[Knob, str, str, str]]:
        """Knobs whose snapshot values differ between two runs: (knob, key, value_a, value_b).
        A framework's knob counts only when both runs ran that framework: the recorder
        snapshots PyTorch's settings in every process (Magneton imports torch), and a
        TensorFlow-vs-PyTorch diff blamed the TensorFlow side's `torch.is_grad_enabled`."""
        out = []
        ran = {framework_of(config_a), framework_of(config_b)}
        for knob in self.knobs.values():
            library = knob.key.split(".", 1)[0]
            if library in BY_KEY and ran != {library}:
                continue
            for key in knob.snapshot_keys:
                va, vb = config_a.get(key), config_b.get(key)
                if va is None or vb is None or va == vb:
                    continue
                out.append((knob, key, va, vb))
        return out


# --------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------

_RULE_KEYS = {
    "id",
    "title",
    "description",
    "category",
    "knob",
    "efficient_value",
    "symmetric",
    "levels",
    "devices",
    "fix",
    "references",
    "grounding",
    "wasteful",
    "efficient",
}
_EVIDENCE_KEYS = {"ops", "any_ops", "absent_ops", "call_paths", "absent_call_paths", "kernels"}
_KNOB_KEYS = {
    "key",
    "kind",
    "description",
    "default",
    "snapshot_keys",
    "assign",
    "calls",
    "env",
    "attribute",
    "references",
}


def _header_lines(text: str, header: str) -> list[int]:
    """1-based line numbers of each `[[header]]` array-of-tables header, in order.

    tomllib keeps no positions, so schema errors are located by counting headers: the
    n-th entry of `rule` is the table opened by the n-th `[[rule]]` line.
    """
    out = []
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith("[[") and s.split("#", 1)[0].strip().replace(" ", "") == f"[[{header}]]":
            out.append(i)
    return out


def _str_list(v, what: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise ValueError(f"{what} must be a list of non-empty strings")
    return tuple(x.strip() for x in v)


def _check_reference(ref: str) -> None:
    if not (ref.startswith("https://") or ref.startswith("http://") or ref.startswith("paper:")):
        raise ValueError(f"reference {ref!r} must be a URL or 'paper:<table case>'")


def _evidence(v, what: str) -> Evidence:
    if v is None:
        return Evidence()
    if not isinstance(v, dict):
        raise ValueError(f"[{what}] must be a table")
    unknown = set(v) - _EVIDENCE_KEYS
    if unknown:
        raise ValueError(f"[{what}] has unknown key(s) {sorted(unknown)}")
    kw = {k: _str_list(v[k], f"{what}.{k}") for k in v}
    for frag in kw.get("call_paths", ()) + kw.get("absent_call_paths", ()):
        if any(not tok.strip() for tok in frag.split(">")):
            raise ValueError(f"{what}: call path fragment {frag!r} has an empty element")
    return Evidence(**kw)


def _parse_knob(d: dict, file: str, line: int) -> Knob:
    unknown = set(d) - _KNOB_KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}")
    for req in ("key", "kind", "description"):
        if not isinstance(d.get(req), str) or not d[req].strip():
            raise ValueError(f"missing or empty {req!r}")
    if d["kind"] not in KNOB_KINDS:
        raise ValueError(f"kind {d['kind']!r} is not one of {KNOB_KINDS}")
    refs = _str_list(d.get("references", []), "references")
    for r in refs:
        _check_reference(r)
    calls = tuple(CallSetter.parse(c) for c in _str_list(d.get("calls", []), "calls"))
    default = d.get("default")
    if default is not None and not isinstance(default, str):
        raise ValueError("default must be a string (values compare as text)")
    attribute = d.get("attribute")
    if attribute is not None and not (isinstance(attribute, str) and attribute.isidentifier()):
        raise ValueError("attribute must be an identifier")
    return Knob(
        key=d["key"].strip(),
        kind=d["kind"],
        description=d["description"].strip(),
        default=default,
        snapshot_keys=_str_list(d.get("snapshot_keys", []), "snapshot_keys"),
        assign=_str_list(d.get("assign", []), "assign"),
        calls=calls,
        env=_str_list(d.get("env", []), "env"),
        attribute=attribute,
        references=refs,
        file=file,
        line=line,
    )


def _parse_rule(d: dict, file: str, line: int, knobs: dict[str, Knob]) -> Rule:
    unknown = set(d) - _RULE_KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}")
    for req in ("id", "title", "description", "category", "fix", "grounding"):
        if not isinstance(d.get(req), str) or not d[req].strip():
            raise ValueError(f"missing or empty {req!r}")
    if d["category"] not in CATEGORIES:
        raise ValueError(f"category {d['category']!r} is not one of {CATEGORIES}")
    refs = _str_list(d.get("references", []), "references")
    if not refs:
        raise ValueError("a rule needs at least one reference (paper case, docs or issue URL)")
    for r in refs:
        _check_reference(r)
    knob = d.get("knob")
    if knob is not None and knob not in knobs:
        raise ValueError(f"knob {knob!r} is not defined in any [[knob]] table")
    eff_value = d.get("efficient_value")
    if eff_value is not None and not isinstance(eff_value, str):
        raise ValueError("efficient_value must be a string")
    levels = _str_list(d.get("levels", []), "levels")
    for lv in levels:
        if lv not in LEVELS:
            raise ValueError(f"level {lv!r} is not one of {LEVELS}")
    wasteful = _evidence(d.get("wasteful"), "wasteful")
    efficient = _evidence(d.get("efficient"), "efficient")
    if wasteful.is_empty() and efficient.is_empty() and not knob:
        raise ValueError("a rule needs evidence on at least one side (or a knob)")
    symmetric = d.get("symmetric", False)
    if not isinstance(symmetric, bool):
        raise ValueError("symmetric must be true or false")
    fields = {f for _, f, _, _ in string.Formatter().parse(d["fix"]) if f}
    bad = fields - FIX_FIELDS
    if bad:
        raise ValueError(
            f"fix template uses unknown field(s) {sorted(bad)}; known: {sorted(FIX_FIELDS)}"
        )
    return Rule(
        id=d["id"].strip(),
        title=d["title"].strip(),
        description=" ".join(d["description"].split()),
        category=d["category"],
        wasteful=wasteful,
        efficient=efficient,
        fix=" ".join(d["fix"].split()),
        references=refs,
        grounding=d["grounding"].strip(),
        knob=knob,
        efficient_value=eff_value,
        symmetric=symmetric,
        levels=levels,
        devices=_str_list(d.get("devices", []), "devices"),
        file=file,
        line=line,
    )


def _read(path: Path) -> tuple[str, dict]:
    text = path.read_text(encoding="utf-8")
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib's message ends with "(at line L, column C)"; keep it, lead with the file.
        line = getattr(e, "lineno", None)
        where = f"{path}:{line}" if line else str(path)
        raise RuleError(f"{where}: invalid TOML: {e}") from None


def load_knowledge(paths: list[Path] | None = None) -> KnowledgeBase:
    """Load and validate knob and rule files (default: every *.toml in knowledge/rules).

    Knobs are collected from all files first, so a rule may name a knob defined in
    another file. Raises `RuleError("file:line: ...")` on the first problem.
    """
    files = sorted(paths) if paths is not None else sorted(RULES_DIR.glob("*.toml"))
    parsed = [(p, *_read(p)) for p in files]
    kb = KnowledgeBase()
    for path, text, data in parsed:
        unknown = set(data) - {"knob", "rule"}
        if unknown:
            raise RuleError(
                f"{path}:1: unknown top-level key(s) {sorted(unknown)}; use [[knob]] / [[rule]]"
            )
        entries = data.get("knob", [])
        lines = _header_lines(text, "knob")
        for i, d in enumerate(entries):
            line = lines[i] if i < len(lines) else 1
            try:
                knob = _parse_knob(d, str(path), line)
            except ValueError as e:
                raise RuleError(f"{path}:{line}: knob {d.get('key', '?')!r}: {e}") from None
            if knob.key in kb.knobs:
                other = kb.knobs[knob.key]
                raise RuleError(
                    f"{path}:{line}: knob {knob.key!r} already defined at {other.file}:{other.line}"
                )
            kb.knobs[knob.key] = knob
    seen: dict[str, Rule] = {}
    for path, text, data in parsed:
        entries = data.get("rule", [])
        lines = _header_lines(text, "rule")
        for i, d in enumerate(entries):
            line = lines[i] if i < len(lines) else 1
            try:
                rule = _parse_rule(d, str(path), line, kb.knobs)
            except ValueError as e:
                raise RuleError(f"{path}:{line}: rule {d.get('id', '?')!r}: {e}") from None
            if rule.id in seen:
                first = seen[rule.id]
                raise RuleError(
                    f"{path}:{line}: rule id {rule.id!r} already used at {first.file}:{first.line}"
                )
            seen[rule.id] = rule
            kb.rules.append(rule)
    return kb


@lru_cache(maxsize=1)
def default_knowledge() -> KnowledgeBase:
    """The shipped knowledge base (cached: the files do not change while Magneton runs)."""
    return load_knowledge()
