"""python -m benchmarks.soak: the soak test of booth mode (benchmarks/soak/run.py)."""

import sys

from benchmarks.soak.run import main

sys.exit(main())
