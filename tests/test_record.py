"""Recording real workloads through the CLI, then checking the graph facts users rely on.

Every recording made here is a subprocess `magneton record ...`, as a user would type it:
module-level flags such as `torch.backends.mkldnn.enabled` must not leak between runs. The
GPT-2 run read here is the session's shared recording (conftest.py `gpt2_db`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import warm_cli
from recordings import copy_db

WORKLOADS = Path(__file__).parent / "workloads"


def magneton(*args: str, env: dict | None = None, check: bool = True):
    proc = warm_cli.run(args, env={**os.environ, **(env or {})}, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"magneton {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def query(db: Path, cypher: str) -> list[dict]:
    return json.loads(magneton("query", "--db", str(db), cypher, "--json").stdout)


@pytest.fixture(scope="module")
def db(gpt2_db, tmp_path_factory) -> Path:
    """The session's GPT-2 runs (conftest.py; 'gelu_new' is the one read here) and two
    convnet runs, mkldnn on and off; tests below add runs, so this is a copy."""
    d = copy_db(gpt2_db, tmp_path_factory.mktemp("rec") / "db")
    for flag, run in (("1", "conv_mkldnn"), ("0", "conv_thnn")):
        magneton(
            "record",
            str(WORKLOADS / "convnet.py"),
            "--db",
            str(d),
            "--run",
            run,
            env={"MAGNETON_TEST_MKLDNN": flag},
        )
    return d


def test_runs_listed_with_counts(db):
    out = json.loads(magneton("runs", "--db", str(db), "--json").stdout)
    runs = {r["name"]: r for r in out}
    assert set(runs) == {"gelu_new", "gelu_fused", "conv_mkldnn", "conv_thnn"}
    assert all(r["status"] == "ok" for r in runs.values())
    # 2 conv + relu + view + add_ + sum
    assert runs["conv_mkldnn"]["op_count"] == 6
    assert runs["gelu_new"]["op_count"] > 50


def test_gelu_ops_run_in_mlp_act_module_and_reach_script_line(db):
    rows = query(
        db,
        "MATCH (o:Operator {run: 'gelu_new'})-[:IN_MODULE]->(m:Module {name: 'h.0.mlp.act'}) "
        "RETURN o.name AS name, o.idx AS idx ORDER BY idx",
    )
    names = [r["name"] for r in rows]
    # gelu_new is the five-op Python tanh approximation: pow and tanh are its signature
    assert "aten::tanh" in names and "aten::pow" in names
    tanh_idx = next(r["idx"] for r in rows if r["name"] == "aten::tanh")
    frames = query(
        db,
        f"MATCH (o:Operator {{run: 'gelu_new', idx: {tanh_idx}}})-[:ON_STACK]->(:CallStack)"
        "-[c:HAS_FRAME]->(f:Frame) "
        "RETURN f.file AS file, f.line AS line, f.function AS fn ORDER BY c.depth",
    )
    # the stack starts at the script's entry line and ends inside transformers' activation
    assert frames[0]["file"].endswith("gpt2_small.py") and frames[0]["fn"] == "main"
    src = (WORKLOADS / "gpt2_small.py").read_text().splitlines()
    assert "model(ids)" in src[frames[0]["line"] - 1]
    assert frames[-1]["file"].endswith("activations.py")


def test_dataflow_connects_inputs_to_output(db):
    # the token ids feed the embedding, and a FLOWS path leads from it to the final op
    first = query(
        db,
        "MATCH (t:Tensor {run: 'gelu_new', kind: 'input'})-[:INPUT]->(o:Operator) "
        "RETURN o.idx AS idx, o.name AS name",
    )
    assert first  # GPT-2 first reshapes the ids (aten::view), then embeds them
    last = query(db, "MATCH (o:Operator {run: 'gelu_new'}) RETURN max(o.idx) AS idx")[0]["idx"]
    edges = query(
        db,
        "MATCH (a:Operator {run: 'gelu_new'})-[:FLOWS]->(b:Operator) RETURN a.idx AS a, b.idx AS b",
    )
    succ: dict[int, set[int]] = {}
    for e in edges:
        succ.setdefault(e["a"], set()).add(e["b"])
    seen, todo = set(), [first[0]["idx"]]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(succ.get(n, ()))
    assert last in seen
    names = {
        r["idx"]: r["name"]
        for r in query(
            db, "MATCH (o:Operator {run: 'gelu_new'}) RETURN o.idx AS idx, o.name AS name"
        )
    }
    assert "aten::embedding" in {names[i] for i in seen}
    # and the Kùzu recursive form users would type, within its 30-hop limit
    near = query(
        db,
        f"MATCH (a:Operator {{run: 'gelu_new', idx: {first[0]['idx']}}})-[:FLOWS* 1..3]->"
        "(b:Operator) RETURN count(DISTINCT b) AS n",
    )
    assert near[0]["n"] >= 2


def test_parameters_are_named_sources(db):
    rows = query(
        db,
        "MATCH (t:Tensor {run: 'gelu_new', kind: 'param'})-[:INPUT]->(o:Operator {name: 'aten::addmm'}) "
        "RETURN DISTINCT t.name AS name ORDER BY name LIMIT 3",
    )
    assert rows and rows[0]["name"].startswith("h.0.attn.c_attn")


def test_inplace_write_keeps_producer_identity(db):
    # main(): flat = y.view(-1); y.add_(1); flat.sum() — sum must consume the add_'s write
    rows = query(
        db,
        "MATCH (a:Operator {run: 'conv_mkldnn'})-[:FLOWS]->(s:Operator {run: 'conv_mkldnn', "
        "name: 'aten::sum'}) RETURN a.name AS name",
    )
    assert [r["name"] for r in rows] == ["aten::add_"]


@pytest.mark.parametrize(
    "run,expected",
    [
        (
            "conv_mkldnn",
            "aten::conv2d > aten::convolution > aten::_convolution > aten::mkldnn_convolution",
        ),
        (
            "conv_thnn",
            "aten::conv2d > aten::convolution > aten::_convolution > aten::thnn_conv2d > aten::_slow_conv2d_forward",
        ),
    ],
)
def test_convolution_dispatch_chain_follows_mkldnn_flag(db, run, expected):
    rows = query(
        db,
        f"MATCH (o:Operator {{run: '{run}', name: 'aten::convolution'}}) "
        "RETURN o.call_paths AS paths, o.api AS api LIMIT 1",
    )
    assert rows[0]["api"] == "aten::conv2d"
    assert any(p.startswith(expected) for p in rows[0]["paths"])
    kernels = query(
        db,
        f"MATCH (o:Operator {{run: '{run}', name: 'aten::convolution'}})-[:LAUNCHED]->(k:Kernel) "
        "RETURN DISTINCT k.name AS name",
    )
    assert expected.split(" > ")[-1] in {k["name"] for k in kernels}


def test_config_snapshot_records_the_flag(db):
    rows = query(
        db,
        "MATCH (c:ConfigEntry {key: 'torch.backends.mkldnn.enabled'}) "
        "RETURN c.run AS run, c.value AS value ORDER BY run",
    )
    values = {r["run"]: r["value"] for r in rows}
    assert values["conv_mkldnn"] == "True" and values["conv_thnn"] == "False"
    # in the steady mode (the suite's, tests/conftest.py) glibc malloc's thresholds were
    # pinned before the script allocated, and the run says so (tracer/programs/steady.py)
    rows = query(db, "MATCH (c:ConfigEntry {key: 'magneton.mode'}) RETURN c.value AS value")
    assert rows and {r["value"] for r in rows} == {
        "steady (OMP_WAIT_POLICY=PASSIVE, malloc glibc mmap_threshold=32MiB trim_threshold=1024MiB)"
    }


def test_script_that_raises_leaves_db_intact_and_marks_run(db):
    before = {r["name"] for r in json.loads(magneton("runs", "--db", str(db), "--json").stdout)}
    proc = magneton(
        "record", str(WORKLOADS / "raises.py"), "--db", str(db), "--run", "bad", check=False
    )
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "ValueError" in err[0] and "raises.py:" in err[0]
    assert "nothing stored" in err[0]
    runs = {r["name"]: r for r in json.loads(magneton("runs", "--db", str(db), "--json").stdout)}
    assert before == set(runs)  # a failed recording leaves nothing behind
    assert all(runs[n]["status"] == "ok" for n in before)
    # the earlier runs' operators are all still there
    assert query(db, "MATCH (o:Operator {run: 'gelu_new'}) RETURN count(o) AS n")[0]["n"] > 50


def test_ctrl_c_stores_nothing_and_exits_130(db):
    proc = magneton(
        "record", str(WORKLOADS / "interrupted.py"), "--db", str(db), "--run", "intr", check=False
    )
    assert proc.returncode == 130
    assert "interrupted" in proc.stderr and "nothing stored" in proc.stderr
    runs = {r["name"]: r for r in json.loads(magneton("runs", "--db", str(db), "--json").stdout)}
    assert "intr" not in runs


def test_existing_run_name_is_refused_without_replace(db):
    proc = magneton(
        "record",
        str(WORKLOADS / "convnet.py"),
        "--db",
        str(db),
        "--run",
        "conv_mkldnn",
        check=False,
    )
    assert proc.returncode != 0 and "--replace" in proc.stderr


def test_missing_script_and_missing_entry_are_one_line_errors(tmp_path):
    proc = magneton(
        "record", str(tmp_path / "nope.py"), "--db", str(tmp_path / "db"), "--run", "x", check=False
    )
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and "no such script" in proc.stderr
    proc = magneton(
        "record",
        str(WORKLOADS / "raises.py"),
        "--db",
        str(tmp_path / "db"),
        "--run",
        "x",
        "--entry",
        "nothere",
        check=False,
    )
    assert proc.returncode != 0 and "nothere" in proc.stderr and "Traceback" not in proc.stderr


def test_python_api_records_a_callable(tmp_path):
    import torch

    import magneton

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)

    def entry(m, x):
        with torch.no_grad():
            return torch.relu(m(x))

    prof = magneton.record(entry, (lin, x), run="api", db=str(tmp_path / "db"))
    assert [op.name for op in prof.ops] == ["aten::t", "aten::addmm", "aten::relu"]
    assert prof.ops[1].module == "" and prof.run.timing == "separate"
    with magneton.open_db(str(tmp_path / "db")) as handle:
        assert handle.load_profile("api").ops[2].name == "aten::relu"


def test_python_api_records_a_block(tmp_path):
    import torch

    import magneton

    x = torch.randn(16, 16)
    with magneton.record_block("blk", db=str(tmp_path / "db")) as prof:
        y = (x @ x).softmax(-1)
    assert y.shape == (16, 16)
    assert [op.name for op in prof.ops] == ["aten::mm", "aten::_softmax"]
    assert prof.run.timing == "combined"
    assert prof.ops[0].frames and prof.frames[prof.ops[0].frames[-1]].function.startswith("test_")


class _Stack:
    """Built lazily (torch imports inside tests): blocks in a ModuleList that is never
    called itself, as in GPT-2's `h`."""

    @staticmethod
    def build():
        import torch

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(8, 8)
                self.act = torch.nn.GELU()

            def forward(self, x):
                return self.act(self.fc(x))

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList([Block() for _ in range(3)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x

        return Net


def _gelu_modules(prof) -> list[str]:
    return [op.module for op in prof.ops if op.name == "aten::gelu"]


def test_python_api_names_modules_of_a_model_reached_by_closure(tmp_path):
    import torch

    import magneton

    torch.manual_seed(0)
    net = _Stack.build()()
    x = torch.randn(2, 8)
    prof = magneton.record(lambda: net(x), run="clo", options=magneton.RecordOptions(repeat=1))
    # the closure's model is the root: Smaragdine paths, one per block, params named
    assert _gelu_modules(prof) == ["layers.0.act", "layers.1.act", "layers.2.act"]
    params = {t.name for t in prof.tensors if t.kind == "param"}
    assert {"layers.0.fc.weight", "layers.2.fc.bias"} <= params


def test_modules_built_inside_the_entry_keep_their_list_index(tmp_path):
    import torch

    import magneton

    net_cls = _Stack.build()

    def entry(x):
        torch.manual_seed(0)
        return net_cls()(x)

    prof = magneton.record(entry, (torch.randn(2, 8),), run="dyn", db=str(tmp_path / "db"))
    # nobody passed the model: it is named by its type, its blocks by their index
    assert _gelu_modules(prof) == ["Net.layers.0.act", "Net.layers.1.act", "Net.layers.2.act"]
    with magneton.open_db(str(tmp_path / "db"), read_only=True) as db:
        rows = db.query(
            "MATCH (c:Module {run: 'dyn', name: 'Net.layers.1.act'})-[:CHILD_OF*1..3]->"
            "(p:Module) RETURN p.name AS name ORDER BY size(p.name) DESC"
        ).records()
    assert [r["name"] for r in rows] == ["Net.layers.1", "Net"]


def test_backward_ops_are_charged_to_the_module_whose_forward_made_them(tmp_path):
    import torch

    import magneton

    torch.manual_seed(0)
    net = _Stack.build()()
    x = torch.randn(2, 8)

    def train_step(net, x):
        net(x).sum().backward()

    prof = magneton.record(
        train_step, (net, x), run="bwd", options=magneton.RecordOptions(repeat=1)
    )
    # autograd runs outside every forward hook; the profiler's sequence numbers say which
    # forward op (and so which module) each backward op belongs to
    gelu_bwd = [op.module for op in prof.ops if op.name == "aten::gelu_backward"]
    assert gelu_bwd == ["layers.2.act", "layers.1.act", "layers.0.act"]
    fc_bwd = {op.module for op in prof.ops if op.name == "aten::mm"}
    assert fc_bwd == {"layers.0.fc", "layers.1.fc", "layers.2.fc"}


CYCLES = """
import gc
import weakref

import torch


class Node:
    pass


def cycle():
    node = Node()
    node.itself = node
    return weakref.ref(node)


AT_IMPORT = cycle()  # garbage as soon as it is made, but only the cyclic collector frees it


def setup():
    return cycle(), torch.ones(2)


def main(made_in_setup, x):
    gc.collect()
    assert AT_IMPORT() is None and made_in_setup() is None, "cyclic garbage kept"
    return x * 2
"""


def test_the_scripts_cyclic_garbage_is_still_collected(tmp_path):
    """`record` leaves its own objects and torch's out of the cyclic collector (they live
    until it ends); the script's, from its import on, are collected as they would be
    without Magneton."""
    script = tmp_path / "cycles.py"
    script.write_text(CYCLES)
    res = magneton("record", str(script), "--db", str(tmp_path / "db"), "--run", "c", check=False)
    assert res.returncode == 0, res.stderr[-1500:]


def test_recording_in_process_leaves_the_callers_objects_collectable(tmp_path):
    """`record` called in the caller's process (`magneton.cli.main`, as tests and Python
    callers do) freezes the objects alive before it only while it records: afterwards
    nothing of the caller's stays out of the cyclic collector."""
    import contextlib
    import gc
    import io

    from magneton.cli import main

    gc.unfreeze()  # what tests/conftest.py froze: this test is about a caller that did not
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(
                [
                    "record",
                    str(WORKLOADS / "tiny.py"),
                    "--db",
                    str(tmp_path / "db"),
                    "--run",
                    "a",
                    "-q",
                ]
            )
        assert rc == 0 and gc.get_freeze_count() == 0
    finally:
        gc.freeze()
