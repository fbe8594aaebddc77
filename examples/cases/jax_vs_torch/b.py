"""The magnitude spectrum of signal frames in PyTorch with `torch.fft.rfft`.

Pair: a.py does the same job in JAX with DFT matrices. Same seeded NumPy frames,
converted with `torch.from_numpy`. Expected: a (JAX) is wasteful.
"""

import numpy as np
import torch

FRAMES, N = 256, 512


def frames() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((FRAMES, N), dtype=np.float32)


def setup():
    return (torch.from_numpy(frames()),)


def main(x):
    return torch.fft.rfft(x, dim=-1).abs()
