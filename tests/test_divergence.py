"""Divergence (Cypher over stored kernel paths) and key variables, on tiny real recordings.

Runs are recorded in-process with the real recorder (small tensors, no warm-up); a
finding is built by hand so the test pins the diagnosis, not the matcher's region cuts.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch
from builders import diff_result, whole_run_finding
from recordings import load_module, record_scripts

from magneton.diagnose.cause.divergence import find_divergence
from magneton.diagnose.cause.rootcause import diagnose_result
from magneton.graphdb import open_db
from magneton.graphdb.paths import DIVERGENCE_QUERY, bookkeeping
from magneton.model import Finding
from magneton.tracer.programs.record import RecordOptions, record_callable

WORK = """
import torch
import torch.nn.functional as F


def conv(x, w):
    return F.conv2d(x, w, padding=1)


def act_fast(x):
    return F.gelu(x, approximate="tanh")


def act_slow(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))


class Act:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)


def dispatch(act, x):
    return act(x)


def gelu(x):
    return F.gelu(x)


def maybe_copy(x, copy):
    if copy:
        x = x.contiguous()
    return F.gelu(x)
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("proj")
    p = d / "work.py"
    p.write_text(WORK)
    return p, load_module(p, "magneton_test_work")


OPTS = RecordOptions(warmup=0, repeat=1, power="model", call_paths=True)


def _record(db, run, fn, args, script):
    return record_callable(fn, args, run=run, db=db, options=OPTS, script=str(script), entry="main")


def test_native_divergence_at_convolution_and_its_knob(work, tmp_path):
    path, mod = work
    x, w = torch.randn(2, 8, 16, 16), torch.randn(8, 8, 3, 3)  # big enough for oneDNN
    with open_db(tmp_path / "db") as db:
        old = torch.backends.mkldnn.enabled
        try:
            torch.backends.mkldnn.enabled = False
            pa = _record(db, "a", mod.conv, (x, w), path)
        finally:
            torch.backends.mkldnn.enabled = old
        pb = _record(db, "b", mod.conv, (x, w), path)
        f = whole_run_finding(pa, pb)
        d = find_divergence(db, f, "a", "b", pa, pb)
        assert d.level == "dispatch"
        assert d.a.to_json() == {"kind": "op", "name": "aten::thnn_conv2d"}
        assert d.b.to_json() == {"kind": "op", "name": "aten::mkldnn_convolution"}
        prefix_ops = [e.name for e in d.common_prefix if e.kind == "op"]
        assert prefix_ops[-1] == "aten::_convolution"
        # the Cypher text users run (docs/diagnosis.md) passes the read-only guard
        rows = db.user_query(
            DIVERGENCE_QUERY,
            {
                "run_a": "a",
                "run_b": "b",
                "ops_a": f.region_a.ops,
                "ops_b": f.region_b.ops,
                "bookkeeping": bookkeeping(),
            },
        ).rows
        assert rows and rows[0][4] == len(d.common_prefix)
        diagnose_result(db, diff_result(pa, pb, f), rerun=False)
    rc = f.root_cause.to_json()
    assert rc["kind"] == "global-flag"
    assert rc["variable"] == "torch.backends.mkldnn.enabled"
    assert rc["values"] == {"a": "False", "b": "True"}
    assert rc["rule"]["id"] == "mkldnn-conv-disabled"
    assert f.category == "misconfiguration"
    # the flag was flipped in the process, not in the script: guidance, no patch
    assert f.fix.patch is None and "torch.backends.mkldnn.enabled" in f.fix.summary


def test_python_divergence_through_a_call_target(work, tmp_path):
    path, mod = work
    x = torch.randn(16, 16)
    with open_db(tmp_path / "db") as db:
        pa = _record(db, "a", mod.dispatch, (mod.Act(mod.act_slow), x), path)
        pb = _record(db, "b", mod.dispatch, (mod.Act(mod.act_fast), x), path)
        d = find_divergence(db, whole_run_finding(pa, pb), "a", "b", pa, pb)
    assert d.level == "python"
    assert d.a.function == "act_slow" and d.b.function == "act_fast"
    assert d.site_a.function == "__call__" and d.site_a.code == "return self.fn(x)"


