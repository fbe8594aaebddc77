"""A BART encoder-decoder (6+6 layers), teacher-forced, attention "sdpa". Pair of a.py
("eager")."""

import torch
from transformers import BartConfig, BartModel


def setup():
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=1000,
        d_model=256,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=1024,
        decoder_ffn_dim=1024,
        max_position_embeddings=256,
    )
    model = BartModel._from_config(config, attn_implementation="sdpa").eval()
    ids = torch.randint(4, config.vocab_size, (2, 128))
    dec = torch.randint(4, config.vocab_size, (2, 64))
    return model, ids, dec


def main(model, ids, dec):
    with torch.no_grad():
        return model(input_ids=ids, decoder_input_ids=dec).last_hidden_state
