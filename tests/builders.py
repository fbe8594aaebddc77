"""Profiles, findings and diff results built by hand, shared by the tests.

One builder instead of a `_profile()` helper per test file: a test states only what it
is about (the ops' energies, a config key, the run's script) and the builder fills in
the rest, so a new field of the data model is added here once. No test module imports
another's private helpers; what two files need lives here (recordings: recordings.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from magneton.model import (
    DiffResult,
    Finding,
    FrameRecord,
    KernelRecord,
    ModuleRecord,
    OpRecord,
    PowerSeries,
    Profile,
    Region,
    RunEnergy,
    RunInfo,
    RunSummary,
    TensorRecord,
)

# One transformer block's operators: (op name, module suffix, uses a weight, kernels)
_BLOCK = [
    ("aten::layer_norm", "ln_1", True, ["aten::native_layer_norm"]),
    ("aten::addmm", "attn.c_attn", True, ["aten::addmm"]),
    ("aten::split", "attn", False, []),
    ("aten::view", "attn", False, []),
    ("aten::permute", "attn", False, []),
    ("aten::matmul", "attn", False, ["aten::bmm"]),
    ("aten::div", "attn", False, ["aten::div"]),
    ("aten::where", "attn", False, ["aten::where"]),
    ("aten::softmax", "attn", False, ["aten::_softmax"]),
    ("aten::matmul", "attn", False, ["aten::bmm"]),
    ("aten::addmm", "attn.c_proj", True, ["aten::addmm"]),
    ("aten::add", "", False, ["aten::add"]),
    ("aten::layer_norm", "ln_2", True, ["aten::native_layer_norm"]),
    ("aten::addmm", "mlp.c_fc", True, ["aten::addmm"]),
    ("aten::gelu", "mlp.act", False, ["aten::gelu"]),
    ("aten::addmm", "mlp.c_proj", True, ["aten::addmm", "aten::copy_"]),
    ("aten::add", "", False, ["aten::add"]),
]
_TYPES = {
    "": "GPT2Block",
    "ln_1": "LayerNorm",
    "ln_2": "LayerNorm",
    "attn": "GPT2Attention",
    "attn.c_attn": "Conv1D",
    "attn.c_proj": "Conv1D",
    "mlp": "GPT2MLP",
    "mlp.c_fc": "Conv1D",
    "mlp.act": "NewGELUActivation",
    "mlp.c_proj": "Conv1D",
}


def profile(
    name: str = "r",
    *,
    ops: Iterable[OpRecord] = (),
    tensors: Iterable[TensorRecord] = (),
    modules: Iterable[ModuleRecord] = (),
    config: dict[str, str] | None = None,
    power: Iterable[PowerSeries] = (),
    energy: RunEnergy | None = None,
    **run: object,
) -> Profile:
    """A profile of run `name` (RunInfo fields as keywords: `script=`, `energy_j=`...)."""
    return Profile(
        run=RunInfo(name=name, **run),  # type: ignore[arg-type]
        ops=list(ops),
        tensors=list(tensors),
        modules=list(modules),
        config=dict(config or {}),
        power=list(power),
        energy=energy if energy is not None else RunEnergy(),
    )


def priced_ops(energies_j: Iterable[float], name: str = "aten::mul") -> list[OpRecord]:
    """One operator `name` per energy, indexed 0..n-1."""
    return [OpRecord(idx=i, name=name, energy_j=e) for i, e in enumerate(energies_j)]


def whole_run_finding(pa: Profile, pb: Profile, wasteful: str = "a") -> Finding:
    """Finding #1 covering every operator of both runs (a test that pins the diagnosis,
    not the matcher's region cuts)."""
    return Finding(
        id=1,
        wasteful=wasteful,
        verdict="waste",
        region_a=Region(ops=[o.idx for o in pa.ops]),
        region_b=Region(ops=[o.idx for o in pb.ops]),
        saving_j=1.0,
        saving_share=0.5,
        output_rel_diff=0.0,
        ops_a=[o.name for o in pa.ops],
        ops_b=[o.name for o in pb.ops],
    )


def diff_result(pa: Profile, pb: Profile, *findings: Finding) -> DiffResult:
    """The diff of `pa` and `pb` holding `findings`."""

    def summary(p: Profile) -> RunSummary:
        return RunSummary(p.run.name, p.run.energy_j, p.run.time_s, p.run.power_source)

    return DiffResult(a=summary(pa), b=summary(pb), findings=list(findings), matched_pairs=1)


