"""Train a small 1-D ResNet classifier on synthetic sensor windows.

An everyday classification script: a stack of residual conv blocks over multichannel
windows, AdamW with cosine decay, label smoothing, loss and accuracy printed every few
steps, a validation pass at the end.

`--detect-anomaly` wraps training in `torch.autograd.set_detect_anomaly(True)`: every
forward op records a Python traceback and every backward output is checked for NaN. It is
a debugging switch for hunting one NaN, often left in launch scripts afterwards.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description="1-D ResNet on synthetic sensor windows")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--blocks", type=int, default=16)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--classes", type=int, default=6)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--detect-anomaly", action="store_true", help="autograd anomaly detection")
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv1d(c, c, 5, padding=2)
        self.norm1 = nn.GroupNorm(4, c)
        self.conv2 = nn.Conv1d(c, c, 5, padding=2)
        self.norm2 = nn.GroupNorm(4, c)

    def forward(self, x):
        h = F.gelu(self.norm1(self.conv1(x)))
        return F.gelu(x + self.norm2(self.conv2(h)))


class ResNet1d(nn.Module):
    def __init__(self, in_ch, c, blocks, classes):
        super().__init__()
        self.stem = nn.Conv1d(in_ch, c, 7, padding=3)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(blocks)])
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(-1))


def make_batch(gen, n, window, classes):
    """Each class is a frequency band; three channels see it with noise and phase."""
    y = torch.randint(0, classes, (n,), generator=gen)
    t = torch.linspace(0, 1, window)
    freq = (y.float() + 1.0)[:, None, None] * 3.0
    phase = torch.rand(n, 3, 1, generator=gen) * 6.283
    x = torch.sin(6.283 * freq * t + phase) + 0.5 * torch.randn(n, 3, window, generator=gen)
    return x, y


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    torch.autograd.set_detect_anomaly(args.detect_anomaly)
    model = ResNet1d(3, args.channels, args.blocks, args.classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)

    for step in range(1, args.steps + 1):
        x, y = make_batch(gen, args.batch_size, args.window, args.classes)
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % args.log_every == 0:
            acc = (logits.argmax(-1) == y).float().mean().item()
            print(f"step {step}: loss {loss.item():.4f} acc {acc:.3f}")

    model.eval()
    with torch.no_grad():
        x, y = make_batch(gen, 256, args.window, args.classes)
        print(f"val acc {(model(x).argmax(-1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
