"""GPT-2 attention backend chosen by the `attn_implementation` argument: "sdpa".

Pair: a.py passes "eager" (matmul, softmax, matmul with the attention matrix in memory).
The efficient side of the pair; see a.py for the expected diagnosis.
"""

import torch
from transformers import GPT2Config, GPT2Model


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=256, n_head=4)
    model = GPT2Model._from_config(config, attn_implementation="sdpa").eval()
    ids = torch.randint(0, config.vocab_size, (4, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
