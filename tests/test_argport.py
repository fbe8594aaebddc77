"""Argument ports (diagnose/fix/ports.py): comparing two calls on the libcst tree and
rewriting the wasteful call with the efficient side's arguments.

The patched text must keep everything but the differing arguments as the user wrote it,
and a port is offered only when one call's arguments are the whole difference.
"""

from __future__ import annotations

import subprocess
import textwrap

import libcst as cst

from magneton.diagnose.fix.edits import make_patch, statement_block, unportable
from magneton.diagnose.fix.ports import (
    argument_port,
    compare_calls,
    counterpart_block,
    port_arguments,
)
from magneton.diagnose.source.index import Span


def call(code: str) -> cst.Call:
    node = cst.parse_expression(code)
    assert isinstance(node, cst.Call)
    return node


def stmts(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(textwrap.dedent(code)).body)


def test_keyword_added():
    d = compare_calls(
        call("x.contiguous()"), call("x.contiguous(memory_format=torch.channels_last)")
    )
    assert d is not None and d.callee == "x.contiguous"
    assert [(c.kind, c.name, c.new) for c in d.changes] == [
        ("added", "memory_format", "torch.channels_last")
    ]
    assert d.summary() == "add `memory_format=torch.channels_last`"


def test_keyword_value_changed_and_removed():
    d = compare_calls(call("x.to(torch.float32, copy=True)"), call("x.to(torch.float32)"))
    assert d is not None and [(c.kind, c.name, c.old) for c in d.changes] == [
        ("removed", "copy", "True")
    ]
    d = compare_calls(call("F.softmax(s, dim=1)"), call("F.softmax(s, dim=-1)"))
    assert d is not None and [(c.kind, c.name, c.old, c.new) for c in d.changes] == [
        ("changed", "dim", "1", "-1")
    ]


def test_positional_changed():
    d = compare_calls(
        call("F.conv2d(F.pad(x, (1, 1, 1, 1)), w, groups=C)"),
        call("F.conv2d(x, w, padding=1, groups=C)"),
    )
    assert d is not None
    assert [(c.kind, c.name) for c in d.changes] == [("changed", "#0"), ("added", "padding")]


def test_different_callee_is_no_port():
    assert compare_calls(call("torch.tensor(x)"), call("torch.as_tensor(x)")) is None
    assert argument_port(stmts("y = torch.tensor(x)\n"), stmts("y = torch.as_tensor(x)\n")) is None


def test_same_arguments_are_no_difference():
    # formatting, comments and keyword order do not make a difference: never a no-op port
    assert compare_calls(call("f(x, a=1, b=2)"), call("f( x, b=2,  a=1 )")) is None
    assert argument_port(stmts("y = f(x, a=1)  # note\n"), stmts("y = f(x,a=1)\n")) is None


def test_port_is_the_whole_difference_only():
    # b pads inside the call, a pads on the line above: porting padding=1 alone would pad
    # twice, so the blocks differ in more than one call's arguments
    a = stmts("""
        x = F.pad(x, (1, 1, 1, 1))
        y = F.conv2d(x, w)
    """)
    b = stmts("""
        x = x
        y = F.conv2d(x, w, padding=1)
    """)
    assert argument_port(a, b) is None
    # the same call differing elsewhere in the statement too
    assert argument_port(stmts("y = f(x, a=1) + 1\n"), stmts("y = f(x, a=2) + 2\n")) is None


def test_innermost_call_is_ported():
    d = argument_port(
        stmts("return model(x.contiguous())\n"),
        stmts("return model(x.contiguous(memory_format=torch.channels_last))\n"),
    )
    assert d is not None and d.callee == "x.contiguous"


WASTEFUL = """import torch
import torch.nn.functional as F

C = 8


def main(x, w):
    # pad by hand
    y = F.conv2d(
        F.pad(x, (1, 1, 1, 1)),  # zero border
        w,
        groups=C,
    )
    return y
"""

EFFICIENT = """import torch
import torch.nn.functional as F

C = 8


def main(x, w):
    y = F.conv2d(x, w, padding=1, groups=C)
    return y
"""


def _blocks(tmp_path, a: str, b: str, line_a: int, line_b: int):
    (tmp_path / "a.py").write_text(a)
    (tmp_path / "b.py").write_text(b)
    bw = statement_block(str(tmp_path / "a.py"), [line_a])
    be = statement_block(str(tmp_path / "b.py"), [line_b])
    assert bw is not None and be is not None
    return bw, be


def test_port_keeps_the_wasteful_formatting_and_applies(tmp_path):
    bw, be = _blocks(tmp_path, WASTEFUL, EFFICIENT, 9, 8)
    d = argument_port(bw.statements, be.statements)
    assert d is not None and not unportable(bw, be)
    text = port_arguments(bw.idx.text, bw.idx.span(d.wasteful), d.efficient)
    assert text is not None
    assert text == WASTEFUL.replace(
        "        F.pad(x, (1, 1, 1, 1)),  # zero border\n        w,\n",
        "        x,  # zero border\n        w,\n        padding=1,\n",
    )
    compile(text, "a.py", "exec")
    patch = make_patch(str(tmp_path / "a.py"), str(tmp_path), text)
    assert patch is not None
    (tmp_path / "fix.patch").write_text(patch.diff())
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "fix.patch"], cwd=tmp_path, check=True)
    assert (tmp_path / "a.py").read_text() == text


