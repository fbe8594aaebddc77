"""GPT-2 at 12 layers (seq 128): activation_function "gelu_pytorch_tanh" (the fused
kernel). Pair of a.py ("gelu_new", the same values computed op by op)."""

import torch
from transformers import GPT2Config, GPT2Model


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=256, n_head=4, activation_function="gelu_pytorch_tanh")
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
