"""Train a small causal transformer LM with gradient accumulation and activation checkpointing.

The large-effective-batch recipe on a small machine: `--accum-steps` micro-batches are
back-propagated before each optimizer step (loss divided by the number of micro-batches),
the accumulated gradient is clipped, AdamW updates the weights. Loss is logged every 5
optimizer steps, a validation loss every 10, a checkpoint written every 15. The model is
a stack of `nn.TransformerEncoderLayer`s with a causal mask, dropout off.

`--activation-checkpointing` chooses which layers run under `torch.utils.checkpoint`
(`none`, `every-2` = every other layer, `full` = all layers): a checkpointed layer keeps
only its input and re-runs its forward during backward. `full` costs about one extra
forward pass per micro-batch, for memory this model never needed.
source: NVIDIA/Megatron-LM#1487 (full recompute costs ~a full extra forward pass); meta-pytorch/torchtune#785 (ac_mode full vs selective)
"""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class CausalLM(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len, ckpt_every):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                dim,
                heads,
                4 * dim,
                dropout=0.0,
                activation="gelu",
                batch_first=True,
                norm_first=True,
            )
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.ckpt_every = ckpt_every  # 0: no layer is checkpointed

    def forward(self, ids):
        t = ids.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.tok(ids) + self.pos(torch.arange(t))
        for i, layer in enumerate(self.layers):
            if self.training and self.ckpt_every and i % self.ckpt_every == 0:
                x = checkpoint(layer, x, mask, None, True, use_reentrant=False)
            else:
                x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def parse_args():
    p = argparse.ArgumentParser(description="Causal LM training with gradient accumulation")
    p.add_argument("--steps", type=int, default=16, help="optimizer steps")
    p.add_argument("--accum-steps", type=int, default=4)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument(
        "--activation-checkpointing", choices=["none", "every-2", "full"], default="none"
    )
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=15)
    p.add_argument("--out", default="checkpoints/lm-accum")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def lm_loss(model, ids):
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    ckpt_every = {"none": 0, "every-2": 2, "full": 1}[args.activation_checkpointing]
    model = CausalLM(args.vocab, args.dim, 4, args.layers, args.seq_len, ckpt_every)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    shape = (args.micro_batch_size, args.seq_len + 1)
    val_ids = torch.randint(0, args.vocab, (8, args.seq_len + 1), generator=gen)

    for step in range(1, args.steps + 1):
        running = 0.0
        for _ in range(args.accum_steps):
            ids = torch.randint(0, args.vocab, shape, generator=gen)
            loss = lm_loss(model, ids) / args.accum_steps
            loss.backward()
            running += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % args.log_every == 0:
            print(f"step {step}: loss {running:.4f} grad_norm {grad_norm.item():.4f}")
        if step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                print(f"step {step}: val loss {lm_loss(model, val_ids).item():.4f}")
            model.train()
        if step % args.save_every == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save(model.state_dict(), os.path.join(args.out, f"step{step}.pt"))
            print(f"saved {args.out}/step{step}.pt")


if __name__ == "__main__":
    main()
