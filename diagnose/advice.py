"""One program is enough: the second side of a diff, built from what Magneton knows
(`magneton advise`).

A user with one training script has no second program to diff against, and the variant
they would have to write is the answer itself. This module proposes that variant from
the base run alone, tries it, and keeps it only when it does the same job for less.

1. **Where a setting matters.** The base run's operators are grouped by the user-line
   chain that launched them (diagnose/source/diffslice.py `chains_of`), and each chain of
   a material share of the run's energy gets its backward slice (`side_slice`): the
   statements, module constants, options (`args.NAME`), environment reads and config
   keys that decide what those operators do. A setting is tried only where the slices
   that read it hold at least `MATERIAL_SHARE` of the run's energy: a flag that only
   names the checkpoint folder, or a constant that picks a log format, is never tried.
2. **Which values, and why each.** No grid search. A value comes from the program
   itself (a bool's other value, an option's other `choices`, the string literals the
   source compares a constant or a variable with) or from the rule base: a rule whose
   knob is the setting's name (an `attn_implementation` keyword, option, constant or
   config key) and whose wasteful evidence holds on the base run's operators proposes
   its efficient value. Each change says which of these it came from (`Change.source`).
3. **Applied as the user would.** An option is rewritten on the recorded command line
   and checked with the program's recorded parser (tracer/programs/cmdline.py: a
   `store_true` flag is dropped or added, never given a value); an environment variable
   is set on the command line; a constant, a literal argument or a config file's key is
   rewritten with libcst (or at the key's own place in the file) in a scratch copy of
   the program's folder, and the suggestion's patch is that edit as `git apply` takes it.
4. **Same job, or no suggestion** (`same_outputs`): the base's final outputs (the
   values its recorded work leaves behind: a loss, returned values, updated state) must
   each have an equivalent in the variant under matching's tolerance
   (diagnose/matching/match.py). A variant that changes them is listed as "changes
   results" with the first output that differs, and is never re-measured.
5. **A saving is a claim** (`try_change`): the variant and the base are re-measured in
   interleaved rounds, every operator of each (confirm.py `whole_run_saving`); the
   saving is suggested only when its interval lies above zero and its point reaches
   `MIN_SAVING_SHARE` (identical runs on a loaded machine differ by a few percent).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import libcst as cst
import numpy as np

from magneton.knowledge.base import KnowledgeBase, Rule
from magneton.model import Change, MagnetonError, Profile, Tried, WorkerError

from .source.diffslice import _attributes_read, _passed_whole, chains_of, side_slice
from .source.index import SourceIndex, literal_value, source_index, user_files

# the least share of the base run's energy the operators a setting decides must hold
MATERIAL_SHARE = 0.05
# the least whole-run saving (point estimate) a confirmed variant must reach
MIN_SAVING_SHARE = 0.03
# seconds of interleaved rounds a variant may take: a suggestion is the product's whole
# claim, and a program's round re-runs its window afresh (diff's confirmation stops at
# 30 s, which on a loaded machine left a 60% saving of eager attention unconfirmed)
ROUNDS_BUDGET_S = 90.0
# chains sliced, largest energy first (each slice is a libcst walk of the script)
MAX_CHAINS = 12
_BOOL_WORDS = {"1": "0", "0": "1", "true": "false", "false": "true", "yes": "no", "no": "yes"}


# --------------------------------------------------------------------------------------
# 1. Where a setting matters: the slices of the base run's costly chains
# --------------------------------------------------------------------------------------


@dataclass
class _Reads:
    """What the slice of one chain of operators reads, and the chain's energy share."""

    share: float
    names: set[str]
    attrs: set[str]
    strings: set[str]
    env: set[str]
    whole: bool  # a parse's result is handed on whole (every option may matter)
    nodes: list[cst.CSTNode]


def _chain_shares(p: Profile) -> list[tuple[tuple[int, ...], float]]:
    total = sum(op.energy_j for op in p.ops)
    if total <= 0:
        return []
    energy: dict[tuple[int, ...], float] = defaultdict(float)
    for op in p.ops:
        for chain in chains_of(p, [op.idx]) or {()}:
            energy[chain] += op.energy_j
    energy.pop((), None)
    ranked = sorted(energy.items(), key=lambda kv: -kv[1])[:MAX_CHAINS]
    return [(c, e / total) for c, e in ranked if e / total >= MATERIAL_SHARE]


