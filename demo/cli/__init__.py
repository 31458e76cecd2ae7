"""The command line, ``python -m demo COMMAND``: one module per command, each holding its parser
and its handler (demo/cli/<command>.py); what they share is demo/cli/args.py. The library modules
hold no argparse.

``main`` imports the command modules when it runs, not when this package is imported: importing
demo.cli.args (for UsageError, the endpoint flags) loads no command.
"""

from __future__ import annotations

import argparse
import sys

from demo.client import settle_heap


def main(argv: list[str] | None = None) -> int:
    """``python -m demo COMMAND`` (race, export, sweep, load, whatif, check, schedule...); return the exit code."""
    from demo.cli import export, guardrails, load, race, schedule, sweep, whatif
    from demo.cli.args import UsageError

    parser = argparse.ArgumentParser(prog="python -m demo", description="Speculative decoding demo")
    sub = parser.add_subparsers(dest="command", required=True)
    race.add_race_parser(sub)
    export.add_export_parser(sub)
    sweep.add_sweep_parser(sub)
    load.add_load_parser(sub)
    whatif.add_whatif_parser(sub)
    guardrails.add_guard_parsers(sub)
    schedule.add_schedule_parser(sub)
    args = parser.parse_args(argv)
    settle_heap()  # no collector pause over the imports inside a measured stream
    try:
        return args.func(args)
    except UsageError as e:
        parser.exit(2, f"error: {e}\n")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
