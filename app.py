"""Start the stage page: `python app.py` (settings from SPECDEMO_* variables or .env)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from demo.client import settle_heap
from demo.fmt import validation_errors
from demo.server_info import probe_servers, terminal_report
from demo.settings import Settings
from demo.ui.app import build_app, exposure_warning, launch_kwargs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The stage page (settings: SPECDEMO_* variables or .env).")
    parser.add_argument("--booth", action="store_true",
                        help="booth mode: race a rotation of presets by itself while the page is open "
                             "(also SPECDEMO_BOOTH=true; docs/booth.md)")
    parser.add_argument("--preset", metavar="NAME",
                        help="the preset the Race tab opens on, e.g. agent_session (also SPECDEMO_UI_PRESET)")
    args = parser.parse_args(argv)
    # Warnings from everything; our own notes too (booth mode's one `booth-race {json}` line a turn).
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("demo").setLevel(logging.INFO)
    try:
        settings = Settings()
        if args.booth:
            settings.booth = True
        if args.preset:
            settings.ui_preset = args.preset
    except ValidationError as e:
        loc, msg = validation_errors(e)[0]
        name = "SPECDEMO_" + loc.replace(".", "_").upper()
        print(f"error: setting {name} is invalid: {msg} (fix the variable or .env)", file=sys.stderr)
        return 2
    print("Speculative decoding demo: checking the servers…", flush=True)
    infos = asyncio.run(probe_servers(settings))
    print(terminal_report(infos), flush=True)
    warning = exposure_warning(settings)
    if warning:
        print(f"\n{warning}\n", file=sys.stderr, flush=True)
    try:
        kwargs = launch_kwargs(settings)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if settings.booth:
        print("Booth mode: the page races a rotation of presets while a browser has it open.", flush=True)
    page = build_app(settings)
    settle_heap()  # no collector pause over the imports inside a measured stream
    page.launch(**kwargs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
