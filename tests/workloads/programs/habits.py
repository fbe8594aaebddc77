"""An ordinary training loop with the habits of real ones: argparse with a `store_true`
flag, a loss printed every 3 steps (`loss.item()`), an evaluation every 4 steps and a
checkpoint every 5. `--per-param-adam` steps AdamW's per-parameter loop (foreach=False)
instead of its `_foreach_` kernels: the same values, more work."""

import argparse
import os

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--per-param-adam", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(48, 48), nn.ReLU()) for _ in range(16)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=not args.per_param_adam)
    x, y = torch.randn(32, 48), torch.randn(32, 48)
    for step in range(args.steps):
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 3 == 0:
            print(f"step {step} loss {loss.item():.4f}")
        if step and step % 4 == 0:
            with torch.no_grad():
                print("eval", (model(y) - x).abs().mean().item())
        if args.out and step and step % 5 == 0:
            torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))


if __name__ == "__main__":
    main()
