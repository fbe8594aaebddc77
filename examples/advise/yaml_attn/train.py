"""Train a small Llama language model whose whole setup comes from a YAML config file.

`python train.py --config cfg.yaml`: model size, data shape, optimiser and logging cadence
are read with `yaml.safe_load`. The model is built from a `LlamaConfig` (random weights,
nothing downloaded); the loss is printed every `train.log_every` steps and a validation
loss at the end.

`model.attn_implementation` selects the attention code transformers runs: `eager` is the
explicit matmul-softmax-matmul with a materialised (seq x seq) score matrix per head, kept
for backward; `sdpa` calls `torch.nn.functional.scaled_dot_product_attention` (the fused
flash kernel on CPU).
"""

import argparse

import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM


def load_config(path):
    with open(path) as f:
        return yaml.safe_load(f)


def build_model(mcfg):
    mcfg = dict(mcfg)
    attn_implementation = mcfg.pop("attn_implementation", "sdpa")
    config = LlamaConfig(**mcfg, attention_dropout=0.0, tie_word_embeddings=False)
    return LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation)


def markov_tokens(gen, shape, vocab_size):
    """Synthetic text with structure: mostly small forward jumps through the vocabulary."""
    jumps = torch.randint(1, 6, shape, generator=gen)
    noise = torch.rand(shape, generator=gen) < 0.1
    random_tok = torch.randint(0, vocab_size, shape, generator=gen)
    return torch.where(noise, random_tok, jumps.cumsum(-1) % vocab_size)


def main():
    parser = argparse.ArgumentParser(description="Llama training from a YAML config")
    parser.add_argument("--config", required=True, help="path to the YAML config")
    args = parser.parse_args()
    cfg = load_config(args.config)
    mcfg, dcfg, tcfg = cfg["model"], cfg["data"], cfg["train"]

    torch.manual_seed(cfg["seed"])
    model = build_model(mcfg)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=tcfg["lr"], weight_decay=tcfg["weight_decay"]
    )
    gen = torch.Generator().manual_seed(cfg["seed"])
    shape = (dcfg["batch_size"], dcfg["seq_len"])

    for step in range(1, tcfg["steps"] + 1):
        ids = markov_tokens(gen, shape, mcfg["vocab_size"])
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % tcfg["log_every"] == 0:
            print(f"step {step}: loss {loss.item():.4f}")

    model.eval()
    val_ids = markov_tokens(gen, shape, mcfg["vocab_size"])
    with torch.no_grad():
        print(f"val loss {model(input_ids=val_ids, labels=val_ids).loss.item():.4f}")


if __name__ == "__main__":
    main()
