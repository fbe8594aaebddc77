"""Knowledge rules: the shipped files load and are grounded, malformed files are reported
with file and line, evidence matching honours orientation, and the rules land in Kùzu."""

from __future__ import annotations

from pathlib import Path

import pytest

from magneton.knowledge.base import CATEGORIES, RuleError, default_knowledge, load_knowledge
from magneton.knowledge.match import SideFacts, fragment_in_chain, match_rules

RULES = Path(__file__).resolve().parents[1] / "knowledge" / "rules"


def test_shipped_rules_are_many_grounded_and_consistent():
    kb = default_knowledge()
    assert len(kb.rules) >= 15
    for r in kb.rules:
        assert r.category in CATEGORIES
        assert r.references, r.id
        assert all(ref.startswith(("https://", "paper:")) for ref in r.references), r.id
        if r.knob:
            assert kb.knob(r.knob) is not None, r.id
        assert r.file.endswith(".toml") and r.line > 0
    cats = {r.category for r in kb.rules}
    assert cats == set(CATEGORIES)  # every category of the paper is covered
    # every Table 1/3 grounding names its case
    paper = [r for r in kb.rules if "paper" in r.grounding]
    assert len(paper) >= 8


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


KNOB = """
[[knob]]
key = "torch.backends.mkldnn.enabled"
kind = "global-flag"
description = "oneDNN"
assign = ["torch.backends.mkldnn.enabled"]
"""


def test_toml_syntax_error_names_file_and_line(tmp_path):
    bad = _write(tmp_path, "bad.toml", KNOB + '\n[[rule]]\nid = "x"\ntitle = "unterminated\n')
    with pytest.raises(RuleError) as e:
        load_knowledge([bad])
    msg = str(e.value)
    assert msg.startswith(f"{bad}:")
    assert ":10:" in msg or "line 10" in msg


def test_schema_error_points_at_the_rule_header(tmp_path):
    text = (
        KNOB
        + """
[[rule]]
id = "ok-rule"
title = "t"
description = "d"
category = "redundant"
fix = "f"
grounding = "g"
references = ["https://example.org/a"]
[rule.wasteful]
ops = ["aten::repeat"]

[[rule]]
id = "broken"
title = "t"
description = "d"
category = "waste"
fix = "f"
grounding = "g"
references = ["https://example.org/b"]
[rule.wasteful]
ops = ["aten::repeat"]
"""
    )
    f = _write(tmp_path, "rules.toml", text)
    header = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == "[[rule]]"][1]
    with pytest.raises(RuleError) as e:
        load_knowledge([f])
    assert str(e.value).startswith(f"{f}:{header}: rule 'broken'")
    assert "category" in str(e.value)


@pytest.mark.parametrize(
    "extra, needle",
    [
        ('knob = "no.such.knob"', "not defined"),
        ('colour = "red"', "unknown key"),
        ('fix = "use {nonsense}"', "unknown field"),
    ],
)
def test_schema_errors(tmp_path, extra, needle):
    body = {
        "id": '"r"',
        "title": '"t"',
        "description": '"d"',
        "category": '"redundant"',
        "fix": '"f"',
        "grounding": '"g"',
        "references": '["https://example.org"]',
    }
    key = extra.split("=")[0].strip()
    body[key] = extra.split("=", 1)[1].strip()
    text = KNOB + "\n[[rule]]\n" + "\n".join(f"{k} = {v}" for k, v in body.items())
    text += '\n[rule.wasteful]\nops = ["aten::repeat"]\n'
    with pytest.raises(RuleError, match=needle):
        load_knowledge([_write(tmp_path, "r.toml", text)])


def test_duplicate_rule_ids_are_refused(tmp_path):
    rule = """
[[rule]]
id = "dup"
title = "t"
description = "d"
category = "redundant"
fix = "f"
grounding = "g"
references = ["https://example.org"]
[rule.wasteful]
ops = ["aten::repeat"]
"""
    a = _write(tmp_path, "a.toml", KNOB + rule)
    b = _write(tmp_path, "b.toml", rule)
    with pytest.raises(RuleError, match="already used"):
        load_knowledge([a, b])


def test_fragment_matching_is_elementwise():
    chain = "aten::conv2d > aten::convolution > aten::_convolution > aten::mkldnn_convolution"
    assert fragment_in_chain("aten::_convolution > aten::mkldnn_convolution", chain)
    assert not fragment_in_chain("aten::convolution > aten::mkldnn_convolution", chain)
    assert fragment_in_chain("aten::_convolution > aten::mkldnn_*", chain)
    # substring of an element is not an element
    assert not fragment_in_chain("aten::conv", chain)


