"""Llama `generate()` over 32 new tokens with its KV cache, attention "eager".

Pair: b.py passes attn_implementation="sdpa". Greedy decoding, so both sides produce the
same tokens from the same prompt and the per-step tensors match by value. Expected: the
attention region of the decode steps; root cause the `attn_implementation` argument.
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

NEW_TOKENS = 32


def setup():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1000,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
    ids = torch.randint(0, config.vocab_size, (1, 64))
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model.generate(
            ids,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )
