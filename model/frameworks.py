"""The frameworks Magneton records, one entry each: the registry every stage reads.

A framework is one entry here plus its recorder module in `tracer/frameworks/` (named by
`recorder`); nothing else names frameworks. The tracer detects a script's framework from
its imports (`imports`), says what to install when it is missing (`module`, `extra`),
loads the recorder lazily (importing JAX or TensorFlow costs seconds and must not happen
for a PyTorch run), and prices a framework's operators as their aten counterparts
(`op_bases`). Reports, diagnosis and the rule base name a framework by `name` and skip a
framework's knobs when a side did not run it (knowledge/base.py).

Data only: importable on a machine that has none of the frameworks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Framework:
    key: str  # the run's `framework` config row ("torch" runs have none) and knob prefix
    name: str  # how output names it
    imports: tuple[str, ...]  # a script importing one of these is this framework's program
    module: str  # the module that must import for a recording
    extra: str  # `pip install "magneton[EXTRA]"` installs it ("" = the base install)
    # "package.module:Class" of its `TracedProgram` (tracer/frameworks/base.py); "" for
    # PyTorch, recorded through its own dispatch (tracer/capture/dispatch.py)
    recorder: str = ""
    op_prefix: str = "aten::"  # recorded operator names start with it
    # operator names priced as their aten counterpart (tracer/energy/flops.py); names not
    # listed are looked up as they are (`jax::exp` as `exp`)
    op_bases: Mapping[str, str] = field(default_factory=dict)


_JAX_BASES = {
    "reduce_sum": "sum",
    "reduce_max": "amax",
    "reduce_min": "amin",
    "reduce_prod": "prod",
    "integer_pow": "pow",
    "logistic": "sigmoid",
    "select_n": "where",
    "convert_element_type": "_to_copy",
    "concatenate": "cat",
    "scan_stack": "stack",
}
_TF_BASES = {
    "AddV2": "add",
    "Add": "add",
    "BiasAdd": "add",
    "Sub": "sub",
    "Mul": "mul",
    "RealDiv": "div",
    "Neg": "neg",
    "Relu": "relu",
    "Tanh": "tanh",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Rsqrt": "rsqrt",
    "Sigmoid": "sigmoid",
    "Erf": "erf",
    "Maximum": "maximum",
    "Minimum": "minimum",
    "Square": "square",
    "Sum": "sum",
    "Mean": "mean",
    "Max": "amax",
    "Min": "amin",
    "Prod": "prod",
    "Softmax": "_softmax",
    "LogSoftmax": "_log_softmax",
    "Equal": "eq",
    "NotEqual": "ne",
    "Greater": "gt",
    "GreaterEqual": "ge",
    "Less": "lt",
    "LessEqual": "le",
    "SelectV2": "where",
    "Cast": "_to_copy",
    "ConcatV2": "cat",
    "BatchMatMulV2": "matmul",
    "BatchMatMulV3": "matmul",
}

# Detection order matters: a script importing torch is a PyTorch program whatever else it
# imports; JAX's names are checked before TensorFlow's.
FRAMEWORKS: tuple[Framework, ...] = (
    Framework("torch", "PyTorch", ("torch",), "torch", ""),
    Framework(
        "jax",
        "JAX",
        ("jax", "flax", "optax"),
        "jax",
        "jax",
        recorder="magneton.tracer.frameworks.jax_program:JaxProgram",
        op_prefix="jax::",
        op_bases=_JAX_BASES,
    ),
    Framework(
        "tf",
        "TensorFlow",
        ("tensorflow", "keras"),
        "tensorflow",
        "tf",
        recorder="magneton.tracer.frameworks.tf_program:TfProgram",
        op_prefix="tf::",
        op_bases=_TF_BASES,
    ),
)
BY_KEY: dict[str, Framework] = {f.key: f for f in FRAMEWORKS}


def framework_of(config: dict[str, str]) -> str:
    """The key of the framework a run with `config` recorded ('torch' when none is named)."""
    return config.get("framework", "torch")


def framework_name(framework: str) -> str:
    """How output names framework key `framework` ('tf' -> 'TensorFlow')."""
    f = BY_KEY.get(framework)
    return f.name if f else framework


def framework_of_op(name: str) -> Framework:
    """The framework whose recorder names operators like `name` (`jax::dot_general`)."""
    for f in FRAMEWORKS:
        if f.recorder and name.startswith(f.op_prefix):
            return f
    return FRAMEWORKS[0]
