"""FLOP and byte counts from recorded shapes (the energy model's only view of work)."""

from __future__ import annotations

import math

import pytest

from magneton.model import OpRecord
from magneton.tracer.energy.flops import count_op, count_work, dtype_bytes

F32 = "float32"


def test_matmul_family_flops():
    # [M,K] x [K,N]: 2·M·N·K
    assert (
        count_work("aten::mm", [[8, 16], [16, 4]], [F32] * 2, [[8, 4]], [F32]).flops
        == 2 * 8 * 4 * 16
    )
    # addmm adds beta·bias: + M·N
    w = count_work("aten::addmm", [[4], [8, 16], [16, 4]], [F32] * 3, [[8, 4]], [F32])
    assert w.flops == 2 * 8 * 4 * 16 + 8 * 4
    # bmm: batch · 2·M·N·K
    w = count_work("aten::bmm", [[3, 8, 16], [3, 16, 5]], [F32] * 2, [[3, 8, 5]], [F32])
    assert w.flops == 3 * 2 * 8 * 5 * 16
    # broadcasting matmul [2,3,8,16] @ [16,4]
    w = count_work("aten::matmul", [[2, 3, 8, 16], [16, 4]], [F32] * 2, [[2, 3, 8, 4]], [F32])
    assert w.flops == 2 * (2 * 3 * 8 * 4) * 16
    # linear with bias on a 3-D input
    w = count_work("aten::linear", [[2, 5, 16], [8, 16], [8]], [F32] * 3, [[2, 5, 8]], [F32])
    assert w.flops == 2 * 2 * 5 * 8 * 16 + 2 * 5 * 8


def test_conv_flops_forward_grouped_and_transposed():
    # out [1,16,6,6], weight [16,3,3,3]: 2·576·3·9 + bias 576
    w = count_work(
        "aten::convolution", [[1, 3, 8, 8], [16, 3, 3, 3], [16]], [F32] * 3, [[1, 16, 6, 6]], [F32]
    )
    assert w.flops == 2 * 576 * 3 * 9 + 576
    # depthwise: groups = C, weight [C,1,k,k]
    w = count_work("aten::conv2d", [[2, 8, 10, 10], [8, 1, 3, 3]], [F32] * 2, [[2, 8, 8, 8]], [F32])
    assert w.flops == 2 * (2 * 8 * 8 * 8) * 1 * 9
    # transposed: weight [C_in, C_out, k, k]; every input element scatters into C_out·k·k
    w = count_work(
        "aten::convolution",
        [[1, 4, 5, 5], [4, 6, 3, 3]],
        [F32] * 2,
        [[1, 6, 7, 7]],
        [F32],
        scalar_args="stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=True",
    )
    assert w.flops == 2 * (4 * 5 * 5) * 6 * 9


def test_sdpa_flops():
    q = [2, 4, 16, 8]
    w = count_work("aten::scaled_dot_product_attention", [q, q, q], [F32] * 3, [q], [F32])
    bh = 2 * 4
    assert w.flops == bh * (2 * 16 * 16 * 8 + 5 * 16 * 16 + 2 * 16 * 16 * 8)


def test_bytes_by_dtype_and_elementwise():
    w = count_work(
        "aten::add", [[10, 10], [10, 10]], ["torch.bfloat16"] * 2, [[10, 10]], ["torch.bfloat16"]
    )
    assert w.bytes == 3 * 100 * 2 and w.flops == 100
    assert dtype_bytes("torch.float64") == 8 and dtype_bytes("int8") == 1
    # transcendental ops cost more per element than an add, reductions per input element
    gelu = count_work("aten::gelu", [[100]], [F32], [[100]], [F32]).flops
    add = count_work("aten::add", [[100], [100]], [F32] * 2, [[100]], [F32]).flops
    assert gelu > add
    s = count_work("aten::sum", [[32, 64]], [F32], [[32]], [F32])
    assert s.flops == 32 * 64
    sm = count_work("aten::_softmax", [[32, 64]], [F32], [[32, 64]], [F32])
    assert sm.flops == 5 * 32 * 64


def test_views_are_free_and_unknown_ops_cost_bytes_only():
    assert count_work("aten::view", [[4, 4]], [F32], [[16]], [F32]).bytes == 0
    assert count_work("aten::t", [[4, 8]], [F32], [[8, 4]], [F32]).flops == 0
    w = count_work("aten::some_custom_op", [[10]], [F32], [[10]], [F32])
    assert (w.flops, w.bytes, w.known) == (0.0, 80.0, False)


def test_embedding_reads_rows_not_table():
    w = count_work("aten::embedding", [[50000, 64], [2, 16]], [F32, "int64"], [[2, 16, 64]], [F32])
    assert w.bytes == 2 * 16 * 8 + 2 * (2 * 16 * 64 * 4)  # far below the 12.8 MB table


def test_count_op_uses_record_fields():
    op = OpRecord(
        idx=0,
        name="aten::mm",
        input_shapes=[[2, 3], [3, 4]],
        input_dtypes=[F32, F32],
        output_shapes=[[2, 4]],
        output_dtypes=[F32],
    )
    w = count_op(op)
    assert w.flops == 48 and w.bytes == pytest.approx((6 + 12 + 8) * 4)


def test_fused_transformer_fast_path_flops():
    """nn.TransformerEncoderLayer's fused inference op: its projections from the weight
    shapes, plus the attention scores when the batch is (B, T, E); a packed nested batch
    (recorded as its (tokens, E)) is charged the projections only."""
    e, f, b, t = 16, 64, 2, 5
    weights = [[3 * e, e], [3 * e], [e, e], [e], [e], [e], [e], [e], [f, e], [f], [e, f], [e]]
    proj = 2 * (3 * e * e + e * e + f * e + e * f)
    dense = count_work(
        "aten::_transformer_encoder_layer_fwd",
        [[b, t, e], *weights],
        [F32] * 13,
        [[b, t, e]],
        [F32],
    )
    assert dense.known and dense.flops > b * t * proj + b * 4 * t * t * e
    packed = count_work(
        "aten::_transformer_encoder_layer_fwd",
        [[7, e], *weights],
        [F32] * 13,
        [[7, e]],
        [F32],
    )
    assert 7 * proj < packed.flops < 7 * proj * 1.2
    assert packed.bytes == (7 * e * 2 + sum(math.prod(w) for w in weights)) * 4
    mha = count_work(
        "aten::_native_multi_head_attention",
        [[b, t, e], [b, t, e], [b, t, e], [3 * e, e], [3 * e], [e, e], [e]],
        [F32] * 7,
        [[b, t, e]],
        [F32],
    )
    assert mha.flops == 2 * e * e * 3 * b * t + 2 * b * t * e * e + b * (4 * t * t * e + 5 * t * t)
