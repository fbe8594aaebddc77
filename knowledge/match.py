"""Match knowledge rules against the two sides of a finding.

A finding already says which side wastes energy; a rule applies when its wasteful-side
evidence holds on that side and its efficient-side evidence holds on the other. Symmetric
rules (patterns whose winner depends on shape or device, e.g. cross_entropy vs
log_softmax+gather) may also match the other way round; the match records the
orientation so the explanation never claims the opposite of what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from magneton.knowledge.base import Evidence, KnowledgeBase, Rule
from magneton.model import RuleRef


@dataclass
class SideFacts:
    """What one side of a finding ran: op names, APIs, dispatch chains, kernels, devices."""

    ops: list[str] = field(default_factory=list)
    apis: list[str] = field(default_factory=list)
    call_paths: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)

    def vocabulary(self) -> set[str]:
        """Names of what ran as operators: dispatched op names and the APIs they were
        entered through. Call-path internals (an `aten::_to_copy` inside a scalar `mul`)
        are not operators the user ran; `call_paths` evidence matches those."""
        return set(self.ops) | set(self.apis)


@dataclass
class RuleMatch:
    rule: Rule
    reversed: bool  # True: the rule's "wasteful" pattern was found on the efficient side
    score: int

    def ref(self) -> RuleRef:
        """The rule as a finding's root cause names it."""
        return rule_ref(self.rule, reversed=self.reversed)


def rule_ref(r: Rule, *, reversed: bool = False, with_fix: bool = False) -> RuleRef:
    """A rule as findings carry it; `with_fix` adds the rule's fix text."""
    return RuleRef(
        id=r.id,
        title=r.title,
        category=r.category,
        knob=r.knob,
        references=list(r.references),
        grounding=r.grounding,
        orientation="reversed" if reversed else "as-written",
        fix=r.fix if with_fix else None,
    )


def _tokens(chain: str) -> list[str]:
    return [t.strip() for t in chain.split(">") if t.strip()]


def fragment_in_chain(fragment: str, chain: str) -> bool:
    """True when the fragment's elements appear contiguously in the chain (fnmatch per element)."""
    frag = _tokens(fragment)
    toks = _tokens(chain)
    n = len(frag)
    for i in range(len(toks) - n + 1):
        if all(fnmatchcase(toks[i + j], frag[j]) for j in range(n)):
            return True
    return False


def _vocab_has(vocab: set[str], pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return any(fnmatchcase(v, pattern) for v in vocab)
    return pattern in vocab


def evidence_holds(ev: Evidence, side: SideFacts) -> bool:
    vocab = side.vocabulary()
    if ev.ops and not all(_vocab_has(vocab, p) for p in ev.ops):
        return False
    if ev.any_ops and not any(_vocab_has(vocab, p) for p in ev.any_ops):
        return False
    if ev.absent_ops and any(_vocab_has(vocab, p) for p in ev.absent_ops):
        return False
    if ev.call_paths and not any(
        fragment_in_chain(f, cp) for f in ev.call_paths for cp in side.call_paths
    ):
        return False
    if ev.absent_call_paths and any(
        fragment_in_chain(f, cp) for f in ev.absent_call_paths for cp in side.call_paths
    ):
        return False
    if ev.kernels and not any(fnmatchcase(k, g) for g in ev.kernels for k in side.kernels):
        return False
    return True


def _device_ok(rule: Rule, *sides: SideFacts) -> bool:
    if not rule.devices:
        return True
    types = {d.split(":", 1)[0] for s in sides for d in s.devices}
    return bool(types & set(rule.devices))


def match_rules(
    kb: KnowledgeBase,
    wasteful: SideFacts,
    efficient: SideFacts,
    *,
    level: str | None = None,
) -> list[RuleMatch]:
    """Rules whose evidence holds on this finding, most specific first."""
    out: list[RuleMatch] = []
    for rule in kb.rules:
        if rule.levels and level is not None and level not in rule.levels:
            continue
        if not _device_ok(rule, wasteful, efficient):
            continue
        spec = rule.wasteful.specificity() + rule.efficient.specificity()
        if evidence_holds(rule.wasteful, wasteful) and evidence_holds(rule.efficient, efficient):
            out.append(RuleMatch(rule, False, spec))
        elif (
            rule.symmetric
            and evidence_holds(rule.wasteful, efficient)
            and evidence_holds(rule.efficient, wasteful)
        ):
            out.append(RuleMatch(rule, True, spec))
    out.sort(key=lambda m: (-m.score, m.rule.id))
    return out
