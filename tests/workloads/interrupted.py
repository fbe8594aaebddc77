"""A workload interrupted by Ctrl-C (KeyboardInterrupt) mid-recording."""

import torch


def setup():
    return (torch.ones(4),)


def main(x):
    _ = x + 1  # some work before the interrupt
    raise KeyboardInterrupt
