"""Pre-train a small GPT-2 on a synthetic token stream, long context.

A plain language-model training loop: the token stream is cut into fixed-length blocks,
AdamW with a linear warm-up, gradient clipping, the loss printed every few steps. The
model is built from a config (random weights, nothing downloaded) with dropout off.

`--attn-implementation` picks the attention code transformers runs: `eager` is the
reference implementation (QK^T, causal mask, softmax, @V, each a separate tensor kept for
backward), `sdpa` calls `F.scaled_dot_product_attention`, a fused flash kernel on CPU.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args():
    p = argparse.ArgumentParser(description="Pre-train GPT-2 on synthetic tokens")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--block-size", type=int, default=768)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup-steps", type=int, default=4)
    p.add_argument(
        "--attn-implementation",
        choices=["eager", "sdpa"],
        default="sdpa",
        help="attention backend of the transformers model",
    )
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def token_stream(n_tokens, vocab_size, seed):
    """A synthetic corpus with some structure: a noisy order-1 Markov chain."""
    g = torch.Generator().manual_seed(seed)
    jumps = torch.randint(1, 8, (n_tokens,), generator=g)
    noise = torch.rand(n_tokens, generator=g) < 0.1
    random_tok = torch.randint(0, vocab_size, (n_tokens,), generator=g)
    return torch.where(noise, random_tok, jumps.cumsum(0) % vocab_size)


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    config = GPT2Config(
        vocab_size=args.vocab_size,
        n_positions=args.block_size,
        n_embd=args.n_embd,
        n_layer=args.layers,
        n_head=args.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel._from_config(config, attn_implementation=args.attn_implementation)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / args.warmup_steps)
    )

    tokens = token_stream(args.steps * args.batch_size * args.block_size, args.vocab_size, 0)
    batches = tokens.view(args.steps, args.batch_size, args.block_size)

    for step in range(1, args.steps + 1):
        ids = batches[step - 1]
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
