"""A bag-of-embeddings text classifier at inference whose input embedding is tied to a
checkpoint's output projection. The checkpoint stores that projection as a (hidden,
vocab) kernel, as JAX/Flax Dense layers do, so setup() builds the embedding from its
transpose: `nn.Embedding.from_pretrained(kernel.T)` keeps the transposed view, and every
lookup gathers rows whose elements lie VOCAB floats apart in memory.

Pair: b.py passes `kernel.T.contiguous()`. Both sides call the same operators the same
way; only the embedding weight's strides differ. Expected diagnosis: a kernel-argument
divergence naming the weight's strides, walked back through the recorded graph to the
parameter (set before the measured region), then through setup()'s statements to the one
that differs between the two sides; the patch carries `.contiguous()` over.
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
    embedding = nn.Embedding.from_pretrained(kernel.T)
    model = BagOfEmbeddings(embedding).eval()
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH))
    return model, ids


@torch.no_grad()
def main(model, ids):
    return model(ids)
