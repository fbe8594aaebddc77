"""A workload whose entry runs 4 matmuls in worker threads and a few ops itself."""

import threading

import torch


def setup():
    torch.manual_seed(0)
    return (torch.randn(16, 16),)


def main(x):
    out = [None] * 4

    def work(i):
        out[i] = x @ x

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (x + 1).relu().sum()
