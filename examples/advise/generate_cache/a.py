"""GPT-2 greedy continuation of a batch of prompts with `generate()`.

A batch-completion job: a small GPT-2 (built from a config, random weights, nothing
downloaded) continues four 64-token prompts by 32 greedy tokens. The call passes
`use_cache=False`, a setting copied from a training script (where the cache is of no
use): each new token then re-runs the whole prefix through the model, where with the KV
cache each step only processes the new token against the cached keys and values. The
generated tokens are the same.
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

BATCH, PROMPT, NEW_TOKENS = 4, 64, 32


def setup():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=1024,
        n_positions=256,
        n_embd=128,
        n_layer=3,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = GPT2LMHeadModel(config).eval()
    prompts = torch.randint(1, config.vocab_size, (BATCH, PROMPT))
    return model, prompts


def main(model, prompts):
    with torch.no_grad():
        return model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            use_cache=False,
        )
