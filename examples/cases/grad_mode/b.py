"""A small text classifier served on CPU (see a.py), with main() run under
`@torch.inference_mode()`: the eval `nn.TransformerEncoder` takes PyTorch's fast path,
packing the padded batch into a nested tensor and running each layer as one fused
operator on the real tokens only.

Pair: a.py runs main() with autograd on. See a.py for the expected diagnosis.
"""

import torch
from torch import nn

VOCAB, D_MODEL, HEADS, LAYERS, CLASSES = 1000, 256, 4, 2, 4
BATCH, MIN_LEN, MAX_LEN, PAD = 16, 16, 64, 0


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(
            D_MODEL, HEADS, dim_feedforward=4 * D_MODEL, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=True)
        self.head = nn.Linear(D_MODEL, CLASSES)

    def forward(self, tokens, pad):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1)
        pooled = (h * keep).sum(1) / keep.sum(1)
        return self.head(pooled)


def setup():
    torch.manual_seed(0)
    # one intra-op thread, as a server running one worker per core does; on a small
    # shared CI machine a two-thread team also waits at its barriers whenever a worker is
    # descheduled, which buries the difference in noise; the same on both sides
    torch.set_num_threads(1)
    model = Classifier().eval()
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (BATCH,))
    pad = torch.arange(MAX_LEN)[None, :] >= lengths[:, None]
    tokens = torch.randint(1, VOCAB, (BATCH, MAX_LEN)).masked_fill(pad, PAD)
    return model, tokens, pad


@torch.inference_mode()
def main(model, tokens, pad):
    return model(tokens, pad).softmax(-1)
