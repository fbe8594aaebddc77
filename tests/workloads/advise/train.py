"""A small attention training loop with the habits of real scripts, for `magneton advise`:
`--attn-implementation eager|sdpa` (explicit QK^T, mask, softmax, @V against the fused
kernel; the same values), `--detect-anomaly` (a store_true flag), `--config FILE` (a YAML
file whose `model.attn_implementation` overrides the option), `ADVISE_CHECK_FINITE` (an
environment switch), and options that decide nothing costly (`--lr`, `--log-every`,
`--out`)."""

import argparse
import os

import torch
import torch.nn.functional as F
import yaml


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--attn-implementation", choices=["eager", "sdpa"], default="sdpa")
    p.add_argument("--detect-anomaly", action="store_true")
    p.add_argument("--config", default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--out", default="checkpoints")
    return p.parse_args()


class Block(torch.nn.Module):
    def __init__(self, d, heads, attn):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.heads, self.attn = heads, attn

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return x + self.proj(y.transpose(1, 2).reshape(b, t, d))


def main():
    args = parse_args()
    attn = args.attn_implementation
    if args.config:
        with open(args.config) as f:
            cfg = yaml.safe_load(f)
        attn = cfg["model"]["attn_implementation"]
    check_finite = os.environ.get("ADVISE_CHECK_FINITE", "0") == "1"
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(32, 4, attn) for _ in range(2)])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    x = torch.randn(2, 256, 32)
    torch.autograd.set_detect_anomaly(args.detect_anomaly)
    for step in range(1, args.steps + 1):
        loss = model(x).pow(2).mean()
        if check_finite:
            assert torch.isfinite(loss).all()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.5f}")
    os.makedirs(args.out, exist_ok=True)


if __name__ == "__main__":
    main()
