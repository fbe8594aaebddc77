"""A training loop that reports its steps through transformers' CallbackHandler (the
dispatcher a HF Trainer uses) with magneton.hf.MagnetonCallback, besides calling
optimizer.step() itself: each step must count once. Step i trains on i + 1 rows."""

import torch
from transformers import TrainerControl, TrainerState
from transformers.trainer_callback import CallbackHandler

from magneton.hf import MagnetonCallback


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    handler = CallbackHandler([MagnetonCallback()], model, None, optimizer, None)
    state, control = TrainerState(), TrainerControl()
    for i in range(5):
        loss = model(torch.ones(i + 1, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        handler.on_step_end(None, state, control)


if __name__ == "__main__":
    main()