def synthetic_profile(
    run: str = "a", n_ops: int = 300, seed: int = 0, gelu: str = "aten::gelu"
) -> Profile:
    """A GPT-2-shaped run of about `n_ops` operators (deterministic for a seed).

    `gelu` renames the MLP activation so two runs can differ in one operator type.
    """
    rng = random.Random(seed)
    hidden, seq = 64, 16
    p = Profile(
        run=RunInfo(
            name=run,
            script=f"/work/examples/{run}.py",
            script_sha256=f"{seed:064x}",
            entry="main",
            started_at=f"2025-01-01T00:00:{seed % 60:02d}+00:00",
            warmup=1,
            repeat=3,
            time_s=0.0,
            energy_j=0.0,
            idle_w=12.5,
            power_source="model:cpu-default",
            energy_method="estimated",
            host="testhost",
        )
    )

    # modules: root "", "h", then h.<i>.<suffix>
    def module(name: str, type_: str, parent: int) -> int:
        p.modules.append(ModuleRecord(idx=len(p.modules), name=name, type=type_, parent=parent))
        return len(p.modules) - 1

    root = module("", "GPT2Model", -1)
    h = module("h", "ModuleList", root)

    frames: dict[tuple[str, int, str], int] = {}

    def frame(file: str, line: int, fn: str) -> int:
        key = (file, line, fn)
        if key not in frames:
            frames[key] = len(p.frames)
            p.frames.append(FrameRecord(idx=len(p.frames), file=file, line=line, function=fn))
        return frames[key]

    kernels: dict[str, int] = {}

    def kernel(name: str) -> int:
        if name not in kernels:
            kernels[name] = len(p.kernels)
            p.kernels.append(KernelRecord(idx=len(p.kernels), name=name, device="cpu"))
        return kernels[name]

    def floats(k: int, scale: float = 1.0) -> list[float]:
        return [round(rng.gauss(0.0, scale), 6) for _ in range(k)]

    def tensor(producer: int, shape: list[int], kind: str = "activation", name: str = "") -> int:
        stride = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
        spectra = [min(shape[i], math.prod(shape) // shape[i], 8) for i in range(len(shape))]
        t = TensorRecord(
            idx=len(p.tensors),
            producer=producer,
            out_index=0,
            kind=kind,
            name=name,
            shape=list(shape),
            dtype="torch.float32",
            stride=stride,
            contiguous=True,
            device="cpu",
            numel=math.prod(shape),
            is_view=False,
            stats=floats(6),
            value_hash="",
            invariant=sorted((abs(x) for x in floats(sum(spectra))), reverse=True),
            invariant_splits=spectra,
            quantiles=sorted(floats(17)),
        )
        p.tensors.append(t)
        return t.idx

    x = tensor(-1, [1, seq, hidden], kind="input", name="args[0]")
    p.tensors[x].value_hash = "0" * 16
    entry = [
        frame("/work/examples/a.py", 40, "main"),
        frame("torch/nn/modules/module.py", 1775, "_call_impl"),
    ]
    t = 0
    layer = 0
    while len(p.ops) < n_ops:
        block = module(f"h.{layer}", "GPT2Block", h)
        mods = {"": block}
        for suffix in (
            "ln_1",
            "attn",
            "attn.c_attn",
            "attn.c_proj",
            "ln_2",
            "mlp",
            "mlp.c_fc",
            "mlp.act",
            "mlp.c_proj",
        ):
            parent_name = suffix.rsplit(".", 1)[0] if "." in suffix else ""
            mods[suffix] = module(f"h.{layer}.{suffix}", _TYPES[suffix], mods[parent_name])
        residual = x
        for j, (name, suffix, weighted, kern) in enumerate(_BLOCK):
            if len(p.ops) >= n_ops:
                break
            if name == "aten::gelu":
                name = gelu
            i = len(p.ops)
            inputs = [x]
            if weighted:
                w = tensor(-1, [hidden, hidden], kind="param", name=f"h.{layer}.{suffix}.weight")
                b = tensor(-1, [hidden], kind="param", name=f"h.{layer}.{suffix}.bias")
                inputs += [w, b]
            if name == "aten::add":
                inputs.append(residual)
            out = tensor(i, [1, seq, hidden])
            if name == "aten::add":
                residual = out
            dur = 1000 + rng.randrange(50_000)
            if suffix == "mlp.act":  # the activation lives in another file, as in transformers
                site = frame("transformers/activations.py", 57, "forward")
            else:
                site = frame("transformers/models/gpt2/modeling_gpt2.py", 100 + j * 7, "forward")
            stack = entry + [frame("transformers/models/gpt2/modeling_gpt2.py", 900, "forward")]
            stack += [frame("torch/nn/modules/module.py", 1786, "_call_impl"), site]
            op = OpRecord(
                idx=i,
                name=name,
                overload="default" if j % 3 else "Tensor",
                seq=i if weighted else -1,
                thread=1,
                device="cpu",
                start_ns=t,
                end_ns=t + dur,
                module=f"h.{layer}.{suffix}" if suffix else f"h.{layer}",
                module_idx=mods[suffix],
                inputs=inputs,
                outputs=[out],
                input_shapes=[p.tensors[k].shape for k in inputs],
                input_dtypes=["torch.float32"] * len(inputs),
                output_shapes=[[1, seq, hidden]],
                output_dtypes=["torch.float32"],
                input_contiguous=[True] * len(inputs),
                scalar_args="dim=-1" if "softmax" in name else "",
                frames=stack,
                api=name,
                call_paths=[" > ".join([name, *kern])] if kern else [],
                kernels=[kernel(k) for k in kern],
                time_s=dur * 1e-9,
                energy_j=dur * 1e-9 * 30.0,
                energy_method="estimated",
                flops=float(2 * seq * hidden * hidden) if weighted else 0.0,
                bytes=float(4 * seq * hidden * len(inputs)),
                windows_ns=[(t, t + dur)],
            )
            p.ops.append(op)
            x = out
            t += dur + 200
        layer += 1
    p.run.time_s = t * 1e-9
    p.run.energy_j = sum(o.energy_j for o in p.ops)
    p.run.energy_above_idle_j = p.run.energy_j - p.run.idle_w * p.run.time_s
    p.config = {
        "torch.__version__": "2.13.0",
        "torch.get_num_threads": "2",
        "torch.backends.cudnn.benchmark": "False",
        "torch.backends.mkldnn.enabled": "True",
        "env.OMP_NUM_THREADS": str(1 + seed % 4),
        "model.config.activation_function": "gelu_new" if gelu == "aten::gelu" else gelu,
    }
    step = 100_000  # 0.1 ms cadence: a few samples even for tiny profiles
    n_samples = max(2, t // step + 1)
    p.power = [
        PowerSeries(
            device="model",
            source="model",
            t_ns=[k * step for k in range(n_samples)],
            watts=[30.0 + rng.random() for _ in range(n_samples)],
            gaps=[(step, 2 * step)] if n_samples > 2 else [],
        )
    ]
    return p
