"""A workload that signals readiness and then runs until it is interrupted.

Its entry writes the file named by `MAGNETON_TEST_READY` once it is running, so a test
can send a real signal at a known phase without timing guesses.
"""

import os
import time
from pathlib import Path

import torch


def setup():
    return (torch.ones(64, 64),)


def main(x):
    ready = os.environ.get("MAGNETON_TEST_READY")
    if ready:
        Path(ready).write_text("running")
        while True:  # until the test's signal arrives
            x = (x @ x).clamp(-1, 1)
            time.sleep(0.01)
    return x.sum()
