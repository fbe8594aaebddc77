"""A workload whose setup builds a thread pool that the entry's matmuls run on."""

from concurrent.futures import ThreadPoolExecutor

import torch


def setup():
    torch.manual_seed(0)
    pool = ThreadPoolExecutor(2)
    pool.submit(lambda: None).result()  # its threads exist before the entry runs
    return torch.randn(16, 16), pool


def main(x, pool):
    products = list(pool.map(lambda _: x @ x, range(3)))
    return (products[0] + 1).relu().sum()
