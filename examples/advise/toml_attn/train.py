"""Masked-LM pre-training of a small BERT whose settings come from a TOML file.

`python train.py --config train.toml`: the file is read with `tomllib` into two
dataclasses (model and training settings); the model is built from a `BertConfig`
(random weights, nothing downloaded) with the file's `attn_implementation`. Tokens are a
synthetic Markov stream; 15% are masked; AdamW; the loss is logged every few steps and a
held-out loss is printed at the end.

`model.attn_implementation = "eager"` runs BERT's reference attention (QK^T, softmax,
@V, each kept for backward); `"sdpa"` calls `F.scaled_dot_product_attention`.
"""

import argparse
import tomllib
from dataclasses import dataclass

import torch
from transformers import BertConfig, BertForMaskedLM


@dataclass
class ModelSettings:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    attn_implementation: str = "sdpa"


@dataclass
class TrainSettings:
    batch_size: int
    seq_len: int
    steps: int
    lr: float
    mask_prob: float
    log_every: int


def load(path):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return ModelSettings(**doc["model"]), TrainSettings(**doc["train"])


def batch(gen, tcfg, vocab_size, mask_id):
    steps = torch.randint(1, 5, (tcfg.batch_size, tcfg.seq_len), generator=gen)
    ids = steps.cumsum(1) % (vocab_size - 1)
    labels = ids.clone()
    masked = torch.rand(ids.shape, generator=gen) < tcfg.mask_prob
    labels[~masked] = -100
    return ids.masked_fill(masked, mask_id), labels


def main():
    ap = argparse.ArgumentParser(description="BERT masked-LM pre-training")
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    mcfg, tcfg = load(args.config)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=mcfg.vocab_size,
        hidden_size=mcfg.hidden_size,
        num_hidden_layers=mcfg.num_hidden_layers,
        num_attention_heads=mcfg.num_attention_heads,
        intermediate_size=mcfg.intermediate_size,
        max_position_embeddings=mcfg.max_position_embeddings,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForMaskedLM._from_config(config, attn_implementation=mcfg.attn_implementation)
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr)
    gen = torch.Generator().manual_seed(0)
    mask_id = mcfg.vocab_size - 1
    model.train()
    for step in range(1, tcfg.steps + 1):
        ids, labels = batch(gen, tcfg, mcfg.vocab_size, mask_id)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % tcfg.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        ids, labels = batch(gen, tcfg, mcfg.vocab_size, mask_id)
        print(f"held-out loss {model(input_ids=ids, labels=labels).loss.item():.4f}")


if __name__ == "__main__":
    main()
