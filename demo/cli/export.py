"""``python -m demo export RUN.json [--out PAGE.html | DIR]``: one saved race as a self-contained
HTML page that replays it (the page itself: demo/runs/export.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from demo.errors import DemoError
from demo.runs.export import export_html, run_for_export, write_page
from demo.runs.store import run_stem


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` sub-command and its options to ``sub``; it runs ``cmd_export``."""
    p = sub.add_parser("export", help="write one saved race as a self-contained HTML page that replays it")
    p.add_argument("run", type=Path, metavar="RUN.json", help="a saved race (runs/*.json)")
    p.add_argument("--out", type=Path,
                   help="the page to write, or a folder for it (default: RUN's name with .html, here)")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Run ``python -m demo export``: write a saved race as a self-contained HTML page that replays it.

    Returns 0 when the page is written, 2 (with the error on stderr) when the run cannot be read or exported."""
    try:
        result = run_for_export(args.run)
        out: Path = args.out if args.out is not None else Path(args.run.stem + ".html")
        if out.is_dir():
            out = out / f"{run_stem(result)}.html"
        write_page(out, export_html(result))
    except DemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB): opens offline in any browser and replays the race")
    return 0
