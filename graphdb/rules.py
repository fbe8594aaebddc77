"""Knowledge rules in the Kùzu DB: load them, link them to what they explain, query them.

`store_knowledge(db, kb)` writes the validated rules and knobs (knowledge/base.py) as
`Rule`, `Knob` and `RulePattern` nodes with `ABOUT_KNOB` / `HAS_PATTERN` rels, so users can
join them with recorded operators in Cypher (docs/diagnosis.md has examples). It is
idempotent and cheap: a `KnowledgeVersion` node keeps the hash of the loaded rule set and
nothing is rewritten while it matches — diagnosing twice must not duplicate rules, and
editing a rule file must replace the old copy rather than leave both.

`link_explanations(db, result)` records, after diagnosis, which rule explained which
finding as `EXPLAINS` rels from the rule to the finding's operators (replacing the links
of an earlier diagnosis of the same run pair).

Read-only DBs are left alone: diagnosis works from the in-memory knowledge base, the DB
copy exists for queries.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from magneton.knowledge.base import KnowledgeBase
from magneton.model import DiffResult

if TYPE_CHECKING:
    from magneton.graphdb.db import ProfileDB

_TABLES = ("Rule", "Knob", "RulePattern", "KnowledgeVersion")


def knowledge_hash(kb: KnowledgeBase) -> str:
    blob = json.dumps(
        {
            "rules": [repr(r) for r in kb.rules],
            "knobs": [repr(k) for k in sorted(kb.knobs.values(), key=lambda k: k.key)],
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def stored_hash(db: ProfileDB) -> str | None:
    rows = db.query("MATCH (v:KnowledgeVersion {key: 'rules'}) RETURN v.hash").rows
    return rows[0][0] if rows else None


def store_knowledge(db: ProfileDB, kb: KnowledgeBase) -> bool:
    """Write the rules into the DB unless this exact rule set is already there.
    Returns True when something was written."""
    if getattr(db, "read_only", True):
        return False
    h = knowledge_hash(kb)
    if stored_hash(db) == h:
        return False
    # delete_where, not DETACH DELETE: the latter loses rels of other runs in Kùzu 0.11.3
    db.delete_where(nodes={t: "true" for t in _TABLES})
    db.bulk_insert(
        "Knob",
        [
            {
                "key": k.key,
                "kind": k.kind,
                "description": k.description,
                "default_value": k.default or "",
                "snapshot_keys": list(k.snapshot_keys),
                "assign": list(k.assign),
                "calls": [f"{c.qualname}({'' if c.arg is None else c.arg})" for c in k.calls],
                "env": list(k.env),
                "attribute": k.attribute or "",
                "refs": list(k.references),
            }
            for k in kb.knobs.values()
        ],
    )
    db.bulk_insert(
        "Rule",
        [
            {
                "id": r.id,
                "title": r.title,
                "category": r.category,
                "description": r.description,
                "knob": r.knob or "",
                "efficient_value": r.efficient_value or "",
                "symmetric": r.symmetric,
                "levels": list(r.levels),
                "devices": list(r.devices),
                "fix": r.fix,
                "refs": list(r.references),
                "grounding": r.grounding,
                "file": r.file,
                "line": r.line,
            }
            for r in kb.rules
        ],
    )
    patterns = []
    for r in kb.rules:
        for side, ev in (("wasteful", r.wasteful), ("efficient", r.efficient)):
            for fld in (
                "ops",
                "any_ops",
                "absent_ops",
                "call_paths",
                "absent_call_paths",
                "kernels",
            ):
                for pat in getattr(ev, fld):
                    patterns.append(
                        {
                            "uid": f"{r.id}|{side}|{fld}|{pat}",
                            "rule": r.id,
                            "side": side,
                            "field": fld,
                            "pattern": pat,
                        }
                    )
    db.bulk_insert("RulePattern", patterns)
    db.bulk_insert("ABOUT_KNOB", [{"from": r.id, "to": r.knob} for r in kb.rules if r.knob])
    db.bulk_insert("HAS_PATTERN", [{"from": p["rule"], "to": p["uid"]} for p in patterns])
    db.bulk_insert(
        "KnowledgeVersion",
        [{"key": "rules", "hash": h, "rules": len(kb.rules), "knobs": len(kb.knobs)}],
    )
    return True


def link_explanations(db: ProfileDB, result: DiffResult) -> int:
    """EXPLAINS rels from each finding's rule to its operators; returns the number made."""
    if getattr(db, "read_only", True):
        return 0
    a, b = result.a.run, result.b.run
    db.delete_where(rels={"EXPLAINS": "{v}.run_a = $a AND {v}.run_b = $b"}, params={"a": a, "b": b})
    rows = []
    for f in result.findings:
        rule = f.root_cause.rule if f.root_cause is not None else None
        if rule is None or not rule.id:
            continue
        rid = rule.id
        for side, run, ops in (("a", a, f.region_a.ops), ("b", b, f.region_b.ops)):
            for i in ops:
                rows.append(
                    {
                        "from": rid,
                        "to": f"{run}/{i}",
                        "run_a": a,
                        "run_b": b,
                        "finding": f.id,
                        "side": side,
                    }
                )
    if rows:
        db.bulk_insert("EXPLAINS", rows)
    return len(rows)


RULES_FOR_RUN_QUERY = """
MATCH (r:Rule)-[:HAS_PATTERN]->(p:RulePattern {field: 'call_paths'})
MATCH (o:Operator {run: $run})
WITH r, p, o, p.pattern AS pat
WHERE size(list_filter(o.call_paths, cp -> cp CONTAINS pat)) > 0
RETURN r.id AS rule, p.side AS side, pat AS pattern, count(o) AS operators
ORDER BY operators DESC
"""
"""Which rules' call-path evidence occurs in a run (a plain containment check; diagnosis
matches fragments element-wise, see knowledge/match.py)."""


def save_diagnosis(db: ProfileDB, result: DiffResult) -> bool:
    """Write the diagnosis fields of `result`'s findings into the stored diff of the same
    run pair (`Diff.result_json` and each `DiffFinding.json`), so `magneton export-patch`
    and reports reuse it instead of re-running both scripts. Findings are matched by id
    and by their region operators; a stored diff that is stale, missing or of another
    matching is left untouched. Returns True when something was written."""
    if getattr(db, "read_only", True):
        return False
    from magneton.graphdb.matches import DIAGNOSIS_FIELDS, diff_uid, load_diff, seal, unseal

    loaded = load_diff(db, result.a.run, result.b.run)
    if loaded is None:
        return False
    uid = diff_uid(result.a.run, result.b.run)
    blob = db.query("MATCH (d:Diff {uid: $u}) RETURN d.result_json", {"u": uid}).rows[0][0]
    data = unseal(blob, result.a.run, result.b.run)  # checked by load_diff just above
    if data is None:
        return False
    stored = {f["id"]: f for f in data["result"]["findings"]}
    changed = False
    for f in result.findings:
        s = stored.get(f.id)
        if (
            s is None
            or s["region_a"]["ops"] != f.region_a.ops
            or s["region_b"]["ops"] != f.region_b.ops
        ):
            continue
        diagnosis = f.diagnosis_json()
        for k in DIAGNOSIS_FIELDS:
            s[k] = diagnosis[k]
        db.query(
            "MATCH (x:DiffFinding {uid: $u}) SET x.json = $j",
            {"u": f"{uid}|{f.id}", "j": json.dumps(f.to_json())},
        )
        changed = True
    if changed:
        db.query("MATCH (d:Diff {uid: $u}) SET d.result_json = $j", {"u": uid, "j": seal(data)})
    return changed
