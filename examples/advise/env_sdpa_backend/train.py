"""Train a small hand-written causal transformer LM; the attention backend comes from the
environment.

The model is plain PyTorch (pre-norm blocks, `F.scaled_dot_product_attention` with
`is_causal=True`). The launch script exports `ATTN_BACKEND`, which the program maps to a
`torch.nn.attention.SDPBackend` and applies with `sdpa_kernel(...)` around the forward
pass; `TINYLM_STEPS` and `TINYLM_SEQ` set the run length and context. Loss printed every
4 steps, a validation loss at the end.

`ATTN_BACKEND=math` restricts SDPA to the unfused reference path (explicit score matrix,
softmax, second matmul, all saved for backward); `flash` runs the fused flash-attention
kernel CPUs have.
"""

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
ATTN_BACKEND = os.environ.get("ATTN_BACKEND", "flash")
STEPS = int(os.environ.get("TINYLM_STEPS", "12"))
SEQ_LEN = int(os.environ.get("TINYLM_SEQ", "768"))
DIM, HEADS, LAYERS, VOCAB, BATCH = 128, 8, 3, 1024, 1


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


def lm_loss(model, ids):
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def main():
    torch.manual_seed(0)
    backend = BACKENDS[ATTN_BACKEND]
    model = TinyLM(VOCAB, DIM, HEADS, LAYERS, SEQ_LEN)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)

    for step in range(1, STEPS + 1):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ_LEN + 1), generator=gen)
        with sdpa_kernel(backend):
            loss = lm_loss(model, ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 4 == 0:
            print(f"step {step}: loss {loss.item():.4f}")

    val_ids = torch.randint(0, VOCAB, (BATCH, SEQ_LEN + 1), generator=gen)
    with torch.no_grad(), sdpa_kernel(backend):
        print(f"val loss {lm_loss(model, val_ids).item():.4f}")


if __name__ == "__main__":
    main()