def _reads(p: Profile, idx: SourceIndex) -> list[_Reads]:
    from .source.dataflow import _env_read

    out = []
    for chain, share in _chain_shares(p):
        s = side_slice(p, idx, {chain})
        nodes = [u.node for _, u in s.units.values()]
        strings, env = set(), set()
        for node in nodes:
            for n in idx.walk(node):
                if isinstance(n, cst.SimpleString) and isinstance(n.evaluated_value, str):
                    strings.add(n.evaluated_value)
                var = _env_read(idx, n) if isinstance(n, (cst.Call, cst.Subscript)) else None
                if var:
                    env.add(var)
        out.append(
            _Reads(
                share,
                set(s.wanted),
                _attributes_read(s),
                strings,
                env,
                bool(_passed_whole(s)),
                nodes,
            )
        )
    return out


def _share(reads: list[_Reads], test: Callable[[_Reads], bool]) -> float:
    return min(1.0, sum(r.share for r in reads if test(r)))


def _reads_option(dest: str, r: _Reads) -> bool:
    return dest in r.attrs or r.whole


def _reads_env(var: str, r: _Reads) -> bool:
    return var in r.env


def _reads_key(key: str, r: _Reads) -> bool:
    return key in r.strings or key in r.attrs


def _reads_name(name: str, r: _Reads) -> bool:
    return name in r.names or name in r.attrs


def _is_env_read(var: str, idx: SourceIndex, node: cst.CSTNode) -> bool:
    from .source.dataflow import _env_read

    return _env_read(idx, node) == var


