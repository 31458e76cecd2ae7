"""Start the stage page: `python app.py` (settings from SPECDEMO_* variables or .env)."""

from __future__ import annotations

import asyncio
import sys

from pydantic import ValidationError

from demo.server_info import probe_servers, terminal_report
from demo.settings import Settings
from demo.ui.app import build_app, launch_kwargs

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def main() -> int:
    try:
        settings = Settings()
    except ValidationError as e:
        err = e.errors()[0]
        name = "SPECDEMO_" + "_".join(str(p) for p in err["loc"]).upper()
        print(f"error: setting {name} is invalid: {err['msg']} (fix the variable or .env)", file=sys.stderr)
        return 2
    print("Speculative decoding demo: checking the servers…", flush=True)
    infos = asyncio.run(probe_servers(settings))
    print(terminal_report(infos), flush=True)
    exposed = settings.ui_share or settings.ui_host not in LOCAL_HOSTS
    if exposed and settings.ui_auth is None:
        print(
            "\n!!! WARNING: the page is reachable beyond this machine "
            f"({'public share link' if settings.ui_share else 'host ' + settings.ui_host}) WITHOUT a login.\n"
            "!!! Anyone who reaches it can run prompts on your servers. "
            "Set SPECDEMO_UI_AUTH=user:password, or bind to 127.0.0.1.\n",
            file=sys.stderr, flush=True,
        )
    try:
        kwargs = launch_kwargs(settings)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    build_app(settings).launch(**kwargs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
