"""Backward data-flow (libcst) and patches: from a key variable to the user's line, and a
patch that real `git apply` accepts.

The "library" here is a module outside the user's project directory, like an installed
package: the slicer walks through it, and origins must land in the user's script.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from magneton.diagnose.fix.edits import (
    add_keyword,
    make_patch,
    port_statements,
    replace_value,
    statement_block,
)
from magneton.diagnose.source.dataflow import (
    BackwardSlicer,
    SideContext,
    SliceContext,
    find_attribute_origin,
    find_knob_origin,
    find_library_default,
)
from magneton.diagnose.source.index import source_index, user_files
from magneton.knowledge.base import default_knowledge

LIB = """
TABLE = {"slow": "SlowAct", "fast": "FastAct"}


class Config:
    kind: str = "slow"

    def __init__(self, width=4, kind="slow", _impl="eager"):
        self.width = width
        self.kind = kind
        self._impl = _impl


class Block:
    def __init__(self, config):
        chosen = config.kind
        self.act = TABLE[chosen]

    def forward(self, x):
        return self.act(x)


def run(x, fast):
    if fast:
        return x * 2
    return x + x


def dispatch(config):
    fn = pick(config._impl, len)
    return fn(config)
"""

USER = """
import os
import torch as T
from mylib import Block, Config, run

FLAG = False
T.backends.mkldnn.enabled = FLAG
os.environ["OMP_NUM_THREADS"] = "1"


def setup():
    cfg = Config(width=8, kind="slow", _impl="eager")
    return (Block(cfg),)


def main(block):
    return run(3, fast=False)