def _is_key(key: str, idx: SourceIndex, node: cst.CSTNode) -> bool:
    """What holds a config key's value: `cfg["key"]`, `cfg.key`, or a variable `key`."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        return isinstance(index, cst.Index) and literal_value(index.value) == key
    return _is_name(key, idx, node)


def _is_name(name: str, idx: SourceIndex, node: cst.CSTNode) -> bool:
    """`NAME` or `module.NAME`."""
    if isinstance(node, cst.Name):
        return node.value == name
    return isinstance(node, cst.Attribute) and node.attr.value == name


# --------------------------------------------------------------------------------------
# 2. Values: the program's own alternatives and the rule base's
# --------------------------------------------------------------------------------------


def _norm(name: str) -> str:
    return name.strip("-").replace("-", "_").lower()


def _rule_values(kb: KnowledgeBase, name: str, base_facts: Any) -> list[Rule]:
    """Rules whose knob is `name` (an attribute-named knob) and whose wasteful evidence
    holds on the base run."""
    knob = kb.knob_for_attribute(_norm(name))
    return _holding(kb, {knob.key} if knob else set(), base_facts)


def _holding(kb: KnowledgeBase, knobs: set[str], base_facts: Any) -> list[Rule]:
    """The rules of `knobs` with an efficient value whose wasteful evidence holds on the
    base run."""
    from magneton.knowledge.match import evidence_holds

    return [
        r
        for r in kb.rules
        if r.knob in knobs and r.efficient_value and evidence_holds(r.wasteful, base_facts)
    ]


COMPARED, TABLE_KEY, LISTED = (
    "compared in the source",
    "a key of the table the source looks it up in",
    "listed in its comment",
)


def _alternatives(
    files: list[str], is_subject: Callable[[SourceIndex, cst.CSTNode], bool]
) -> dict[str, str]:
    """The string values the program itself names for a subject, each with how: the
    literals it compares the subject with (`MODE == "fast"`, `os.environ.get("X") in
    ("1", "on")`), and the keys of a dict literal it looks the subject up in
    (`BACKENDS[backend]`, `TABLE.get(mode)`). A variable assigned from the subject
    (`BACKEND = os.environ.get("ATTN_BACKEND", "flash")`) stands for it."""
    out: dict[str, str] = {}
    for f in files:
        idx = source_index(f)
        if idx is None:
            continue
        subject = partial(_subject_or_holder, is_subject, _holders(idx, is_subject))
        for value in _compared(idx, subject):
            out.setdefault(value, COMPARED)
        for value in _table_keys(idx, subject):
            out.setdefault(value, TABLE_KEY)
    return out


def _subject_or_holder(is_subject, held: set[str], idx: SourceIndex, n: cst.CSTNode) -> bool:
    return is_subject(idx, n) or (isinstance(n, cst.Name) and n.value in held)


def _holders(idx: SourceIndex, is_subject) -> set[str]:
    """Names a statement of the file assigns from an expression mentioning the subject."""
    names: set[str] = set()
    for a in idx.nodes_of(cst.Assign):
        if _mentions(idx, a.value, is_subject):
            names |= {t.target.value for t in a.targets if isinstance(t.target, cst.Name)}
    return names


def _compared(idx: SourceIndex, is_subject) -> Iterator[str]:
    for cmp in idx.nodes_of(cst.Comparison):
        sides = [cmp.left, *(c.comparator for c in cmp.comparisons)]
        if not any(_mentions(idx, s, is_subject) for s in sides):
            continue
        for s in sides:
            elems = (
                [e.value for e in s.elements]
                if isinstance(s, (cst.Tuple, cst.List, cst.Set))
                else [s]
            )
            yield from (v for e in elems if isinstance(v := literal_value(e), str))


def _table_keys(idx: SourceIndex, is_subject) -> Iterator[str]:
    """Keys of the dict literals (inline or bound to a module-level name) that the file
    subscripts with the subject or calls `.get` on with it."""
    tables = {
        t.target.value: a.value
        for stmt in idx.module.body
        if isinstance(stmt, cst.SimpleStatementLine)
        for a in stmt.body
        if isinstance(a, cst.Assign) and isinstance(a.value, cst.Dict)
        for t in a.targets
        if isinstance(t.target, cst.Name)
    }
    looked_up: list[cst.BaseExpression] = []
    for sub in idx.nodes_of(cst.Subscript):
        if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
            if _mentions(idx, sub.slice[0].slice.value, is_subject):
                looked_up.append(sub.value)
    for call in idx.nodes_of(cst.Call):
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value == "get" and call.args:
            if _mentions(idx, call.args[0].value, is_subject):
                looked_up.append(f.value)
    for table in looked_up:
        d = tables.get(table.value) if isinstance(table, cst.Name) else table
        if isinstance(d, cst.Dict):
            for el in d.elements:
                if isinstance(el, cst.DictElement) and isinstance(k := literal_value(el.key), str):
                    yield k


def _listed(stmt: cst.SimpleStatementLine, now: str) -> list[str]:
    """The string literals the assignment's own comment lists, where it lists the
    current value among them (`MODE = "loop"  # "loop" | "batched"`): documented
    choices, read with Python's tokenizer."""
    import ast
    import io
    import tokenize

    comment = stmt.trailing_whitespace.comment
    if comment is None:
        return []
    found: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(comment.value[1:]).readline):
            if tok.type == tokenize.STRING:
                v = ast.literal_eval(tok.string)
                if isinstance(v, str):
                    found.append(v)
    except (tokenize.TokenError, SyntaxError, ValueError, IndentationError):
        return []
    return [v for v in found if v != now] if now in found else []


def _mentions(idx: SourceIndex, node: cst.CSTNode, is_subject) -> bool:
    return any(is_subject(idx, n) for n in idx.walk(node))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


# --------------------------------------------------------------------------------------
# Proposals, by kind of setting
# --------------------------------------------------------------------------------------


