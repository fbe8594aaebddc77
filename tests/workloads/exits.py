"""A workload that leaves the interpreter from its entry: `MAGNETON_TEST_EXIT` says how
(`sys` → sys.exit(0), `os` → os._exit(3), `setup` → sys.exit(0) in setup)."""

import os
import sys

import torch


def setup():
    if os.environ.get("MAGNETON_TEST_EXIT") == "setup":
        sys.exit(0)
    return (torch.ones(4),)


def main(x):
    _ = x * 2
    if os.environ.get("MAGNETON_TEST_EXIT") == "os":
        os._exit(3)
    sys.exit(0)
