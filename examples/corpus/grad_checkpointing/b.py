"""A BERT training step without gradient checkpointing.

Upstream pattern (huggingface/transformers: `gradient_checkpointing=True` left on for a
model that fits in memory; the forward of every layer runs twice). Pair: b.py does not
enable it. Expected root: the gradient_checkpointing_enable() line in setup().
"""

import torch
from transformers import BertConfig, BertForMaskedLM


def setup():
    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=4,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=512,
        vocab_size=1000,
    )
    model = BertForMaskedLM(config).train()
    ids = torch.randint(0, config.vocab_size, (4, 64))
    return model, ids


def main(model, ids):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss.detach()
