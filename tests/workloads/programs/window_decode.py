"""A program that marks blocks with magneton.window(): an encoder runs outside every
window, each decode step inside `decode`, with a nested `inner` block."""

import argparse

import torch

import magneton


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=3, help="decode steps")
    p.add_argument("--width", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    encoder = torch.nn.Conv1d(4, 4, 3)
    decoder = torch.nn.Linear(args.width, args.width)
    with torch.no_grad():
        h = encoder(torch.randn(2, 4, args.width + 2))  # outside every window
        for _ in range(args.n):
            with magneton.window("decode"):
                with magneton.window("inner"):
                    h = torch.tanh(decoder(h))
                h = h * 0.5
    print("decoded", tuple(h.shape))


if __name__ == "__main__":
    main()
