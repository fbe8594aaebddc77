"""GPT-2 at 12 layers (seq 128): activation_function "gelu_new" (a Python-level tanh GELU).

Pair: b.py uses "gelu_pytorch_tanh" (the fused kernel, the same values). Expected: the MLP
activation region; root cause the `activation_function` config value below.
"""

import torch
from transformers import GPT2Config, GPT2Model


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=256, n_head=4, activation_function="gelu_new")
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
