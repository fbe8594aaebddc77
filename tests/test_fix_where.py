"""A rule's advice is an edit where its operators are issued (diagnose/fix/plan.py
`library_site`): when a model library or a torch module's implementation issues them, the
user cannot "drop the copy" there, and the fix says where the copy happens instead."""

from __future__ import annotations

import os

from magneton.diagnose.fix.plan import library_site
from magneton.model import FrameRecord, OpRecord, Profile, RunInfo

SITE = os.path.join(os.sep, "venv", "lib", "python3.11", "site-packages")
USER = os.path.join(os.sep, "work", "a.py")


def _run(*stacks: list[tuple[str, int, str]]) -> Profile:
    frames: list[FrameRecord] = []
    ops = []
    for k, stack in enumerate(stacks):
        ids = []
        for file, line, fn in stack:
            frames.append(FrameRecord(len(frames), file, line, fn))
            ids.append(len(frames) - 1)
        ops.append(OpRecord(idx=k, name="aten::clone", frames=ids))
    return Profile(run=RunInfo(name="a", script=USER), ops=ops, frames=frames)


def _torch(*parts: str) -> str:
    return os.path.join(SITE, "torch", *parts)


def test_a_copy_the_user_line_asks_for_is_the_users():
    p = _run([(USER, 10, "main"), (_torch("nn", "functional.py"), 5000, "pad")])
    assert library_site(p, [0], {"aten::clone"}) is None


def test_a_copy_inside_a_torch_module_or_a_model_library_is_theirs():
    inside_module = [
        (USER, 10, "main"),
        (_torch("nn", "modules", "activation.py"), 1494, "forward"),
    ]
    hf = os.path.join(SITE, "transformers", "models", "gpt2", "modeling_gpt2.py")
    inside_hf = [(USER, 12, "main"), (hf, 312, "forward"), (_torch("nn", "functional.py"), 9, "f")]
    assert library_site(_run(inside_module), [0], {"aten::clone"}) == (
        "torch/nn/modules/activation.py:1494 in forward"
    )
    assert library_site(_run(inside_hf), [0], {"aten::clone"}) == (
        "transformers/models/gpt2/modeling_gpt2.py:312 in forward"
    )
    # one copy the user's line makes is enough to keep the rule's advice
    assert library_site(_run(inside_hf, [(USER, 14, "main")]), [0, 1], {"aten::clone"}) is None
