"""Recording a program whose operators produce and consume nested tensors.

An eval `nn.TransformerEncoder` run with autograd off takes PyTorch's fast path: a padded
batch with a key-padding mask is packed into a nested tensor and each layer is one fused
operator on the real tokens. Nested tensors have no single size, and the recorder once
failed on them ("NestedTensorImpl doesn't support sizes"). They are now recorded through
their packed components (`tracer/capture/nested.py`); these tests check the recording succeeds
through the CLI and that what it stores describes those components, so value matching
can pair them with the same tokens gathered densely.
"""

from __future__ import annotations

import runpy
import subprocess
import sys

import pytest
import torch

from magneton.graphdb import open_db
from magneton.tracer.capture.invariants import summarize
from magneton.tracer.capture.nested import recorded_view

SCRIPT = """
import torch
from torch import nn

D, HEADS, LENGTHS = 32, 2, [8, 3, 5, 2]


def setup():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=64, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(len(LENGTHS), max(LENGTHS), D)
    pad = torch.arange(max(LENGTHS))[None, :] >= torch.tensor(LENGTHS)[:, None]
    return model, x, pad


@torch.inference_mode()
def main(model, x, pad):
    return model(x, src_key_padding_mask=pad)
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    work = tmp_path_factory.mktemp("nested")
    script = work / "encoder.py"
    script.write_text(SCRIPT)
    db = work / "db"
    proc = subprocess.run(
        [sys.executable, "-m", "magneton", "record", str(script), "--db", str(db)]
        + ["--run", "nested", "--repeat", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "recorded run 'nested'" in proc.stdout + proc.stderr
    with open_db(db) as handle:
        profile = handle.load_profile("nested")
    return script, profile


def test_fast_path_with_nested_tensors_is_recorded(recorded):
    _, profile = recorded
    names = [op.name for op in profile.ops]
    assert "aten::_nested_tensor_from_mask" in names
    assert names.count("aten::_transformer_encoder_layer_fwd") == 2  # one fused op per layer
    assert "aten::to_padded_tensor" in names  # back to the padded batch the caller gets
    assert all(op.time_s > 0 and op.energy_j > 0 for op in profile.ops)


def test_nested_tensors_are_recorded_as_their_packed_tokens(recorded):
    """The packed tensor's record: (sum of lengths, D), and a value summary equal to that
    of the real tokens gathered from the padded batch (`x[~pad]`), which is what a
    dense program that drops the padding computes on."""
    script, profile = recorded
    ns = runpy.run_path(str(script))
    _, x, pad = ns["setup"]()
    tokens = x[~pad]
    assert tokens.shape == (sum(ns["LENGTHS"]), ns["D"])
    pack = next(op for op in profile.ops if op.name == "aten::_nested_tensor_from_mask")
    packed = profile.tensors[pack.outputs[0]]
    assert packed.shape == list(tokens.shape) and packed.numel == tokens.numel()
    assert pack.output_shapes == [list(tokens.shape)]
    want = summarize(tokens)
    assert packed.stats == pytest.approx(want["stats"], rel=1e-6, abs=1e-9)
    assert packed.invariant_splits == want["invariant_splits"]
    assert packed.invariant == pytest.approx(want["invariant"], rel=1e-5, abs=1e-9)
    # the fused layers read and write that packed tensor, never the padding
    for op in profile.ops:
        if op.name == "aten::_transformer_encoder_layer_fwd":
            assert op.input_shapes[0] == list(tokens.shape)
            assert op.output_shapes == [list(tokens.shape)]
            assert op.bytes > 2 * tokens.numel() * 4  # the tokens in and out, weights too


def test_recorded_view_of_nested_layouts():
    a, b = torch.randn(3, 4), torch.randn(5, 4)
    dense = torch.cat([a, b])
    strided = torch.nested.nested_tensor([a, b])
    assert torch.equal(recorded_view(strided), dense)
    jagged = torch.nested.nested_tensor([a, b], layout=torch.jagged)
    assert torch.equal(recorded_view(jagged), dense)
    # components of different trailing sizes have no common row shape: a flat vector
    ragged = torch.nested.nested_tensor([a, torch.randn(2, 6)])
    view = recorded_view(ragged)
    assert view.shape == (12 + 12,)
    assert torch.equal(view, torch.cat([c.reshape(-1) for c in ragged.unbind()]))
    # a non-contiguous nested tensor is read in its components' logical order
    transposed = strided.transpose(1, 2)
    assert not transposed.is_contiguous()
    assert torch.equal(recorded_view(transposed), torch.cat([a.t().reshape(-1), b.t().reshape(-1)]))
    plain = torch.randn(2, 3)
    assert recorded_view(plain) is plain


def test_rerun_describes_a_nested_value():
    """The key-variable re-run describes every watched value; a nested tensor has no
    shape to print and is described by its components."""
    from magneton.diagnose.cause.keyvar import summarize as describe

    nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])
    assert describe(nested) == "<Tensor float32 nested, 2 components>"
    assert describe(torch.ones(2, 3)) == "<Tensor float32 [2, 3]>"
