"""JAX programs end to end through the CLI (record, report, diff), on the JAX cases of
examples/cases: a JAX-vs-JAX pair with a known waste (jax_stft: an STFT magnitude by DFT
matrices vs `jnp.fft.rfft`), its A/A control (jax_aa: nothing flagged), and the same job
in JAX and in PyTorch (jax_vs_torch, whose a.py is jax_stft's). Plus the recorder's walk
of nested jaxprs (jit, cond, scan, while) in this process, and the one-line error of an
install without JAX.

The recordings are made once for the module (one process each, as a user runs them); the
scripts are small (a 256x512 frame batch, a 64x128 MLP block).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import warm_cli

jax = pytest.importorskip("jax")

from magneton.graphdb import open_db  # noqa: E402

CASES = Path(__file__).resolve().parents[1] / "examples" / "cases"


def magneton(*args: str) -> subprocess.CompletedProcess:
    return warm_cli.run(args)


def ok(*args: str) -> str:
    res = magneton(*args)
    assert res.returncode == 0, f"magneton {' '.join(args)} failed:\n{res.stderr[-2000:]}"
    return res.stdout


RUNS = {
    # run: (script, extra record options)
    "stft_dft": ("jax_stft/a.py", []),
    "stft_rfft": ("jax_stft/b.py", []),
    "torch_rfft": ("jax_vs_torch/b.py", []),
    "aa_a": ("jax_aa/a.py", ["--power", "model:work-only"]),
    "aa_b": ("jax_aa/b.py", ["--power", "model:work-only"]),
}


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("jax") / "db"
    for run, (script, extra) in RUNS.items():
        out = ok("record", str(CASES / script), "--db", str(path), "--run", run, "-q", *extra)
        assert f"recorded run '{run}'" in out
    return path


def _diff(db: Path, a: str, b: str, *extra: str) -> dict:
    return json.loads(ok("diff", "--db", str(db), a, b, "--json", *extra))


def test_record_structure_names_primitives_modules_and_user_lines(db):
    with open_db(db, read_only=True) as h:
        p = h.load_profile("aa_a")
    assert p.config["framework"] == "jax"
    names = [op.name for op in p.ops]
    assert names.count("jax::dot_general") == 2 and "jax::tanh" in names  # gelu (tanh form)
    # the name stack is the module path: the jitted entry, then the named scopes
    mods = {op.module for op in p.ops}
    assert {"main.mlp", "main.norm"} <= mods
    assert {m.name: m.type for m in p.modules}["main"] == "jit"
    # each operator's frames end at the user's line, entry first
    dot = next(op for op in p.ops if op.name == "jax::dot_general")
    last = p.frames[dot.frames[-1]]
    assert last.file.endswith("jax_aa/a.py") and last.function == "main"
    assert dot.api == "jax.Array.__matmul__"
    assert dot.call_paths[0].endswith("> jax::dot_general")
    # dataflow: the second matmul consumes what the gelu produced
    dots = [op for op in p.ops if op.name == "jax::dot_general"]
    producers = {p.tensors[t].producer for t in dots[1].inputs}
    assert any(p.ops[i].module == "main.mlp" and i > dots[0].idx for i in producers if i >= 0)
    # FLOPs of the contraction: 2*B*H*D
    assert dots[0].flops == pytest.approx(2 * 64 * 256 * 128)


def test_energy_is_the_unfused_replay_and_the_fused_cost_is_reported(db):
    with open_db(db, read_only=True) as h:
        p = h.load_profile("stft_dft")
    assert p.run.energy_j == pytest.approx(sum(op.energy_j for op in p.ops), rel=1e-6)
    assert all(op.energy_j > 0 for op in p.ops)
    assert p.config["energy.windows"].startswith("replayed, unfused")
    fused = float(p.config["fused.energy_j"])
    ratio = float(p.config["fused.unfused_over_fused"])
    assert fused > 0 and ratio == pytest.approx(p.run.energy_j / fused)
    out = ok("report", "--db", str(db), "stft_dft")
    assert "jax::dot_general" in out
    assert "JAX program as it runs (fused, timed as a whole)" in out
    assert f"{ratio:.2f}x the fused total" in out
    rep = json.loads(ok("report", "--db", str(db), "stft_dft", "--json"))
    assert rep["framework"] == "jax" and float(rep["fused"]["energy_j"]) == fused
    by_module = ok("report", "--db", str(db), "aa_a", "--by", "module")
    assert "mlp" in by_module and "norm" in by_module


def test_jax_and_torch_tensors_of_equal_values_get_equal_summaries(db):
    with open_db(db, read_only=True) as h:
        pj = h.load_profile("stft_rfft")
        pt = h.load_profile("torch_rfft")
    xj = next(t for t in pj.tensors if t.name == "args[0]")
    xt = next(t for t in pt.tensors if t.name == "args[0]")
    assert xj.shape == xt.shape == [256, 512] and xj.dtype == xt.dtype == "float32"
    np.testing.assert_allclose(xj.stats, xt.stats, rtol=1e-6)
    np.testing.assert_allclose(xj.invariant, xt.invariant, rtol=1e-5)
    # the outputs (magnitudes) too, computed by two different FFTs
    oj = pj.tensors[pj.ops[-1].outputs[0]]
    ot = pt.tensors[pt.ops[-1].outputs[0]]
    np.testing.assert_allclose(oj.quantiles, ot.quantiles, rtol=1e-3, atol=1e-3)


def test_jax_vs_jax_flags_the_dft_matrices(db):
    d = _diff(db, "stft_dft", "stft_rfft", "--no-rerun")  # confirmation: the torch pair
    regions = [f for f in d["findings"] if f["kind"] == "region"]
    assert regions, d["message"]
    f = regions[0]
    assert f["wasteful"] == "a"
    assert "jax::dot_general" in f["ops"]["a"] and "jax::fft" in f["ops"]["b"]
    assert f["root_cause"]["file"].endswith("jax_stft/a.py")
    assert "x @ cos_t" in f["root_cause"]["code"]


def test_jax_vs_torch_names_the_region_and_the_api(db):
    d = _diff(db, "stft_dft", "torch_rfft")
    regions = [f for f in d["findings"] if f["kind"] == "region"]
    assert regions, d["message"]
    f = regions[0]
    assert f["wasteful"] == "a" and f["interval"]["confirmed"]
    assert "jax::dot_general" in f["ops"]["a"]
    assert any("fft" in op for op in f["ops"]["b"])
    div = f["divergence"]
    assert div["a"]["name"] == "jax.Array.__matmul__"
    assert "fft" in div["b"]["name"]
    assert "torch.fft.rfft" in div["site"]["b"]["code"]
    # no interpreter finding: the replay's own Python is not the program's
    assert all(x["kind"] != "interpreter" for x in d["findings"])


def test_jax_aa_flags_nothing(db):
    d = _diff(db, "aa_a", "aa_b")
    assert d["findings"] == [] and d["matched_pairs"] > 0


def test_nested_jaxprs_are_walked_and_replayed_alike():
    """jit inlined under its name, cond's taken branch, scan and while unrolled with
    explicit slices/stacks; the structure pass and a replay run the same operators."""
    import jax.numpy as jnp

    from magneton.tracer.frameworks.jax_program import JaxProgram

    @jax.jit
    def inner(v):
        return jnp.sin(v) * 2.0

    def body(c, x):
        return c + x, c * x

    def main(x):
        y = inner(x)
        y = jax.lax.cond(y.sum() > 0, lambda v: v + 1.0, lambda v: v - 1.0, y)
        c, ys = jax.lax.scan(body, jnp.zeros(3), y.reshape(4, 3))
        n = jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 2.0), (0, c))
        return ys.sum() + n[1].sum()

    x = jnp.arange(12.0)
    prog = JaxProgram(main, (x,))
    st = prog.structure()
    names = [op.name for op in st.ops]
    assert [w[0] for w in prog.replay()] == names
    assert "jax::sin" in names and names.count("jax::scan_slice") == 4
    assert names.count("jax::scan_stack") == 1
    assert {op.module for op in st.ops if op.name == "jax::sin"} == {"inner"}
    assert any(op.module == "cond" for op in st.ops)
    assert sum(op.module == "while_body" for op in st.ops) >= 3  # three trips unrolled
    out = st.tensors[st.ops[-1].outputs[0]]
    assert out.stats[0] == pytest.approx(float(main(x)), rel=1e-5)


def test_without_jax_installed_record_says_what_to_install(monkeypatch, tmp_path, capsys):
    import importlib.util

    from magneton.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "jax" else real(n, *a)
    )
    rc = main(["record", str(CASES / "jax_aa/a.py"), "--db", str(tmp_path / "db"), "--run", "r"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1
    assert 'pip install "magneton[jax]"' in err[0]
    assert not (tmp_path / "db").exists()  # refused before the DB is created


def test_framework_is_detected_from_the_imports(tmp_path):
    from magneton.tracer.frameworks import detect_framework

    cases = {
        "import jax.numpy as jnp\n": "jax",
        "from flax import linen as nn\n": "jax",
        "import tensorflow as tf\n": "tf",
        "import torch\nimport jax\n": "torch",
        "import numpy as np\n": "torch",
        "def f(:\n": "torch",  # a syntax error is the import's to report
    }
    for i, (src, want) in enumerate(cases.items()):
        f = tmp_path / f"s{i}.py"
        f.write_text(src)
        assert detect_framework(f) == want, src


def test_tui_energy_view_shows_the_jax_run(db):
    """The TUI reads a JAX run like any other: its operator table and its modules."""
    from tui_support import app_for, cells, run_app, wait_for

    from magneton.tui.energy_screen import EnergyScreen

    app = app_for(db)

    async def scenario(pilot) -> None:
        await pilot.press("v")  # the highlighted run
        screen = app.screen
        assert isinstance(screen, EnergyScreen)
        table = screen.query_one("#op-table")
        await wait_for(pilot, lambda: table.row_count > 0, 30, "the operator table")
        assert any(r[0].startswith("jax::") for r in cells(table))
        await pilot.press("m")
        await wait_for(pilot, lambda: "main" in [r[0] for r in cells(table)], 30, "by module")

    run_app(app, scenario)