def test_identical_paths_compare_kernel_arguments(work, tmp_path):
    path, mod = work
    x = torch.randn(8, 16)
    with open_db(tmp_path / "db") as db:
        pa = _record(db, "a", mod.gelu, (x,), path)
        pb = _record(db, "b", mod.gelu, (x.t(),), path)  # same code, non-contiguous input
        pc = _record(db, "c", mod.gelu, (x,), path)
        d = find_divergence(db, whole_run_finding(pa, pb), "a", "b", pa, pb)
        assert d.level == "kernel" and d.a.kind == "args"
        assert d.a.diff["input_contiguous"] == [True]
        assert d.b.diff["input_contiguous"] == [False]
        same = find_divergence(db, whole_run_finding(pa, pc), "a", "c", pa, pc)
        assert same.level == "kernel" and same.a.diff == {} and same.identical_paths >= 1


def test_extra_copy_is_redundant_and_copies_are_not_ignored(work, tmp_path):
    path, mod = work
    x = torch.randn(8, 16)
    with open_db(tmp_path / "db") as db:
        pa = _record(db, "a", mod.maybe_copy, (x.t(), True), path)
        pb = _record(db, "b", mod.maybe_copy, (x.t(), False), path)
        f = whole_run_finding(pa, pb)
        d = find_divergence(db, f, "a", "b", pa, pb)
        assert d.b.to_json() == {"kind": "none"}  # a copies, b has nothing in its place
        diagnose_result(db, diff_result(pa, pb, f), rerun=False)
    assert f.category == "redundant"
    assert f.root_cause.rule.id == "redundant-copy"


LIB = """
ACTS = {}


def register(name):
    def deco(fn):
        ACTS[name] = fn
        return fn
    return deco


@register("slow")
def slow(x):
    import torch
    return 0.5 * x * (1.0 + torch.tanh(0.79788 * (x + 0.044715 * x * x * x)))


@register("fast")
def fast(x):
    import torch.nn.functional as F
    return F.gelu(x, approximate="tanh")


class Config:
    def __init__(self, width=8, act="slow"):
        self.width = width
        self.act = act


class Block:
    def __init__(self, config):
        self.fn = ACTS[config.act]

    def forward(self, x):
        return self.fn(x)
"""

SCRIPT = """
import torch
from actlib import Block, Config


def setup():
    torch.manual_seed(0)
    cfg = Config(width=8, act="{act}")
    return Block(cfg), torch.randn(32, 32)


def main(block, x):
    return block.forward(x)
"""


def _install_lib(tmp_path: Path, monkeypatch, name: str, source: str) -> None:
    """A library "installed" outside the project: importable from anywhere (the re-runs
    inherit PYTHONPATH) but not part of the user's code."""
    lib = tmp_path / "site" / f"{name}.py"
    lib.parent.mkdir()
    lib.write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(lib.parent))
    monkeypatch.syspath_prepend(str(lib.parent))


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_rerun_finds_the_config_value_and_patches_it(tmp_path, monkeypatch):
    _install_lib(tmp_path, monkeypatch, "actlib", LIB)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text(textwrap.dedent(SCRIPT.format(act="slow")))
    (proj / "b.py").write_text(textwrap.dedent(SCRIPT.format(act="fast")))
    with open_db(tmp_path / "db") as db:
        pa, pb = record_scripts(db, proj, "act")
        f = whole_run_finding(pa, pb)
        diagnose_result(db, diff_result(pa, pb, f), rerun=True)
    rc = f.root_cause.to_json()
    assert f.divergence.level == "python"
    kv = rc["key_variable"]
    assert kv["expr"] == "self.fn" and kv["rerun"]["ran"], rc
    assert kv["values"]["a"].endswith("actlib.slow>") and kv["values"]["b"].endswith("actlib.fast>")
    assert rc["kind"] == "config" and rc["variable"] == "act"
    assert rc["file"] == str(proj / "a.py") and rc["values"] == {"a": '"slow"', "b": '"fast"'}
    hops = [h["expr"] for h in rc["data_flow"]]
    assert hops == ["self.fn", "ACTS[config.act]", "config.act"]
    patch = f.fix.patch
    assert patch and '-    cfg = Config(width=8, act="slow")' in patch
    (proj / "fix.patch").write_text(patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=proj, check=True)
    assert 'act="fast"' in (proj / "a.py").read_text()


# torch.optim's shape: a decorator that forwards *args/**kwargs between `step()` and the
# update function, `if fused: ... elif foreach: ... else: ...` choosing the kernel
# family, the setting read back as `group["foreach"]`, and the user's script setting it
# through a module constant
OPTLIB = """
import functools

import torch


def no_compile(fn):
    @functools.wraps(fn)
    def maybe_fallback(*args, **kwargs):
        return fn(*args, **kwargs)
    return maybe_fallback


def _loop(params):
    for p in params:
        p.mul_(0.9)


def _grouped(params):
    torch._foreach_mul_(params, 0.9)


def _fused(params):
    raise NotImplementedError


@no_compile
def decay(params, fused=None, foreach=None):
    if fused:
        func = _fused
    elif foreach:
        func = _grouped
    else:
        func = _loop
    func(params)


class Decay:
    def __init__(self, params, foreach=None):
        self.param_groups = [{"params": list(params), "foreach": foreach}]

    def step(self):
        for group in self.param_groups:
            decay(group["params"], fused=None, foreach=group["foreach"])
"""

