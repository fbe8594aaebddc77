"""A small transformer text classifier (`nn.TransformerEncoder`) at inference on a padded
batch, called with autograd on: the parameters require grad (the default) and nothing
disables grad mode. `nn.TransformerEncoder` takes its fused "fast path" (one native
kernel per layer: fused attention, fused bias+activation) only when autograd is off (PyTorch docs, nn.TransformerEncoderLayer: "autograd is disabled (using
torch.inference_mode or torch.no_grad) or no tensor argument requires_grad"). With grad
on, every layer runs as separate operators and records a backward graph that is never
used. (The fast path can also pack the padded batch into a nested tensor; the recorder
cannot summarize nested tensors yet, so the model is built with
`enable_nested_tensor=False` on both sides.)

Pair: b.py runs the same forward under `@torch.inference_mode()`, PyTorch's
recommendation for inference. Expected diagnosis: the two sides part inside
`TransformerEncoder.forward`, at the fast-path test; the root cause is the grad mode —
traced to the efficient side's `@torch.inference_mode()` and to the wasteful side's
entry that lacks it; the patch adds the decorator.
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


def main(model, ids, padding):
    return model(ids, padding)
