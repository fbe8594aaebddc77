"""Command lines a fix suggests are checked against the program's own recorded parser
(tracer/programs/cmdline.py): every kind of argparse setting gets a line that parses and
sets the dest the efficient run's way, and nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from magneton.tracer.programs import cmdline


def _string_to_bool(v):  # HfArgumentParser's converter, by name
    return v if isinstance(v, bool) else v.lower() in ("yes", "true", "t", "y", "1")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--no-foreach", dest="foreach", action="store_false")
    p.add_argument("--use-cache", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--attn-implementation", choices=["eager", "sdpa"], default="sdpa")
    p.add_argument("--sdpa-backends", nargs="+", choices=["math", "flash", "efficient"])
    p.add_argument("--exclude", action="append", default=[])
    p.add_argument("--bf16", type=_string_to_bool, nargs="?", const=True, default=False)
    p.add_argument("--no_bf16", dest="bf16", action="store_false")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def _recorded(argv: list[str], monkeypatch) -> cmdline.ParserSpec:
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    with cmdline.observed_parsers() as seen:
        _parser().parse_args()
    (spec,) = seen
    return cmdline.ParserSpec.from_json(json.loads(json.dumps(spec.to_json())))  # as stored


def _fix(wasteful, efficient, dest, monkeypatch) -> list[str]:
    spec = _recorded(wasteful, monkeypatch)
    fixed = cmdline.rewrite(spec, wasteful, efficient, dest)
    assert cmdline.check(spec, fixed, wasteful, efficient, dest) == ""
    # the program's own parser agrees: it parses, and the dest is the efficient run's
    parse = _parser().parse_args
    assert getattr(parse(fixed), dest) == getattr(parse(efficient), dest)
    return fixed


@pytest.mark.parametrize(
    "wasteful, efficient, dest, fixed",
    [
        # store_true given on the wasteful side: drop it (never `--grad-checkpointing False`)
        (
            ["--steps", "9", "--grad-checkpointing"],
            ["--steps", "9"],
            "grad_checkpointing",
            ["--steps", "9"],
        ),
        # and the other way round: add it
        (
            ["--steps", "9"],
            ["--grad-checkpointing", "--steps", "9"],
            "grad_checkpointing",
            ["--steps", "9", "--grad-checkpointing"],
        ),
        # store_false
        (["--no-foreach"], [], "foreach", []),
        # BooleanOptionalAction: --no-x for --x
        (["--no-use-cache", "--steps", "3"], ["--steps", "3"], "use_cache", ["--steps", "3"]),
        (["--steps", "3"], ["--no-use-cache"], "use_cache", ["--steps", "3", "--no-use-cache"]),
        # choices, as `--x v` and as `--x=v`, and abbreviated
        (
            ["--attn-implementation", "eager"],
            ["--attn-implementation=sdpa"],
            "attn_implementation",
            ["--attn-implementation=sdpa"],
        ),
        (["--attn-impl", "eager", "--steps", "2"], [], "attn_implementation", ["--steps", "2"]),
        # nargs="+": the whole list
        (
            ["--sdpa-backends", "math", "--steps", "2"],
            ["--sdpa-backends", "flash", "math"],
            "sdpa_backends",
            ["--sdpa-backends", "flash", "math", "--steps", "2"],
        ),
        # append: every occurrence
        (
            ["--exclude", "a", "--steps", "2", "--exclude", "b"],
            ["--exclude", "c"],
            "exclude",
            ["--exclude", "c", "--steps", "2"],
        ),
        # HfArgumentParser's booleans: `--x` (const), `--x false`, `--no_x`
        (["--bf16"], ["--no_bf16"], "bf16", ["--no_bf16"]),
        (["--bf16", "true", "--steps", "4"], [], "bf16", ["--steps", "4"]),
        # count
        (["-vv", "--steps", "4"], ["-v"], "verbose", ["-v", "--steps", "4"]),
    ],
)
def test_every_kind_of_setting_gets_a_command_line_that_parses(
    wasteful, efficient, dest, fixed, monkeypatch
):
    assert _fix(wasteful, efficient, dest, monkeypatch) == fixed


def test_a_line_the_parser_refuses_is_never_offered(monkeypatch):
    spec = _recorded(["--grad-checkpointing"], monkeypatch)
    bad = ["--grad-checkpointing", "False"]  # what a naive fix printed
    why = cmdline.check(spec, bad, ["--grad-checkpointing"], [], "grad_checkpointing")
    assert "does not know False" in why
    wrong_value = ["--attn-implementation", "flash"]
    why = cmdline.check(
        spec, wrong_value, [], ["--attn-implementation", "sdpa"], "attn_implementation"
    )
    assert "refuses" in why and "invalid choice" in why


def test_a_line_that_changes_another_setting_is_refused(monkeypatch):
    spec = _recorded(["--steps", "9", "--grad-checkpointing"], monkeypatch)
    why = cmdline.check(
        spec, [], ["--steps", "9", "--grad-checkpointing"], [], "grad_checkpointing"
    )
    assert why == "it also changes steps"


def test_the_recorded_values_are_the_programs_own(monkeypatch):
    spec = _recorded(["--grad-checkpointing", "--attn-implementation", "eager"], monkeypatch)
    assert spec.values["grad_checkpointing"] == "True"
    assert spec.values["attn_implementation"] == "'eager'"
    assert spec.values["steps"] == "30"  # its type applied to the default


def test_a_parser_given_other_words_than_the_programs_is_not_recorded(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--steps", "2"])
    with cmdline.observed_parsers() as seen:
        _parser().parse_args(["--steps", "5"])  # a library's own parse of its own words
    assert seen == []


PROGRAM = """import argparse
p = argparse.ArgumentParser()
p.add_argument("--grad-checkpointing", action="store_true")
p.parse_args()
"""


def test_eval_checks_a_suggested_command_in_a_case_named_relative_to_the_caller(
    tmp_path, monkeypatch
):
    """`magneton eval examples/programs` names its cases relative to the working
    directory, and runs each program from its own directory: the parse check must find
    the script there (it looked for examples/programs/X/examples/programs/X/train.py)."""
    from magneton.commands.eval import command_problem
    from magneton.model import Finding, Fix, Region

    def finding(fid: int, command: str) -> Finding:
        return Finding(
            fid, "a", "waste", Region(), Region(), 1.0, 0.1, 0.0, fix=Fix(command=command)
        )

    (tmp_path / "progs" / "loop").mkdir(parents=True)
    (tmp_path / "progs" / "loop" / "train.py").write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    good = finding(1, "python train.py --grad-checkpointing")
    assert command_problem(Path("progs") / "loop", [good]) == ""
    bad = finding(2, "python train.py --grad-checkpointing False")
    assert "does not parse" in command_problem(Path("progs") / "loop", [bad])


HF_LIKE = """
import argparse
import sys


