"""GPT-2 MLP activation backend: "gelu_pytorch_tanh" (one fused aten::gelu kernel).

Pair: a.py uses "gelu_new" (NewGELUActivation: mul, pow, add, tanh, ... kernels).
The efficient side of the pair; see a.py for the expected diagnosis.
"""

import torch
from transformers import GPT2Config, GPT2Model


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=384, n_head=6, activation_function="gelu_pytorch_tanh")
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (4, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
