"""Start the stage page: `python app.py` (settings from SPECDEMO_* variables or .env)."""

from __future__ import annotations

import asyncio
import sys

from pydantic import ValidationError

from demo.fmt import validation_errors
from demo.server_info import probe_servers, terminal_report
from demo.settings import Settings
from demo.ui.app import build_app, exposure_warning, launch_kwargs


def main() -> int:
    try:
        settings = Settings()
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
    build_app(settings).launch(**kwargs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