def propose(p: Profile, kb: KnowledgeBase | None = None) -> list[Change]:
    """The changes worth trying on run `p`, most energy decided first (module docstring)."""
    from magneton.knowledge.base import default_knowledge

    from .cause.rootcause import side_facts

    script = p.run.script or ""
    idx = source_index(script) if script and os.path.isfile(script) else None
    if idx is None:
        raise MagnetonError(f"the base run's script cannot be read ({script or 'none recorded'})")
    kb = kb or default_knowledge()
    reads = _reads(p, idx)
    facts = side_facts(p, [op.idx for op in p.ops])
    files = user_files(script)
    found: dict[tuple[str, str, str], Change] = {}
    for make in (
        _option_changes,
        _env_changes,
        _config_changes,
        _constant_changes,
        _argument_changes,
    ):
        for c in make(p, reads, kb, facts, files):
            if c.value == c.from_value:
                continue
            known = found.setdefault(c.key, c)
            if known is not c and c.rule and not known.rule:  # the program's and a rule's
                known.rule, known.source = c.rule, f"{known.source}; {c.source}"
    return sorted(found.values(), key=_order)


def _order(c: Change) -> tuple:
    """A rule's change first (its waste is evidenced on the run), then the program's
    own settings, then a literal argument's other value, each by the share it decides."""
    tier = 0 if c.rule else 2 if c.kind == "argument" else 1
    return tier, -round(c.share, 2), c.setting


def _option_changes(p, reads, kb, facts, files) -> Iterator[Change]:
    from magneton.tracer.programs import cmdline

    args = json.loads(p.config.get("program.args", "[]") or "[]")
    seen: set[str] = set()
    for spec in reversed(cmdline.parsers_of(p.config)):
        for a in spec.actions:
            if not a.option_strings or a.dest in seen or a.kind in ("help", "version"):
                continue
            seen.add(a.dest)
            reads_it = _reads_name if spec.library == "click" else _reads_option
            share = _share(reads, partial(reads_it, a.dest))
            if share < MATERIAL_SHARE:
                continue
            now = cmdline._literal(spec.values.get(a.dest))
            # named as diff names an option: its first long form (`--fused`, not the
            # `--no-fused` that BooleanOptionalAction adds)
            opt = next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0])
            for words, value, source in _option_values(a, opt, now, kb, facts):
                fixed = cmdline.rewrite(spec, args, words, a.dest)
                if cmdline.check(spec, fixed, args, words, a.dest):
                    continue  # the program's parser would not give the dest that value
                yield Change(
                    "option", opt, _text(now), value, source[0], share, rule=source[1], args=fixed
                )


def _option_values(
    a, opt: str, now: Any, kb, facts
) -> Iterator[tuple[list[str], str, tuple[str, str]]]:
    """(the efficient words for the option, the dest's value as text, (source, rule))."""
    flag = (f"option {opt} (a flag)", "")
    if a.kind == "store_true":
        yield ([] if now else [opt]), str(not now), flag
    elif a.kind == "store_false":
        yield ([opt] if now else []), str(not now), flag
    elif a.kind == "boolean_optional":
        neg = next((o for o in a.option_strings if o.startswith("--no-")), None)
        if neg:
            yield (
                ([neg] if now else [max((o for o in a.option_strings if o != neg), key=len)]),
                str(not now),
                flag,
            )
    elif a.kind == "store" and a.bool_type and isinstance(now, bool):
        yield [opt, str(not now)], str(not now), flag
    elif a.kind == "store" and a.choices:
        for c in a.choices:
            if c != _text(now):
                yield [opt, c], c, (f"option {opt} (choices)", "")
    if a.kind == "store":
        for r in _rule_values(kb, a.dest, facts):
            yield [opt, r.efficient_value or ""], r.efficient_value or "", (f"rule {r.id}", r.id)


def _env_changes(p, reads, kb, facts, files) -> Iterator[Change]:
    from magneton.tracer.programs.envreads import CONFIG_KEY

    try:
        seen = json.loads(p.config.get(CONFIG_KEY) or "{}")
    except ValueError:
        seen = {}

    for var in sorted({v for r in reads for v in r.env}):
        share = _share(reads, partial(_reads_env, var))
        if share < MATERIAL_SHARE or var not in seen:
            continue
        now = seen[var]
        values: list[tuple[str, str, str]] = []
        if now is not None and now.lower() in _BOOL_WORDS:
            flip = _BOOL_WORDS[now.lower()]
            values.append(
                (flip.upper() if now.isupper() else flip, f"variable {var} (a switch)", "")
            )
        named = _alternatives(files, partial(_is_env_read, var))
        values += [(c, f"variable {var} ({how})", "") for c, how in sorted(named.items())]
        values += [
            (r.efficient_value or "", f"rule {r.id}", r.id) for r in _rule_values(kb, var, facts)
        ]
        for value, source, rule in values:
            if value != now:
                yield Change(
                    "env",
                    var,
                    "(unset)" if now is None else now,
                    value,
                    source,
                    share,
                    rule=rule,
                    env={var: value},
                )


