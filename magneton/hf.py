"""A HF `transformers` Trainer callback that marks training steps for Magneton.

    trainer = Trainer(..., callbacks=[MagnetonCallback()])

and record with `magneton record --db prof --run a --steps 1:1:3 -- python train.py`.
A Trainer's optimizer steps are counted without it; the callback ends each step where the
Trainer does (after the scheduler step and `zero_grad`), and keeps counting right when a
step has no torch optimizer step (a skipped step under fp16 loss scaling, or an optimizer
that is not a `torch.optim.Optimizer`). Outside a recording it does nothing.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from magneton.tracer.api import step


class MagnetonCallback(TrainerCallback):
    """Calls `magneton.step()` at the end of every Trainer step."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step()
