"""Train a hashed-bigram text classifier whose settings come from a TOML file.

`python train.py --config fused.toml`: data shape, model size and the optimiser are read
with `tomllib`; accuracy is printed every `log_every` steps and a held-out accuracy at
the end. `[optim] fused` is passed to `torch.optim.AdamW(fused=...)`: `false` steps every
parameter with the for-loop implementation (a pass over the 40000-row embedding table
per term of the update), `true` with the fused CPU kernel (one pass).
"""

import argparse
import tomllib

import torch
import torch.nn.functional as F


def load(path):
    with open(path, "rb") as f:
        return tomllib.load(f)


def batch(gen, data, buckets):
    tokens = torch.randint(0, 50000, (data["batch_size"], data["doc_len"]), generator=gen)
    bigrams = (tokens[:, :-1] * 31 + tokens[:, 1:]) % buckets
    return bigrams, tokens[:, 0] % 8


def main():
    ap = argparse.ArgumentParser(description="hashed-bigram classifier")
    ap.add_argument("--config", required=True)
    cfg = load(ap.parse_args().config)
    data, model_cfg, optim = cfg["data"], cfg["model"], cfg["optim"]
    torch.manual_seed(cfg["seed"])
    emb = torch.nn.EmbeddingBag(model_cfg["buckets"], model_cfg["dim"], mode="mean")
    head = torch.nn.Linear(model_cfg["dim"], 8)
    params = [*emb.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=optim["lr"], fused=optim["fused"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    for step in range(1, cfg["steps"] + 1):
        x, y = batch(gen, data, model_cfg["buckets"])
        logits = head(emb(x))
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % cfg["log_every"] == 0:
            acc = (logits.argmax(-1) == y).float().mean()
            print(f"step {step}: loss {loss.item():.4f} acc {acc.item():.3f}")
    x, y = batch(gen, data, model_cfg["buckets"])
    with torch.no_grad():
        print(f"held-out accuracy {(head(emb(x)).argmax(-1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
