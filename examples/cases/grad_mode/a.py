"""A small text classifier served on CPU: a batch of requests of different lengths
(16 to 64 tokens) is padded to the longest, embedded, encoded by a two-layer
`nn.TransformerEncoder` with a key-padding mask, mean-pooled over the real tokens and
classified. The model is in eval mode, but main() runs with autograd on.

Pair: b.py decorates main() with `@torch.inference_mode()`; nothing else differs. With
autograd off, an eval `nn.TransformerEncoder` takes PyTorch's fast path: it packs the
padded batch into a nested tensor (`aten::_nested_tensor_from_mask`) and runs each layer
as one fused `aten::_transformer_encoder_layer_fwd` on the real tokens only, instead of
the dense layer ops over every padded position. Expected diagnosis: the grad mode
(read from the recorded operators: autograd recorded them on this side only), origin
this side's main(); the patch adds b.py's `@torch.inference_mode()` there.
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


def main(model, tokens, pad):
    return model(tokens, pad).softmax(-1)
