"""Train a GPT-2 language model whose whole setup comes from a YAML config file.

`python train.py --config cfg_sdpa.yaml`: model size, data shape, optimiser and logging
cadence are read with `yaml.safe_load`; the loss is printed every `log_every` steps, a
validation loss every `eval_every`, a checkpoint saved every `save_every`. The model is
built from a config (random weights, nothing downloaded), dropout is off.

`model.attn_implementation` selects the attention code: `eager` is the explicit
matmul-softmax-matmul with a materialised (seq x seq) score matrix per head, `sdpa` calls
`torch.nn.functional.scaled_dot_product_attention` (the fused flash kernel on CPU).
source: huggingface/transformers#31031 (SDPA vs eager attention: training speedup and memory saving)
"""

import argparse
import os

import torch
import torch.nn.functional as F
import yaml
from transformers import GPT2Config, GPT2LMHeadModel


def load_config(path):
    with open(path) as f:
        return yaml.safe_load(f)


def build_model(mcfg):
    config = GPT2Config(
        vocab_size=mcfg["vocab_size"],
        n_positions=mcfg["n_positions"],
        n_embd=mcfg["n_embd"],
        n_layer=mcfg["n_layer"],
        n_head=mcfg["n_head"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel._from_config(config, attn_implementation=mcfg["attn_implementation"])


def lm_loss(model, ids):
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def main():
    parser = argparse.ArgumentParser(description="GPT-2 training from a YAML config")
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
    val_ids = torch.randint(0, mcfg["vocab_size"], shape, generator=gen)

    for step in range(1, tcfg["steps"] + 1):
        ids = torch.randint(0, mcfg["vocab_size"], shape, generator=gen)
        loss = lm_loss(model, ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % tcfg["log_every"] == 0:
            print(f"step {step}: loss {loss.item():.4f}")
        if step % tcfg["eval_every"] == 0:
            model.eval()
            with torch.no_grad():
                print(f"step {step}: val loss {lm_loss(model, val_ids).item():.4f}")
            model.train()
        if step % tcfg["save_every"] == 0:
            path = os.path.join(tcfg["out_dir"], f"step-{step}")
            model.save_pretrained(path)
            print(f"saved {path}")


if __name__ == "__main__":
    main()