def _conv(leaf: list[str]) -> SideFacts:
    return SideFacts(
        ops=["aten::convolution"],
        apis=["aten::conv2d"],
        call_paths=["aten::conv2d > aten::convolution > aten::_convolution > " + " > ".join(leaf)],
        kernels=[leaf[-1]],
        devices={"cpu"},
    )


def test_mkldnn_rule_matches_only_in_the_measured_direction():
    kb = default_knowledge()
    slow = _conv(["aten::thnn_conv2d", "aten::_slow_conv2d_forward"])
    fast = _conv(["aten::mkldnn_convolution"])
    ids = [m.rule.id for m in match_rules(kb, slow, fast, level="dispatch")]
    assert ids[0] == "mkldnn-conv-disabled"
    # the rule is not symmetric: mkldnn being the wasteful side is not this pattern
    assert "mkldnn-conv-disabled" not in [
        m.rule.id for m in match_rules(kb, fast, slow, level="dispatch")
    ]
    # level filter: a python-level divergence is not explained by a dispatch rule
    assert "mkldnn-conv-disabled" not in [
        m.rule.id for m in match_rules(kb, slow, fast, level="python")
    ]


def test_symmetric_rule_records_orientation():
    kb = default_knowledge()
    ce = SideFacts(
        ops=["aten::_log_softmax", "aten::nll_loss2d_forward"],
        apis=["aten::cross_entropy_loss"],
        call_paths=["aten::cross_entropy_loss > aten::log_softmax > aten::_log_softmax"],
    )
    manual = SideFacts(
        ops=["aten::_log_softmax", "aten::gather", "aten::mul"], apis=["aten::log_softmax"]
    )
    as_written = {m.rule.id: m for m in match_rules(kb, ce, manual)}
    reversed_ = {m.rule.id: m for m in match_rules(kb, manual, ce)}
    rid = "cross-entropy-vs-log-softmax-gather"
    assert not as_written[rid].reversed
    assert reversed_[rid].reversed


def test_internal_call_path_ops_are_not_operators():
    """A scalar `mul` that converts its scalar (`aten::mul > aten::to > aten::_to_copy >
    aten::copy_`) did not run a copy operator: no redundant-copy rule."""
    kb = default_knowledge()
    gelu_new = SideFacts(
        ops=["aten::mul", "aten::pow", "aten::add", "aten::tanh"],
        call_paths=["aten::mul > aten::to > aten::_to_copy > aten::copy_"],
    )
    fused = SideFacts(ops=["aten::gelu"], call_paths=["aten::gelu"])
    ids = [m.rule.id for m in match_rules(kb, gelu_new, fused)]
    assert "hf-gelu-composite" in ids
    assert "redundant-copy" not in ids


def test_rules_are_stored_in_kuzu_once(tmp_path):
    from magneton.graphdb import open_db
    from magneton.graphdb.rules import store_knowledge

    kb = default_knowledge()
    with open_db(tmp_path / "db") as db:
        assert store_knowledge(db, kb)
        assert not store_knowledge(db, kb)  # unchanged rule set: nothing rewritten
        n = db.query("MATCH (r:Rule) RETURN count(r)").rows[0][0]
        assert n == len(kb.rules)
        rows = db.query(
            "MATCH (r:Rule {id: 'mkldnn-conv-disabled'})-[:ABOUT_KNOB]->(k:Knob) "
            "MATCH (r)-[:HAS_PATTERN]->(p:RulePattern {side: 'efficient'}) "
            "RETURN k.key, p.pattern"
        ).rows
        assert rows == [
            ["torch.backends.mkldnn.enabled", "aten::_convolution > aten::mkldnn_convolution"]
        ]


def test_a_frameworks_settings_count_only_between_runs_of_that_framework():
    """Magneton imports torch in every recording, so a TensorFlow run snapshots PyTorch's
    settings too; between a TensorFlow run and a PyTorch run they explain nothing."""
    kb = default_knowledge()
    torch_a = {"torch.is_grad_enabled": "False", "env.OMP_WAIT_POLICY": "PASSIVE"}
    torch_b = {"torch.is_grad_enabled": "True", "env.OMP_WAIT_POLICY": "ACTIVE"}
    keys = {key for _, key, _, _ in kb.config_differences(torch_a, torch_b)}
    assert {"torch.is_grad_enabled", "env.OMP_WAIT_POLICY"} <= keys
    tf_a = {**torch_a, "framework": "tf"}
    keys = {key for _, key, _, _ in kb.config_differences(tf_a, torch_b)}
    assert "torch.is_grad_enabled" not in keys and "env.OMP_WAIT_POLICY" in keys
