"""Batch inference with a Transformer sentence encoder: embed a synthetic corpus.

An offline embedding job: sentences of varying length are padded into batches, each batch
goes through an `nn.TransformerEncoder` (with a key-padding mask), the mean-pooled,
L2-normalised sentence embeddings are collected and written to `--out` at the end, and a
progress line is printed every few batches. Weights are random (seeded), the model is in
eval mode, dropout is off.

`--no-grad` runs the encoder under `torch.no_grad()`. Without it autograd stays on (the
weights require grad), so PyTorch records a backward graph nobody uses and, more
importantly, cannot take the `nn.TransformerEncoderLayer` inference fast path
(BetterTransformer): fused native layer kernels and nested tensors that skip the padding.
source: pytorch/pytorch#75809 (native fast path for transformer encoder inference, autograd must be off); pytorch/tutorials#1976
"""

import argparse
import contextlib
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import magneton

    step = magneton.step
except ImportError:
    step = lambda: None  # noqa: E731


class SentenceEncoder(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers)

    def forward(self, ids, pad_mask):
        x = self.tok(ids) + self.pos(torch.arange(ids.size(1)))
        h = self.encoder(x, src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1)
        return F.normalize(pooled, dim=-1)


def parse_args():
    p = argparse.ArgumentParser(description="Embed a synthetic corpus with a Transformer encoder")
    p.add_argument("--num-batches", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--no-grad", action="store_true", help="run the encoder under torch.no_grad()")
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--out", default="embeddings.pt")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    model = SentenceEncoder(args.vocab, args.dim, args.heads, args.layers, args.max_len).eval()
    gen = torch.Generator().manual_seed(args.seed)

    embeddings = []
    for i in range(1, args.num_batches + 1):
        lengths = torch.randint(4, args.max_len + 1, (args.batch_size,), generator=gen)
        pad_mask = torch.arange(args.max_len)[None, :] >= lengths[:, None]
        ids = torch.randint(1, args.vocab, (args.batch_size, args.max_len), generator=gen)
        ids = ids.masked_fill(pad_mask, 0)
        ctx = torch.no_grad() if args.no_grad else contextlib.nullcontext()
        with ctx:
            emb = model(ids, pad_mask)
        embeddings.append(emb.detach())
        if i % args.log_every == 0:
            sim = (emb @ emb[0]).mean().item()
            print(f"batch {i}: {i * args.batch_size} sentences, mean cos-sim to first {sim:.5f}")
        step()

    all_emb = torch.cat(embeddings)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    torch.save(all_emb, args.out)
    print(f"wrote {tuple(all_emb.shape)} embeddings to {args.out}")


if __name__ == "__main__":
    main()
