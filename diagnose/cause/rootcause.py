"""Root-cause diagnosis: every finding ends in *why* and *what to change*.

`diagnose_result(db, result)` fills `category`, `divergence`, `root_cause` and `fix` of each
finding of a `DiffResult` (paper §4.3, Algorithm 2):

1. divergence — the first point where the two regions' kernel paths differ (Cypher over
   the stored paths, divergence.py);
2. key variable — a re-run with line tracing at a Python deviation site, or the knob
   that differs in the config snapshots for a native one (keyvar.py);
3. backward data-flow — from the key variable to the literal or default a user changes
   (dataflow.py); for an operand property first through the recorded graph to the op or
   source that set it (argflow.py), then through the source: the property's keyword,
   else the two sides' statements side by side (setupflow.py);
4. knowledge rules name the pattern and ground it (paper tables, docs, issues) — they
   explain findings, never create them;
5. a fix — a libcst patch of the wasteful script when the change is mechanical, guidance
   otherwise (fix/plan.py, with the libcst edits of fix/edits.py).

A finding whose diagnosis fails for an unexpected reason keeps its measurement and gets a
root cause of kind "unknown" with the reason: one broken diagnosis must not hide the
other findings (the error is kept in `RootCause.error`).

The results are the typed `Divergence`, `RootCause` and `Fix` of model/diagnosis.py, built
here directly (their `to_json` is the `diff --json` contract, docs/diagnosis.md).
Diagnosis never writes the DB; `store_diagnosis` does, when a caller asks
(diagnose/pipeline.py composes the two).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable

from magneton.knowledge.base import KnowledgeBase, default_knowledge
from magneton.knowledge.match import RuleMatch, SideFacts, match_rules
from magneton.model import (
    DiffResult,
    Divergence,
    Finding,
    Fix,
    FlowHop,
    OperandProperty,
    PathElement,
    Profile,
    RootCause,
    script_unchanged,
)
from magneton.model.vocab import IGNORED_OPS
from magneton.tracer.timing.warm import WarmPool

from ..fix.edits import Block, statement_block
from ..fix.plan import RunPair, framework, make_fix, user_lines
from ..fix.ports import counterpart_block
from ..source.argflow import (
    absent_origin,
    grad_mode_origins,
    observed,
    observed_config,
    setup_origin,
    trace_both,
)
from ..source.dataflow import KeyVariable, Origin
from ..source.diffslice import Difference, program_difference
from ..source.index import is_user_file, source_index, user_files
from ..source.setupflow import setup_difference
from .divergence import find_divergence
from .keyvar import (
    Rerun,
    SideInfo,
    SitePlan,
    analyze_site,
    merge_watches,
    native_key_variable,
    plan_site,
    python_key_variable,
    run_rerun,
    start_rerun,
)

# progress(done, total): called after each diagnosed finding
Progress = Callable[[int, int], None]


def side_facts(p: Profile, ops: list[int]) -> SideFacts:
    facts = SideFacts()
    for i in ops:
        op = p.ops[i]
        if op.name in IGNORED_OPS:
            continue
        facts.ops.append(op.name)
        if op.api:
            facts.apis.append(op.api)
        facts.call_paths.extend(op.call_paths)
        facts.kernels.extend(p.kernels[k].name for k in op.kernels)
        facts.devices.add(op.device)
    return facts


def _side_info(name: str, p: Profile, op: int | None) -> SideInfo:
    frames = []
    if op is not None:
        frames = [
            (p.frames[i].file, p.frames[i].line, p.frames[i].function) for i in p.ops[op].frames
        ]
    return SideInfo(
        name=name,
        run=p.run.name,
        script=p.run.script,
        entry=p.run.entry or "main",
        setup=p.run.setup or "setup",
        config=observed_config(p),
        files=user_files(p.run.script),
        frames=frames,
        script_unchanged=script_unchanged(p),
    )


def _is_python_decision(div: Divergence, runs: RunPair) -> bool:
    """The first difference is a Python frame, or the first aten op entered from Python
    (the same line called a different API): a decision made in Python at the site."""
    if div.level == "python":
        return True
    if div.level != "dispatch" or div.op_a is None or div.op_b is None:
        return False
    na = len(runs.a.ops[div.op_a].frames)
    nb = len(runs.b.ops[div.op_b].frames)
    return div.common <= min(na, nb)


def _site_is_user(div: Divergence, runs: RunPair) -> bool:
    """The choice was made by *different user code* on the two sides (API misuse):
    the site is in the users' scripts and the two sites are different files or
    statements. The same user helper module branching differently is analysed like
    library code (which branch, steered by what)."""
    sa, sb = div.site_a, div.site_b
    user = bool(
        (sa and is_user_file(sa.file or "", runs.a.run.script))
        or (sb and is_user_file(sb.file or "", runs.b.run.script))
    )
    if not user:
        return False
    if not sa or not sb:
        return True
    same_place = os.path.realpath(sa.file or "") == os.path.realpath(sb.file or "")
    return not (same_place and (sa.branch or sa.code == sb.code))


def _code_lines(p: Profile, ops: list[int], op: int | None) -> list[int]:
    """The user lines a side runs for a region: the first diverging operator's own user
    line (`op`, the divergence's operator on this side) — the line where the two sides
    part, not the region's first line, which can be a statement both sides share (a
    weight normalization the matcher attached to the region) — else the region's."""
    own = user_lines(p, [op]) if op is not None else []
    return own or user_lines(p, ops)


