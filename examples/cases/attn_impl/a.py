"""GPT-2 attention backend chosen by the `attn_implementation` argument: "eager".

Pair: b.py passes "sdpa" (torch.nn.functional.scaled_dot_product_attention).
Expected diagnosis: the attention region; root cause the `attn_implementation` argument on
the `_from_config` line below.
"""

import torch
from transformers import GPT2Config, GPT2Model


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=256, n_head=4)
    model = GPT2Model._from_config(config, attn_implementation="eager").eval()
    ids = torch.randint(0, config.vocab_size, (4, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
