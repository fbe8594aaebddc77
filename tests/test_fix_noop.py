"""Never a no-op fix, and a command-line option as one more kind of origin.

The backward walk used to stop at `attn_implementation=args.attn_implementation`: both
sides read the same expression, so the fix said "change ... from args.attn_implementation
to args.attn_implementation". The walk now takes one more hop, to the argparse option and
the value each run's recorded command line gave; and one check in fix/plan.py refuses any
fix whose new text equals its old text.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

from fixcheck import noop_reason

from magneton.diagnose.fix.plan import RunPair, _FixInput, refuse_noop
from magneton.diagnose.source.dataflow import find_attribute_origin
from magneton.model import Divergence, Finding, Fix, PathElement, Region
from magneton.tracer.programs import cmdline
from magneton.tracer.programs.program import parse_command

PROGRAM = """\
import argparse


class Model:
    def __init__(self, attn_implementation):
        self.attn_implementation = attn_implementation


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--attn-implementation", default=DEFAULT, choices=["eager", "sdpa"])
    args = p.parse_args()
    return Model(attn_implementation=args.attn_implementation)


if __name__ == "__main__":
    main()
"""


def _program(tmp_path: Path, default: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("DEFAULT", repr(default)))
    return script


def _config(script: Path, *args: str) -> dict[str, str]:
    """A program run's config: its command line and its parser, as `record` keeps them
    (the program run up to its parse; tracer/programs/cmdline.py)."""
    import sys

    config = parse_command(["python", str(script), *args], steps="1:1:3").to_config()
    argv = sys.argv
    try:
        with cmdline.observed_parsers() as seen:
            assert cmdline.parses(str(script), list(args)) == 0
    finally:
        sys.argv = argv
    config.update(cmdline.to_config(seen))
    return config


def test_args_attribute_continues_to_the_command_line_option(tmp_path):
    script = _program(tmp_path, "eager")
    given = find_attribute_origin(
        "_attn_implementation",
        [str(script)],
        "eager",
        _config(script, "--attn-implementation", "eager"),
    )
    assert given.kind == "command-line" and given.option == "--attn-implementation"
    assert given.value == "eager"
    # the origin line is still where the program passes the value on
    assert "attn_implementation=args.attn_implementation" in given.code
    # the option's literal default, which a patch may change
    assert given.option_default["value"] == "'eager'"
    assert given.option_default["line"] == 12
    defaulted = find_attribute_origin(
        "attn_implementation", [str(script)], "eager", _config(script, "--steps", "2")
    )
    assert defaulted.value == "eager" and "default" in defaulted.note
    # not a program run: the walk stops at the expression, as before
    plain = find_attribute_origin("attn_implementation", [str(script)], None, {})
    assert plain.kind == "api-argument" and plain.value == "args.attn_implementation"


def _finding() -> Finding:
    f = Finding(1, "a", "waste", Region(), Region(), 1.0, 0.1, 0.0)
    code = "return model(x)"
    f.divergence = Divergence(
        level="kernel",
        op_a=3,
        op_b=3,
        a=PathElement("args", op="aten::convolution", diff={"input_strides": "[..]"}),
        b=PathElement("args", op="aten::convolution", diff={"input_strides": "[...]"}),
        site_a=PathElement("frame", file="a.py", line=24, function="main", code=code),
    )
    return f


def test_a_fix_that_changes_nothing_becomes_no_mechanical_fix():
    f = _finding()
    x = _FixInput(f, None, {}, None, None, "code")  # type: ignore[arg-type]
    fix = Fix(
        summary="Replace a.py:24 with the efficient side's code (b.py:24).",
        patch="--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-    return model(x)\n+    return model(x)\n",
        file="a.py",
        old_text="    return model(x)\n",
        new_text="    return model(x)\n",
    )
    out = refuse_noop(fix, x)
    assert out.patch is None and out.file is None
    assert out.summary.startswith("No mechanical fix")
    assert "aten::convolution with input_strides" in out.summary  # where the sides differ
    assert noop_reason({"fix": out.to_json()}) == ""
    # a real change is left alone
    real = Fix(
        summary="In a.py:3 change X from 1 to 2 (the value ...).", old_text="1", new_text="2"
    )
    assert refuse_noop(real, x) is real and real.summary.startswith("In a.py:3")


def test_noop_check_reads_what_a_user_reads(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = model(x)\n")
    (tmp_path / "b.py").write_text("x = 1\ny = model(x)\n")
    same = {
        "summary": "Replace a.py:2 with the efficient side's code (b.py:2).",
        "base_dir": str(tmp_path),
    }
    assert "same code" in noop_reason({"fix": same})
    (tmp_path / "b.py").write_text("x = 1\ny = model(x.contiguous())\n")
    assert noop_reason({"fix": same}) == ""
    to_itself = "In t.py:49 change attn_implementation from args.a to args.a (the value the efficient run used)."
    assert "itself" in noop_reason({"fix": {"summary": to_itself}})
    env_same = "Run with OMP_WAIT_POLICY=PASSIVE as the efficient run did (it was PASSIVE)."
    assert "already used" in noop_reason({"fix": {"summary": env_same}})
    env = "Run with OMP_WAIT_POLICY=PASSIVE as the efficient run did (it was ACTIVE)."
    assert noop_reason({"fix": {"summary": env}}) == ""
    run_same = "Run `MLP_DEBUG=0 python train.py` as the efficient run did (MLP_DEBUG was 0)."
    assert "already used" in noop_reason({"fix": {"summary": run_same}})
    run = "Run `MLP_DEBUG=0 python train.py` as the efficient run did (MLP_DEBUG was 1)."
    assert noop_reason({"fix": {"summary": run}}) == ""


def test_patch_of_the_default_applies_with_git(tmp_path):
    """The option's default, patched where the wasteful run relied on it."""
    from magneton.diagnose.fix.plan import _run_with_fix
    from magneton.diagnose.source.dataflow import Origin

    script = _program(tmp_path, "eager")
    wasteful, efficient = _config(script), _config(script, "--attn-implementation", "sdpa")
    ow = find_attribute_origin("attn_implementation", [str(script)], "eager", wasteful)
    oe = Origin(kind="command-line", variable="attn_implementation", value="sdpa", option=ow.option)
    f = _finding()

    def side(config: dict) -> SimpleNamespace:  # what the fix reads of a run
        return SimpleNamespace(run=SimpleNamespace(script=str(script)), config=config)

    pair = RunPair(side(wasteful), side(efficient))  # type: ignore[arg-type]
    x = _FixInput(f, None, {"a": ow, "b": oe}, pair, None, "command-line")
    fix = Fix()
    _run_with_fix(x, fix, "")
    assert "adds `--attn-implementation sdpa`" in fix.summary and fix.patch
    assert fix.command == f"python {script} --attn-implementation sdpa"
    assert noop_reason({"fix": fix.to_json()}) == ""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "fix.patch").write_text(fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=tmp_path, check=True)
    assert "default='sdpa'" in script.read_text()
    # the default already is the efficient value (the wasteful run gave eager on its
    # command line): no patch, only the command line to change
    explicit = _config(script, "--attn-implementation", "eager")
    ow = find_attribute_origin("attn_implementation", [str(script)], "eager", explicit)
    x.origins["a"] = ow
    x.runs = RunPair(side(explicit), side(efficient))  # type: ignore[arg-type]
    fix = Fix()
    _run_with_fix(x, fix, "")
    assert fix.patch is None
    assert "`--attn-implementation sdpa` in place of `--attn-implementation eager`" in fix.summary
    assert json.loads(json.dumps(fix.to_json()))["patch"] is None


