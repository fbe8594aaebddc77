"""Train a fastText-style bag-of-embeddings text classifier on synthetic documents.

A classic text-classification baseline: token and bigram-hash ids are averaged by
`nn.EmbeddingBag`, a linear layer predicts the label, AdamW trains it with a linear decay;
loss and accuracy are printed every few steps, a held-out accuracy at the end.

`--fused/--no-fused` is passed to `torch.optim.AdamW(fused=...)`. The fused CPU kernel
updates each parameter, its two moment buffers and weight decay in one pass over memory;
with `--no-fused` the default for-loop implementation (what CPU training gets when no
implementation is chosen) makes a separate pass over the 12.8M-entry embedding table for
every term of the update.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description="fastText-style classifier")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--doc-len", type=int, default=48)
    p.add_argument("--vocab-size", type=int, default=60000)
    p.add_argument("--buckets", type=int, default=40000, help="hashed bigram buckets")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-2)
    p.add_argument(
        "--fused",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="use the fused AdamW kernel",
    )
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class FastText(nn.Module):
    def __init__(self, vocab_size, buckets, dim, classes):
        super().__init__()
        self.vocab_size = vocab_size
        self.buckets = buckets
        self.embed = nn.EmbeddingBag(vocab_size + buckets, dim, mode="mean")
        self.fc = nn.Linear(dim, classes)

    def forward(self, tokens):
        bigrams = (tokens[:, :-1] * 1000003 + tokens[:, 1:]) % self.buckets + self.vocab_size
        return self.fc(self.embed(torch.cat([tokens, bigrams], dim=1)))


def make_batch(gen, n, doc_len, vocab_size, classes):
    """Each label owns a slice of the vocabulary that its documents draw half their words from."""
    y = torch.randint(0, classes, (n,), generator=gen)
    topic = y[:, None] * (vocab_size // classes) + torch.randint(
        0, vocab_size // classes, (n, doc_len), generator=gen
    )
    common = torch.randint(0, vocab_size, (n, doc_len), generator=gen)
    pick = torch.rand(n, doc_len, generator=gen) < 0.5
    return torch.where(pick, topic, common), y


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = FastText(args.vocab_size, args.buckets, args.dim, args.classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=args.fused)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=args.steps)

    for step in range(1, args.steps + 1):
        tokens, y = make_batch(gen, args.batch_size, args.doc_len, args.vocab_size, args.classes)
        logits = model(tokens)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % args.log_every == 0:
            acc = (logits.argmax(-1) == y).float().mean().item()
            print(f"step {step}: loss {loss.item():.4f} acc {acc:.3f}")

    with torch.no_grad():
        tokens, y = make_batch(gen, 512, args.doc_len, args.vocab_size, args.classes)
        print(f"held-out acc {(model(tokens).argmax(-1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
