"""FLOP and byte counts of aten operators, computed from recorded shapes and dtypes only.

The energy model (`tracer/energy/session.py`, source `model`) prices an operator as
`P_static·t + e_flop·FLOPs + e_byte·bytes`, so these two counts are the model's only
view of the work an operator did. They are computed from the *recorded* shapes, never
from live tensors, so a saved profile can be re-priced on a machine without the workload.

Conventions (documented in docs/energy.md):

* FLOPs count multiply and add separately (a multiply-accumulate is 2 FLOPs), the
  convention of vendor peak-throughput figures the coefficients are derived from.
* Element-wise ops cost a fixed number of FLOPs per *output* element (`_POINTWISE`);
  transcendental functions are priced by a rough instruction count rather than 1, so
  a fused `aten::gelu` is not priced like a single add.
* Bytes are the ideal (compulsory) traffic: every input read once, every output written
  once, sized by dtype. Views and allocation-only ops move no data and cost 0 bytes;
  gathers (embedding, index_select) read only the rows they return, not the whole table,
  which is what makes an embedding lookup cheap rather than priced like a full copy.
* Unknown operators get bytes only (0 FLOPs): under-counting compute is safer than
  inventing it, and the byte term still makes a large unknown op cost something.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from magneton.model import OpRecord
from magneton.model.frameworks import framework_of_op
from magneton.model.vocab import ZERO_COST_OPS

# Bytes per element. Keys are dtype names without the "torch." prefix.
_DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "complex128": 16,
    "complex64": 8,
    "cdouble": 16,
    "cfloat": 8,
    "complex32": 4,
    "int64": 8,
    "long": 8,
    "int32": 4,
    "int": 4,
    "int16": 2,
    "short": 2,
    "int8": 1,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "qint8": 1,
    "quint8": 1,
    "qint32": 4,
}


# FLOPs per output element of point-wise ops. Arithmetic = 1; transcendental functions
# are priced by an approximate instruction count of a vectorised implementation.
_POINTWISE = {
    # 1 FLOP per element
    **dict.fromkeys(
        [
            "add",
            "sub",
            "rsub",
            "mul",
            "div",
            "neg",
            "abs",
            "relu",
            "relu6",
            "threshold",
            "clamp",
            "clamp_min",
            "clamp_max",
            "hardtanh",
            "maximum",
            "minimum",
            "where",
            "masked_fill",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "logical_not",
            "bitwise_and",
            "bitwise_or",
            "bitwise_not",
            "sign",
            "floor",
            "ceil",
            "round",
            "trunc",
            "reciprocal",
            "square",
            "fmod",
            "remainder",
            "leaky_relu",
            "lerp",
            "fill",
            "zero",
        ],
        1,
    ),
    **dict.fromkeys(["addcmul", "addcdiv", "hardsigmoid", "hardswish"], 3),
    **dict.fromkeys(["sqrt", "rsqrt"], 2),
    **dict.fromkeys(
        ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "pow"],
        4,
    ),
    **dict.fromkeys(["tanh", "sigmoid", "erf", "erfc", "erfinv", "atan", "asin", "acos"], 4),
    **dict.fromkeys(["softplus", "silu", "elu", "selu", "celu", "logsigmoid", "mish"], 5),
    # gelu: x·Φ(x) (erf form) ≈ 7; tanh form 0.5·x·(1+tanh(√(2/π)(x+0.044715x³))) ≈ 9
    "gelu": 8,
    "dropout": 2,
    "native_dropout": 3,
    "bernoulli": 2,
    "uniform": 2,
    "normal": 4,
    "nan_to_num": 1,
    "sum_to_size": 1,
    "masked_scatter": 1,
    "index_put": 1,
    "scatter": 1,
    "scatter_add": 1,
    "index_add": 1,
    "cumsum": 1,
    "cumprod": 1,
    "sort": 10,  # ~log2(n) comparisons per element for moderate n; rough
    "topk": 4,
    "argsort": 10,
}

# Reductions: FLOPs per *input* element.
_REDUCTIONS = {
    "sum": 1,
    "mean": 1,
    "amax": 1,
    "amin": 1,
    "max": 1,
    "min": 1,
    "argmax": 1,
    "argmin": 1,
    "prod": 1,
    "any": 1,
    "all": 1,
    "logsumexp": 6,
    "norm": 2,
    "linalg_vector_norm": 2,
    "var": 3,
    "std": 4,
    "var_mean": 3,
    "std_mean": 4,
    "count_nonzero": 1,
}

# Normalisation / softmax family: FLOPs per element of the (first) input.
_PER_INPUT_ELEMENT = {
    "softmax": 5,  # max, sub, exp, sum, div
    "_softmax": 5,
    "log_softmax": 5,
    "_log_softmax": 5,
    "_softmax_backward_data": 4,
    "_log_softmax_backward_data": 4,
    "layer_norm": 8,  # mean, var (2), sub, mul rstd, affine (2) + rsqrt amortised
    "native_layer_norm": 8,
    "native_layer_norm_backward": 14,
    "rms_norm": 5,
    "_fused_rms_norm": 5,
    "group_norm": 8,
    "native_group_norm": 8,
    "batch_norm": 8,
    "native_batch_norm": 8,
    "_native_batch_norm_legit": 8,
    "_native_batch_norm_legit_no_training": 4,
    "instance_norm": 8,
    "cross_entropy_loss": 6,
    "nll_loss": 1,
    "nll_loss_forward": 1,
    "mse_loss": 3,
    "gelu_backward": 10,
    "tanh_backward": 3,
    "sigmoid_backward": 3,
    "threshold_backward": 1,
    "silu_backward": 8,
}

# Gathers: read the index and the selected rows, write the output (not the whole table).
_GATHERS = frozenset(
    {"embedding", "index_select", "gather", "take", "take_along_dim", "embedding_bag"}
)


@dataclass(frozen=True)
class WorkCount:
    flops: float
    bytes: float
    known: bool  # False when the op has no FLOP formula (bytes only)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a recorded dtype string ("torch.float32" or "float32")."""
    d = dtype.removeprefix("torch.").strip().lower()
    if d in _DTYPE_BYTES:
        return _DTYPE_BYTES[d]
    m = re.search(r"(\d+)", d)
    return max(1, int(m.group(1)) // 8) if m else 4


def _numel(shape: list[int] | tuple[int, ...]) -> int:
    return math.prod(int(s) for s in shape) if shape else 1


def _base(name: str) -> str:
    """`aten::add_` -> `add`; `aten::_softmax` stays `_softmax` (distinct op)."""
    fw = framework_of_op(name)
    if fw.recorder:  # a JAX primitive or TensorFlow op type (model/frameworks.py)
        raw = name[len(fw.op_prefix) :]
        return fw.op_bases.get(raw, raw)
    base = name.split("::", 1)[-1].split(".", 1)[0]
    if base.endswith("_") and not base.endswith("__") and base not in ("_", "set_"):
        base = base[:-1]
    return base


def _tensor_bytes(shapes: list[list[int]], dtypes: list[str]) -> float:
    total = 0.0
    for i, shape in enumerate(shapes):
        dt = dtypes[i] if i < len(dtypes) else "float32"
        total += _numel(shape) * dtype_bytes(dt)
    return total


def _matmul_flops(a: list[int], b: list[int], out: list[int]) -> float:
    """2·(output elements)·K for any broadcasting matmul; K is the contracted size."""
    if not a or not b:
        return 0.0
    k = a[-1]
    n_out = _numel(out) if out else 1
    return 2.0 * n_out * k


def _conv_flops(
    x: list[int], w: list[int], out: list[int], transposed: bool, has_bias: bool
) -> float:
    if len(w) < 3 or len(x) < 3:
        return 0.0
    kernel = _numel(w[2:])
    if transposed:
        # weight [C_in, C_out/groups, *k]: every input element scatters into C_out/g·k outputs
        flops = 2.0 * _numel(x) * w[1] * kernel
    else:
        # weight [C_out, C_in/groups, *k]: every output element gathers C_in/g·k inputs
        flops = 2.0 * _numel(out) * w[1] * kernel
    if has_bias and out:
        flops += _numel(out)
    return flops


def _sdpa_flops(shapes: list[list[int]]) -> float:
    if len(shapes) < 3 or len(shapes[0]) < 2:
        return 0.0
    q, k, v = shapes[0], shapes[1], shapes[2]
    batch = _numel(q[:-2])
    L, E = q[-2], q[-1]
    S = k[-2] if len(k) >= 2 else L
    Ev = v[-1] if v else E
    # QK^T, softmax over each row, attention·V
    return batch * (2.0 * L * S * E + 5.0 * L * S + 2.0 * L * S * Ev)


@dataclass(frozen=True)
class _Call:
    """One operator call's recorded signature, with the sizes every formula needs."""

    base: str  # `aten::add_` -> `add`
    ins: list[list[int]]
    in_dtypes: list[str]
    out0: list[int]  # first output's shape
    n_out: int  # its elements (0 without outputs)
    n_in0: int  # first input's elements (0 without inputs)
    out_bytes: float
    nbytes: float  # inputs + outputs
    scalar_args: str


_CONVOLUTIONS = frozenset(
    {
        "convolution",
        "_convolution",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "mkldnn_convolution",
        "cudnn_convolution",
        "cudnn_convolution_transpose",
        "_slow_conv2d_forward",
        "slow_conv_transpose2d",
        "thnn_conv2d",
    }
)


def count_work(
    name: str,
    input_shapes: list[list[int]],
    input_dtypes: list[str],
    output_shapes: list[list[int]],
    output_dtypes: list[str],
    scalar_args: str = "",
) -> WorkCount:
    """FLOPs and bytes of one operator call from its recorded signature."""
    if name in ZERO_COST_OPS:
        return WorkCount(0.0, 0.0, True)
    in_bytes = _tensor_bytes(input_shapes, input_dtypes)
    out_bytes = _tensor_bytes(output_shapes, output_dtypes)
    call = _Call(
        base=_base(name),
        ins=input_shapes,
        in_dtypes=input_dtypes,
        out0=output_shapes[0] if output_shapes else [],
        n_out=_numel(output_shapes[0]) if output_shapes else 0,
        n_in0=_numel(input_shapes[0]) if input_shapes else 0,
        out_bytes=out_bytes,
        nbytes=in_bytes + out_bytes,
        scalar_args=scalar_args,
    )
    # the first family with a formula for the call decides (order matters: a family
    # whose arguments are missing passes the call on, as an unknown op would)
    for family in (_matmul_work, _conv_work, _attention_work, _movement_work, _elementwise_work):
        w = family(call)
        if w is not None:
            return w
    return WorkCount(0.0, call.nbytes, False)


def _matmul_work(c: _Call) -> WorkCount | None:
    ins, base = c.ins, c.base
    if base in ("mm", "matmul", "bmm", "dot", "vdot", "mv", "inner") and len(ins) >= 2:
        return WorkCount(_matmul_flops(ins[0], ins[1], c.out0), c.nbytes, True)
    if base == "MatMul" and len(ins) >= 2:  # TensorFlow's, transposes as attributes
        a = ins[0]
        k = a[-2] if "transpose_a=True" in c.scalar_args and len(a) >= 2 else a[-1] if a else 0
        return WorkCount(2.0 * c.n_out * k, c.nbytes, True)
    if base == "dot_general" and len(ins) >= 2:
        # JAX's contraction (tracer/frameworks/jax_program.py writes the contracted size)
        m = re.search(r"contract_size=(\d+)", c.scalar_args)
        k = int(m.group(1)) if m else 1
        return WorkCount(2.0 * c.n_out * k, c.nbytes, True)
    if base in ("addmm", "baddbmm", "addbmm", "addmv", "addr") and len(ins) >= 3:
        flops = _matmul_flops(ins[1], ins[2], c.out0) + c.n_out  # + beta·self
        return WorkCount(flops, c.nbytes, True)
    if base == "_addmm_activation" and len(ins) >= 3:
        return WorkCount(_matmul_flops(ins[1], ins[2], c.out0) + 2 * c.n_out, c.nbytes, True)
    if base in ("linear", "_addmm_activation") and len(ins) >= 2:
        w = ins[1]
        flops = 2.0 * c.n_out * (w[-1] if w else 0)
        if len(ins) >= 3:
            flops += c.n_out
        return WorkCount(flops, c.nbytes, True)
    return None


def _conv_work(c: _Call) -> WorkCount | None:
    ins = c.ins
    if c.base in _CONVOLUTIONS and len(ins) >= 2:
        transposed = "transpose" in c.base or bool(
            re.search(r"transposed\s*=\s*True", c.scalar_args)
        )
        has_bias = len(ins) >= 3 and bool(ins[2])
        return WorkCount(_conv_flops(ins[0], ins[1], c.out0, transposed, has_bias), c.nbytes, True)
    if c.base == "convolution_backward" and len(ins) >= 3:
        # grad_input + grad_weight: two convolutions of the forward's size
        grad_out, x, w = ins[0], ins[1], ins[2]
        fwd = _conv_flops(x, w, grad_out, "transposed=True" in c.scalar_args, False)
        return WorkCount(2.0 * fwd, c.nbytes, True)
    return None


def _attention_work(c: _Call) -> WorkCount | None:
    if "scaled_dot_product" in c.base or c.base in ("_flash_attention_forward",):
        return WorkCount(_sdpa_flops(c.ins), c.nbytes, True)
    if c.base == "_transformer_encoder_layer_fwd" and len(c.ins) >= 13:
        return WorkCount(_encoder_layer_flops(c.ins), c.nbytes, True)
    if c.base == "_native_multi_head_attention" and len(c.ins) >= 7:
        return WorkCount(_native_mha_flops(c.ins), c.nbytes, True)
    return None


# The fused inference fast path of nn.TransformerEncoderLayer / nn.MultiheadAttention.
# Its tensor operands, in schema order: src (or query, key, value), then the weights
# and biases. The projections are exact from the shapes. The attention scores are counted
# for a batched (B, T, E) operand only: a packed nested batch is recorded as its
# (sum of lengths, E) tokens, which no longer say how long each sequence was, so its
# per-sequence T² term is left out (an under-count, as for unknown operators).


def _tokens(x: list[int]) -> float:
    return _numel(x[:-1]) if x else 0.0


def _scores_flops(q: list[int], k: list[int]) -> float:
    """QKᵀ, softmax and attention·V of a batched (B, T, E) query against (B, S, E) keys."""
    if len(q) != 3 or len(k) != 3:
        return 0.0
    (b, t, e), s = q, k[1]
    return b * (4.0 * t * s * e + 5.0 * t * s)


def _encoder_layer_flops(ins: list[list[int]]) -> float:
    src = ins[0]
    n, e = _tokens(src), (src[-1] if src else 0)
    weights = [ins[1], ins[3], ins[9], ins[11]]  # qkv, out proj, ffn 1, ffn 2
    biases = [ins[2], ins[4], ins[10], ins[12]]
    flops = 2.0 * n * sum(_numel(w) for w in weights if w)
    flops += n * sum(_numel(b) for b in biases if b)
    flops += n * e * (2 * 5 + 2)  # two layer norms, two residual adds
    flops += n * (ins[9][0] if ins[9] else 0)  # the activation
    return flops + _scores_flops(src, src)


def _native_mha_flops(ins: list[list[int]]) -> float:
    q, k, v, qkv_w, proj_w = ins[0], ins[1], ins[2], ins[3], ins[5]
    e = q[-1] if q else 0
    # one third of the packed qkv weight per input, then the output projection
    flops = 2.0 * e * e * (_tokens(q) + _tokens(k) + _tokens(v)) if qkv_w else 0.0
    flops += 2.0 * _tokens(q) * _numel(proj_w) if proj_w else 0.0
    return flops + _scores_flops(q, k)


def _movement_work(c: _Call) -> WorkCount | None:
    """Gathers and copies: bytes moved, no arithmetic."""
    if c.base in _GATHERS:
        # weight/table first for embedding, index first... read rows + indices, write out
        idx_bytes = 0.0
        for i, shape in enumerate(c.ins):
            dt = c.in_dtypes[i] if i < len(c.in_dtypes) else ""
            if "int" in dt:
                idx_bytes += _numel(shape) * dtype_bytes(dt)
        return WorkCount(0.0, idx_bytes + 2.0 * c.out_bytes, True)
    if c.base in ("copy", "clone", "contiguous", "_to_copy", "to", "cat", "stack", "repeat"):
        if c.base == "copy" and len(c.ins) >= 2:
            # dst.copy_(src): read src, write dst (dst is not read)
            src = _tensor_bytes(c.ins[1:2], c.in_dtypes[1:2])
            dst = _tensor_bytes(c.ins[0:1], c.in_dtypes[0:1])
            return WorkCount(0.0, src + dst, True)
        return WorkCount(0.0, c.nbytes, True)
    return None


def _elementwise_work(c: _Call) -> WorkCount | None:
    """Factories, random numbers, per-element and reduction ops: FLOPs per element."""
    base, n_out = c.base, c.n_out
    if base in ("arange", "linspace", "logspace", "zeros", "ones", "full", "zeros_like"):
        return WorkCount(float(n_out), c.out_bytes, True)
    if base in ("randn", "rand", "randint", "randn_like", "rand_like", "randperm"):
        return WorkCount(4.0 * n_out, c.out_bytes, True)
    if base in _PER_INPUT_ELEMENT:
        return WorkCount(float(_PER_INPUT_ELEMENT[base] * c.n_in0), c.nbytes, True)
    if base in _REDUCTIONS:
        return WorkCount(float(_REDUCTIONS[base] * c.n_in0), c.nbytes, True)
    if base in _POINTWISE:
        n = max(n_out, max((_numel(s) for s in c.ins), default=0))
        return WorkCount(float(_POINTWISE[base] * n), c.nbytes, True)
    return None


def count_op(op: OpRecord) -> WorkCount:
    """`count_work` for a recorded operator."""
    return count_work(
        op.name,
        op.input_shapes,
        op.input_dtypes,
        op.output_shapes,
        op.output_dtypes,
        op.scalar_args,
    )


def fill_work(ops: list[OpRecord]) -> None:
    """Set `flops` and `bytes` on every op from its recorded shapes."""
    for op in ops:
        w = count_op(op)
        op.flops = w.flops
        op.bytes = w.bytes


def dominant_dtype(op: OpRecord) -> str:
    """The dtype the arithmetic runs in: the first floating input, else the first output."""
    for d in list(op.input_dtypes) + list(op.output_dtypes):
        dd = d.removeprefix("torch.")
        if dd.startswith(("float", "bfloat", "half", "double", "complex")):
            return dd
    if op.output_dtypes:
        return op.output_dtypes[0].removeprefix("torch.")
    return "float32"
