"""The differential slice (diagnose/source/diffslice.py): the root of a finding is the first
statement, among those deciding its operators, where the two programs differ.

Each test writes the two sides' scripts of a corpus pattern (examples/corpus) and profiles
whose operators carry the user frames a recording gives them (entry line, then the line
inside it), so the slice runs on real source without a recording.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from magneton.diagnose.source.diffslice import program_difference
from magneton.model import FrameRecord, OpRecord, Profile, RunInfo


def _profile(script: Path, op_lines: list[list[tuple[int, str]]], args: str = "") -> Profile:
    """A run of `script` whose k-th operator was issued under the frames `op_lines[k]`
    ((line, function), outermost first)."""
    frames: dict[tuple[int, str], FrameRecord] = {}
    ops = []
    for k, chain in enumerate(op_lines):
        ids = []
        for line, fn in chain:
            fr = frames.setdefault((line, fn), FrameRecord(len(frames), str(script), line, fn))
            ids.append(fr.idx)
        ops.append(OpRecord(idx=k, name="aten::mm", frames=ids))
    run = RunInfo(name=script.stem, script=str(script), entry="main", setup="setup")
    return Profile(run=run, ops=ops, frames=list(frames.values()))


def _write(tmp_path: Path, name: str, code: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(code).lstrip())
    return p


def _line(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def _diff(pa: Profile, pb: Profile, configs=None):
    configs = configs or {"a": {}, "b": {}}
    return program_difference(pa, pb, [o.idx for o in pa.ops], [o.idx for o in pb.ops], configs)


CONSTANT = """
import torch

MEMORY_FORMAT = torch.{fmt}


def setup():
    x = torch.randn(2, 3, 4, 4)
    return (x,)


def main(x):
    y = x.contiguous(memory_format=MEMORY_FORMAT)
    return y * 2
"""


def test_same_statement_text_leads_to_the_constant_that_differs(tmp_path):
    a = _write(tmp_path, "a.py", CONSTANT.format(fmt="contiguous_format"))
    b = _write(tmp_path, "b.py", CONSTANT.format(fmt="channels_last"))
    chain = lambda p: [[(_line(p, "y = x.contiguous"), "main")]]  # noqa: E731
    d = _diff(_profile(a, chain(a)), _profile(b, chain(b)))
    assert d is not None and d.kind == "config"
    oa, ob = d.origins["a"], d.origins["b"]
    assert oa.variable == "MEMORY_FORMAT" and oa.line == _line(a, "MEMORY_FORMAT = ")
    assert (oa.value, ob.value) == ("torch.contiguous_format", "torch.channels_last")
    assert oa.span is not None  # a value a patch can replace
    # another step's origin on the shared statement does not agree with the difference
    from magneton.diagnose.source.dataflow import Origin

    shared = Origin(
        kind="api-argument", variable="memory_format", file=str(a), line=_line(a, "y = x.")
    )
    assert not d.agrees_with("a", shared) and d.agrees_with("a", oa)
    assert not d.agrees({"a": shared, "b": None})
    assert d.agrees({"a": shared, "b": ob})  # one side where the programs differ suffices


STATE = """
import torch
from torch import nn

DEBUG = {{"detect_anomaly": {flag}}}


def setup():
    torch.autograd.set_detect_anomaly(DEBUG["detect_anomaly"])
    model = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    return model, x


def main(model, x):
    return model(x).sum()
"""


def test_state_set_in_setup_is_followed_to_the_settings_dict(tmp_path):
    a = _write(tmp_path, "a.py", STATE.format(flag="True"))
    b = _write(tmp_path, "b.py", STATE.format(flag="False"))
    chain = lambda p: [[(_line(p, "return model(x)"), "main")]]  # noqa: E731
    d = _diff(_profile(a, chain(a)), _profile(b, chain(b)))
    assert d is not None
    assert d.origins["a"].variable == 'DEBUG["detect_anomaly"]'
    assert d.origins["a"].line == _line(a, "DEBUG = ")


EXTRA = """
import torch
import torch.nn.functional as F