"""


@pytest.fixture()
def project(tmp_path):
    lib = tmp_path / "site" / "mylib.py"
    lib.parent.mkdir()
    lib.write_text(LIB)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text(USER)
    return lib, proj / "a.py"


def _line(path: Path, text: str) -> int:
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if text in ln:
            return i
    raise AssertionError(text)


def _ctx(script: Path, frames=()) -> SliceContext:
    kb = default_knowledge()
    return SliceContext(
        sides={
            "a": SideContext(script=str(script), files=user_files(str(script)), frames=list(frames))
        },
        config_attributes=frozenset(
            k.attribute.lstrip("_") for k in kb.knobs.values() if k.attribute
        ),
    )


def test_self_attribute_and_local_chain_reach_the_config_keyword(project):
    lib, script = project
    idx = source_index(lib)
    call = idx.calls_on_line(_line(lib, "return self.act(x)"))[0]
    flow = BackwardSlicer(_ctx(script)).from_node(idx, call.func, "call target")
    exprs = [h.expr for h in flow.hops]
    # self.act -> assigned in __init__ -> lookup key `chosen` -> local assigned from config.kind
    assert exprs == ["self.act", "TABLE[chosen]", "chosen", "config.kind"]
    assert flow.terminal == "config-attribute" and flow.attribute == "kind"
    origin = find_attribute_origin("kind", user_files(str(script)), "'slow'")
    assert origin is not None and origin.kind == "config"
    assert origin.file == str(script) and origin.line == _line(script, "cfg = Config(")
    assert origin.value == '"slow"'


def test_underscored_attribute_matches_the_keyword_the_user_wrote(project):
    lib, script = project
    idx = source_index(lib)
    call = idx.calls_on_line(_line(lib, "fn = pick("))[0]
    flow = BackwardSlicer(_ctx(script)).from_node(idx, call, "value")
    assert flow.attribute == "_impl"
    origin = find_attribute_origin("_impl", user_files(str(script)), None)
    assert origin.variable == "_impl" and origin.value == '"eager"'


def test_parameter_follows_the_recorded_caller(project):
    lib, script = project
    idx = source_index(lib)
    if_line = _line(lib, "if fast:")
    test = next(n for n in idx.nodes_of(cst.If) if idx.line_of(n) == if_line).test
    frames = [(str(script), _line(script, "return run(3"), "main"), (str(lib), if_line, "run")]
    flow = BackwardSlicer(_ctx(script, frames)).from_node(idx, test, "condition")
    assert flow.terminal == "literal"
    last = flow.hops[-1]
    assert last.file == str(script) and last.expr == "False"


def test_global_flag_through_alias_and_name(project):
    _, script = project
    kb = default_knowledge()
    origin = find_knob_origin(
        kb.knob("torch.backends.mkldnn.enabled"), user_files(str(script)), "False"
    )
    assert origin is not None and origin.kind == "global-flag"
    # the setter reads FLAG; the literal to change is where FLAG is assigned
    assert origin.line == _line(script, "FLAG = False") and origin.value == "False"
    assert origin.span is not None and origin.assigned_to == "FLAG"


def test_environment_variable_origin(project):
    _, script = project
    kb = default_knowledge()
    origin = find_knob_origin(kb.knob("torch.get_num_threads"), user_files(str(script)), None)
    assert origin.kind == "env" and origin.env_var == "OMP_NUM_THREADS"
    assert origin.line == _line(script, "os.environ[")


def test_library_default_and_added_keyword(project, tmp_path):
    lib, script = project
    # class-level annotation wins (dataclass-style configs), else the __init__ default
    assert find_library_default("kind", "Config", str(lib))[2] == '"slow"'
    assert find_library_default("width", "Config", str(lib))[2] == "4"
    idx = source_index(script)
    call = idx.calls_on_line(_line(script, "cfg = Config("))[0]
    text = add_keyword(str(script), idx.span(call), "act", '"fast"')
    assert 'Config(width=8, kind="slow", _impl="eager", act="fast")' in text


def _git_apply(repo: Path, patch: str, directory: str | None = None) -> None:
    pf = repo / "fix.patch"
    pf.write_text(patch)
    args = ["git", "apply"] + ([f"--directory={directory}"] if directory else [])
    for check in (["--check"], []):
        subprocess.run(args[:2] + check + args[2:] + [str(pf)], cwd=repo, check=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_value_patch_applies_with_git_in_a_repo_subdirectory(project, tmp_path):
    _, script = project
    origin = find_knob_origin(
        default_knowledge().knob("torch.backends.mkldnn.enabled"), user_files(str(script)), "False"
    )
    patch = make_patch(
        str(script), str(script.parent), replace_value(str(script), origin.span, "True")
    )
    diff = patch.diff()
    assert diff.startswith("diff --git a/a.py b/a.py")
    repo = tmp_path / "repo"
    sub = repo / "cases" / "x"
    sub.mkdir(parents=True)
    shutil.copy(script, sub / "a.py")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _git_apply(repo, diff, directory="cases/x")
    assert "FLAG = True" in (sub / "a.py").read_text()
    # outside any repository, plain `git apply` in the script's directory works too
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(script, plain / "a.py")
    _git_apply(plain, diff)
    assert "FLAG = True" in (plain / "a.py").read_text()


def _two(tmp_path, a: str, b: str) -> tuple[Path, Path]:
    pa, pb = tmp_path / "a.py", tmp_path / "b.py"
    pa.write_text(textwrap.dedent(a))
    pb.write_text(textwrap.dedent(b))
    return pa, pb


def test_port_is_refused_when_names_mean_different_things(tmp_path):
    a, b = _two(
        tmp_path,
        """
        def main(x, w):
            y = x + 1
            return y * w
        """,
        """
        def main(x, w):
            y = x * 3
            return w * y
        """,
    )
    bw = statement_block(str(a), [4])
    be = statement_block(str(b), [4])
    port = port_statements(bw, be)
    assert port.text is None and "computed differently" in port.reason


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_port_with_missing_import_applies(tmp_path):
    a, b = _two(
        tmp_path,
        """
        import torch


        def main(logits, labels):
            logp = torch.log_softmax(logits, -1)
            return -logp.gather(-1, labels[..., None])[..., 0]
        """,
        """
        import torch
        import torch.nn.functional as F


        def main(logits, labels):
            return F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        """,
    )
    bw = statement_block(str(a), [6, 7])
    be = statement_block(str(b), [7])
    port = port_statements(bw, be)
    assert port.text is not None and "import torch.nn.functional as F" in port.reason
    compile(port.text, "a.py", "exec")
    diff = make_patch(str(a), str(tmp_path), port.text).diff()
    _git_apply(tmp_path, diff)
    assert "F.cross_entropy" in a.read_text() and "log_softmax" not in a.read_text()


def test_keyword_fed_by_a_module_constant_is_traced_to_the_constant(tmp_path):
    # the usual way to make two variants of one script: a constant at the top, read in setup()
    script = tmp_path / "b.py"
    script.write_text(
        textwrap.dedent(
            """
            ATTN = "sdpa"


            def setup():
                cfg = BertConfig(hidden_size=64, attn_implementation=ATTN)
                return (cfg,)
            """
        )
    )
    origin = find_attribute_origin("_attn_implementation", [str(script)], "'sdpa'")
    assert origin is not None and origin.kind == "config"
    assert origin.variable == "attn_implementation" and origin.assigned_to == "ATTN"
    # the patchable literal is the constant's value, not the name in the call
    assert origin.line == _line(script, 'ATTN = "sdpa"') and origin.value == '"sdpa"'
    assert origin.span is not None
    text = replace_value(str(script), origin.span, '"eager"')
    assert 'ATTN = "eager"' in text and "attn_implementation=ATTN)" in text


def test_positional_dtype_of_to_is_an_origin_and_a_device_is_not(tmp_path):
    script = tmp_path / "a.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch

            WIDE = torch.float64


            def main(x, model):
                model = model.to("cpu")
                return model(x.to(WIDE))
            """
        )
    )
    origin = find_attribute_origin("dtype", [str(script)], "float64")
    assert origin is not None and origin.assigned_to == "WIDE"
    assert origin.line == _line(script, "WIDE = torch.float64")
    assert origin.value == "torch.float64" and origin.span is not None
    assert origin.note.startswith("WIDE, passed at line") and "argument of x.to" in origin.note
    text = replace_value(str(script), origin.span, "torch.float32")
    assert "WIDE = torch.float32" in text and 'model.to("cpu")' in text


