"""``python -m demo``: the command line (demo/cli/: a module per command)."""

import sys

from demo.cli import main

sys.exit(main())
