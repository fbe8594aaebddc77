"""Train a residual MLP on a synthetic tabular dataset fed by a multi-worker DataLoader.

A plain argparse script: a map-style `Dataset` whose samples are generated from their
index (so every worker produces the same data), `DataLoader(num_workers=2)`, AdamW,
logging every 5 steps, evaluation every 10 and a checkpoint every 15.

By default the optimizer is `AdamW(fused=True)`: one fused kernel per parameter tensor
reads the weight, gradient and both moments once. `--no-fused` falls back to what
`torch.optim` picks on CPU, the for-loop implementation: about seven elementwise kernels
per tensor, each a separate pass over memory, launched one by one from Python.
source: pytorch/pytorch#108491 (support fused AdamW on CPU: the unfused step is memory-bound)
"""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class SyntheticTabular(Dataset):
    def __init__(self, size, features, classes, seed):
        self.size, self.features, self.classes, self.seed = size, features, classes, seed
        g = torch.Generator().manual_seed(seed)
        self.proj = torch.randn(features, classes, generator=g)

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(self.seed * 100_003 + idx)
        x = torch.randn(self.features, generator=g)
        y = int((x @ self.proj).argmax())
        return x, y


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResMLP(nn.Module):
    def __init__(self, features, width, depth, classes):
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


def parse_args():
    p = argparse.ArgumentParser(description="Residual MLP on synthetic tabular data")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-size", type=int, default=20 * 64)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=15)
    p.add_argument("--out", default="checkpoints/resmlp")
    p.add_argument(
        "--no-fused",
        dest="fused",
        action="store_false",
        help="use the default (for-loop) AdamW instead of the fused kernel",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    for x, y in loader:
        correct += (model(x).argmax(-1) == y).sum().item()
        total += len(y)
    model.train()
    return correct / total


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    train_set = SyntheticTabular(args.train_size, args.features, args.classes, args.seed)
    val_set = SyntheticTabular(256, args.features, args.classes, args.seed + 1)
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        drop_last=True,
        generator=torch.Generator().manual_seed(args.seed),
    )
    val_loader = DataLoader(val_set, batch_size=args.batch_size, num_workers=args.num_workers)

    model = ResMLP(args.features, args.width, args.depth, args.classes)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=0.01, fused=args.fused
    )
    os.makedirs(args.out, exist_ok=True)

    step = 0
    for epoch in range(args.epochs):
        for x, y in train_loader:
            step += 1
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")
            if step % args.eval_every == 0:
                print(f"epoch {epoch} step {step}: val acc {evaluate(model, val_loader):.3f}")
            if step % args.save_every == 0:
                path = os.path.join(args.out, f"step{step}.pt")
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "step": step,
                    },
                    path,
                )
                print(f"saved {path}")


if __name__ == "__main__":
    main()