def _block_origin(block: Block) -> Origin:
    first, last = block.lines()
    return Origin(
        kind="code",
        variable=block.idx.line_text(first),
        file=block.idx.path,
        line=first,
        code=block.code().strip(),
        note=f"lines {first}-{last}" if last != first else "",
    )


def _code_origin(p: Profile, ops: list[int], side: str, op: int | None = None) -> Origin | None:
    """The user code a side runs for a region: the statements holding `_code_lines`."""
    lines = _code_lines(p, ops, op)
    if not lines:
        return None
    block = statement_block(p.run.script, lines)
    if block is None:
        idx = source_index(p.run.script)
        ln = lines[0]
        return Origin(
            kind="code",
            variable=idx.line_text(ln) if idx else "",
            file=p.run.script,
            line=ln,
            code=idx.line_text(ln) if idx else "",
        )
    return _block_origin(block)


def _counterpart_origin(
    p_other: Profile, ops: list[int], op: int | None, p: Profile
) -> Origin | None:
    """The statements of `p`'s script standing where the other side's code for the
    region stands (argport.counterpart_block): the code of a side whose call there did
    no work, so no operator and no frame points at it."""
    lines = _code_lines(p_other, ops, op)
    block = statement_block(p_other.run.script, lines) if lines else None
    there = counterpart_block(block, p.run.script) if block is not None else None
    return _block_origin(there) if there is not None else None


def _category(
    kind: str, div: Divergence | None, rule: RuleMatch | None, wasteful: str = "a"
) -> str | None:
    if rule is not None:
        return rule.rule.category
    # redundant: the wasteful side ran work the efficient one has nothing in place of
    # (the efficient side's extra layout copy that buys a faster kernel is not)
    if div is not None and (div.b if wasteful == "a" else div.a).kind == "none":
        return "redundant"
    if kind == "code":
        return "api-misuse"
    if kind == "unknown":
        return None
    return "misconfiguration"


def _env_as_read(origins: dict[str, Origin | None], runs: RunPair) -> None:
    """An environment origin's value as its run read the variable (recorded by
    tracer/programs/envreads.py; None: unset), in place of what the program made of it
    (`== "1"` gave True): the root cause and its fix name the value a user sets."""
    from magneton.tracer.programs.envreads import UNRECORDED, recorded_value

    for side, p in (("a", runs.a), ("b", runs.b)):
        o = origins.get(side)
        if o is not None and o.kind == "env" and o.env_var:
            read = recorded_value(p.config, o.env_var)
            if read is not UNRECORDED:
                o.value = None if read is None else str(read)


