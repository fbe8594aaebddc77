"""BERT-base's real structure (12 layers, hidden 768, 12 heads) on one short sequence,
random weights from a config: attention "sdpa". The pair of a.py ("eager") for the tests
that need real-size findings (long operator names, a cause in 12 layers) without the
minutes a batch of 4×128 takes to record on a shared 2-core box."""

import torch
from transformers import BertConfig, BertModel


def setup():
    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072
    )
    model = BertModel._from_config(
        config, add_pooling_layer=False, attn_implementation="sdpa"
    ).eval()
    ids = torch.randint(0, config.vocab_size, (1, 32))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
