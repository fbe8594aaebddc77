"""A workload that pauses `magneton record` inside its final DB write, for signal tests.

Importing it wraps `ProfileDB._load_tables` (the bulk load of the new run): after the node
tables are in, it writes the file named by `MAGNETON_TEST_READY` and waits until the file
named by `MAGNETON_TEST_GO` exists, so a test can deliver a real signal (or kill -9) at
exactly that phase. The workload itself is a small Linear + ReLU.
"""

import os
import time
from pathlib import Path

import torch

from magneton.graphdb import db as _db

_real_load = _db.ProfileDB._load_tables


def _paused_load(self, tables):
    tables = list(tables)
    nodes = [t for t in tables if isinstance(t[0], _db.S.NodeTable)]
    rels = [t for t in tables if not isinstance(t[0], _db.S.NodeTable)]
    _real_load(self, nodes)
    Path(os.environ["MAGNETON_TEST_READY"]).write_text("writing")
    go = Path(os.environ["MAGNETON_TEST_GO"])
    while not go.exists():
        time.sleep(0.05)
    _real_load(self, rels)


_db.ProfileDB._load_tables = _paused_load


def setup():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 8), torch.ones(2, 8)


def main(model, x):
    return model(x).relu().sum()
