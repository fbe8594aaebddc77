import sys

from magneton.cli import console

sys.exit(console())
