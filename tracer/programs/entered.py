"""Where a recorded unit was entered from: the program's lines that called it.

A unit that runs inside library code (an HF `Trainer`'s epoch loop, Keras' `fit`, a
compiled JAX or TensorFlow step) launches operators whose call stacks hold no line of
the script; the lines that entered the unit (`trainer.train()`, `model.fit(...)`) are
where the program's backward slice starts (diagnose/source/diffslice.py `chains_of`).
Both the PyTorch program recorder (program.py) and the JAX/TensorFlow step recorder
(tracer/frameworks/steps.py) store them under `ENTERED_KEY`; this module is theirs in
common so neither imports the other.
"""

from __future__ import annotations

from typing import Any

ENTERED_KEY = "program.entered_from"


def caller_frames(user: Any) -> list[list]:
    """[file, line, function] of the frames that called the unit's own frame `user`,
    outermost first. The operators' call paths stop at `user`; where that is library code
    (an HF `Trainer`'s epoch loop, Keras' `fit`), these hold the user's line that entered
    it (`trainer.train()`, `model.fit(...)`), from which the program's slice starts
    (diffslice.py)."""
    out = []
    f = user.f_back if user is not None else None
    while f is not None:
        out.append([f.f_code.co_filename, f.f_lineno, f.f_code.co_name])
        f = f.f_back
    return out[::-1]
