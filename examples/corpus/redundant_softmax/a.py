"""Sampling statistics that compute the same softmax twice.

Upstream pattern (generation utilities and RL loss code that call `logits.softmax(-1)` once
for the probabilities and again inside the entropy term; vLLM/TRL sampler reviews point at
it). Pair: b.py reuses the probabilities. Expected root: the entropy line (its extra
softmax has no counterpart on b).
"""

import torch

BATCH, VOCAB = 64, 32000


def setup():
    torch.manual_seed(0)
    return (torch.randn(BATCH, VOCAB),)


@torch.no_grad()
def main(logits):
    probs = logits.softmax(-1)
    entropy = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    return probs.argmax(-1), entropy
