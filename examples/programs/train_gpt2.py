"""Train a small GPT-2 language model on random tokens: an ordinary training script.

Nothing here knows about Magneton: argparse, an AdamW loop, `if __name__ == "__main__"`.
Record ten of its steps (one structure step, eight timed) and compare two attention backends without editing it:

    magneton record --db prof --run eager --steps 1:1:9 -- \
        python examples/programs/train_gpt2.py --attn-implementation eager
    magneton record --db prof --run sdpa --steps 1:1:9 -- \
        python examples/programs/train_gpt2.py --attn-implementation sdpa
    magneton diff --db prof eager sdpa

The model is built from a config (random weights, nothing is downloaded); dropout is off
so that two runs with the same seed compute the same values step by step.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12, help="optimizer steps")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--attn-implementation", default="sdpa", choices=["eager", "sdpa"])
    p.add_argument("--activation", default="gelu_new")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_model(args):
    config = GPT2Config(
        vocab_size=512,
        n_positions=args.seq_len,
        n_embd=128,
        n_layer=args.layers,
        n_head=4,
        activation_function=args.activation,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel._from_config(config, attn_implementation=args.attn_implementation)


def train(args):
    torch.manual_seed(args.seed)
    model = build_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    for step in range(args.steps):
        ids = torch.randint(0, model.config.vocab_size, (args.batch_size, args.seq_len))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    train(parse_args())