def _values(kv: KeyVariable | None, origins: dict[str, Origin | None]) -> dict[str, str | None]:
    oa, ob = origins.get("a"), origins.get("b")
    if oa is not None and ob is not None and oa.value is not None and ob.value is not None:
        if oa.value != ob.value:
            return {"a": oa.value, "b": ob.value}
    if kv is not None and kv.values:
        return {"a": kv.values.get("a"), "b": kv.values.get("b")}
    return {"a": oa.value if oa else None, "b": ob.value if ob else None}


def _explaining_rules(
    matches: list[RuleMatch],
    kv: KeyVariable | None,
    origin: Origin | None,
    kind: str,
    kb: KnowledgeBase,
) -> list[RuleMatch]:
    """Rules that can explain this finding, best first.

    A rule tied to a knob explains a finding only when that knob is the key variable:
    matching evidence alone (e.g. "same kernels on both sides") must not blame a thread
    count that is identical in both runs. Knob-free rules (API patterns) always may.
    """
    knob = None
    if kv is not None and kv.knob is not None:
        knob = kv.knob.key
    elif origin is not None and origin.kind in ("config", "api-argument"):
        k = kb.knob_for_attribute(origin.variable)
        knob = k.key if k else None
    keep = [m for m in matches if m.rule.knob is None or (knob and m.rule.knob == knob)]
    keep.sort(key=lambda m: (m.rule.knob is None, -m.score, m.rule.id))
    return keep


def _root_cause(
    kind: str,
    kv: KeyVariable | None,
    origins: dict[str, Origin | None],
    w: str,
    matches: list[RuleMatch],
) -> RootCause:
    ow = origins.get(w)
    best = matches[0] if matches else None
    flow = kv.flow if kv is not None else None
    return RootCause(
        kind=kind,
        variable=ow.variable if ow else (kv.expr if kv else None),
        values=_values(kv, origins),
        file=ow.file if ow else None,
        line=ow.line if ow else None,
        code=ow.code if ow else None,
        library_default=bool(ow.library_default) if ow else False,
        origins={s: (o.info() if o else None) for s, o in origins.items()},
        key_variable=kv.info() if kv else None,
        data_flow=[FlowHop(**h.to_json()) for h in flow.hops] if flow else [],
        rule=best.ref() if best else None,
        rules=[m.rule.id for m in matches],
        unresolved=(flow.unresolved or None) if flow is not None else None,
        note=(kv.note or None) if kv is not None else None,
    )


# Nothing a user could change differs, so calling it waste would send them hunting for a
# fix that does not exist (seen: identical LayerNorm regions 12% apart on a loaded 2-core
# box under the cpu-default model).
NOISE_NOTE = (
    "both sides ran the same kernels, reached the same way, with the same "
    "arguments, and no recorded setting that affects such kernels differs: "
    "nothing in the programs explains this difference (run-to-run variation "
    "or contention; re-record with a larger --repeat to check)"
)


ACROSS_NOTE = (
    "the two runs are different frameworks: a setting or argument value of one does not "
    "carry to the other, so the cause is the call each side makes for this region"
)


def _overridden_note(kind: str, origin: Origin | None) -> str | None:
    """What the divergence-first explanation had reached, when it reads alike on both
    sides (so it cannot be what differs)."""
    if origin is None or origin.file is None:
        return None
    where = f"{os.path.basename(origin.file)}:{origin.line}"
    return (
        f"the path from the diverging kernel reached {origin.variable or kind} at {where}, "
        "which reads the same in both programs; the root is the first statement that "
        "differs among those deciding this region"
    )


def _compared_note(div: Divergence | None, diff: Difference | None) -> str:
    """What an unexplained finding's diagnosis compared, so "unknown" is a statement of
    what is known not to differ rather than a shrug."""
    path = (
        "the two regions' kernel call paths (no divergence found)"
        if div is None
        else f"the kernel call paths, which part at the {div.level or 'unknown'} level"
    )
    code = (
        "the source of both programs along the statements that decide these operators "
        "(they read alike, and so do their command-line options)"
        if diff is None
        else "the source of both programs"
    )
    return f"compared {path}, the recorded settings of both runs, and {code}"


