"""``python -m harness.standin``: harness/standin/_cli.py."""

from harness.standin._cli import main

main()
