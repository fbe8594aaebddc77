"""Cosine-similarity classifier head (NormFace-style): normalize the class weights,
then score every input against every class with one F.linear (a GEMM).

Pair: a.py broadcasts and sums instead. See a.py for the expected diagnosis.
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
        return F.linear(x, w)


def setup():
    torch.manual_seed(0)
    head = CosineHead().eval()
    x = torch.randn(BATCH, DIM)
    return head, x


@torch.no_grad()
def main(head, x):
    return head(x)
