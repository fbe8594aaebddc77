"""Operator/module/kernel tables and the folded module tree (Smaragdine EDD)."""

from __future__ import annotations

import pytest
from builders import profile

from magneton.diagnose.breakdown import module_tree, operator_table, top_rows
from magneton.model import KernelRecord, ModuleRecord, OpRecord, Profile


def _profile(modules: list[tuple[str, str]], ops: list[tuple[str, str, float]]) -> Profile:
    mods = [ModuleRecord(idx=i, name=n, type=t) for i, (n, t) in enumerate(modules)]
    recs = []
    t = 0
    for i, (module, name, energy) in enumerate(ops):
        recs.append(
            OpRecord(
                idx=i,
                name=name,
                module=module,
                energy_j=energy,
                energy_method="measured",
                time_s=1e-3,
                start_ns=t,
                end_ns=t + 1_000_000,
            )
        )
        t += 1_500_000
    energy_j = sum(e for _, _, e in ops)
    return profile("x", ops=recs, modules=mods, energy_j=energy_j, time_s=len(ops) * 1.5e-3)


def gpt2_like(n_blocks: int = 12) -> Profile:
    modules = [("", "GPT2Model"), ("wte", "Embedding"), ("h", "ModuleList"), ("ln_f", "LayerNorm")]
    ops = [("wte", "aten::embedding", 1.0)]
    for i in range(n_blocks):
        modules += [
            (f"h.{i}", "GPT2Block"),
            (f"h.{i}.attn", "GPT2Attention"),
            (f"h.{i}.mlp", "GPT2MLP"),
            (f"h.{i}.mlp.act", "NewGELUActivation"),
        ]
        ops += [
            (f"h.{i}.attn", "aten::addmm", 2.0),
            (f"h.{i}.mlp", "aten::addmm", 3.0),
            (f"h.{i}.mlp.act", "aten::tanh", 0.5),
            (f"h.{i}.mlp.act", "aten::mul", 0.25),
        ]
    ops.append(("ln_f", "aten::native_layer_norm", 0.5))
    return _profile(modules, ops)


def test_repeated_blocks_fold_into_star_with_summed_energy():
    p = gpt2_like(12)
    root = module_tree(p, fold=True)
    assert root.name == "GPT2Model" and root.energy_j == pytest.approx(p.run.energy_j)
    h = root.find("h")
    assert [c.path for c in h.children] == ["h.*"]
    star = root.find("h.*")
    assert star.instances == 12
    assert star.energy_j == pytest.approx(12 * 5.75)
    act = root.find("h.*.mlp.act")
    assert act.energy_j == pytest.approx(12 * 0.75) and act.instances == 12
    assert act.ops == {"aten::tanh": pytest.approx(6.0), "aten::mul": pytest.approx(3.0)}
    assert act.share == pytest.approx(9.0 / p.run.energy_j)
    # unfolded: every block its own node, same totals
    flat = module_tree(p, fold=False)
    assert len(flat.find("h").children) == 12
    assert flat.find("h.3.mlp").energy_j == pytest.approx(3.75)
    assert flat.energy_j == pytest.approx(root.energy_j)


def test_heterogeneous_sequential_and_named_layers_do_not_fold():
    p = _profile(
        [
            ("", "Net"),
            ("features", "Sequential"),
            ("features.0", "Conv2d"),
            ("features.1", "ReLU"),
            ("features.2", "Conv2d"),
            ("conv1", "Conv2d"),
            ("conv2", "Conv2d"),
            ("layer_0", "Block"),
            ("layer_1", "Block"),
        ],
        [
            ("features.0", "aten::convolution", 4.0),
            ("features.1", "aten::relu", 1.0),
            ("features.2", "aten::convolution", 4.0),
            ("conv1", "aten::convolution", 2.0),
            ("conv2", "aten::convolution", 2.0),
            ("layer_0", "aten::add", 1.0),
            ("layer_1", "aten::add", 1.0),
        ],
    )
    root = module_tree(p)
    assert {c.path for c in root.find("features").children} == {
        "features.0",
        "features.1",
        "features.2",
    }
    assert root.find("conv1") is not None and root.find("conv2") is not None
    layer = root.find("layer_*")
    assert layer is not None and layer.instances == 2 and layer.energy_j == pytest.approx(2.0)


def test_operator_table_sums_to_run_and_groups():
    p = gpt2_like(4)
    rows = operator_table(p, by="op")
    assert sum(r.energy_j for r in rows) == pytest.approx(p.run.energy_j)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    addmm = next(r for r in rows if r.name == "aten::addmm")
    assert addmm.calls == 8 and addmm.energy_j == pytest.approx(20.0)
    assert addmm.j_per_call == pytest.approx(2.5)
    assert rows[0].name == "aten::addmm"  # sorted by energy
    assert addmm.method == "measured"
    # average power over charged time (own 1 ms + half of each 0.5 ms gap around it)
    assert addmm.avg_w == pytest.approx(20.0 / (8 * 1.5e-3), rel=1e-6)
    mods = operator_table(p, by="module")
    assert {r.name for r in mods} >= {"h.0.mlp", "wte", "ln_f"}
    limited = top_rows(rows, 2, p.run.energy_j)
    assert len(limited) == 3 and limited[-1].name.startswith("(other")
    assert sum(r.energy_j for r in limited) == pytest.approx(p.run.energy_j)


def test_kernel_table_splits_an_ops_energy_among_its_kernels():
    p = gpt2_like(1)
    p.kernels = [KernelRecord(0, "aten::addmm", "cpu"), KernelRecord(1, "aten::copy_", "cpu")]
    p.ops[1].kernels = [0, 1]
    rows = {r.name: r for r in operator_table(p, by="kernel")}
    assert rows["aten::copy_"].energy_j == pytest.approx(1.0)
    assert rows["aten::addmm"].energy_j == pytest.approx(1.0 + 3.0)  # other addmm: no kernels
    assert sum(r.energy_j for r in rows.values()) == pytest.approx(p.run.energy_j)


def test_mixed_methods_are_named():
    p = gpt2_like(1)
    p.ops[1].energy_method = "replayed"
    row = next(r for r in operator_table(p) if r.name == "aten::addmm")
    assert row.method == "measured+replayed"