def setup():
    q = torch.randn(1, 2, 8, 4)
    return q, q, q


def main(q, k, v):
{body}
"""


def test_extra_work_is_rooted_at_the_first_statement_that_runs_operators(tmp_path):
    body_a = (
        "    n = q.shape[-2]\n"
        "    mask = torch.ones(n, n, dtype=torch.bool).tril()\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"
    )
    body_b = "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)"
    a = _write(tmp_path, "a.py", EXTRA.format(body=body_a))
    b = _write(tmp_path, "b.py", EXTRA.format(body=body_b))
    ops_a = [[(_line(a, "mask = "), "main")], [(_line(a, "return F."), "main")]]
    ops_b = [[(_line(b, "return F."), "main")]]
    d = _diff(_profile(a, ops_a), _profile(b, ops_b))
    assert d is not None
    # `n = q.shape[-2]` differs first but runs no operator: the mask is the extra work
    assert d.origins["a"].line == _line(a, "mask = ")


def test_identical_programs_have_no_difference(tmp_path):
    a = _write(tmp_path, "a.py", CONSTANT.format(fmt="channels_last"))
    b = _write(tmp_path, "b.py", CONSTANT.format(fmt="channels_last"))
    chain = lambda p: [[(_line(p, "y = x.contiguous"), "main")]]  # noqa: E731
    assert _diff(_profile(a, chain(a)), _profile(b, chain(b))) is None


PROGRAM = """
import argparse

import torch


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--foreach", type=int, default=1)
    p.add_argument("--detect-anomaly", action="store_true")
    return p.parse_args()


def build(args):
    model = torch.nn.Linear(4, 4)
    return model, torch.optim.AdamW(model.parameters(), foreach=bool(args.foreach))


def main():
    args = parse_args()
    model, opt = build(args)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()


if __name__ == "__main__":
    main()
"""


def _program_config(script: Path, args: list[str]) -> dict[str, str]:
    import json

    return {"program.script": str(script), "program.args": json.dumps(args)}


def test_a_program_flag_read_inside_a_helper_is_the_root(tmp_path):
    from magneton.tracer.programs.program import ProgramSpec

    prog = _write(tmp_path, "train.py", PROGRAM)
    cfg = {s: _program_config(prog, ["--foreach", v]) for s, v in (("a", "0"), ("b", "1"))}
    if ProgramSpec.from_config(cfg["a"]) is None:  # the config keys a program run stores
        raise AssertionError("test config does not describe a program run")
    chain = [[(_line(prog, "main()"), "<module>"), (_line(prog, "opt.step()"), "main")]]
    pa, pb = _profile(prog, chain), _profile(prog, chain)
    d = _diff(pa, pb, cfg)
    assert d is not None and d.kind == "command-line"
    oa, ob = d.origins["a"], d.origins["b"]
    assert (oa.option, oa.value, ob.value) == ("--foreach", "0", "1")
    assert oa.line == _line(prog, "foreach=bool(args.foreach)")
    # another step's origin on the line that passes the option on agrees (and stands,
    # with its key variable and data flow)
    from magneton.diagnose.source.dataflow import Origin

    passing = Origin(kind="api-argument", variable="foreach", file=str(prog), line=oa.line)
    assert d.agrees({"a": passing, "b": None})


def test_a_store_true_switch_reads_as_given_or_not(tmp_path):
    from magneton.tracer.programs.program import command_line_origin

    prog = _write(tmp_path, "train.py", PROGRAM)
    on = command_line_origin(
        _program_config(prog, ["--detect-anomaly", "--foreach", "0"]), "detect_anomaly"
    )
    off = command_line_origin(_program_config(prog, ["--foreach", "0"]), "detect_anomaly")
    assert on is not None and (on.value, on.given) == ("True", True)
    assert off is not None and (off.value, off.given) == ("False", False)


SETTINGS = """
import math