def test_an_explicit_setting_is_patched_back_to_the_default_the_efficient_side_keeps(tmp_path):
    """The wasteful side sets a keyword (`memory_format=torch.channels_last`) that the
    efficient side never passes (it keeps the default): the patch writes the default out
    in the wasteful call (was: "Use the efficient run's setting.", no patch)."""
    from magneton.diagnose.fix.plan import _setting_fix
    from magneton.diagnose.source.dataflow import Origin
    from magneton.diagnose.source.index import Span

    script = tmp_path / "serve.py"
    line = "    model = model.to(memory_format=torch.channels_last)"
    script.write_text(f"import torch\n\n\ndef setup(model):\n{line}\n    return model\n")
    col = line.index("torch.channels_last")
    ow = Origin(kind="api-argument", variable="memory_format", file=str(script), line=5,
                code=line.strip(), value="torch.channels_last",
                span=Span(5, col, 5, col + len("torch.channels_last")))  # fmt: skip
    oe = Origin(kind="api-argument", variable="memory_format", file=str(script), line=5,
                value="torch.contiguous_format", library_default=True)  # fmt: skip
    side = SimpleNamespace(run=SimpleNamespace(script=str(script)))
    x = _FixInput(_finding(), None, {"a": ow, "b": oe}, RunPair(side, side), None, "api-argument")  # type: ignore[arg-type]
    fix = Fix()
    _setting_fix(x, fix, "")
    assert "from torch.channels_last to torch.contiguous_format" in fix.summary and fix.patch
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "fix.patch").write_text(fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=tmp_path, check=True)
    assert "model.to(memory_format=torch.contiguous_format)" in script.read_text()