class Diagnoser:
    """Diagnoses the findings of one pair of runs; caches per deviation site, so the
    findings of repeated layers (one per transformer block) cost one re-run."""

    def __init__(
        self,
        db,
        result: DiffResult,
        *,
        rerun: bool = True,
        kb: KnowledgeBase | None = None,
        profiles: tuple[Profile, Profile] | None = None,
        pool: WarmPool | None = None,
    ):
        self.db = db
        self.result = result
        self.rerun = rerun
        # the diff's warm workers (tracer/timing/warm.py), owned by the caller: the re-run forks
        # from them instead of importing the scripts' libraries once more
        self.pool = pool
        self.kb = kb or default_knowledge()
        if profiles is None:
            profiles = (db.load_profile(result.a.run), db.load_profile(result.b.run))
        self.runs = RunPair(*profiles)
        self._kv_cache: dict[tuple, KeyVariable] = {}
        self._divs: dict[int, Divergence | None] = {}
        self.timings: dict[str, float] = {}
        self.rerun_info: dict = {}

    def _divergence(self, f: Finding) -> Divergence | None:
        return find_divergence(
            self.db, f, self.result.a.run, self.result.b.run, self.runs.a, self.runs.b
        )

    def diagnose_all(self, findings: list[Finding], progress: Progress | None = None) -> None:
        """Diagnose every finding with at most one re-run of each script.

        Divergences come first; every Python deviation site contributes its watch
        points, both scripts are re-run once with all of them, then each finding is
        analysed. (A re-run costs seconds — importing transformers alone — so one per
        site would multiply that by the number of distinct sites.) `progress(done,
        total)` is called after each diagnosed finding.
        """
        # interpreter findings come explained (no kernel path to trace; interpreter.py)
        findings = [f for f in findings if f.kind != "interpreter"]
        t0 = time.perf_counter()
        plans: dict[tuple, tuple[SitePlan | KeyVariable, dict[str, SideInfo]]] = {}
        # The re-run's workers start importing the scripts' libraries as soon as the first
        # Python deviation site is found, while the remaining sites are analysed.
        started: Rerun | None = None
        try:
            for f in findings:
                try:
                    div = self._divergence(f)
                except Exception:  # diagnose() recomputes it and records the error
                    continue
                self._divs[f.id] = div
                if div is None or div.site_a is None:
                    continue
                if _is_python_decision(div, self.runs) and not _site_is_user(div, self.runs):
                    key = ("py", div.site_a.file, div.site_a.line)
                    if key not in plans:
                        sides = {
                            "a": _side_info("a", self.runs.a, div.op_a),
                            "b": _side_info("b", self.runs.b, div.op_b),
                        }
                        if not plans:
                            started = start_rerun(sides, self.rerun, self.pool)
                        plans[key] = (plan_site(div.site_a, sides, self.kb), sides)
            self.timings["prepare"] = round(time.perf_counter() - t0, 3)
            self._rerun_sites(plans, started)
        finally:
            if started is not None:
                started.close()
        for k, f in enumerate(findings, 1):
            self.diagnose(f)
            if progress is not None:
                progress(k, len(findings))

    def _rerun_sites(
        self,
        plans: dict[tuple, tuple[SitePlan | KeyVariable, dict[str, SideInfo]]],
        started: Rerun | None = None,
    ) -> None:
        """One re-run of both scripts watching every site, then each site's key variable.
        `started`: the workers `start_rerun` began for the first site's sides."""
        real = [p for p, _ in plans.values() if isinstance(p, SitePlan)]
        if not real:
            return
        # every plan holds the same two runs: the scripts `started` was started for
        sides = next(sd for p, sd in plans.values() if isinstance(p, SitePlan))
        results, info = run_rerun(sides, merge_watches(real), self.rerun, started)
        self.rerun_info = info
        for key, (plan, sd) in plans.items():
            self._kv_cache[key] = (
                analyze_site(plan, sd, self.kb, results, info)
                if isinstance(plan, SitePlan)
                else plan
            )

    def diagnose(self, finding: Finding) -> None:
        t0 = time.perf_counter()
        try:
            self._diagnose(finding)
        except Exception as e:  # keep the finding; say why its diagnosis is missing
            finding.root_cause = RootCause(
                kind="unknown",
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(limit=4),
            )
            finding.category = finding.category or "misconfiguration"
            finding.fix = Fix(summary="diagnosis failed; see root_cause.error")
        self.timings[str(finding.id)] = round(time.perf_counter() - t0, 3)

    def _key_variable(
        self, finding: Finding, div: Divergence | None, matches: list[RuleMatch]
    ) -> tuple[str, KeyVariable | None, dict[str, Origin | None]]:
        """(root-cause kind, key variable, origins per side) of one finding."""
        runs, w = self.runs, finding.wasteful
        if div is None:
            return "unknown", None, {}
        python = _is_python_decision(div, runs)
        if python and _site_is_user(div, runs):
            return "code", None, self._code_origins(finding, div)
        sides = {
            "a": _side_info("a", runs.a, div.op_a),
            "b": _side_info("b", runs.b, div.op_b),
        }
        if python and div.site_a is not None:
            key: tuple = ("py", div.site_a.file, div.site_a.line)
            kv = self._kv_cache.get(key)
            if kv is None:
                kv = python_key_variable(
                    div.site_a, sides, self.kb, rerun=self.rerun, pool=self.pool
                )
                self._kv_cache[key] = kv
            grad_mode_origins(kv, sides)  # a library branch on `torch.is_grad_enabled()`
            ow = kv.origins.get(w)
            if ow is None:
                # the branch read there led to no setting (anomaly mode is decided in
                # C++ below a Python call both sides make alike): a knob of a matching
                # rule that the two runs set differently explains it
                native = self._knob_key_variable(div, sides, matches)
                if native.origins.get(w) is not None:
                    kv, ow = native, native.origins[w]
            return (ow.kind if ow is not None else "unknown"), kv, kv.origins
        kv = self._knob_key_variable(div, sides, matches)
        ow = kv.origins.get(w)
        if ow is not None:
            return ow.kind, kv, kv.origins
        props = self._property_origins(div, sides)
        if props is not None:
            pw = props.get(w)
            if pw is not None:
                return pw.kind, kv, props
        if div.a.kind == "args" and div.a.diff:
            return "code", kv, self._code_origins(finding, div)
        return "unknown", kv, kv.origins

    def _knob_key_variable(
        self, div: Divergence, sides: dict[str, SideInfo], matches: list[RuleMatch]
    ) -> KeyVariable:
        """The key variable among the knobs of the rules that matched (the native path)."""
        knob_keys = [m.rule.knob for m in matches if m.rule.knob]
        knobs = [kn for k in knob_keys if (kn := self.kb.knob(k)) is not None]
        key = ("native", div.level, tuple(k.key for k in knobs))
        kv = self._kv_cache.get(key)
        if kv is None:
            kv = native_key_variable(knobs, sides, self.kb, level=div.level)
            self._kv_cache[key] = kv
        grad_mode_origins(kv, sides)
        return kv

    def _property_origins(
        self, div: Divergence, sides: dict[str, SideInfo]
    ) -> dict[str, Origin | None] | None:
        """A kernel-argument divergence: walk the differing operand back through the
        recorded dataflow to the op or source that set its property (argflow.py), then
        into the user's code: the keyword that sets that property (`memory_format=`,
        `dtype=`; one side may never set it — the library default — and its origin is
        where the other side's setting belongs), else, for a source set before the
        region, the statement of setup() where the two sides differ (setupflow.py)."""
        prop = div.prop
        if prop is None or div.op_a is None or div.op_b is None:
            return None
        profs = {"a": self.runs.a, "b": self.runs.b}
        trace_both(prop, div.op_a, div.op_b, profs["a"], profs["b"])
        return self._keyword_origins(prop, profs, sides) or self._setup_origins(prop, profs)

    @staticmethod
    def _keyword_origins(
        prop: OperandProperty, profs: dict[str, Profile], sides: dict[str, SideInfo]
    ) -> dict[str, Origin | None] | None:
        found: dict[str, Origin | None] = {
            n: setup_origin(prop, n, profs[n], sides[n].files, sides[n].config) for n in "ab"
        }
        if found["a"] is None and found["b"] is None:
            return None
        if found["a"] is not None and found["b"] is not None:
            return found if found["a"].value != found["b"].value else None
        have = "a" if found["a"] is not None else "b"
        other = "b" if have == "a" else "a"
        efficient = found[have]
        assert efficient is not None  # one side found an origin (both None returned above)
        absent = absent_origin(efficient, profs[other].run.script)
        if absent is None:
            return None
        seen = observed(prop, other, profs[other])
        absent.value = f"torch.{seen}" if seen else None
        found[other] = absent
        return found

    @staticmethod
    def _setup_origins(
        prop: OperandProperty, profs: dict[str, Profile]
    ) -> dict[str, Origin | None] | None:
        """No keyword names the value: compare the two sides' source from where the walk
        stopped — the operator that set the property (its user line, then its callers)
        or, for a source tensor, setup() — statement by statement (setupflow.py)."""
        kinds = {prop.set_by.get(n, {}).get("kind") for n in "ab"}
        if None in kinds or (len(kinds) > 1 and "op" in kinds):
            return None
        found = setup_difference(profs["a"], profs["b"], prop.set_by)
        return dict(found) if found is not None else None

    def _code_origins(self, finding: Finding, div: Divergence) -> dict[str, Origin | None]:
        out = {
            "a": _code_origin(self.runs.a, finding.region_a.ops, "a", div.op_a),
            "b": _code_origin(self.runs.b, finding.region_b.ops, "b", div.op_b),
        }
        # a side that ran nothing at the divergence (the other's extra work) has no
        # operator of its own there: its code is what stands in the other's place
        runs = {"a": self.runs.a, "b": self.runs.b}
        regions = {"a": finding.region_a.ops, "b": finding.region_b.ops}
        ops = {"a": div.op_a, "b": div.op_b}
        for side, other in (("a", "b"), ("b", "a")):
            if div.element(side).kind == "none" and out[other] is not None:
                there = _counterpart_origin(runs[other], regions[other], ops[other], runs[side])
                out[side] = there or out[side]
        return out

    def _program_difference(self, finding: Finding) -> Difference | None:
        runs = self.runs
        configs = {"a": observed_config(runs.a), "b": observed_config(runs.b)}
        return program_difference(
            runs.a, runs.b, finding.region_a.ops, finding.region_b.ops, configs
        )

    def _diagnose(self, finding: Finding) -> None:
        runs = self.runs
        div = self._divs[finding.id] if finding.id in self._divs else self._divergence(finding)
        finding.divergence = div
        w = finding.wasteful
        facts_a = side_facts(runs.a, finding.region_a.ops)
        facts_b = side_facts(runs.b, finding.region_b.ops)
        fw, fe = (facts_a, facts_b) if w == "a" else (facts_b, facts_a)
        matches = match_rules(self.kb, fw, fe, level=div.level if div else None)
        kind, kv, origins = self._key_variable(finding, div, matches)
        note = None
        across = framework(runs.a) != framework(runs.b)
        if across and div is not None:
            # settings, argument values and tensor properties of one framework do not
            # carry to the other (a TensorFlow-vs-PyTorch diff named the TensorFlow
            # side's `torch.is_grad_enabled`, then an "unset dtype" of its setup()): the
            # cause is the call each side makes
            kind, kv, origins = "code", None, self._code_origins(finding, div)
            note = ACROSS_NOTE
        diff = None if across else self._program_difference(finding)
        if diff is not None and (not diff.agrees(origins) or diff.sharper_than(kind, w)):
            # the explanation stopped where the two programs read alike: the difference
            # that decides these operators is elsewhere (diffslice.py)
            reached = diff.agrees(origins)
            note = None if reached else _overridden_note(kind, origins.get(w))
            # an explanation that reached where the programs differ (the line reading the
            # option) keeps its key variable and data flow: the path to the root
            kind, kv, origins = diff.kind, (kv if reached else None), dict(diff.origins)
        _env_as_read(origins, runs)
        matches = _explaining_rules(matches, kv, origins.get(w), kind, self.kb)
        best = matches[0] if matches else None
        finding.category = _category(kind, div, best, w)
        finding.root_cause = _root_cause(kind, kv, origins, w, matches)
        if note:
            finding.root_cause.note = note
        elif kind == "unknown" and not finding.root_cause.note:
            finding.root_cause.note = _compared_note(div, diff)
        if div is not None and div.same_everything() and kind == "unknown":
            finding.verdict = "noise"
            finding.root_cause.note = NOISE_NOTE
        finding.fix = make_fix(finding, kv, origins, runs, best, kind)
        if best is not None:
            finding.fix.rule = best.rule.id
            finding.fix.references = list(best.rule.references)


