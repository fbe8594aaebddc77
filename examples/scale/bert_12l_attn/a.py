"""A BERT-base encoder at its real size (12 layers, hidden 768, 12 heads, seq 128), random
weights from a config: attention "eager" (matmul, softmax, matmul).

Pair: b.py passes attn_implementation="sdpa". Expected: the attention regions; root cause
the `attn_implementation` argument below. On CUDA the two sides reach different kernels
(the math path here, a fused flash / memory-efficient kernel there): benchmarks/gpu_check.py
records this pair with the NVML sensor. Without a GPU it runs on the CPU, like the other
pairs of examples/scale.
"""

import torch
from transformers import BertConfig, BertModel

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def setup():
    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072
    )
    model = BertModel._from_config(
        config, add_pooling_layer=False, attn_implementation="eager"
    ).eval()
    ids = torch.randint(0, config.vocab_size, (4, 128))
    # both sides move the same way, after the model is built (the diagnosis follows
    # `model = model.to(...)` back to the line that built it)
    model = model.to(DEVICE)
    ids = ids.to(DEVICE)
    return model, ids


def main(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state