import torch
import torch.nn.functional as F


def naive_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


SETTINGS = {{"attention": {fn}}}


def setup():
    return (torch.randn(1, 2, 8, 4),)


def main(q):
    return SETTINGS["attention"](q, q, q)
"""


def test_a_function_both_files_define_is_no_difference_only_the_entry_naming_it(tmp_path):
    a = _write(tmp_path, "a.py", SETTINGS.format(fn="naive_attention"))
    b = _write(tmp_path, "b.py", SETTINGS.format(fn="F.scaled_dot_product_attention"))
    # a's operators run inside naive_attention; b's inside torch, called from main
    ops_a = [[(_line(a, "return SETTINGS"), "main"), (_line(a, "scores = q @"), "naive_attention")]]
    ops_b = [[(_line(b, "return SETTINGS"), "main")]]
    d = _diff(_profile(a, ops_a), _profile(b, ops_b))
    assert d is not None and d.kind == "config"
    assert d.origins["a"].line == _line(a, "SETTINGS = {")
    assert d.origins["a"].variable == 'SETTINGS["attention"]'
    assert (d.origins["a"].value, d.origins["b"].value) == (
        "naive_attention",
        "F.scaled_dot_product_attention",
    )


def test_extra_work_with_no_counterpart_is_sliced_at_the_same_place_on_the_other_side(tmp_path):
    a = _write(tmp_path, "a.py", CONSTANT.format(fmt="contiguous_format"))
    b = _write(tmp_path, "b.py", CONSTANT.format(fmt="channels_last"))
    pa = _profile(a, [[(_line(a, "y = x.contiguous"), "main")]])  # the copy a makes
    pb = _profile(b, [])  # b made none: its region is empty
    d = program_difference(pa, pb, [0], [], {"a": {}, "b": {}})
    assert d is not None and d.origins["a"].line == _line(a, "MEMORY_FORMAT = ")
    assert d.sharper_than("code", "a")  # a value to port beats naming the code


DATACLASS = """
from dataclasses import dataclass

import torch


@dataclass
class RunConfig:
    width: int = 8
    track_grad: bool = {flag}


CFG = RunConfig()


def setup():
    return (torch.randn(2, CFG.width),)


def main(x):
    with torch.set_grad_enabled(CFG.track_grad):
        return x * 2
"""


def test_a_dataclass_field_default_is_the_root(tmp_path):
    a = _write(tmp_path, "a.py", DATACLASS.format(flag="True"))
    b = _write(tmp_path, "b.py", DATACLASS.format(flag="False"))
    chain = lambda p: [[(_line(p, "return x * 2"), "main")]]  # noqa: E731
    d = _diff(_profile(a, chain(a)), _profile(b, chain(b)))
    assert d is not None and d.kind == "config"
    oa = d.origins["a"]
    assert (oa.variable, oa.value, oa.line) == ("track_grad", "True", _line(a, "track_grad:"))


JAX_LOOP = """
import argparse

import jax


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--per-example-grads", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()

    def loss_fn(w, x):
        return (x @ w).sum()

    def per_example(w, x):
        return jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))(w, x[:, None]).mean(0)

    grad_fn = per_example if args.per_example_grads else jax.grad(loss_fn)

    @jax.jit
    def train_step(w, x):
        return w - 0.1 * grad_fn(w, x)

    for _ in range(3):
        w = train_step(w, x)


if __name__ == "__main__":
    main()