class DataclassParser(argparse.ArgumentParser):  # as HfArgumentParser parses
    def parse_into(self):
        namespace, rest = self.parse_known_args(args=sys.argv[1:])
        if rest:
            self.error(f"unrecognized arguments: {rest}")
        return namespace


p = DataclassParser()
p.add_argument("--optim", choices=["loop", "fused"], default="loop")
p.parse_into()
raise SystemExit(7)  # past the parse: the check stops before it
"""


def test_eval_checks_commands_of_keyword_parsers_env_prefixes_and_no_arguments(
    tmp_path, monkeypatch
):
    """A parser called with `parse_known_args(args=...)` (HfArgumentParser) is checked
    like any other (the check's stand-in once took no `args=` and called the line
    unparseable); `NAME=value python ...` is the shell's environment, not an argument;
    a command with no arguments has nothing to refuse (a program configured only by its
    environment, which the check would otherwise run to its end)."""
    from magneton.commands.eval import command_problem
    from magneton.model import Finding, Fix, Region

    def finding(command: str) -> Finding:
        return Finding(1, "a", "waste", Region(), Region(), 1.0, 0.1, 0.0, fix=Fix(command=command))

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "train.py").write_text(HF_LIKE)
    monkeypatch.chdir(tmp_path)
    case = Path("hf")
    assert command_problem(case, [finding("python train.py --optim fused")]) == ""
    assert command_problem(case, [finding("MLP_DEBUG=0 python train.py --optim fused")]) == ""
    assert "does not parse" in command_problem(case, [finding("python train.py --optim x")])
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "train.py").write_text("raise SystemExit(5)  # no parser at all\n")
    assert command_problem(Path("env"), [finding("MLP_DEBUG=0 python train.py")]) == ""


TYPER_PROGRAM = """
from enum import Enum

