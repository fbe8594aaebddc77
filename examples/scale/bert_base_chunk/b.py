"""A BERT-base-depth encoder (12 layers, seq 128) with chunk_size_feed_forward=0: the
feed-forward over the whole sequence at once. Pair of a.py (8: 16 slices of 8 tokens)."""

import torch
from transformers import BertConfig, BertModel


def setup():
    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=12,
        hidden_size=256,
        num_attention_heads=4,
        intermediate_size=1024,
        chunk_size_feed_forward=0,
    )
    model = BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, config.vocab_size, (2, 128))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
