import sys

from magneton.cli import main

sys.exit(main())
