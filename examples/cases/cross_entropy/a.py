"""Per-token negative log-likelihood via log_softmax + gather + padding mask.

Pair: b.py computes the same values with F.cross_entropy(logits.permute(0, 2, 1), labels,
reduction="none"). Which formulation costs more depends on shapes and device (paper case
c13, pytorch-141822); expected diagnosis: an api-misuse finding on whichever side measures
worse, pointing at its line.
"""

import torch
import torch.nn.functional as F

BATCH, SEQ, VOCAB = 4, 256, 8000


def setup():
    torch.manual_seed(0)
    logits = torch.randn(BATCH, SEQ, VOCAB)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels[:, -16:] = -100  # padding positions contribute zero loss
    return logits, labels


def main(logits, labels):
    logp = F.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -picked * (labels != -100)
