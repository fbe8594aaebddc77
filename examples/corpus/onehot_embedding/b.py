"""Token embeddings looked up by a one-hot matrix product.

Upstream pattern (code ported from TPU-era implementations, e.g. T5/Mesh-TF style
`one_hot(ids) @ table`, reported as slow in PyTorch ports): a dense (tokens x vocab)
matmul where an indexed gather does the same. Pair: b.py uses F.embedding.
Expected root: the one_hot line below.
"""

import torch
import torch.nn.functional as F

VOCAB, DIM = 8000, 256


def setup():
    torch.manual_seed(0)
    table = torch.randn(VOCAB, DIM)
    ids = torch.randint(0, VOCAB, (8, 128))
    return table, ids


@torch.no_grad()
def main(table, ids):
    return F.embedding(ids, table)