OPTSCRIPT = """
import torch
from optlib import Decay

FOREACH = {foreach}


def setup():
    torch.manual_seed(0)
    params = [torch.randn(64) for _ in range(6)]
    return (Decay(params, foreach=FOREACH),)


def main(opt):
    opt.step()
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_optimizer_flag_behind_a_forwarding_decorator_is_found_and_patched(tmp_path, monkeypatch):
    _install_lib(tmp_path, monkeypatch, "optlib", OPTLIB)
    proj = tmp_path / "proj"
    proj.mkdir()
    for side, flag in (("a", "False"), ("b", "True")):
        (proj / f"{side}.py").write_text(textwrap.dedent(OPTSCRIPT.format(foreach=flag)))
    with open_db(tmp_path / "db") as db:
        pa, pb = record_scripts(db, proj, "opt")
        assert {o.name for o in pb.ops} == {"aten::_foreach_mul_"}
        f = whole_run_finding(pa, pb)
        diagnose_result(db, diff_result(pa, pb, f), rerun=True)
    rc = f.root_cause.to_json()
    kv = rc["key_variable"]
    # the branch that differs is the `elif foreach:`, not the `if fused:` whose span holds it
    assert kv["kind"] == "branch" and kv["expr"] == "foreach", rc
    assert kv["values"] == {"a": "False", "b": "True"}
    # stepped over the forwarding wrapper to step()'s keyword, then to the user's constant
    assert [h["expr"] for h in rc["data_flow"]] == ["foreach", 'group["foreach"]'], rc
    assert rc["variable"] == "foreach" and rc["values"] == {"a": "False", "b": "True"}
    assert rc["line"] == 5 and rc["file"] == str(proj / "a.py")
    assert "FOREACH (which sets foreach)" in f.fix.summary
    (proj / "fix.patch").write_text(f.fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=proj, check=True)
    assert "FOREACH = True" in (proj / "a.py").read_text()


DTYPE_SCRIPT = """
import numpy as np
import torch

DTYPE = torch.{dtype}
ids_dtype = torch.long  # another dtype= in the file: not the one that decided


def setup():
    rng = np.random.default_rng(0)  # float64 arrays, as data loaders hand them over
    return rng.standard_normal((64, 64)), rng.standard_normal((64, 64))


def main(x, w):
    ids = torch.zeros(4, dtype=ids_dtype)
    xt, wt = torch.tensor(x, dtype=DTYPE), torch.tensor(w, dtype=DTYPE)
    return torch.mm(xt, wt) + ids.sum()
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_same_kernels_on_another_dtype_trace_to_the_dtype_the_user_set(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    for side, dtype in (("a", "float64"), ("b", "float32")):
        (proj / f"{side}.py").write_text(DTYPE_SCRIPT.format(dtype=dtype))
    with open_db(tmp_path / "db") as db:
        pa, pb = record_scripts(db, proj, "dtype")
        f = whole_run_finding(pa, pb)  # the whole computation

        def only(name: str) -> Finding:
            g = whole_run_finding(pa, pb)
            g.region_a.ops = [o.idx for o in pa.ops if o.name == name]
            g.region_b.ops = [o.idx for o in pb.ops if o.name == name]
            return g

        conv = only("aten::_to_copy")
        result = diff_result(pa, pb, f)
        result.findings.append(conv)
        diagnose_result(db, result, rerun=False)
    # the conversions differ only in their dtype= argument (the matmul in its inputs' dtype)
    assert "dtype=torch.float32" in conv.divergence.b.diff["scalar_args"]
    for finding in (f, conv):
        rc = finding.root_cause.to_json()
        assert finding.divergence.level == "kernel", finding.divergence
        assert rc["variable"] == "dtype", rc
        assert rc["values"] == {"a": "torch.float64", "b": "torch.float32"}
        assert rc["line"] == 5 and rc["file"] == str(proj / "a.py")
    (proj / "fix.patch").write_text(f.fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=proj, check=True)
    text = (proj / "a.py").read_text()
    assert "DTYPE = torch.float32" in text and "ids_dtype = torch.long" in text