def test_port_at_a_position_only(tmp_path):
    # two identical calls: only the one at the span changes
    text = "y = f(x)\nz = f(x)\n"
    new = port_arguments(text, Span(2, 4, 2, 8), call("f(x, a=1)"))
    assert new == "y = f(x)\nz = f(x, a=1)\n"
    assert port_arguments(text, Span(3, 0, 3, 4), call("f(x, a=1)")) is None


def test_ported_arguments_must_read_names_the_wasteful_side_has(tmp_path):
    a = "import torch\n\n\ndef main(x):\n    return x.contiguous()\n"
    b = (
        "import torch\nFMT = torch.channels_last\n\n\ndef main(x):\n"
        "    return x.contiguous(memory_format=FMT)\n"
    )
    bw, be = _blocks(tmp_path, a, b, 5, 6)
    assert argument_port(bw.statements, be.statements) is not None
    assert "FMT" in unportable(bw, be)


def test_counterpart_block_is_the_statement_in_the_same_place(tmp_path):
    a = (
        "def main(x):\n    x = x.to(torch.float32, copy=True)\n"
        "    return torch.softmax(x, dim=-1)\n"
    )
    b = "def main(x):\n    x = x.to(torch.float32)\n    return torch.softmax(x, dim=-1)\n"
    bw, _ = _blocks(tmp_path, a, b, 2, 2)
    there = counterpart_block(bw, str(tmp_path / "b.py"))
    assert there is not None and there.code().strip() == "x = x.to(torch.float32)"
    d = argument_port(bw.statements, there.statements)
    assert d is not None and d.summary() == "drop `copy=True`"


def test_a_rewritten_stretch_pairs_whole_whatever_its_length(tmp_path):
    """Two statements on the wasteful side where the efficient side has one: a region
    that only the wasteful side recorded (its dtype copies) still finds the statement
    to port. Part of the stretch pairs with nothing: which statement is its
    counterpart is unknown."""
    a = "def main(x):\n    y = x.double() @ x.double()\n    return y.float().relu().sum()\n"
    b = "def main(x):\n    return (x @ x).relu().sum()\n"
    (tmp_path / "a.py").write_text(a)
    (tmp_path / "b.py").write_text(b)
    whole = statement_block(str(tmp_path / "a.py"), [2, 3])
    assert whole is not None
    there = counterpart_block(whole, str(tmp_path / "b.py"))
    assert there is not None and there.code().strip() == "return (x @ x).relu().sum()"
    part = statement_block(str(tmp_path / "a.py"), [2])
    assert part is not None and counterpart_block(part, str(tmp_path / "b.py")) is None


def _setting_fix_of(tmp_path, a: str, b: str, line_a: int, line_b: int, statement: str):
    """fixes._setting_fix for a setting the wasteful side (a) leaves at its default."""
    from types import SimpleNamespace

    from magneton.diagnose.fix.plan import RunPair, _FixInput, _setting_fix
    from magneton.diagnose.source.dataflow import Origin
    from magneton.model import Finding, Fix, Region

    (tmp_path / "a.py").write_text(a)
    (tmp_path / "b.py").write_text(b)
    fa, fb = str(tmp_path / "a.py"), str(tmp_path / "b.py")
    ow = Origin(
        kind="api-argument",
        variable="memory_format",
        file=fa,
        line=line_a,
        value="torch.contiguous_format",
        library_default=True,
        insert={"file": fa, "line": line_a, "end_line": line_a, "statement": statement},
    )
    oe = Origin(
        kind="api-argument",
        variable="memory_format",
        file=fb,
        line=line_b,
        value="torch.channels_last",
    )
    f = Finding(1, "a", "waste", Region(), Region(), 1.0, 0.1, 0.0)
    sides = [SimpleNamespace(run=SimpleNamespace(script=s)) for s in (fa, fb)]
    x = _FixInput(f, None, {"a": ow, "b": oe}, RunPair(*sides), None, "api-argument")  # type: ignore[arg-type]
    fix = Fix(base_dir=str(tmp_path))
    _setting_fix(x, fix, "")
    return fix


def test_default_left_at_the_same_call_gets_the_argument_not_a_second_statement(tmp_path):
    a = "def main(images):\n    images = images.contiguous()\n    return images * 2.0\n"
    b = (
        "def main(images):\n    images = images.contiguous(memory_format=torch.channels_last)\n"
        "    return images * 2.0\n"
    )
    stmt = "images = images.contiguous(memory_format=torch.channels_last)"
    fix = _setting_fix_of(tmp_path, a, b, 2, 2, stmt)
    assert "with the efficient side's arguments" in fix.summary and fix.patch
    assert "-    images = images.contiguous()\n+    images = images.contiguous(memory_format" in (
        fix.patch
    )
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "fix.patch").write_text(fix.patch)
    subprocess.run(["git", "apply", "fix.patch"], cwd=tmp_path, check=True)
    assert (tmp_path / "a.py").read_text() == b


def test_default_set_by_another_statement_is_still_inserted(tmp_path):
    a = "def setup():\n    model = make_model()\n    return model\n"
    b = (
        "def setup():\n    model = make_model()\n"
        "    model = model.to(memory_format=torch.channels_last)\n    return model\n"
    )
    stmt = "model = model.to(memory_format=torch.channels_last)"
    fix = _setting_fix_of(tmp_path, a, b, 2, 3, stmt)
    assert f"add `{stmt}` after line 2" in fix.summary
    assert f"+    {stmt}\n" in fix.patch and "-    model = make_model()" not in fix.patch


def test_an_argument_spanning_lines_compares_as_python():
    d = compare_calls(call("f(a +\n  b, k=1)"), call("f(a + b, k=2)"))
    assert d is not None and [c.name for c in d.changes] == ["k"]
