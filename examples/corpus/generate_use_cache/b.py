"""GPT-2 greedy generate() with the KV cache.

Upstream pattern (huggingface/transformers issues on slow generation with
`use_cache=False`, e.g. left over from gradient-checkpointed training configs): every new
token re-runs attention over the whole prefix. Pair: b.py passes use_cache=True.
Expected root: the `use_cache=False` argument of generate() below.
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 48))
    return model, ids


@torch.no_grad()
def main(model, ids):
    return model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0)
