"""Token-level cross-entropy on logits permuted to (batch, vocab, seq).

Upstream pattern (pytorch/pytorch and HF forum reports: `F.cross_entropy(logits.permute(0,
2, 1), labels)` makes the loss copy the non-contiguous logits and reduce over a strided
class dim). Pair: b.py flattens to (batch*seq, vocab) instead.
Expected root: the permute line below.
"""

import torch
import torch.nn.functional as F

BATCH, SEQ, VOCAB = 8, 256, 4000


def setup():
    torch.manual_seed(0)
    logits = torch.randn(BATCH, SEQ, VOCAB)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    return logits, labels


@torch.no_grad()
def main(logits, labels):
    scores = logits.reshape(-1, VOCAB)
    return F.cross_entropy(scores, labels.reshape(-1))
