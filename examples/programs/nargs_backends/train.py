"""Train a small hand-written causal transformer LM, restricting the SDPA backends.

The model is plain PyTorch (pre-norm blocks, `F.scaled_dot_product_attention(is_causal=True)`).
The forward pass runs inside `torch.nn.attention.sdpa_kernel(backends)`, with the allowed
backends taken from `--sdpa-backends` (several may be given, e.g.
`--sdpa-backends flash math`). Loss every 5 steps, validation every 10, checkpoint every 15.

`--sdpa-backends math` forbids the fused kernels, so attention runs as the unfused
reference (explicit score matrix, softmax, second matmul, all saved for backward);
with `flash` allowed, CPU runs the fused flash-attention kernel.
source: pytorch/pytorch#105131 ([cpu] SDPA backend selection: flash attention ~1.85x faster than the unfused path)
"""

import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(max_len, dim) / math.sqrt(dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos[: ids.size(1)]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def parse_args():
    p = argparse.ArgumentParser(description="Tiny causal transformer LM")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--sdpa-backends", nargs="+", choices=list(BACKENDS), default=["flash", "math"])
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=15)
    p.add_argument("--out", default="checkpoints/tinylm")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def lm_loss(model, ids):
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    backends = [BACKENDS[name] for name in args.sdpa_backends]
    model = TinyLM(args.vocab, args.dim, args.heads, args.layers, args.seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    val_ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=gen)

    for step in range(1, args.steps + 1):
        ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=gen)
        with sdpa_kernel(backends):
            loss = lm_loss(model, ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")
        if step % args.eval_every == 0:
            with torch.no_grad(), sdpa_kernel(backends):
                print(f"step {step}: val loss {lm_loss(model, val_ids).item():.4f}")
        if step % args.save_every == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save(model.state_dict(), os.path.join(args.out, f"step{step}.pt"))
            print(f"saved {args.out}/step{step}.pt")


if __name__ == "__main__":
    main()
