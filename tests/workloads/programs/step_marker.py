"""An inference loop that ends each step with magneton.step(); step i runs a batch of
i + 1 rows, so the recorded window can be told apart by its shapes."""

import argparse

import torch

import magneton


def infer(model, batch):
    return torch.relu(model(torch.ones(batch, 8)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    model = torch.nn.Linear(8, 8)
    with torch.no_grad():
        for i in range(args.steps):
            infer(model, i + 1)
            magneton.step()


if __name__ == "__main__":
    main()
