"""A GPT-2 training step (6 layers: forward, loss, backward, AdamW) with foreach=True.
Pair of a.py (foreach=False: one small kernel per parameter)."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def setup():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=6, n_embd=256, n_head=4, vocab_size=2000)
    model = GPT2LMHeadModel(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, config.vocab_size, (2, 64))
    return model, opt, ids


def main(model, opt, ids):
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()
