"""Sentence vectors from a transformer encoder layer, for `magneton advise`: the batch is
padded by the program's own `collate`, whose strategy is a literal argument of the call
(`padding="max_length"` pads every sentence to 512 positions, `"longest"` to the
longest in the batch; the pooled vectors are the same), and the encoder's `is_causal`
is a literal bool."""

import torch

MAX_LENGTH = 512


def collate(seqs, padding, max_length=MAX_LENGTH):
    if padding == "max_length":
        width = max_length
    elif padding == "longest":
        width = max(len(s) for s in seqs)
    else:
        raise ValueError(f"unknown padding {padding!r}")
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = True
    return ids, mask


def setup():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(1000, 64)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    seqs = [torch.randint(1, 1000, (int(n),)) for n in torch.randint(16, 48, (8,))]
    return emb, layer, seqs


def main(emb, layer, seqs):
    ids, mask = collate(seqs, padding="max_length")
    with torch.no_grad():
        h = layer(emb(ids), src_key_padding_mask=~mask, is_causal=False)
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1)
