"""A click training CLI for a bag-of-embeddings text classifier: `--fused-adam` picks
AdamW's implementation.

`python train.py` (no flag) steps AdamW with its for-loop implementation, a separate
pass over each parameter's memory per term of the update; `--fused-adam` passes
`fused=True`, one kernel per parameter. Accuracy is printed every `--log-every` steps,
a held-out accuracy at the end.
"""

import click
import torch
import torch.nn.functional as F


@click.command()
@click.option("--steps", default=12, type=int)
@click.option("--vocab", default=60000, type=int)
@click.option("--dim", default=128, type=int)
@click.option("--batch", default=64, type=int)
@click.option("--lr", default=2e-2, type=float)
@click.option("--fused-adam", is_flag=True, help="fused AdamW kernel")
@click.option("--log-every", default=4, type=int)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32")
def main(steps, vocab, dim, batch, lr, fused_adam, log_every, precision):
    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(vocab, dim, mode="mean")
    head = torch.nn.Linear(dim, 8)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    emb, head = emb.to(dtype), head.to(dtype)
    opt = torch.optim.AdamW([*emb.parameters(), *head.parameters()], lr=lr, fused=fused_adam)
    gen = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        docs = torch.randint(0, vocab, (batch, 48), generator=gen)
        labels = docs[:, 0] % 8
        logits = head(emb(docs))
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0:
            acc = (logits.argmax(-1) == labels).float().mean()
            print(f"step {step}: loss {loss.item():.4f} acc {acc.item():.3f}")
    docs = torch.randint(0, vocab, (batch, 48), generator=gen)
    with torch.no_grad():
        acc = (head(emb(docs)).argmax(-1) == docs[:, 0] % 8).float().mean()
    print(f"held-out accuracy {acc.item():.3f}")


if __name__ == "__main__":
    main()