def _config_changes(p, reads, kb, facts, files) -> Iterator[Change]:
    from magneton.tracer.programs.configfiles import config_files, key_line, set_key

    for cf in config_files(p.config):
        for keys, now in _leaves(cf.doc):
            last = str(keys[-1])
            share = _share(reads, partial(_reads_key, last))
            if share < MATERIAL_SHARE:
                continue
            values: list[tuple[Any, str, str]] = []
            where = key_line(cf.path, keys)
            at = f"{os.path.basename(cf.path)}:{where[0]}" if where else os.path.basename(cf.path)
            if isinstance(now, bool):
                values.append((not now, f"key {'.'.join(map(str, keys))} of {at} (a switch)", ""))
            elif isinstance(now, str):
                values += [
                    (r.efficient_value, f"rule {r.id}", r.id) for r in _rule_values(kb, last, facts)
                ]
                named = _alternatives(files, partial(_is_key, last))
                where_key = f"key {'.'.join(map(str, keys))} of {at}"
                values += [
                    (c, f"{where_key} ({how})", "") for c, how in sorted(named.items()) if c != now
                ]
            for value, source, rule in values:
                text = set_key(cf.path, keys, value, cf.format)
                if text is not None and value != now:
                    yield Change(
                        "config-key",
                        ".".join(map(str, keys)),
                        _yaml_text(now),
                        _yaml_text(value),
                        source,
                        share,
                        where=at,
                        rule=rule,
                        file=cf.path,
                        text=text,
                    )


def _leaves(doc: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*prefix, k))
    elif prefix and isinstance(doc, (bool, str)):
        yield prefix, doc


def _yaml_text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _constant_changes(p, reads, kb, facts, files) -> Iterator[Change]:
    """Module-level `NAME = literal` (bool or str) of the program's files that the slices
    read, by name or as `module.NAME`."""
    for f in files:
        idx = source_index(f)
        if idx is None:
            continue
        for name, node, stmt in _module_literals(idx):
            share = _share(reads, partial(_reads_name, name))
            if share < MATERIAL_SHARE:
                continue
            now = literal_value(node)
            where = f"{os.path.basename(f)}:{idx.line_of(node)}"
            for value, source, rule in _literal_values(name, now, stmt, files, kb, facts, where):
                text = _replaced(f, idx, node, value)
                if text is not None:
                    yield Change(
                        "constant",
                        name,
                        _text(now),
                        _text(value),
                        source,
                        share,
                        where,
                        rule,
                        file=f,
                        text=text,
                    )


def _module_literals(
    idx: SourceIndex,
) -> Iterator[tuple[str, cst.BaseExpression, cst.SimpleStatementLine]]:
    for stmt in idx.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        s = stmt.body[0]
        if isinstance(s, cst.Assign) and len(s.targets) == 1:
            target, value = s.targets[0].target, s.value
        elif isinstance(s, cst.AnnAssign) and s.value is not None:
            target, value = s.target, s.value
        else:
            continue
        if isinstance(target, cst.Name) and isinstance(literal_value(value), (bool, str)):
            yield target.value, value, stmt


def _literal_values(name, now, stmt, files, kb, facts, where) -> Iterator[tuple[Any, str, str]]:
    if isinstance(now, bool):
        yield not now, f"{where} (a switch)", ""
        return
    named = _alternatives(files, partial(_is_name, name))
    named.update((v, LISTED) for v in _listed(stmt, now) if v not in named)
    for c, how in sorted(named.items()):
        if c != now:
            yield c, f"{where} ({how})", ""
    for r in _rule_values(kb, name, facts):
        yield r.efficient_value, f"rule {r.id}", r.id


