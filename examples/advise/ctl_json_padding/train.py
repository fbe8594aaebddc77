"""Fine-tune a small BERT sentence classifier; every setting comes from a JSON config.

`python train.py --config config.json`: the model shape, the data and the optimiser are
read with `json.load`. Sentences are variable-length token-id lists; the collate function
pads each batch, builds the attention mask and stacks the labels, as a tokenizer call
with `padding=...` does. The loss is printed every `train.log_every` steps, a held-out
accuracy at the end. The model is built from a `BertConfig` (random weights, nothing
downloaded), dropout is off.

`data.padding` is the tokenizer's padding strategy: `max_length` pads every batch to
`data.max_seq_length` (512) positions, `longest` pads only to the longest sentence of the
batch. Padded positions are masked out, so the logits are the same either way; with
`max_length` the encoder computes over hundreds of padding positions per sentence.
"""

import argparse
import json

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification


def load_config(path):
    with open(path) as f:
        return json.load(f)


def make_dataset(gen, n, dcfg, vocab_size, num_labels):
    """Sentences of varying length; the label is which quarter of the vocabulary dominates."""
    examples = []
    for _ in range(n):
        length = int(
            torch.randint(dcfg["min_len"], dcfg["max_len_in_data"] + 1, (1,), generator=gen)
        )
        label = int(torch.randint(0, num_labels, (1,), generator=gen))
        band = vocab_size // num_labels
        topical = torch.randint(label * band, (label + 1) * band, (length,), generator=gen)
        other = torch.randint(1, vocab_size, (length,), generator=gen)
        ids = torch.where(torch.rand(length, generator=gen) < 0.4, topical, other)
        examples.append((ids.tolist(), label))
    return examples


def collate(batch, padding, max_seq_length, pad_id=0):
    if padding == "max_length":
        width = max_seq_length
    elif padding == "longest":
        width = max(len(ids) for ids, _ in batch)
    else:
        raise ValueError(f"unknown padding strategy {padding!r}")
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (ids, _) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
    labels = torch.tensor([label for _, label in batch])
    return input_ids, attention_mask, labels


def main():
    parser = argparse.ArgumentParser(description="BERT classifier from a JSON config")
    parser.add_argument("--config", required=True, help="path to the JSON config")
    args = parser.parse_args()
    cfg = load_config(args.config)
    mcfg, dcfg, tcfg = cfg["model"], cfg["data"], cfg["train"]

    torch.manual_seed(cfg["seed"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    config = BertConfig(**mcfg, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=tcfg["lr"], weight_decay=tcfg["weight_decay"]
    )
    bs = dcfg["batch_size"]
    train = make_dataset(gen, tcfg["steps"] * bs, dcfg, mcfg["vocab_size"], mcfg["num_labels"])
    held_out = make_dataset(gen, 64, dcfg, mcfg["vocab_size"], mcfg["num_labels"])

    for step in range(1, tcfg["steps"] + 1):
        batch = train[(step - 1) * bs : step * bs]
        input_ids, attention_mask, labels = collate(batch, dcfg["padding"], dcfg["max_seq_length"])
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % tcfg["log_every"] == 0:
            print(f"step {step}: loss {loss.item():.4f}")

    model.eval()
    input_ids, attention_mask, labels = collate(held_out, dcfg["padding"], dcfg["max_seq_length"])
    with torch.no_grad():
        pred = model(input_ids=input_ids, attention_mask=attention_mask).logits.argmax(-1)
    print(f"held-out acc {(pred == labels).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
