"""A typer training CLI for a small causal transformer: `--flash/--no-flash` picks the
attention code.

`python train.py --no-flash` computes attention by hand (QK^T, causal mask, softmax,
@V, each kept for backward); `--flash` calls `F.scaled_dot_product_attention(...,
is_causal=True)`, the fused kernel. The loss is printed every `--log-every` steps and a
checkpoint written at the end.
"""

import os

import torch
import torch.nn.functional as F
import typer


class Block(torch.nn.Module):
    def __init__(self, d, heads, flash):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
        )
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.heads, self.flash = heads, flash

    def attend(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            y = s.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def main(
    steps: int = 12,
    layers: int = 2,
    dim: int = 64,
    seq_len: int = 512,
    lr: float = 3e-4,
    flash: bool = typer.Option(True, "--flash/--no-flash", help="fused attention kernel"),
    log_every: int = 4,
    out: str = "checkpoints",
):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(256, dim)
    blocks = torch.nn.Sequential(*[Block(dim, 4, flash) for _ in range(layers)])
    head = torch.nn.Linear(dim, 256)
    params = [*emb.parameters(), *blocks.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=lr)
    gen = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        ids = torch.randint(0, 256, (2, seq_len + 1), generator=gen)
        logits = head(blocks(emb(ids[:, :-1])))
        loss = F.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    os.makedirs(out, exist_ok=True)
    torch.save(blocks.state_dict(), os.path.join(out, "blocks.pt"))


if __name__ == "__main__":
    typer.run(main)
