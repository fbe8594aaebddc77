"""Train a small GPT-style language model with gradient accumulation and gradient clipping.

The usual large-batch recipe on a small machine: `--accum-steps` micro-batches are
back-propagated before each optimizer step, the accumulated gradient is clipped to a
global norm, AdamW updates the weights. Loss is logged every 5 optimizer steps, a
validation loss every 10, a checkpoint written every 15. The model is built from a config
(random weights, nothing downloaded), dropout is off.

`--clip-impl loop` computes the global gradient norm and rescales the gradients one
parameter tensor at a time (`clip_grad_norm_(..., foreach=False)`); `foreach` does it with
the multi-tensor kernels (`torch._foreach_norm` / `torch._foreach_mul_`).
source: pytorch/pytorch#91846 (foreach gradient clipping: per-tensor loop is 4x slower)
"""

import argparse
import os

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args():
    p = argparse.ArgumentParser(description="GPT-2 LM training with gradient accumulation")
    p.add_argument("--steps", type=int, default=16, help="optimizer steps")
    p.add_argument("--accum-steps", type=int, default=4)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--clip-impl", choices=["foreach", "loop"], default="foreach")
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=15)
    p.add_argument("--out", default="checkpoints/gpt2-accum")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def lm_loss(model, ids):
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=2048, n_positions=args.seq_len, n_embd=args.hidden,
                        n_layer=args.layers, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    val_ids = torch.randint(0, config.vocab_size, (8, args.seq_len), generator=gen)

    for step in range(1, args.steps + 1):
        running = 0.0
        for _ in range(args.accum_steps):
            ids = torch.randint(0, config.vocab_size,
                                (args.micro_batch_size, args.seq_len), generator=gen)
            loss = lm_loss(model, ids) / args.accum_steps
            loss.backward()
            running += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            model.parameters(), args.max_grad_norm, foreach=(args.clip_impl == "foreach"))
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
