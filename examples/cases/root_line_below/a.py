"""Cosine-similarity classifier head (NormFace-style): normalize the class weights,
then score every input against every class by broadcasting and summing.

Pair: b.py normalizes the weights the same way and scores with one F.linear (a GEMM).
The weight normalization on the line above is the same on both sides and lands in the
same region (it is computed from a parameter alone, so the matcher attaches it to the
region of its first data-dependent consumer). Expected diagnosis: api-misuse whose root
line is the broadcast-and-sum line, the first line whose operators differ — not the
normalization line that opens the region.
"""

import torch
import torch.nn.functional as F
from torch import nn

BATCH, DIM, CLASSES = 128, 128, 512


class CosineHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(CLASSES, DIM))

    def forward(self, x):
        w = F.normalize(self.weight, dim=1)
        return (x[:, None, :] * w[None, :, :]).sum(-1)


def setup():
    torch.manual_seed(0)
    head = CosineHead().eval()
    x = torch.randn(BATCH, DIM)
    return head, x


@torch.no_grad()
def main(head, x):
    return head(x)