def test_an_extra_setting_statement_is_named_with_what_to_do(tmp_path):
    """The wasteful side runs a setting statement the efficient side lacks: deleting a
    statement is not a mechanical fix, but the advice names it and what to do."""
    from magneton.diagnose.fix.plan import _setting_fix
    from magneton.diagnose.source.dataflow import Origin

    script = tmp_path / "serve.py"
    script.write_text("import torch\n\n\ndef setup(x):\n    return x.to(torch.float64)\n")
    stmt = "return x.to(torch.float64)"
    ow = Origin(kind="api-argument", variable="dtype", file=str(script), line=5, code=stmt,
                value=stmt)  # fmt: skip
    oe = Origin(kind="api-argument", variable="dtype", value="(not run)", library_default=True)
    side = SimpleNamespace(run=SimpleNamespace(script=str(script)))
    x = _FixInput(_finding(), None, {"a": ow, "b": oe}, RunPair(side, side), None, "api-argument")  # type: ignore[arg-type]
    fix = Fix()
    _setting_fix(x, fix, "")
    assert fix.patch is None and f"serve.py:5 runs `{stmt}`" in fix.summary
    assert "Remove it or make it conditional" in fix.summary and "stays the default" in fix.summary


def test_an_environment_setting_is_fixed_with_the_value_the_efficient_run_read(tmp_path):
    """A program that reads `MLP_DEBUG` from its environment: the recorded reads
    (tracer/programs/envreads.py) give each run's value, where the origin holds what the
    program made of it (a bool); the fix is the command line with the efficient value."""
    import os

    from magneton.diagnose.fix.plan import _run_with_fix
    from magneton.diagnose.source.dataflow import Origin
    from magneton.tracer.programs import envreads

    script = _program(tmp_path, "eager")

    def read_as(value: str | None) -> dict[str, str]:
        saved = os.environ.pop("MLP_DEBUG", None)
        if value is not None:
            os.environ["MLP_DEBUG"] = value
        try:
            with envreads.observed_env() as seen:
                debug = os.environ.get("MLP_DEBUG", "0") == "1"  # as the program reads it
                assert debug == (value == "1")
                os.getenv("MLP_UNSET_HERE")
        finally:
            os.environ.pop("MLP_DEBUG", None)
            if saved is not None:
                os.environ["MLP_DEBUG"] = saved
        return {**_config(script), **envreads.to_config(seen)}

    wasteful, efficient = read_as("1"), read_as("0")
    assert envreads.recorded_value(wasteful, "MLP_DEBUG") == "1"
    assert envreads.recorded_value(wasteful, "MLP_UNSET_HERE") is None  # read while unset
    assert envreads.recorded_value(wasteful, "NEVER_READ") is envreads.UNRECORDED

    def side(config: dict) -> SimpleNamespace:
        return SimpleNamespace(run=SimpleNamespace(script=str(script)), config=config)

    ow = Origin(kind="env", variable="DEBUG", env_var="MLP_DEBUG", value="True")
    oe = Origin(kind="env", variable="DEBUG", env_var="MLP_DEBUG", value="False")
    pair = RunPair(side(wasteful), side(efficient))  # type: ignore[arg-type]
    x = _FixInput(_finding(), None, {"a": ow, "b": oe}, pair, None, "env")
    fix = Fix()
    _run_with_fix(x, fix, "")
    assert fix.command == f"MLP_DEBUG=0 python {script}", fix.summary
    assert (fix.old_text, fix.new_text) == ("1", "0")
    assert noop_reason({"fix": fix.to_json()}) == ""
    # the efficient run never set it: run with it unset, no command to paste
    x.runs = RunPair(side(wasteful), side(read_as(None)))  # type: ignore[arg-type]
    fix = Fix()
    _run_with_fix(x, fix, "")
    assert "MLP_DEBUG unset" in fix.summary and fix.command is None
