"""A ViT (12 layers, 224x224 images, 16x16 patches), attention "sdpa". Pair of a.py
("eager")."""

import torch
from transformers import ViTConfig, ViTModel


def setup():
    torch.manual_seed(0)
    config = ViTConfig(
        num_hidden_layers=12, hidden_size=192, num_attention_heads=3, intermediate_size=768
    )
    model = ViTModel._from_config(
        config, add_pooling_layer=False, attn_implementation="sdpa"
    ).eval()
    pixels = torch.randn(2, 3, 224, 224)
    return model, pixels


def main(model, pixels):
    with torch.no_grad():
        return model(pixel_values=pixels).last_hidden_state
