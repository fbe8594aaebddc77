"""A workload interrupted by Ctrl-C (KeyboardInterrupt) mid-recording."""

import torch


def setup():
    return (torch.ones(4),)


def main(x):
    y = x + 1
    raise KeyboardInterrupt
