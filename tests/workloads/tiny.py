"""A small workload (a Linear and a ReLU) for fault tests that need a real, quick run."""

import torch


def setup():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 8), torch.ones(2, 8)


def main(model, x):
    return model(x).relu().sum()
