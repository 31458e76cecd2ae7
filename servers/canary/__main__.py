"""``python -m servers.canary``: servers/canary/_cli.py."""

import sys

from servers.canary._cli import main

sys.exit(main())
