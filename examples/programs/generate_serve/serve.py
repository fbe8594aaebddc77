"""Serve batched text-generation requests with a small GPT-2 (greedy decoding).

A minimal offline serving loop: requests arrive as batches of prompt token ids, each batch
is completed with `model.generate(max_new_tokens=...)`, and a latency line is printed every
few requests. The model is built from a config (random weights, nothing downloaded).

`--no-use-cache` turns the key/value cache off, so every new token re-runs the model over
the whole prefix (prompt + tokens so far) instead of over one new position.
source: sam-paech/antislop-sampler#2 (use_cache=False: generation 6x slower); transformers docs "KV cache"
"""

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

try:
    import magneton

    step = magneton.step
except ImportError:
    step = lambda: None  # noqa: E731


def parse_args():
    p = argparse.ArgumentParser(description="Batched greedy generation with GPT-2")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=48)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--use-cache", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    config = GPT2Config(
        vocab_size=4096,
        n_positions=args.prompt_len + args.max_new_tokens,
        n_embd=args.hidden,
        n_layer=args.layers,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = GPT2LMHeadModel(config).eval()
    gen = torch.Generator().manual_seed(args.seed)

    t0 = time.perf_counter()
    for req in range(1, args.requests + 1):
        prompts = torch.randint(
            1, config.vocab_size, (args.batch_size, args.prompt_len), generator=gen
        )
        with torch.no_grad():
            out = model.generate(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=args.max_new_tokens,
                min_new_tokens=args.max_new_tokens,
                do_sample=False,
                use_cache=args.use_cache,
                pad_token_id=0,
            )
        completion = out[:, args.prompt_len :]
        if req % args.log_every == 0:
            elapsed = time.perf_counter() - t0
            print(
                f"request {req}: first completion {completion[0, :8].tolist()} "
                f"({elapsed / req:.3f} s/request)"
            )
        step()


if __name__ == "__main__":
    main()
