"""The last hop of the property walk: through the source, side by side (setupflow.py) —
from setup()'s returned value that became a source tensor, or from an operator's user
line out through its callers, to the first statement where the two sides differ."""

from __future__ import annotations

import subprocess
import textwrap

from builders import diff_result, profile, whole_run_finding
from recordings import record_scripts

from magneton.diagnose.source.index import source_index
from magneton.diagnose.source.setupflow import call_slice, setup_difference, setup_slice
from magneton.model import FrameRecord, OpRecord, Profile, RunInfo, TensorRecord

SETUP = """
import torch
from torch import nn

VOCAB, HIDDEN = 1000, 64
UNUSED = 3


def setup():
    torch.manual_seed(0)
    # a (hidden, vocab) checkpoint kernel
    kernel = torch.randn(HIDDEN, VOCAB)
    embedding = nn.Embedding.from_pretrained({weight})
    model = nn.Sequential(embedding).eval()
    {extra}ids = torch.randint(0, VOCAB, (4, 16))
    return model, ids


def main(model, ids):
    return model(ids)
"""


def _write(tmp_path, side: str, **kw) -> str:
    kw.setdefault("extra", "")
    p = tmp_path / f"{side}.py"
    p.write_text(textwrap.dedent(SETUP).format(**kw))
    return str(p)


def _profile(script: str, tensors: list[TensorRecord] | None = None) -> Profile:
    return profile("x", script=script, tensors=tensors or [])


PARAM = {"kind": "param", "name": "0.weight", "tensor": 0, "op": None, "hops": 0}
INPUTS = [
    TensorRecord(0, kind="param", name="0.weight"),
    TensorRecord(1, kind="input", name="args[1]"),
]


def test_setup_slice_follows_the_returned_value_to_the_constants_it_reads(tmp_path):
    a = _write(tmp_path, "a", weight="kernel.T")
    idx = source_index(a)
    texts = [u.text for u in setup_slice(idx, "setup", [0])]
    # the model's statements, the constants they read; not the ids, not UNUSED
    assert "embedding = nn.Embedding.from_pretrained(kernel.T)" in texts
    assert "VOCAB, HIDDEN = 1000, 64" in texts and "UNUSED = 3" not in texts
    assert not any(t.startswith("ids =") for t in texts)
    assert texts[-1] == "return model, ids"


def test_the_first_differing_statement_gives_the_value_to_port(tmp_path):
    a = _write(tmp_path, "a", weight="kernel.T")
    b = _write(tmp_path, "b", weight="kernel.T.contiguous()")
    found = setup_difference(_profile(a, INPUTS), _profile(b, INPUTS), {"a": PARAM, "b": PARAM})
    assert found is not None
    oa, ob = found["a"], found["b"]
    assert (oa.value, ob.value) == ("kernel.T", "kernel.T.contiguous()")
    assert oa.code == "embedding = nn.Embedding.from_pretrained(kernel.T)"
    assert oa.variable == "embedding" and oa.span is not None and ob.span is not None
    # a comment above a statement is not a difference; identical slices have none
    same = setup_difference(_profile(a, INPUTS), _profile(a, INPUTS), {"a": PARAM, "b": PARAM})
    assert same is None


def test_a_statement_one_side_lacks_is_inserted_where_it_belongs(tmp_path):
    a = _write(tmp_path, "a", weight="kernel.T")
    b = _write(tmp_path, "b", weight="kernel.T", extra="model = model.half()\n    ")
    found = setup_difference(_profile(a, INPUTS), _profile(b, INPUTS), {"a": PARAM, "b": PARAM})
    assert found is not None
    assert found["b"].code == "model = model.half()" and found["b"].span is None
    ins = found["a"].insert
    assert found["a"].library_default and ins["statement"] == "model = model.half()"
    assert found["a"].value == "(not run)"
    assert found["a"].code == "model = nn.Sequential(embedding).eval()"


CALLS = """
import torch

PAD_ID = 0


def collate(sentences, pad_to_multiple_of=1):
    longest = max(len(s) for s in sentences)
    length = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    ids = torch.full((len(sentences), length), PAD_ID)
    return ids


def main(sentences):
    ids = collate(sentences, pad_to_multiple_of={pad})
    return ids.sum()
"""


def _line(path: str, text: str) -> int:
    return next(i for i, ln in enumerate(open(path), 1) if text in ln)


def _op_profile(path: str) -> Profile:
    frames = [
        FrameRecord(0, path, _line(path, "ids = collate("), "main"),
        FrameRecord(1, path, _line(path, "ids = torch.full("), "collate"),
    ]
    op = OpRecord(0, "aten::full", frames=[0, 1], outputs=[0])
    return Profile(run=RunInfo(name="x", script=path), ops=[op], frames=frames,
                   tensors=[TensorRecord(0, producer=0)])  # fmt: skip


