"""Train a narrow GPT-2 language model on synthetic token sequences.

A plain GPT-2 pre-training loop on a model built from a `GPT2Config` (random weights,
nothing downloaded, dropout off): AdamW with warm-up, gradient clipping, loss printed
every few steps, a validation loss at the end.

The config asks for `activation_function="gelu_new"`, transformers' Python
`NewGELUActivation` (0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))): eight
element-wise kernels, each result kept for backward. `"gelu_pytorch_tanh"` is the same
tanh approximation computed by one fused `F.gelu(approximate="tanh")` kernel.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args():
    p = argparse.ArgumentParser(description="narrow GPT-2 pre-training")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--n-inner", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def markov_tokens(gen, shape, vocab_size):
    jumps = torch.randint(1, 6, shape, generator=gen)
    noise = torch.rand(shape, generator=gen) < 0.1
    return torch.where(
        noise, torch.randint(0, vocab_size, shape, generator=gen), jumps.cumsum(-1) % vocab_size
    )


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    config = GPT2Config(
        vocab_size=256,
        n_positions=args.seq_len,
        n_embd=args.n_embd,
        n_layer=args.layers,
        n_head=4,
        n_inner=args.n_inner,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
    gen = torch.Generator().manual_seed(args.seed)
    shape = (args.batch_size, args.seq_len)

    for step in range(1, args.steps + 1):
        ids = markov_tokens(gen, shape, config.vocab_size)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")

    model.eval()
    val_ids = markov_tokens(gen, shape, config.vocab_size)
    with torch.no_grad():
        print(f"val loss {model(input_ids=val_ids, labels=val_ids).loss.item():.4f}")


if __name__ == "__main__":
    main()
