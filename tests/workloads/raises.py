"""A workload that fails inside its entry, after doing some work."""

import torch


def setup():
    return (torch.ones(4),)


def main(x):
    y = x * 2
    raise ValueError(f"boom after computing {y.sum().item()}")