def _argument_changes(p, reads, kb, facts, files) -> Iterator[Change]:
    """Literal keyword arguments in the slices' statements (`use_cache=False`,
    `method="direct"`): a rule's efficient value where the keyword is a knob of the
    rule base (by name, or as the argument of the call a knob lists) and the rule's
    wasteful evidence holds on the base run; a bool's other value; the string literals
    the program compares a variable of that name with."""
    idx = source_index(p.run.script or "")
    if idx is None:
        return
    seen: set[tuple[int, Any]] = set()
    for r in reads:
        for node in r.nodes:
            for call in idx.nodes_of(cst.Call, node):
                for arg in call.args:
                    if arg.keyword is None or not isinstance(literal_value(arg.value), (bool, str)):
                        continue
                    now = literal_value(arg.value)
                    where = f"{os.path.basename(idx.path)}:{idx.line_of(arg)}"
                    key = arg.keyword.value
                    for value, source, rule in _argument_values(
                        idx, call, key, now, files, kb, facts, where
                    ):
                        text = _replaced(idx.path, idx, arg.value, value)
                        if text is None or value == now or (id(arg), value) in seen:
                            continue
                        seen.add((id(arg), value))
                        yield Change(
                            "argument",
                            key,
                            _text(now),
                            _text(value),
                            source,
                            r.share,
                            where,
                            rule,
                            file=idx.path,
                            text=text,
                        )


def _argument_values(
    idx, call, key, now, files, kb, facts, where
) -> Iterator[tuple[Any, str, str]]:
    rules = _rule_values(kb, key, facts) + _call_rules(
        kb, idx.qualified_names(call.func), key, facts
    )
    for rule in rules:
        yield _parse_like(rule.efficient_value or "", now), f"rule {rule.id}", rule.id
    if isinstance(now, bool):
        yield not now, f"{where} (a switch)", ""
    else:
        for c, how in sorted(_alternatives(files, partial(_is_name, key)).items()):
            if c != now:
                yield c, f"{where} ({how})", ""


def _call_rules(
    kb: KnowledgeBase, qualnames: set[str], keyword: str, base_facts: Any
) -> list[Rule]:
    """Rules whose knob is set by this call's `keyword` argument (the knob's `calls`)
    and whose wasteful evidence holds on the base run."""
    knobs = {
        k.key
        for k in kb.knobs.values()
        if any(c.qualname in qualnames and c.arg == keyword for c in k.calls)
    }
    return _holding(kb, knobs, base_facts)


def _parse_like(text: str, like: Any) -> Any:
    if isinstance(like, bool):
        return text.strip().lower() == "true"
    return text


def _replaced(file: str, idx: SourceIndex, node: cst.BaseExpression, value: Any) -> str | None:
    """The file with the literal at `node` replaced by `value`, quoted as it was."""
    from .fix.edits import replace_value

    if isinstance(value, str):
        old = idx.code(node)
        code = json.dumps(value) if old.startswith('"') else repr(value)
    else:
        code = repr(value)
    return replace_value(file, idx.span(node), code)


# --------------------------------------------------------------------------------------
# 4. Same job: the base's outputs in the variant
# --------------------------------------------------------------------------------------


def same_outputs(base: Profile, variant: Profile) -> tuple[bool, str]:
    """Whether every result of `base` (`results_of`) has an equivalent in `variant`
    (matching's tolerance); else the first one that has none, in words."""
    from .matching.match import match_runs

    results, what = results_of(base)
    m = match_runs(base, variant)
    found = {a for a, _ in m.anchors} | {t for side, t, _ in m.identity if side == "a"}
    for t in results:
        if t not in found:
            return False, f"{_described(base, t)} ({what}) has no equal in the variant"
    if what == READ_BACK:
        missing = _work_left_out(base, variant)
        if missing:
            return False, f"the variant leaves {missing} out (an update the base makes)"
    return True, ""


RETURNED, READ_BACK, FINAL = "returned", "read back", "a final output"
# operators through which a program reads a value back into Python (`loss.item()`,
# `float(loss)`, a printed loss) and through which a backward pass is seeded
_READ_OPS = {"aten::_local_scalar_dense", "aten::item"}
_SEED_OPS = {"aten::ones_like"}


