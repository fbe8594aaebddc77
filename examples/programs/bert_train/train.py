"""Fine-tune a small BERT sequence classifier on synthetic data.

An ordinary argparse training script: AdamW, loss logged every few steps, a held-out
evaluation and a checkpoint every N steps. The model is built from a config (random
weights, nothing is downloaded) and dropout is off, so two runs with the same seed compute
the same values.

`--grad-checkpointing` turns on activation (gradient) checkpointing: every layer's forward
is recomputed during backward. It saves memory but costs an extra forward pass per step,
which is pure waste when the activations fit in memory anyway.
source: stas00/ml-engineering#64 (gradient checkpointing slows training at a given batch size: one extra forward)
"""

import argparse
import os

import torch
from transformers import BertConfig, BertForSequenceClassification


def parse_args():
    p = argparse.ArgumentParser(description="Train a BERT classifier on synthetic data")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--num-labels", type=int, default=4)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=15)
    p.add_argument("--out", default="checkpoints/bert")
    p.add_argument(
        "--grad-checkpointing",
        action="store_true",
        help="recompute activations in backward to save memory",
    )
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def make_batch(gen, args, vocab_size):
    ids = torch.randint(1, vocab_size, (args.batch_size, args.seq_len), generator=gen)
    # the label depends on the tokens so there is something to learn
    labels = ids[:, :8].sum(dim=1) % args.num_labels
    return ids, labels


@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    total, correct, loss = 0, 0, 0.0
    for ids, labels in batches:
        out = model(input_ids=ids, labels=labels)
        loss += out.loss.item() * len(labels)
        correct += (out.logits.argmax(-1) == labels).sum().item()
        total += len(labels)
    model.train()
    return loss / total, correct / total


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    config = BertConfig(
        vocab_size=8000,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        intermediate_size=4 * args.hidden,
        max_position_embeddings=args.seq_len,
        num_labels=args.num_labels,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForSequenceClassification(config)
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    train_gen = torch.Generator().manual_seed(args.seed)
    eval_gen = torch.Generator().manual_seed(args.seed + 1)
    eval_batches = [make_batch(eval_gen, args, config.vocab_size) for _ in range(2)]

    for step in range(1, args.steps + 1):
        ids, labels = make_batch(train_gen, args, config.vocab_size)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}")
        if step % args.eval_every == 0:
            eval_loss, acc = evaluate(model, eval_batches)
            print(f"step {step}: eval loss {eval_loss:.4f} acc {acc:.3f}")
        if step % args.save_every == 0:
            path = os.path.join(args.out, f"step-{step}")
            model.save_pretrained(path)
            print(f"saved {path}")


if __name__ == "__main__":
    main()