def diagnose_result(
    db,
    result: DiffResult,
    *,
    rerun: bool = True,
    profiles: tuple[Profile, Profile] | None = None,
    progress: Progress | None = None,
    kb: KnowledgeBase | None = None,
    pool: WarmPool | None = None,
) -> DiffResult:
    """Fill category, divergence, root_cause and fix of every finding (in place; returned).

    Pure: nothing is written to the DB (`store_diagnosis` does that). `profiles`: the
    two runs' profiles when the caller already loaded them, to skip loading them again.
    `rerun=False` skips the key-variable re-run. `progress(done, total)` is called after
    each diagnosed finding. `pool`: the diff's warm workers to re-run in (left open).
    """
    if not result.findings:
        return result
    d = Diagnoser(db, result, rerun=rerun, profiles=profiles, kb=kb, pool=pool)
    d.diagnose_all(result.findings, progress)
    return result


def store_diagnosis(
    db, result: DiffResult, kb: KnowledgeBase | None = None, *, findings: bool = True
) -> None:
    """Write a diagnosed result's knowledge rules, EXPLAINS rels and (with `findings`)
    its findings' diagnosis fields into the stored diff of the pair, in a writable DB.
    The DB copy of the rules is for users' Cypher; diagnosis never depends on it."""
    from magneton.graphdb.rules import link_explanations, save_diagnosis, store_knowledge

    store_knowledge(db, kb or default_knowledge())
    link_explanations(db, result)
    if findings:
        save_diagnosis(db, result)


