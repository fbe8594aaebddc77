"""A bag-of-embeddings text classifier at inference whose input embedding is tied to a
checkpoint's (hidden, vocab) output projection; setup() builds the embedding from
`kernel.T.contiguous()`, so lookups read contiguous rows.

Pair: a.py passes the transposed view `kernel.T`. See a.py for the expected diagnosis.
"""

import torch
from torch import nn

VOCAB, HIDDEN, CLASSES = 32000, 256, 4
BATCH, LENGTH = 64, 128


class BagOfEmbeddings(nn.Module):
    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.embed = embedding
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(1))


def setup():
    torch.manual_seed(0)
    # the checkpoint's output projection, stored (hidden, vocab) like a Flax Dense kernel
    kernel = torch.randn(HIDDEN, VOCAB) * 0.02
    embedding = nn.Embedding.from_pretrained(kernel.T.contiguous())
    model = BagOfEmbeddings(embedding).eval()
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH))
    return model, ids


@torch.no_grad()
def main(model, ids):
    return model(ids)
