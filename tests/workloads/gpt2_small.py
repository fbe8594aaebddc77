"""A tiny Hugging Face GPT-2 (random weights, built from a config) for recorder tests."""

import os

import torch
from transformers import GPT2Config, GPT2Model

ACTIVATION = os.environ.get("MAGNETON_TEST_ACT", "gelu_new")


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, activation_function=ACTIVATION)
    model = GPT2Model(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 16))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
