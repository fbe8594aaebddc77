"""Config snapshot of a run: the knobs that steer PyTorch's kernel selection.

Which settings are read is the rule base's business: every knob in knowledge/rules/
names its `snapshot_keys`, and `snapshot` reads each (so teaching Magneton a knob is one
rule-file entry, and the recorder cannot forget to record it).

Native divergences (mkldnn vs thnn convolution, TF32 vs FP32 GEMM) are decided inside C++
from global state, so the only way to explain them afterwards is to have recorded that
state with the run. Values are strings ("True", "4") so two runs compare with `==` and
Cypher can filter them without type juggling. Keys are the Python spelling a user would
write to change them (`torch.backends.mkldnn.enabled`), which is also what the
backward data-flow searches the source for.
"""

from __future__ import annotations

import os
import platform
import sys

import torch

from magneton.model.vocab import sha256_file  # noqa: F401  (re-export: record.py uses it)
from magneton.tracer.programs import steady

# Environment variables that change threading or kernel choice.
ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "OMP_WAIT_POLICY",
    "CUDA_VISIBLE_DEVICES",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_CUDNN_V8_API_ENABLED",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "DNNL_DEFAULT_FPMATH_MODE",
    "ATEN_CPU_CAPABILITY",
    "TOKENIZERS_PARALLELISM",
    steady.ENV,  # a re-run of a steady recording is steady too
)

_LIBRARIES = ("torch", "numpy", "transformers", "accelerate", "diffusers", "vllm", "kuzu")


def _get(fn, default="n/a") -> str:
    try:
        return str(fn())
    except Exception:
        return default


def setting(key: str) -> str | None:
    """The current value of a knob's snapshot key: `env.NAME` from the environment, a
    dotted name (`torch.backends.mkldnn.enabled`, `torch.get_num_threads`) by attribute
    lookup, called when it is a function. None when its library is not loaded: a
    PyTorch run must not import JAX to read a JAX knob."""
    if key.startswith("env."):
        return os.environ.get(key[4:], "")
    root, *path = key.split(".")
    obj = sys.modules.get(root)
    if obj is None:
        return None

    def read():
        value = obj
        for part in path:
            value = getattr(value, part)
        return value() if callable(value) else value

    return _get(read)


def snapshot(script: str = "") -> dict[str, str]:
    """The run's settings: every knob of the rule base (knowledge/rules/knobs.toml, by
    its `snapshot_keys`), the environment variables a re-run reproduces, and the facts
    that explain a difference no knob does (device, versions, script hash)."""
    from magneton.knowledge.base import default_knowledge

    cfg: dict[str, str] = {
        "torch.backends.mkldnn.is_available": _get(lambda: torch.backends.mkldnn.is_available()),
        "torch.backends.cpu.get_cpu_capability": _get(
            lambda: torch.backends.cpu.get_cpu_capability()
        ),
        "device.cpu": platform.processor() or platform.machine(),
        "device.cpu_count": str(os.cpu_count()),
        "device.cuda_available": str(torch.cuda.is_available()),
        "python.version": sys.version.split()[0],
        "platform": platform.platform(),
    }
    for knob in default_knowledge().knobs.values():
        for key in knob.snapshot_keys:
            value = setting(key)
            if value is not None:
                cfg[key] = value
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            cfg[f"device.cuda.{i}.name"] = _get(lambda i=i: torch.cuda.get_device_name(i))
            cfg[f"device.cuda.{i}.capability"] = _get(
                lambda i=i: torch.cuda.get_device_capability(i)
            )
    for var in ENV_VARS:
        cfg[f"env.{var}"] = os.environ.get(var, "")
    for lib in _LIBRARIES:
        mod = sys.modules.get(lib)
        if mod is not None:
            cfg[f"version.{lib}"] = str(getattr(mod, "__version__", "?"))
    if script:
        cfg["script.path"] = script
        cfg["script.sha256"] = sha256_file(script)
    cfg[steady.CONFIG_KEY] = steady.describe()
    return cfg