def test_a_library_literal_continues_to_the_condition_that_chose_it(tmp_path):
    """torch's TransformerEncoderLayer skips its fused fast path for a reason string
    assigned in an `elif torch.is_grad_enabled() and ...` block: the user cannot edit
    that literal, so the walk goes on through the condition to the grad-mode knob. A
    literal in the user's own branch stays the end of the walk (the patch edits it)."""
    import torch.nn.modules.transformer as transformer

    kb = default_knowledge()
    script = tmp_path / "a.py"
    script.write_text(
        'def main(fast):\n    if fast:\n        mode = "sdpa"\n    else:\n'
        '        mode = "eager"\n    return run(mode)\n'
    )
    ctx = SliceContext(
        sides={"a": SideContext(script=str(script), files=[str(script)])},
        knob_names=frozenset(n for k in kb.knobs.values() for n in (k.key, *k.snapshot_keys)),
    )
    idx = source_index(transformer.__file__)
    fused = _line(Path(transformer.__file__), "return torch._transformer_encoder_layer_fwd(")
    use = next(
        n
        for n in idx.nodes_of(cst.If)
        if idx.code(n.test) == "not why_not_sparsity_fast_path" and 0 < fused - idx.line_of(n) < 5
    )
    flow = BackwardSlicer(ctx).from_node(idx, use.test.expression, "key variable")
    assert flow.terminal == "knob" and flow.knob_name == "torch.is_grad_enabled", flow
    notes = [h.note for h in flow.hops]
    assert notes[-2:] == ["condition that chose this value", "operand of the condition"]
    assert "grad is enabled" in flow.hops[-3].expr

    uidx = source_index(script)
    name = uidx.calls_on_line(6)[0].args[0].value
    flow = BackwardSlicer(ctx).from_node(uidx, name, "key variable")
    assert flow.terminal == "literal" and flow.hops[-1].expr == '"eager"'