"""


def test_a_nested_step_reads_the_option_its_enclosing_function_chose_by(tmp_path):
    """A jitted `train_step` defined in `main()`: its operators' frames stop at the step
    (jit traces it), and the function it calls was chosen in `main` from a flag."""
    prog = _write(tmp_path, "train.py", JAX_LOOP)
    cfg = {
        "a": _program_config(prog, ["--per-example-grads"]),
        "b": _program_config(prog, []),
    }
    chain = [[(_line(prog, "return w - 0.1"), "main.<locals>.train_step")]]
    d = _diff(_profile(prog, chain), _profile(prog, chain), cfg)
    assert d is not None and d.kind == "command-line"
    oa, ob = d.origins["a"], d.origins["b"]
    assert (oa.option, oa.value, ob.value) == ("--per-example-grads", "True", "False")
    assert oa.line == _line(prog, "grad_fn = per_example if")
    # the key-variable step finds the step's function by the qualified name JAX gives
    from magneton.diagnose.source.index import source_index

    idx = source_index(prog)
    assert idx is not None
    fn = idx.function_at(chain[0][0][0], "main.<locals>.train_step")
    assert fn is not None and fn.name.value == "train_step"
    # the same step with no option between it and the enclosing choice: nothing differs
    same = {"a": _program_config(prog, []), "b": _program_config(prog, [])}
    assert _diff(_profile(prog, chain), _profile(prog, chain), same) is None


TRAINER = """
import argparse

from trainlib import Runner


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--optim", default="loop")
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    runner = Runner(args)
    runner.run()


if __name__ == "__main__":
    main()
"""


def _recorded_parse(argv: list[str], prog: Path) -> dict[str, str]:
    """A program run's config with its parser as `record` keeps it (cmdline.py)."""
    import argparse

    from magneton.tracer.programs import cmdline

    p = argparse.ArgumentParser()
    p.add_argument("--optim", default="loop")
    p.add_argument("--steps", type=int, default=10)
    saved = sys.argv
    sys.argv = [str(prog), *argv]  # the program's own arguments: what the recorder keeps
    try:
        with cmdline.observed_parsers() as seen:
            p.parse_args()
    finally:
        sys.argv = saved
    assert seen, "the parse was not recorded"
    return {**_program_config(prog, argv), **cmdline.to_config(seen)}


def test_a_parse_handed_whole_to_a_library_is_rooted_at_its_one_differing_option(tmp_path):
    """An HF-`Trainer`-like runner takes the parsed arguments whole and runs the step in
    its own code: no operator has a line of the script; the line that entered the unit
    and the parse handed over name the one option the runs differ in."""
    import json

    from magneton.tracer.programs.program import ENTERED_KEY

    prog = _write(tmp_path, "train.py", TRAINER)
    lib = tmp_path / "trainlib.py"
    entered = json.dumps(
        [
            [str(prog), _line(prog, "    main()"), "<module>"],
            [str(prog), _line(prog, "runner.run()"), "main"],
            [str(lib), 9, "run"],
        ]
    )

    def run(argv: list[str]) -> tuple[Profile, dict]:
        p = _profile(prog, [[]])  # the operator's frames are the library's only
        cfg = {**_recorded_parse(argv, prog), ENTERED_KEY: entered}
        p.config = cfg
        return p, cfg

    (pa, ca), (pb, cb) = (
        run(["--optim", "loop", "--steps", "5"]),
        run(["--optim", "fused", "--steps", "5"]),
    )
    d = _diff(pa, pb, {"a": ca, "b": cb})
    assert d is not None and d.kind == "command-line"
    oa, ob = d.origins["a"], d.origins["b"]
    assert (oa.option, oa.value, ob.value) == ("--optim", "loop", "fused")
    assert oa.line == _line(prog, "runner = Runner(args)")
    # extra work on one side only (the other ran no operator there): the same place on
    # the other side, the module-level call above `main` needing no counterpart
    extra = program_difference(pa, pb, [0], [], {"a": ca, "b": cb})
    assert extra is not None and extra.origins["b"].option == "--optim"
    # two options differ: which one decides the library's operators is not known
    _, c2 = run(["--optim", "fused", "--steps", "6"])
    assert _diff(pa, pb, {"a": ca, "b": c2}) is None