def _cause_line(f: Finding, rc: RootCause) -> str:
    where = f" at {os.path.basename(rc.file)}:{rc.line}" if rc.file else ""
    if rc.kind == "code":
        return f"{f.category or '-'}: the two sides call different code{where}"
    if f.verdict == "noise":
        return f"noise: {rc.note}"
    if rc.kind == "unknown":
        return f"cause unknown: {rc.note or rc.error or rc.unresolved or ''}"
    return (
        f"{f.category or '-'}: {rc.kind} {rc.variable} = {rc.values.get('a')} (a) vs "
        f"{rc.values.get('b')} (b){where}"
    )


def _element_label(e: PathElement) -> str:
    from magneton.model.names import short_name

    if e.kind == "frame":
        return f"{os.path.basename(e.file or '')}:{e.line} {e.function}"
    return short_name(e.name) if e.name else e.kind


def describe_finding(f: Finding) -> list[str]:
    """Human lines for a diagnosed finding (for `magneton diff`'s table and reports)."""
    rc = f.root_cause
    if rc is None:
        return []
    lines = [_cause_line(f, rc)]
    div = f.divergence
    if div is not None:
        la, lb = _element_label(div.a), _element_label(div.b)
        if div.a.kind == div.b.kind and (div.a.name, div.a.file, div.a.line) == (
            div.b.name,
            div.b.file,
            div.b.line,
        ):
            # the largest difference is in one kernel both sides ran: not a divergence
            lines.append(f"same {div.level} on both sides: {la} (it ran longer or more often)")
        else:
            lines.append(f"diverges ({div.level}): {la} vs {lb}")
    if rc.rule is not None:
        lines.append(f"rule {rc.rule.id}: {rc.rule.title} [{', '.join(rc.rule.references)}]")
    fix = f.fix
    if fix is not None and fix.summary:
        lines.append(
            "fix: " + fix.summary + (" (patch: magneton export-patch)" if fix.patch else "")
        )
    return lines