def results_of(p: Profile) -> tuple[list[int], str]:
    """The values run `p`'s job is judged by, and which kind they are.

    A script's entry is judged by what it returned (recorded as `RETURNED_KEY`). A
    training program returns nothing; it is judged by the loss: the one-element values
    it reads back (`loss.item()` in a log line) and those its backward passes start
    from. Its updated weights are not compared by value: the optimizer's normalised
    step (Adam divides by the root of the second moment) turns last-bit differences
    in a gradient into visible ones, so two implementations of the same attention
    would "change results" (`_work_left_out` checks instead that the same updates are
    made). Failing both, the floating-point final outputs: an unconsumed integer or
    bool tensor is one implementation's scaffolding (eager attention's causal mask),
    which another way of computing the same results need not build."""
    from magneton.model.run import RETURNED_KEY

    n = len(p.tensors)
    try:
        returned = [t for t in json.loads(p.config.get(RETURNED_KEY) or "[]") if 0 <= t < n]
    except (ValueError, TypeError):
        returned = []
    if returned:
        return returned, RETURNED
    read = [
        t
        for op in p.ops
        if op.name in _READ_OPS or op.name in _SEED_OPS
        for t in op.inputs[:1]
        if p.tensors[t].numel == 1 and _is_float(p.tensors[t].dtype)
    ]
    if read:
        return list(dict.fromkeys(read)), READ_BACK
    return _float_finals(p), FINAL


def _float_finals(p: Profile) -> list[int]:
    from .matching.match import build_graph

    return [t for t in sorted(build_graph(p).final_set) if _is_float(p.tensors[t].dtype)]


def _work_left_out(base: Profile, variant: Profile) -> str:
    """A floating-point final output of `base` (an updated weight, by shape and dtype)
    with no final output of that shape and dtype in `variant`, in words; "" if none."""
    from collections import Counter

    have = Counter(
        (tuple(variant.tensors[t].shape), variant.tensors[t].dtype) for t in _float_finals(variant)
    )
    for t in _float_finals(base):
        key = (tuple(base.tensors[t].shape), base.tensors[t].dtype)
        if have[key] <= 0:
            return _described(base, t)
        have[key] -= 1
    return ""


def _described(p: Profile, t: int) -> str:
    rec = p.tensors[t]
    op = p.ops[rec.producer].name if rec.producer >= 0 else "an input"
    return f"the output of {op} {list(rec.shape)} ({rec.dtype})"


def _is_float(dtype: str) -> bool:
    return any(k in dtype for k in ("float", "half", "double", "bfloat", "complex"))


# --------------------------------------------------------------------------------------
# 5. Trying one change
# --------------------------------------------------------------------------------------


def command_of(p: Profile, change: Change) -> str:
    """The program's command line with the change (`NAME=value python train.py ARGS`)."""
    import shlex

    from magneton.tracer.programs.program import ProgramSpec

    spec = ProgramSpec.from_config(p.config)
    if spec is None:
        return ""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in change.env.items())
    return (env + " " if env else "") + spec.python_command(change.args)


def patch_of(change: Change, root: str) -> str:
    from .fix.edits import unified_diff

    if not change.file:
        return ""
    rel = os.path.relpath(change.file, root).replace(os.sep, "/")
    with open(change.file, encoding="utf-8") as f:
        return unified_diff(rel, f.read(), change.text)


