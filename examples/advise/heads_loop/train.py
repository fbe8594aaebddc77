"""Train a character-level GPT on a synthetic text stream (the "GPT from scratch" recipe).

The training script of the classic lecture model: token and position embeddings, pre-norm
blocks of masked self-attention and an MLP, AdamW, the loss printed every few steps and a
validation loss at the end. Text is generated from a small grammar so that the run needs
no data download.

`ATTENTION_MODE` is a module-level setting of the attention code. `"loop"` computes the
heads one after another in a Python loop (slice the head's queries, keys and values, score,
mask, softmax, weight the values) and concatenates them, as the lecture's first
`MultiHeadAttention` does; `"batched"` treats the heads as another batch dimension and runs
each of those steps once for all heads. Same parameters, same arithmetic per head.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTENTION_MODE = "loop"  # "loop" | "batched"

WORDS = "the a cat dog sat on mat ran to from big small red blue and or but".split()


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        mask = self.tril[:T, :T] == 0
        if ATTENTION_MODE == "loop":
            heads = []
            for h in range(self.n_head):
                cols = slice(h * hs, (h + 1) * hs)
                wei = q[:, :, cols] @ k[:, :, cols].transpose(-2, -1) * hs**-0.5
                wei = F.softmax(wei.masked_fill(mask, float("-inf")), dim=-1)
                heads.append(wei @ v[:, :, cols])
            y = torch.cat(heads, dim=-1)
        else:
            q, k, v = (z.view(B, T, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
            wei = q @ k.transpose(-2, -1) * hs**-0.5
            wei = F.softmax(wei.masked_fill(mask, float("-inf")), dim=-1)
            y = (wei @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab_size, n_embd, n_head, n_layer, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        logits = self.head(self.ln_f(self.blocks(x)))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def synthetic_text(gen, n_words):
    picks = torch.randint(0, len(WORDS), (n_words,), generator=gen).tolist()
    return " ".join(WORDS[i] for i in picks) + "."


def parse_args():
    p = argparse.ArgumentParser(description="character-level GPT")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=16)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    text = synthetic_text(gen, 20000)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text])
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]

    def get_batch(split):
        src = train_data if split == "train" else val_data
        ix = torch.randint(len(src) - args.block_size - 1, (args.batch_size,), generator=gen)
        x = torch.stack([src[i : i + args.block_size] for i in ix])
        y = torch.stack([src[i + 1 : i + args.block_size + 1] for i in ix])
        return x, y

    model = CharGPT(len(chars), args.n_embd, args.n_head, args.n_layer, args.block_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step in range(1, args.steps + 1):
        xb, yb = get_batch("train")
        loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0:
            print(f"step {step}: train loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        print(f"val loss {model(*get_batch('val')).item():.4f}")


if __name__ == "__main__":
    main()