def test_an_operator_set_property_is_followed_out_through_its_callers(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(CALLS.format(pad=256))
    b.write_text(CALLS.format(pad=8))
    idx = source_index(str(a))
    texts = [
        u.text
        for u in call_slice(idx, [_line(str(a), "ids = collate("), _line(str(a), "torch.full")])
    ]
    assert texts == [
        "PAD_ID = 0",
        "ids = collate(sentences, pad_to_multiple_of=256)",
        "longest = max(len(s) for s in sentences)",
        "length = -(-longest // pad_to_multiple_of) * pad_to_multiple_of",
        "ids = torch.full((len(sentences), length), PAD_ID)",
    ]
    op = {"kind": "op", "op": 0, "name": "aten::full", "tensor": 0, "hops": 0}
    found = setup_difference(_op_profile(str(a)), _op_profile(str(b)), {"a": op, "b": op})
    assert found is not None
    assert found["a"].variable == "pad_to_multiple_of"
    assert (found["a"].value, found["b"].value) == ("256", "8")
    assert found["a"].line == _line(str(a), "ids = collate(")


NO_GRAD = """
import torch
from torch import nn


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)).eval()
    return model, torch.randn(16, 64)


{decorator}def main(model, x):
    return model(x)
"""


def test_grad_mode_is_read_from_the_recorded_operators_and_fixed_with_a_decorator(tmp_path):
    """The config snapshot is taken outside the measured call and reads grad mode on for
    both sides; the operators' autograd records say which side ran with autograd. The
    side without a setter gets the efficient side's as a decorator on its entry."""
    import subprocess

    from magneton.diagnose.cause.rootcause import diagnose_result
    from magneton.diagnose.source.argflow import observed_config
    from magneton.graphdb import open_db

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text(NO_GRAD.format(decorator=""))
    (proj / "b.py").write_text(NO_GRAD.format(decorator="@torch.inference_mode()\n"))
    with open_db(tmp_path / "db") as db:
        pa, pb = record_scripts(db, proj, "grad")
        assert pa.config["torch.is_grad_enabled"] == pb.config["torch.is_grad_enabled"]
        assert observed_config(pa)["torch.is_grad_enabled"] == "True"
        assert observed_config(pb)["torch.is_grad_enabled"] == "False"
        f = whole_run_finding(pa, pb)
        diagnose_result(db, diff_result(pa, pb, f), rerun=False)
    rc = f.root_cause.to_json()
    assert rc["variable"] == "torch.is_grad_enabled", rc
    assert rc["values"] == {"a": "True", "b": "False"}
    assert rc["origins"]["b"]["code"] == "@torch.inference_mode()"
    assert rc["code"] == "def main(model, x):" and rc["file"] == str(proj / "a.py")
    assert "add `@torch.inference_mode()`" in f.fix.summary, f.fix.summary
    (proj / "fix.patch").write_text(f.fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=proj, check=True)
    assert "@torch.inference_mode()\ndef main(model, x):" in (proj / "a.py").read_text()


def test_statements_that_differ_in_several_places_are_shown_whole(tmp_path):
    a = _write(tmp_path, "a", weight="kernel.T")
    b = _write(tmp_path, "b", weight="kernel.T")
    text = (tmp_path / "b.py").read_text()
    (tmp_path / "b.py").write_text(
        text.replace(
            "embedding = nn.Embedding.from_pretrained(kernel.T)",
            "table = nn.Embedding.from_pretrained(kernel.T.contiguous())\n    embedding = table",
        )  # fmt: skip
    )
    found = setup_difference(_profile(a, INPUTS), _profile(b, INPUTS), {"a": PARAM, "b": PARAM})
    assert found is not None
    # target and value differ: the statements themselves, nothing to port by position
    assert found["a"].value == "embedding = nn.Embedding.from_pretrained(kernel.T)"
    assert found["a"].span is None and found["b"].span is None


LOSS = """
import torch
import torch.nn.functional as F

BATCH, SEQ, VOCAB = 8, 256, 4000


def main(logits, labels):
    scores = {scores}
    return F.cross_entropy(scores, {labels})
"""


def _loss_profile(path: str) -> Profile:
    """The view on the `scores` line, then the loss on the `return` line."""
    frames = [
        FrameRecord(0, path, _line(path, "scores = "), "main"),
        FrameRecord(1, path, _line(path, "return F.cross_entropy"), "main"),
    ]
    ops = [
        OpRecord(0, "aten::view", frames=[0], outputs=[0]),
        OpRecord(1, "aten::cross_entropy_loss", frames=[1], inputs=[0], outputs=[1]),
    ]
    tensors = [TensorRecord(0, producer=0), TensorRecord(1, producer=1)]
    return Profile(run=RunInfo(name="x", script=path), ops=ops, frames=frames, tensors=tensors)


def test_a_constant_both_files_define_is_not_the_difference_and_the_port_is_whole(tmp_path):
    """Only b's slice reads VOCAB (`reshape(-1, VOCAB)`), but both files define it
    alike: the difference is the `scores` statement. Porting its value alone would feed
    flattened scores to unflattened labels, so the fix ports both statements."""
    from magneton.diagnose.fix.plan import RunPair, _FixInput, _setting_fix
    from magneton.model import Finding, Fix, Region

    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(LOSS.format(scores="logits.permute(0, 2, 1)", labels="labels"))
    b.write_text(LOSS.format(scores="logits.reshape(-1, VOCAB)", labels="labels.reshape(-1)"))
    pa, pb = _loss_profile(str(a)), _loss_profile(str(b))
    op = {"kind": "op", "op": 0, "name": "aten::view", "tensor": 0, "hops": 0}
    found = setup_difference(pa, pb, {"a": op, "b": op})
    assert found is not None
    assert (found["a"].value, found["b"].value) == (
        "logits.permute(0, 2, 1)",
        "logits.reshape(-1, VOCAB)",
    )
    assert found["a"].line == _line(str(a), "scores = ")

    f = Finding(1, "a", "waste", Region(ops=[0, 1]), Region(ops=[0, 1]), 1.0, 0.1, 0.0)
    x = _FixInput(f, None, found, RunPair(pa, pb), None, "api-argument")
    fix = Fix(base_dir=str(tmp_path))
    _setting_fix(x, fix, "")
    assert fix.patch and fix.summary.startswith("Replace a.py:9-10 with the efficient side's code")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "fix.patch").write_text(fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=tmp_path, check=True)
    assert a.read_text() == b.read_text()
