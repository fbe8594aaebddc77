"""GPT-2 MLP activation backend: "gelu_new" (NewGELUActivation, a chain of element-wise ops).

Pair: b.py uses "gelu_pytorch_tanh" (one fused aten::gelu with the same tanh approximation).
Expected diagnosis: waste on this side; key variable `activation_function`; origin the
config line below; the patch changes that literal.
"""

import torch
from transformers import GPT2Config, GPT2Model


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=384, n_head=6, activation_function="gelu_new")
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (4, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
