"""`magneton diff` end to end, as a user runs it: record two scripts with `magneton
record`, diff them, read the table / JSON / stored Cypher graph.

Energy comes from the recorder's model source with a profile that prices only FLOPs
and bytes (`p_static_w = 0`): the default profile adds static power × measured time,
and on a shared CI core the timing noise of microsecond operators would decide whether
identical runs differ by 10%. Work-only estimates are deterministic, and still the real
recorder, attribution and CLI path.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import warm_cli

from magneton.cli import main as cli

GELU_SCRIPT = """
import torch
from transformers import GPT2Config, GPT2Model

def setup():
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000,
                     activation_function="{act}")
    model = GPT2Model(cfg).eval()
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed({seed}))
    return model, ids

def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
"""

ADDMM_SCRIPT = """
import torch

def setup():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(64, 256, generator=g), torch.randn(256, 256, generator=g),
            torch.randn(256, generator=g))

def main(x, w, b):
    return {expr}
"""

WORK_MODEL = """
name = "work-only"
p_static_w = 0.0
e_flop_pj = 35.0
e_byte_pj = 100.0
citation = "tests: FLOPs and bytes only, deterministic"
"""


def magneton(*args: str) -> subprocess.CompletedProcess:
    return warm_cli.run(args, env={**os.environ, "COLUMNS": "200"}, timeout=300)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("diff")
    model = root / "work.toml"
    model.write_text(WORK_MODEL)
    scripts = {
        "gelu_new": GELU_SCRIPT.format(act="gelu_new", seed=1),
        "gelu_fused": GELU_SCRIPT.format(act="gelu_pytorch_tanh", seed=1),
        "gelu_new_again": GELU_SCRIPT.format(act="gelu_new", seed=1),
        "gelu_other_ids": GELU_SCRIPT.format(act="gelu_new", seed=2),
        "addmm": ADDMM_SCRIPT.format(expr="torch.addmm(b, x, w)"),
        "add_mm": ADDMM_SCRIPT.format(expr="b + torch.mm(x, w)"),
    }
    d = root / "db"
    for run, text in scripts.items():
        path = root / f"{run}.py"
        path.write_text(text)
        rc = cli(
            [
                "record",
                str(path),
                "--db",
                str(d),
                "--run",
                run,
                "--warmup",
                "0",
                "--repeat",
                "1",
                "--power",
                f"model:{model}",
                "--no-call-paths",
            ]
        )
        assert rc == 0
    return d


def run(capsys, *args: str) -> tuple[int, str, str]:
    """`magneton ARGS` in this process (a subprocess per call would spend seconds
    importing torch; two tests below do go through a real subprocess)."""
    capsys.readouterr()
    rc = cli(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def diff_json(capsys, db: Path, a: str, b: str, *extra: str) -> dict:
    rc, out, err = run(capsys, "diff", "--db", str(db), a, b, "--json", *extra)
    assert rc == 0, err
    return json.loads(out)


def non_alias(ops: list[str]) -> list[str]:
    return [o for o in ops if o not in ("aten::view", "aten::_unsafe_view")]


def test_tanh_gelu_chain_is_waste_against_the_fused_gelu(db, capsys):
    proc = magneton("diff", "--db", str(db), "gelu_new", "gelu_fused", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # DiffResult.to_json's keys, plus the findings grouped by cause (one per cause)
    assert set(out) == {
        "a",
        "b",
        "threshold",
        "matched_pairs",
        "message",
        "findings",
        "dismissed",
        "groups",
    }
    grouped = sorted(i for g in out["groups"] for i in g["finding_ids"])
    assert grouped == sorted(f["id"] for f in out["findings"])
    assert (
        out["a"]["energy_method"] == "estimated" and out["a"]["power_source"] == "model:work-only"
    )
    assert out["message"] == "" and out["threshold"] == 0.1 and out["matched_pairs"] > 10
    f = out["findings"][0]
    assert f["id"] == 1 and f["wasteful"] == "a" and f["verdict"] == "waste"
    # HF gelu_new: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))), once per layer
    one_layer = [
        "aten::mul",
        "aten::pow",
        "aten::mul",
        "aten::add",
        "aten::mul",
        "aten::tanh",
        "aten::add",
        "aten::mul",
    ]
    assert non_alias(f["ops"]["a"]) == one_layer * 2
    assert non_alias(f["ops"]["b"]) == ["aten::gelu"] * 2
    assert f["modules"] == {
        "a": ["h.0.mlp.act", "h.1.mlp.act"],
        "b": ["h.0.mlp.act", "h.1.mlp.act"],
    }
    assert f["energy_j"]["a"] > f["energy_j"]["b"] > 0
    assert f["saving_j"] == pytest.approx(f["energy_j"]["a"] - f["energy_j"]["b"])
    assert 0 < f["saving_share"] < 1 and f["output_rel_diff"] < 0.01
    assert f["fix"] is not None and len(f["op_idx"]["a"]) == len(f["ops"]["a"])
    savings = [x["saving_j"] for x in out["findings"]]
    assert savings == sorted(savings, reverse=True)

    # the table a user reads
    rc, text, _ = run(capsys, "diff", "--db", str(db), "gelu_new", "gelu_fused")
    assert rc == 0
    assert "estimated" in text and "model:work-only" in text
    assert "gelu ×2" in text and "tanh" in text and "waste" in text


def test_stored_regions_answer_cypher_and_are_replaced_on_rerun(db, capsys):
    diff_json(capsys, db, "gelu_new", "gelu_fused")
    out = diff_json(capsys, db, "gelu_new", "gelu_fused")

    def q(cypher: str) -> list[dict]:
        rc, text, err = run(capsys, "query", "--db", str(db), cypher, "--json")
        assert rc == 0, err
        return json.loads(text)

    n = q("MATCH (d:Diff {run_a: 'gelu_new', run_b: 'gelu_fused'}) RETURN count(*) AS n")
    assert n[0]["n"] == 1
    regions = q(
        "MATCH (m:MatchedRegion {run_a: 'gelu_new', run_b: 'gelu_fused'}) RETURN count(*) AS n"
    )
    assert regions[0]["n"] == out["matched_pairs"]
    top = q(
        "MATCH (f:DiffFinding {run_a: 'gelu_new', run_b: 'gelu_fused', id: 1})-[:FLAGS]->"
        "(m:MatchedRegion)<-[r:IN_REGION]-(o:Operator) "
        "RETURN o.run AS run, o.name AS name, r.side AS side ORDER BY o.idx"
    )
    assert {r["name"] for r in top if r["side"] == "b"} >= {"aten::gelu"}
    assert {r["run"] for r in top if r["side"] == "a"} == {"gelu_new"}
    costly = q(
        "MATCH (m:MatchedRegion {run_a: 'gelu_new', run_b: 'gelu_fused'}) "
        "RETURN m.energy_a_j - m.energy_b_j AS extra ORDER BY extra DESC LIMIT 1"
    )
    assert costly[0]["extra"] == pytest.approx(out["findings"][0]["saving_j"] / 2, rel=1e-6)


def test_identical_runs_have_no_finding(db, capsys):
    out = diff_json(capsys, db, "gelu_new", "gelu_new_again")
    assert out["findings"] == [] and out["message"] == "" and out["matched_pairs"] > 0
    rc, text, _ = run(capsys, "diff", "--db", str(db), "gelu_new", "gelu_new_again")
    assert rc == 0 and "none differs" in text


def test_fused_addmm_and_add_plus_mm_differ_by_less_than_ten_percent(db, capsys):
    out = diff_json(capsys, db, "addmm", "add_mm")
    assert out["matched_pairs"] == 1 and out["findings"] == []
    assert out["b"]["energy_j"] / out["a"]["energy_j"] < 1.1


def test_different_inputs_print_a_message_and_exit_zero(db, capsys):
    rc, text, _ = run(capsys, "diff", "--db", str(db), "gelu_new", "gelu_other_ids")
    assert rc == 0
    assert "different inputs" in text and "args[1]" in text
    out = diff_json(capsys, db, "gelu_new", "gelu_other_ids")
    assert out["findings"] == [] and "different inputs" in out["message"]


def test_user_errors_are_one_line(db, capsys):
    proc = magneton("diff", "--db", str(db), "gelu_new", "nope")
    assert proc.returncode == 2 and proc.stderr.startswith("magneton: no run 'nope'")
    assert "Traceback" not in proc.stderr
    rc, _, err = run(
        capsys, "diff", "--db", str(db), "gelu_new", "gelu_fused", "--threshold", "0.01"
    )
    assert rc == 2 and "threshold" in err
    rc, _, err = run(capsys, "diff", "--db", str(db.parent / "missing"), "a", "b")
    assert rc == 2 and "no Magneton DB" in err


PAIR_FINDINGS = "MATCH (f:DiffFinding) WHERE f.run_a = $a AND f.run_b = $b RETURN count(f)"


def test_a_timing_blip_on_identical_code_is_noise_not_waste(db, capsys, tmp_path):
    """One recording stored twice, where in the copy the layer-1 LayerNorm came out 3×
    costlier (what a busy neighbour does to a time-based estimate): the difference is
    flagged, but diagnosis finds the same kernels, call paths, arguments and settings on
    both sides, so it is no finding: it is dismissed, said in one line and listed under
    "dismissed" in --json (issue 13: an A/A diff shows no finding of any verdict)."""
    from magneton.graphdb import open_db

    script = tmp_path / "ln.py"
    script.write_text(GELU_SCRIPT.format(act="gelu_new", seed=1))
    # with call paths: without kernels to compare, diagnosis cannot rule a cause out
    rc = cli(["record", str(script), "--db", str(db), "--run", "ln_src", "--warmup", "0",
              "--repeat", "1", "--power", "model:work-only"])  # fmt: skip
    assert rc == 0
    with open_db(db) as d:
        p = d.load_profile("ln_src")
        p.run.name = "ln_blip"
        mod = {m.idx: m.name for m in p.modules}
        hit = [o for o in p.ops if mod.get(o.module_idx) == "h.1.ln_1"]
        assert hit
        for o in hit:
            p.run.energy_j += 2.0 * o.energy_j
            o.energy_j *= 3.0
        d.save_profile(p)
    out = diff_json(capsys, db, "ln_src", "ln_blip", "--no-rerun")
    assert out["findings"] == [] and out["groups"] == []
    assert out["dismissed"], "the blip is over the threshold and must be examined"
    assert {f["verdict"] for f in out["dismissed"]} == {"noise"}
    f = out["dismissed"][0]
    assert f["wasteful"] == "b" and "aten::native_layer_norm" in f["ops"]["b"]
    assert "same kernels" in f["root_cause"]["note"] and not (f["fix"] or {}).get("patch")
    rc, text, _ = run(capsys, "diff", "--db", str(db), "ln_src", "ln_blip", "--no-rerun")
    assert rc == 0
    assert "none differs in energy" in text and "software cause" in text
    assert "dismissed (not findings): 1 difference(s) over the threshold" in text
    assert "native_layer_norm" in text and "waste" not in text
    with open_db(db) as d:  # what the TUI and export-patch read: no finding stored
        assert d.query(PAIR_FINDINGS, {"a": "ln_src", "b": "ln_blip"}).rows[0][0] == 0


def test_fail_on_waste_is_a_ci_gate_with_exit_3(db, capsys):
    """`--fail-on waste` exits 3 when a waste finding exists, prints the same output
    (the JSON unchanged), and passes when nothing is waste or the saving is too small."""
    args = ("diff", "--db", str(db), "gelu_new", "gelu_fused", "--no-rerun")
    rc, out, err = run(capsys, *args, "--json")
    assert rc == 0, err
    plain = json.loads(out)
    assert any(f["verdict"] == "waste" for f in plain["findings"])
    rc, out, err = run(capsys, *args, "--json", "--fail-on", "waste")
    assert rc == 3 and "--fail-on waste" in err
    assert json.loads(out) == plain  # the gate does not change the contract
    rc, out, _ = run(capsys, *args, "--fail-on", "waste")
    assert rc == 3 and "waste" in out  # the table is still printed
    share = max(f["saving_share"] for f in plain["findings"] if f["verdict"] == "waste")
    rc, _, err = run(capsys, *args, "--fail-on", "waste", "--fail-on-share", f"{share * 1.01}")
    assert rc == 0, err
    # a waste finding under the gate's share is named as below it, not silently dropped
    assert "below the gate's minimum share" in err and "#" in err
    # the two addmm forms differ by less than the threshold: nothing to fail on
    rc, _, err = run(capsys, "diff", "--db", str(db), "addmm", "add_mm", "--fail-on", "waste")
    assert rc == 0, err
    rc, _, err = run(capsys, *args, "--fail-on", "waste", "--fail-on-share", "1.5")
    assert rc == 2 and "--fail-on-share" in err


def test_pipeline_is_pure_and_callers_store_explicitly(db):
    """`run_diff` reads a writable DB without writing it; `store_outcome` stores."""
    from magneton.diagnose.pipeline import run_diff, store_outcome
    from magneton.graphdb import open_db
    from magneton.graphdb.matches import delete_diff, load_diff

    stages: list[tuple[str, int, int]] = []
    with open_db(db) as h:
        delete_diff(h, "add_mm", "addmm")
        out = run_diff(
            h,
            "add_mm",
            "addmm",
            threshold=0.05,
            rerun=False,
            progress=lambda stage, res, done, total: stages.append((stage, done, total)),
        )
        assert load_diff(h, "add_mm", "addmm") is None  # nothing written
        store_outcome(h, out)
        stored, regions = load_diff(h, "add_mm", "addmm")
    # status stages first ("loaded", "matched": done = total = 0, no findings), then counts
    assert stages[0] == ("loaded", 0, 0)
    counted = [s for s in stages if s[0] in ("detected", "diagnosed")]
    assert all(s[1:] == (0, 0) for s in stages if s not in counted)
    assert counted[0][0] == "detected"
    assert [s for s in stages if s[0] == "diagnosed"][-1:] == (
        [("diagnosed", len(out.result.findings), len(out.result.findings))]
        if out.result.findings
        else []
    )
    assert stored.to_json() == out.result.to_json() and len(regions) == len(out.regions)
