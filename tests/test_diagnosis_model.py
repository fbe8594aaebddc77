"""The typed diagnosis results (model/diagnosis.py) write exactly the JSON keys of the
`magneton diff --json` contract and read back what they wrote: stored diffs and the
TUI's cached results go through this round trip."""

from __future__ import annotations

import json

from magneton.graphdb.matches import finding_from_record, finding_record
from magneton.model import Finding, Region

DIVERGENCE = {
    "level": "python",
    "ops": {"a": 3, "b": 5},
    "a": {"kind": "frame", "file": "/x/a.py", "line": 4, "function": "act", "code": "y = f(x)"},
    "b": {"kind": "none"},
    "site": {
        "a": {
            "kind": "frame",
            "file": "/x/m.py",
            "line": 9,
            "function": "fwd",
            "code": "if fast:",
            "branch": True,
        },
        "b": None,
    },
    "common_prefix": [
        {"kind": "frame", "function": "main", "a": "/x/a.py:1", "b": "/x/b.py:1"},
        {"kind": "op", "name": "aten::linear"},
    ],
    "identical_paths": 2,
    # job keys travel inside "divergence"
    "rank": 1,
    "runs": {"a": "j/rank1", "b": "k/rank1"},
    "collectives": {
        "count": 3,
        "phases": {"shadow": 3},
        "ops": [7, 8, 9],
        "energy_j": 0.5,
        "time_s": 0.01,
        "measured_wait_s": 0.002,
        "busy_wait_share": None,
    },
    "rank_time_s": {"a": 0.1, "b": 0.2},
}
ROOT_CAUSE = {
    "kind": "config",
    "variable": "activation_function",
    "values": {"a": "'gelu_new'", "b": "'gelu'"},
    "file": "/x/a.py",
    "line": 12,
    "code": "cfg = Cfg(activation_function='gelu_new')",
    "library_default": False,
    "origins": {
        "a": {
            "kind": "config",
            "variable": "activation_function",
            "file": "/x/a.py",
            "line": 12,
            "code": "cfg = ...",
            "value": "'gelu_new'",
            "library_default": False,
            "assigned_to": "ACT",
        },
        "b": None,
    },
    "key_variable": {
        "kind": "call-target",
        "expr": "self.act",
        "file": "/x/m.py",
        "line": 9,
        "values": {"a": "NewGELU", "b": "GELU"},
        "knob": "hf.activation",
        "rerun": {"ran": True, "seconds": 1.5},
    },
    "data_flow": [
        {"file": "/x/m.py", "line": 9, "code": "y = self.act(x)", "expr": "self.act", "note": "k"},
        {"file": "/x/a.py", "line": 12, "code": "c", "expr": "e", "note": "", "values": {"a": "1"}},
    ],
    "rule": {
        "id": "gelu-tanh",
        "title": "t",
        "category": "api-misuse",
        "knob": None,
        "references": ["paper"],
        "grounding": "g",
        "orientation": "as-written",
    },
    "rules": ["gelu-tanh"],
    "note": "n",
}
FIX = {
    "summary": "In a.py:12 change ...",
    "patch": "--- a/a.py\n+++ b/a.py\n",
    "file": "a.py",
    "base_dir": "/x",
    "rule": "gelu-tanh",
    "references": ["paper"],
}


def _finding() -> Finding:
    f = Finding(1, "a", "waste", Region([3], [0], [1], 2.0, 0.1), Region([5]), 1.0, 0.5, 0.0)
    f.set_diagnosis_json(
        {
            "category": "api-misuse",
            "divergence": DIVERGENCE,
            "root_cause": ROOT_CAUSE,
            "fix": FIX,
        }
    )
    return f


def test_diagnosis_json_round_trips_with_the_contract_keys() -> None:
    f = _finding()
    assert f.divergence is not None and f.divergence.site_a.branch
    assert f.job is not None and f.job.collectives.phases == {"shadow": 3}
    assert f.root_cause.origin("a").assigned_to == "ACT" and f.root_cause.rule.id == "gelu-tanh"
    assert f.root_cause.key_variable.rerun_ran and f.fix.patch.startswith("---")
    out = f.to_json()
    assert out["divergence"] == DIVERGENCE
    assert out["root_cause"] == ROOT_CAUSE
    assert out["fix"] == FIX
    assert out["category"] == "api-misuse"


def test_undiagnosed_and_failed_findings_keep_their_shape() -> None:
    f = Finding(2, "b", "noise", Region(), Region(), 0.1, 0.01, 0.0)
    out = f.to_json()
    assert out["divergence"] is None and out["root_cause"] is None and out["fix"] is None
    failed = {"kind": "unknown", "error": "ValueError: x", "traceback": "tb"}
    f.set_diagnosis_json({"category": None, "root_cause": failed, "fix": {"summary": "s"}})
    rc = f.to_json()["root_cause"]
    assert (
        rc["kind"] == "unknown"
        and rc["error"] == "ValueError: x"
        and rc["values"]
        == {
            "a": None,
            "b": None,
        }
    )
    assert f.to_json()["fix"] == {"summary": "s", "patch": None, "file": None, "base_dir": None}


def test_stored_record_reads_back_the_same_finding() -> None:
    f = _finding()
    record = json.loads(json.dumps(finding_record(f)))  # as Diff.result_json keeps it
    back = finding_from_record(record)
    assert back.to_json() == f.to_json()
    assert back.region_a == f.region_a and back.occurrences == f.occurrences
