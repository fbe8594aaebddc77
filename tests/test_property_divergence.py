"""Kernel-argument divergence: the same operators reached the same way, one operand's
recorded property differs; the walk back through the recorded dataflow, then into
setup() (examples/cases/channels_last_setup, and small recorded graphs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import warm_cli
from fixcheck import assert_no_noop_fix

from magneton.diagnose.cause.divergence import layout, operand_property
from magneton.diagnose.source.argflow import observed, trace_both, trace_property
from magneton.model import OpRecord, Profile, RunInfo, TensorRecord

CASE = Path(__file__).resolve().parents[1] / "examples" / "cases" / "channels_last_setup"

NCHW = ([8, 64, 32, 32], [65536, 1024, 32, 1])
NHWC = ([8, 64, 32, 32], [65536, 1, 2048, 64])
W_NCHW = ([64, 3, 3, 3], [27, 9, 3, 1])
W_NHWC = ([64, 3, 3, 3], [27, 1, 9, 3])


def _t(idx: int, shape_stride, producer: int = -1, kind: str = "activation", name: str = ""):
    shape, stride = shape_stride
    row_major = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        row_major[d] = row_major[d + 1] * shape[d + 1]
    contiguous = stride == row_major
    return TensorRecord(
        idx, producer=producer, kind=kind, name=name, shape=shape, stride=stride,
        contiguous=contiguous, dtype="torch.float32",
    )  # fmt: skip


def _conv_relu_mean(weight_layout, act_layout) -> Profile:
    """x, weight -> convolution -> relu -> mean: the graph a conv net records."""
    tensors = [
        _t(0, ([8, 3, 32, 32], [3072, 1024, 32, 1]), kind="input", name="args[0]"),
        _t(1, weight_layout, kind="param", name="0.weight"),
        _t(2, act_layout, producer=0),
        _t(3, act_layout, producer=1),
        _t(4, ([8, 64, 1, 1], [64, 1, 1, 1]), producer=2),
    ]
    ops = [
        OpRecord(0, "aten::convolution", inputs=[0, 1], outputs=[2]),
        OpRecord(1, "aten::relu", inputs=[2], outputs=[3]),
        OpRecord(2, "aten::mean", inputs=[3], outputs=[4]),
    ]
    return Profile(run=RunInfo(name="x"), ops=ops, tensors=tensors)


def test_layout_names_the_memory_format():
    assert layout(_t(0, NCHW)) == (0, 1, 2, 3)
    assert layout(_t(0, NHWC)) == (0, 2, 3, 1)
    assert layout(_t(0, W_NHWC)) == layout(_t(0, NHWC))


def test_operand_property_and_the_walk_back_to_the_parameter():
    pa = _conv_relu_mean(W_NCHW, NCHW)
    pb = _conv_relu_mean(W_NHWC, NHWC)
    prop = operand_property(pa.ops[2], pa, pb.ops[2], pb)
    assert prop is not None and (prop.name, prop.operand) == ("strides", 0)
    assert prop.values == {"a": NCHW[1], "b": NHWC[1]}
    trace_both(prop, 2, 2, pa, pb)
    # relu and the conv pass the layout on; the conv's output takes its weight's layout
    assert prop.set_by["b"] == {
        "tensor": 1, "kind": "param", "name": "0.weight", "op": None, "hops": 2
    }  # fmt: skip
    assert observed(prop, "b", pb) == "channels_last"
    assert observed(prop, "a", pa) == "contiguous_format"
    # a conversion inside the region is where the walk stops
    pc = _conv_relu_mean(W_NCHW, NCHW)
    pc.tensors[3] = _t(3, NHWC, producer=1)  # relu's output only: relu set the layout
    assert trace_property(pc, 2, 0, "strides")["name"] == "aten::relu"
    # same shapes, dtypes and layouts: no property differs
    assert operand_property(pa.ops[2], pa, pa.ops[2], pa) is None


def magneton(*args: str) -> str:
    res = warm_cli.run(args)
    assert res.returncode == 0, f"magneton {' '.join(args)} failed:\n{res.stderr[-2000:]}"
    return res.stdout


def _double_energy(db: str, run: str, op_name: str) -> None:
    """Make the recorded `op_name` operators of `run` cost twice their energy, in every
    timed iteration's samples too (what detection's statistics read)."""
    from magneton.graphdb import open_db

    with open_db(db) as d:
        p = d.load_profile(run)
        hit = [o.idx for o in p.ops if o.name == op_name]
        assert hit, op_name
        for i in hit:
            p.run.energy_j += p.ops[i].energy_j
            p.ops[i].energy_j *= 2.0
            for row in p.energy.op_samples_j:
                row[i] *= 2.0
        d.save_profile(p, replace=True)


def test_memory_format_set_in_setup_is_found_and_the_patch_applies(tmp_path):
    work = tmp_path / "case"
    shutil.copytree(CASE, work)
    db = str(tmp_path / "db")
    for side in ("a", "b"):
        magneton("record", str(work / f"{side}.py"), "--db", db, "--run", side, "--repeat", "3")
    # This is about the walk back into setup(), not about which layout this CPU runs
    # faster (on the 2-core CI machine the convolutions came out within noise, and only a
    # Python-time row was left): the recorded convolutions of a are made to cost twice
    # as much, so detection flags them on any machine, and the diff runs on the stored
    # profiles alone (--no-rerun: re-measuring would undo the edit).
    _double_energy(db, "a", "aten::convolution")
    diff = magneton("diff", "--db", db, "a", "b", "--json", "--no-rerun")
    findings = json.loads(diff)["findings"]
    assert_no_noop_fix(findings)
    mf = [f for f in findings if (f.get("root_cause") or {}).get("variable") == "memory_format"]
    assert mf, [(f.get("divergence"), f.get("root_cause")) for f in findings]
    f = mf[0]
    div, rc = f["divergence"], f["root_cause"]
    # the relu regions differ in their operand's strides (`args`); the first conv's
    # region in its dispatch (an extra layout copy on b, `extra`): both name the weight
    assert div["kind"] in ("args", "extra") and div["property"]["name"] == "strides"
    assert div["property"]["set_by"]["b"]["kind"] == "param"
    assert rc["kind"] == "api-argument"
    assert rc["values"] == {"a": "torch.contiguous_format", "b": "torch.channels_last"}
    # both origins are found whichever side measured slower
    assert (
        rc["origins"]["b"]["code"].strip() == "model = model.to(memory_format=torch.channels_last)"
    )
    assert rc["origins"]["a"]["code"].strip() == "model = make_model().eval()"
    assert f["wasteful"] == "a"
    assert (os.path.basename(rc["file"]), rc["code"].strip()) == (
        "a.py",
        "model = make_model().eval()",
    )
    patch = tmp_path / "fix.patch"
    magneton("export-patch", "--db", db, "a", "b", "--finding", str(f["id"]), "-o", str(patch))
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    patched = (work / "a.py").read_text()
    assert (
        "    model = make_model().eval()\n    model = model.to(memory_format=torch.channels_last)\n"
        in patched
    )


def test_a_dispatch_divergence_carries_the_operand_property_that_chose_it():
    """Below Python the operands steer dispatch as well as the knobs: with a
    channels-last weight the same convolution runs an extra layout copy. The divergence
    names the weight's strides, so the walk back (and the root cause) can follow them."""
    from magneton.diagnose.cause.divergence import _build
    from magneton.graphdb.paths import PathPair

    pa = _conv_relu_mean(W_NCHW, NCHW)
    pb = _conv_relu_mean(W_NHWC, NHWC)
    common = ("at:aten::convolution", "at:aten::_convolution")
    pair = PathPair(0, 0, common + ("at:aten::mkldnn_convolution",),
                    common + ("at:aten::contiguous",), 2)  # fmt: skip
    d = _build(pair, pa, pb, 0)
    assert d.level == "dispatch" and d.prop is not None
    assert (d.prop.name, d.prop.operand) == ("strides", 1)  # the weight, not the input
    trace_both(d.prop, 0, 0, pa, pb)
    assert d.prop.set_by["b"]["kind"] == "param" and d.prop.set_by["b"]["name"] == "0.weight"
    # a Python-level divergence is a choice made in code: no operand property
    py = PathPair(0, 0, ("py:lib.py:3:f",), ("py:lib.py:5:g",), 0)
    assert _build(py, pa, pb, 0).prop is None
