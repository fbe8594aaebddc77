"""A BERT-base encoder at its real size (12 layers, hidden 768, 12 heads, seq 128), attention
"sdpa" (torch.nn.functional.scaled_dot_product_attention). Pair of a.py ("eager")."""

import torch
from transformers import BertConfig, BertModel

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def setup():
    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072
    )
    model = BertModel._from_config(
        config, add_pooling_layer=False, attn_implementation="sdpa"
    ).eval()
    ids = torch.randint(0, config.vocab_size, (4, 128))
    model = model.to(DEVICE)
    ids = ids.to(DEVICE)
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
