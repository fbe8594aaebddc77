"""A small transformer text encoder serving a batch of token-id lists, padded to a multiple
of 256 tokens. The handler, main(), pads the batch the way a tokenizer's
`pad_to_multiple_of=` does (a setting meant for tensor-core-friendly shapes, 8 or 64);
with 256 the ~60-token sentences become 256 positions, and every projection, attention
and MLP runs on ~4x the tokens. The padded positions are masked, so the pooled sentence
embeddings are the same.

Pair: b.py pads to a multiple of 8. Both sides call the same operators the same way; the
operands' shapes differ. Expected diagnosis: a kernel-argument divergence naming a
shape, walked back through the recorded graph to the operator that created the padded
batch (`torch.full` in collate()), then through the source — its `length` argument, the
`pad_to_multiple_of` parameter, the caller's keyword — to `pad_to_multiple_of=256`; the
patch changes it to the efficient side's 8.
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, HIDDEN, HEADS, LAYERS = 1000, 256, 4, 1
BATCH, PAD_ID = 8, 0


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.norm1 = nn.LayerNorm(HIDDEN)
        self.mlp = nn.Sequential(
            nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN)
        )
        self.norm2 = nn.LayerNorm(HIDDEN)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        h = self.norm1(h + self.out(a.transpose(1, 2).reshape(b, n, HIDDEN)))
        return self.norm2(h + self.mlp(h))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN, padding_idx=PAD_ID)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, mask)
        keep = mask[..., None].to(h.dtype)
        return (h * keep).sum(1) / keep.sum(1)  # mean over the real tokens


def collate(sentences: list[list[int]], pad_to_multiple_of: int = 1):
    """Token id lists -> (ids, mask), right-padded to a multiple of `pad_to_multiple_of`."""
    longest = max(len(s) for s in sentences)
    length = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    ids = torch.full((len(sentences), length), PAD_ID)
    mask = torch.zeros(len(sentences), length, dtype=torch.bool)
    for i, s in enumerate(sentences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = True
    return ids, mask


def setup():
    torch.manual_seed(0)
    model = Encoder().eval()
    lengths = torch.randint(40, 64, (BATCH,)).tolist()
    sentences = [torch.randint(1, VOCAB, (n,)).tolist() for n in lengths]
    return model, sentences


@torch.no_grad()
def main(model, sentences):
    ids, mask = collate(sentences, pad_to_multiple_of=256)
    return model(ids, mask)