import typer


class Attn(str, Enum):
    eager = "eager"
    sdpa = "sdpa"


def main(
    steps: int = 3,
    flash: bool = typer.Option(False, "--flash/--no-flash"),
    attn: Attn = Attn.eager,
    eager_mode: bool = typer.Option(True, "--eager-mode/--compiled"),
):
    print("ran", steps, flash, attn.value, eager_mode)


if __name__ == "__main__":
    typer.run(main)
"""

CLICK_PROGRAM = """
import click


@click.command()
@click.option("--steps", default=3, type=int)
@click.option("--fused-adam", is_flag=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32")
@click.option("--tag", multiple=True)
def main(steps, fused_adam, precision, tag):
    print("ran", steps, fused_adam, precision, tag)


if __name__ == "__main__":
    main()
"""


def _click_recorded(tmp_path, source: str, argv: list[str], monkeypatch):
    import runpy

    script = tmp_path / "train.py"
    script.write_text(source)
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    with cmdline.observed_parsers() as seen:
        with pytest.raises(SystemExit) as done:  # click's standalone mode ends in exit(0)
            runpy.run_path(str(script), run_name="__main__")
    assert done.value.code in (0, None)
    (spec,) = seen
    return str(script), cmdline.ParserSpec.from_json(json.loads(json.dumps(spec.to_json())))


@pytest.mark.parametrize(
    "program, wasteful, efficient, dest, fixed",
    [
        # typer's --x/--no-x bool: the other form, never `--flash True`
        (TYPER_PROGRAM, ["--no-flash"], ["--flash"], "flash", ["--flash"]),
        (TYPER_PROGRAM, [], ["--flash"], "flash", ["--flash"]),
        # a flag pair that is not --x/--no-x: each form sets the one dest
        (
            TYPER_PROGRAM,
            ["--steps", "5"],
            ["--compiled"],
            "eager_mode",
            ["--steps", "5", "--compiled"],
        ),
        # an Enum option: its values are the choices
        (TYPER_PROGRAM, ["--attn", "eager"], ["--attn", "sdpa"], "attn", ["--attn", "sdpa"]),
        # click is_flag: added or dropped
        (
            CLICK_PROGRAM,
            ["--steps", "5"],
            ["--fused-adam"],
            "fused_adam",
            ["--steps", "5", "--fused-adam"],
        ),
        (CLICK_PROGRAM, ["--fused-adam"], [], "fused_adam", []),
        (CLICK_PROGRAM, [], ["--precision", "bf16"], "precision", ["--precision", "bf16"]),
    ],
)
def test_click_and_typer_options_get_command_lines_their_own_parser_accepts(
    program, wasteful, efficient, dest, fixed, tmp_path, monkeypatch
):
    script, spec = _click_recorded(tmp_path, program, wasteful, monkeypatch)
    assert spec.library == "click"
    got = cmdline.rewrite(spec, wasteful, efficient, dest)
    assert got == fixed
    assert cmdline.check(spec, got, wasteful, efficient, dest) == ""
    assert cmdline.parses(script, got) == 0  # the program's own parser accepts it


def test_click_values_are_recorded_as_the_program_received_them(tmp_path, monkeypatch):
    _, spec = _click_recorded(tmp_path, TYPER_PROGRAM, ["--attn", "sdpa", "--flash"], monkeypatch)
    assert spec.values["attn"] == "'sdpa'"  # the enum member as the word that selects it
    assert spec.values["flash"] == "True" and spec.values["steps"] == "3"
    kinds = {a.dest: a.kind for a in spec.actions}
    assert kinds["flash"] == "boolean_optional" and kinds["help"] == "help"
    assert [a.choices for a in spec.actions if a.dest == "attn"] == [["eager", "sdpa"]]
    _, spec = _click_recorded(tmp_path, CLICK_PROGRAM, ["--tag", "a"], monkeypatch)
    assert {a.dest: a.kind for a in spec.actions}["tag"] == "append"


def test_a_click_line_the_program_refuses_is_refused(tmp_path, monkeypatch):
    script, spec = _click_recorded(tmp_path, CLICK_PROGRAM, [], monkeypatch)
    assert cmdline.parses(script, ["--fused-adam", "True"]) == 2
    assert cmdline.check(spec, ["--precision", "fp16"], [], ["--precision", "bf16"], "precision")
