"""Config snapshot of a run: the knobs that steer PyTorch's kernel selection.

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
from magneton.tracer.programs import allocator
from magneton.tracer.programs.preload import OMP_POLICY_TOO_LATE

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
)

_LIBRARIES = ("torch", "numpy", "transformers", "accelerate", "diffusers", "vllm", "kuzu")


def _get(fn, default="n/a") -> str:
    try:
        return str(fn())
    except Exception:
        return default


def snapshot(script: str = "") -> dict[str, str]:
    b = torch.backends
    cfg: dict[str, str] = {
        "torch.backends.mkldnn.enabled": _get(lambda: b.mkldnn.enabled),
        "torch.backends.mkldnn.is_available": _get(lambda: b.mkldnn.is_available()),
        "torch.backends.cudnn.enabled": _get(lambda: b.cudnn.enabled),
        "torch.backends.cudnn.benchmark": _get(lambda: b.cudnn.benchmark),
        "torch.backends.cudnn.deterministic": _get(lambda: b.cudnn.deterministic),
        "torch.backends.cudnn.allow_tf32": _get(lambda: b.cudnn.allow_tf32),
        "torch.backends.cuda.matmul.allow_tf32": _get(lambda: b.cuda.matmul.allow_tf32),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": _get(
            lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": _get(
            lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        "torch.backends.cuda.flash_sdp_enabled": _get(lambda: b.cuda.flash_sdp_enabled()),
        "torch.backends.cuda.mem_efficient_sdp_enabled": _get(
            lambda: b.cuda.mem_efficient_sdp_enabled()
        ),
        "torch.backends.cuda.math_sdp_enabled": _get(lambda: b.cuda.math_sdp_enabled()),
        "torch.backends.nnpack.enabled": _get(lambda: b.nnpack.enabled),  # type: ignore[attr-defined]
        "torch.backends.opt_einsum.enabled": _get(lambda: b.opt_einsum.enabled),
        "torch.get_float32_matmul_precision": _get(torch.get_float32_matmul_precision),
        "torch.are_deterministic_algorithms_enabled": _get(
            torch.are_deterministic_algorithms_enabled
        ),
        "torch.is_grad_enabled": _get(torch.is_grad_enabled),
        "torch.get_num_threads": _get(torch.get_num_threads),
        "torch.get_num_interop_threads": _get(torch.get_num_interop_threads),
        "torch.get_default_dtype": _get(torch.get_default_dtype),
        "torch.backends.cpu.get_cpu_capability": _get(lambda: b.cpu.get_cpu_capability()),
        "device.cpu": platform.processor() or platform.machine(),
        "device.cpu_count": str(os.cpu_count()),
        "device.cuda_available": str(torch.cuda.is_available()),
        "python.version": sys.version.split()[0],
        "platform": platform.platform(),
    }
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
    cfg[allocator.CONFIG_KEY] = allocator.pin()  # pinned before the workload, or now
    cfg["magneton.omp_wait_policy"] = (
        "libgomp default (torch was imported before magneton)"
        if OMP_POLICY_TOO_LATE
        else os.environ.get("OMP_WAIT_POLICY", "")
    )
    return cfg
