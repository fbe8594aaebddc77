"""The energy model: what an operator costs without a power sensor.

Each op costs `P_static·t + e_flop·FLOPs + e_byte·bytes` (the documented energy roofline);
`MODELS` holds the coefficient profiles, `load_model` picks one (by name, file or the
`MAGNETON_ENERGY_MODEL` variable), `model_op_power_w` gives an op's modelled power.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from magneton.model import MagnetonError, OpRecord
from magneton.tracer.energy.flops import count_op, dominant_dtype


@dataclass(frozen=True)
class ModelCoefficients:
    """One energy-roofline profile. Energies in picojoules, powers in watts.

    `e_flop_pj` maps a dtype name ("float32", "bfloat16", ...) to pJ per FLOP; the key
    "default" is used for any other dtype. `citation` names where the figures come from.
    """

    name: str
    p_static_w: float
    e_flop_pj: dict[str, float]
    e_byte_pj: float
    tdp_w: float = 0.0
    citation: str = ""

    def flop_pj(self, dtype: str) -> float:
        d = dtype.removeprefix("torch.")
        aliases = {"half": "float16", "float": "float32", "double": "float64"}
        d = aliases.get(d, d)
        return self.e_flop_pj.get(d, self.e_flop_pj.get("default", 0.0))

    def dynamic_j(self, op: OpRecord) -> float:
        """Energy above the static floor: FLOPs and bytes priced by the profile."""
        return (op.flops * self.flop_pj(dominant_dtype(op)) + op.bytes * self.e_byte_pj) * 1e-12

    def op_energy_j(self, op: OpRecord, time_s: float) -> float:
        return self.p_static_w * time_s + self.dynamic_j(op)


# Built-in profiles. Derivations are in docs/energy.md ("Model coefficients"): e_flop is the
# datasheet dynamic power budget (TDP - idle) divided by the datasheet peak throughput for
# that dtype, e_byte is a published DRAM energy per bit times 8, and P_static is the idle
# draw of the whole device (what a board/package sensor reports with nothing running).
MODELS: dict[str, ModelCoefficients] = {
    "cpu-default": ModelCoefficients(
        name="cpu-default",
        p_static_w=90.0,
        e_flop_pj={"float64": 70.0, "float32": 35.0, "default": 35.0},
        e_byte_pj=100.0,
        tdp_w=270.0,
        citation="x86 server socket (Xeon Platinum 8380-class datasheet: 270 W TDP, "
        "~5 TFLOP/s FP32 AVX-512); DRAM energy per bit after Horowitz, ISSCC 2014",
    ),
    "h100": ModelCoefficients(
        name="h100",
        p_static_w=70.0,
        e_flop_pj={
            "bfloat16": 0.64,
            "float16": 0.64,
            "float8_e4m3fn": 0.32,
            "float8_e5m2": 0.32,
            "float32": 9.4,
            "float64": 9.4,
            "default": 9.4,
        },
        e_byte_pj=31.0,
        tdp_w=700.0,
        citation="NVIDIA H100 SXM5 datasheet (700 W, 989 TFLOP/s dense BF16, 67 TFLOP/s "
        "FP32, 3.35 TB/s HBM3); HBM 3.9 pJ/bit (O'Connor et al., MICRO 2017)",
    ),
    "h200": ModelCoefficients(
        name="h200",
        p_static_w=75.0,
        e_flop_pj={
            "bfloat16": 0.63,
            "float16": 0.63,
            "float8_e4m3fn": 0.32,
            "float8_e5m2": 0.32,
            "float32": 9.3,
            "float64": 9.3,
            "default": 9.3,
        },
        e_byte_pj=31.0,
        tdp_w=700.0,
        citation="NVIDIA H200 SXM datasheet (700 W, 989 TFLOP/s dense BF16, 67 TFLOP/s "
        "FP32, 4.8 TB/s HBM3e); HBM 3.9 pJ/bit (O'Connor et al., MICRO 2017)",
    ),
    "a100": ModelCoefficients(
        name="a100",
        p_static_w=55.0,
        e_flop_pj={"bfloat16": 1.1, "float16": 1.1, "float32": 17.7, "default": 17.7},
        e_byte_pj=31.0,
        tdp_w=400.0,
        citation="NVIDIA A100 SXM4 80GB datasheet (400 W, 312 TFLOP/s BF16, 19.5 TFLOP/s "
        "FP32, 2.0 TB/s HBM2e); HBM 3.9 pJ/bit (O'Connor et al., MICRO 2017)",
    ),
    "rtx4090": ModelCoefficients(
        name="rtx4090",
        p_static_w=20.0,
        e_flop_pj={"bfloat16": 2.6, "float16": 2.6, "float32": 5.2, "default": 5.2},
        e_byte_pj=60.0,
        tdp_w=450.0,
        citation="NVIDIA RTX 4090 specifications (450 W, 82.6 TFLOP/s FP32, 165 TFLOP/s "
        "FP16 tensor, 1008 GB/s GDDR6X); GDDR6X ~7.5 pJ/bit",
    ),
}
MODELS["gpu-default"] = ModelCoefficients(
    **{**MODELS["a100"].__dict__, "name": "gpu-default"},
)

# The work alone (FLOPs and bytes of the CPU default), no static power x measured time:
# deterministic for the same shapes, so comparisons of identical work cannot be moved by
# a loaded machine. It cannot see a slower kernel doing the same work (mkldnn vs thnn),
# which is why it is not the default.
MODELS["work-only"] = ModelCoefficients(
    **{
        **MODELS["cpu-default"].__dict__,
        "name": "work-only",
        "p_static_w": 0.0,
        "citation": "cpu-default's e_flop and e_byte with P_static = 0 (work only)",
    },
)

MODEL_ENV = "MAGNETON_ENERGY_MODEL"


def load_model(spec: str = "", device: str = "cpu") -> ModelCoefficients:
    """Resolve a model profile: a built-in name, a TOML/JSON file, or the device default.

    Order: explicit `spec`, then $MAGNETON_ENERGY_MODEL, then the default for `device`
    (a known GPU name when torch can see one, else "gpu-default"; "cpu-default" on CPU).
    """
    spec = spec or os.environ.get(MODEL_ENV, "")
    if not spec:
        return MODELS[_default_model_name(device)]
    key = spec.strip().lower()
    if key in MODELS:
        return MODELS[key]
    path = Path(spec).expanduser()
    if path.is_file():
        return _load_model_file(path)
    raise MagnetonError(
        f"unknown energy model {spec!r}: use one of {', '.join(sorted(MODELS))} "
        "or a path to a .toml/.json file with p_static_w, e_flop_pj, e_byte_pj"
    )


def _default_model_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu-default"
    try:
        import torch

        if torch.cuda.is_available():
            idx = int(device.split(":", 1)[1]) if ":" in device else 0
            gpu = torch.cuda.get_device_name(idx).lower()
            for key, name in (("h200", "h200"), ("h100", "h100"), ("a100", "a100")):
                if key in gpu:
                    return name
            if "4090" in gpu:
                return "rtx4090"
    except Exception:  # a broken CUDA setup must not stop a model-based estimate
        pass
    return "gpu-default"


def _load_model_file(path: Path) -> ModelCoefficients:
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text())
        else:
            data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MagnetonError(f"cannot read energy model {path}: {e}") from None
    missing = [k for k in ("p_static_w", "e_flop_pj", "e_byte_pj") if k not in data]
    if missing:
        raise MagnetonError(f"energy model {path} lacks {', '.join(missing)}")
    flop = data["e_flop_pj"]
    if not isinstance(flop, dict):
        flop = {"default": float(flop)}
    return ModelCoefficients(
        name=str(data.get("name", path.stem)),
        p_static_w=float(data["p_static_w"]),
        e_flop_pj={str(k): float(v) for k, v in flop.items()},
        e_byte_pj=float(data["e_byte_pj"]),
        tdp_w=float(data.get("tdp_w", 0.0)),
        citation=str(data.get("citation", f"user file {path}")),
    )


def model_op_power_w(model: ModelCoefficients, op: OpRecord) -> float:
    """Modelled average power of an op over its own window (used for traces/templates)."""
    t = op.time_s if op.time_s > 0 else (op.end_ns - op.start_ns) / 1e9
    if t <= 0:
        return model.p_static_w
    if not op.flops and not op.bytes:
        w = count_op(op)
        dyn = (w.flops * model.flop_pj(dominant_dtype(op)) + w.bytes * model.e_byte_pj) * 1e-12
    else:
        dyn = model.dynamic_j(op)
    return model.p_static_w + dyn / t
