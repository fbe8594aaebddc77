"""Train a small transformer review classifier; the run settings live in `settings.py`.

The project keeps its hyper-parameters in a `settings.py` module beside the script
(vocabulary and model size, batch, steps, learning rate), imported at start-up. The
model: word and position embeddings, a `nn.TransformerEncoder`, mean pooling over the
tokens and a linear classifier; AdamW; the loss printed every `LOG_EVERY` steps, a
held-out accuracy at the end.

`settings.USE_ONE_HOT_EMBEDDINGS` comes from the TPU code the model was ported from
(google-research/bert's `use_one_hot_embeddings`): the word vectors are computed as
`one_hot(ids) @ table`, a (tokens x vocab) matrix multiplied with the table, forward and
backward, instead of the `nn.Embedding` lookup.
"""

import settings
import torch
import torch.nn as nn
import torch.nn.functional as F


class ReviewClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(settings.VOCAB_SIZE, settings.HIDDEN)
        self.position = nn.Embedding(settings.MAX_LEN, settings.HIDDEN)
        layer = nn.TransformerEncoderLayer(
            settings.HIDDEN,
            settings.HEADS,
            dim_feedforward=4 * settings.HIDDEN,
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, settings.LAYERS, enable_nested_tensor=False)
        self.classifier = nn.Linear(settings.HIDDEN, settings.NUM_CLASSES)

    def embed(self, ids):
        if settings.USE_ONE_HOT_EMBEDDINGS:
            one_hot = F.one_hot(ids, settings.VOCAB_SIZE).to(self.word.weight.dtype)
            return one_hot @ self.word.weight
        return self.word(ids)

    def forward(self, ids):
        x = self.embed(ids) + self.position(torch.arange(ids.shape[1]))
        return self.classifier(self.encoder(x).mean(dim=1))


def make_batch(gen, n):
    """Reviews whose rating shifts which part of the vocabulary they use."""
    y = torch.randint(0, settings.NUM_CLASSES, (n,), generator=gen)
    shape = (n, settings.MAX_LEN)
    band = settings.VOCAB_SIZE // settings.NUM_CLASSES
    topical = y[:, None] * band + torch.randint(0, band, shape, generator=gen)
    common = torch.randint(0, settings.VOCAB_SIZE, shape, generator=gen)
    return torch.where(torch.rand(shape, generator=gen) < 0.3, topical, common), y


def main():
    torch.manual_seed(settings.SEED)
    gen = torch.Generator().manual_seed(settings.SEED)
    model = ReviewClassifier()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.LEARNING_RATE, weight_decay=settings.WEIGHT_DECAY
    )
    for step in range(1, settings.STEPS + 1):
        ids, y = make_batch(gen, settings.BATCH_SIZE)
        loss = F.cross_entropy(model(ids), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % settings.LOG_EVERY == 0:
            print(f"step {step}: loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        ids, y = make_batch(gen, 64)
        print(f"held-out acc {(model(ids).argmax(-1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
