"""A small transformer text classifier (`nn.TransformerEncoder`) at inference on a padded
batch, under `@torch.inference_mode()` (PyTorch's recommendation for inference): with
autograd off the encoder takes its fused fast path.

Pair: a.py runs the same forward with autograd on. See a.py for the expected diagnosis.
"""

import torch
from torch import nn

VOCAB, HIDDEN, HEADS, LAYERS, CLASSES = 1000, 256, 4, 2, 4
BATCH, LONGEST = 16, 128


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, 4 * HIDDEN, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(ids), src_key_padding_mask=padding)
        keep = (~padding)[..., None].to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))  # mean over the real tokens


def setup():
    torch.manual_seed(0)
    model = Classifier().eval()
    lengths = torch.randint(8, LONGEST // 2, (BATCH,))
    lengths[0] = LONGEST  # one long sentence sets the padded length
    ids = torch.randint(1, VOCAB, (BATCH, LONGEST))
    padding = torch.arange(LONGEST)[None, :] >= lengths[:, None]
    return model, ids, padding


@torch.inference_mode()
def main(model, ids, padding):
    return model(ids, padding)
