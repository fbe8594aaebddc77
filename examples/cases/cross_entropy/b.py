"""Per-token negative log-likelihood via F.cross_entropy(reduction="none").

Pair: a.py computes the same values with log_softmax + gather + a padding mask.
See a.py for the expected diagnosis.
"""

import torch
import torch.nn.functional as F

BATCH, SEQ, VOCAB = 4, 256, 8000


def setup():
    torch.manual_seed(0)
    logits = torch.randn(BATCH, SEQ, VOCAB)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels[:, -16:] = -100  # padding positions contribute zero loss (ignore_index)
    return logits, labels


def main(logits, labels):
    return F.cross_entropy(logits.permute(0, 2, 1), labels, reduction="none")