def try_change(
    db_path: str,
    base: Profile,
    change: Change,
    run: str,
    work: Path,
    threshold: float = MIN_SAVING_SHARE,
) -> Tried:
    """Record the variant that `change` makes of `base`'s program into the DB at
    `db_path` as `run` (from a scratch copy under `work`, left for the caller to remove
    once done with the run's re-runs), store its diff against the base, check that it
    does the same job and re-measure the two in interleaved rounds."""
    from magneton.graphdb import open_db

    from .fix.verify import program_root, record_argv, record_copy
    from .matching.confirm import compiled_program_step, whole_run_saving
    from .pipeline import run_diff, store_outcome

    t0 = time.perf_counter()
    tried = Tried(change)
    root = program_root(base)
    tried.command = command_of(base, change) if change.args is not None or change.env else ""
    try:
        tried.patch = patch_of(change, root)
        copy = _copied(root, change, work / run.replace(os.sep, "_"))
        argv, cwd = record_argv(base, root, copy, change.args)
        variant = record_copy(["--replace", *argv], cwd, Path(db_path), run, env=change.env)
        tried.run = run
        with open_db(db_path) as db:
            out = run_diff(db, base.run.name, run, diagnose=False, rerun=False)
            store_outcome(db, out)
        tried.findings = len(out.result.findings)
        tried.same_outputs, tried.first_difference = same_outputs(base, variant)
        if not tried.same_outputs:
            tried.status = "changes results"
            return tried
        if compiled_program_step(base):
            iv, tried.rounds = rerecorded_saving(
                base, variant, root, change, work / f"{run}-rounds"
            )
        else:
            iv, rm = whole_run_saving(base, variant, threshold, ROUNDS_BUDGET_S)
            tried.rounds = rm.rounds.n
        if iv is not None:
            ratio, lo, hi = iv  # E_base / E_variant
            tried.saving_share = 1.0 - 1.0 / ratio
            tried.interval = (1.0 - 1.0 / lo, 1.0 - 1.0 / hi)
        good = tried.confirmed and (tried.saving_share or 0.0) >= threshold
        tried.status = "suggested" if good else "no saving"
    except (WorkerError, MagnetonError, OSError) as e:
        tried.status, tried.error = "failed", _one_line(str(e))
    finally:
        tried.seconds = time.perf_counter() - t0
    return tried


def _copied(root: str, change: Change | None, dest: Path) -> Path:
    """A scratch copy of the program's folder at `dest`, with `change`'s file edit."""
    from .fix.verify import copy_folder

    copy = copy_folder(root, dest)
    if change is not None and change.file:
        rel = os.path.relpath(change.file, root)
        if rel.startswith(".."):
            raise MagnetonError(f"{change.file} lies outside the program's folder {root}")
        (copy / rel).write_text(change.text, encoding="utf-8")
    return copy


# rounds of a program whose step runs compiled: each round records base and variant
RERECORDED_ROUNDS = 5


def rerecorded_saving(
    base: Profile, variant: Profile, root: str, change: Change, work: Path
) -> tuple[tuple[float, float, float] | None, int]:
    """E_base / E_variant with its interval, from rounds that each record both programs
    anew (base and variant alternating which goes first, so a drift of the machine's
    load falls on both): for a JAX or TensorFlow program, whose compiled step no warm
    worker can re-time operator by operator (confirm.py `unconfirmable`), a recording is
    the measurement a round can repeat. The recordings go to a scratch DB under `work`,
    each program from its own scratch copy of the folder. WorkerError when one fails."""
    from magneton.tracer.programs.program import env_of

    from .fix.verify import record_argv, record_copy
    from .matching.confirm import paired_interval

    db = work / "db"
    sides = []
    for name, p, applied in (("base", base, None), ("variant", variant, change)):
        copy = _copied(root, applied, work / name)
        argv, cwd = record_argv(base, root, copy, applied.args if applied else None)
        sides.append((name, argv, cwd, env_of(p.config)))
    energy: dict[str, list[float]] = {"base": [], "variant": []}
    iv = None
    for i in range(RERECORDED_ROUNDS):
        for name, argv, cwd, env in sides if i % 2 == 0 else sides[::-1]:
            p = record_copy(["--replace", *argv], cwd, db, f"{name}-{i}", env=env)
            energy[name].append(p.run.energy_j)
        iv = paired_interval(np.asarray(energy["base"]), np.asarray(energy["variant"]))
        if iv is not None and (iv[1] > 1.0 or iv[2] < 1.0):  # decided: stop recording
            return iv, i + 1
    return iv, RERECORDED_ROUNDS


def _one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "failed"


def ranked(tried: list[Tried]) -> list[Tried]:
    """The suggestions, largest saving first."""
    return sorted(
        (t for t in tried if t.status == "suggested"),
        key=lambda t: -(t.interval[0] if t.interval else 0.0),
    )
