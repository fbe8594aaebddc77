"""The recorded call stack of an operator reaches the user's entry even when the entry and
the library functions it calls share a decorator (`@torch.no_grad()` on `main` and on
transformers' `generate`): the stack walk stops at the entry's own code, not at the
decorator's wrapper, whose code every decorated function shares."""

from __future__ import annotations

import contextlib
import io
import textwrap

from magneton.cli import main as cli
from magneton.graphdb import open_db

SCRIPT = """
import torch


@torch.no_grad()
def helper(x):
    return x.relu()


def setup():
    return (torch.randn(8, 8),)


@torch.no_grad()
def main(x):
    y = helper(x)
    return y + 1
"""


def test_a_decorated_entry_keeps_its_frames_under_a_decorated_call(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent(SCRIPT).lstrip())
    db = str(tmp_path / "db")
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(["record", str(script), "--db", db, "--run", "r", "-q"]) == 0
    with open_db(db, read_only=True) as d:
        p = d.load_profile("r")
    relu = next(o for o in p.ops if o.name == "aten::relu")
    stack = [(p.frames[i].function, p.frames[i].line) for i in relu.frames]
    call_line = script.read_text().splitlines().index("    y = helper(x)") + 1
    assert ("main", call_line) in stack, stack
    assert stack[-1][0] == "helper"  # the op's own site stays last
