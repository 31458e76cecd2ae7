"""``python -m demo``: the command line (demo/cli.py)."""

import sys

from demo.cli import main

sys.exit(main())
