"""A Plotly figure as a PNG (load.png, the load sweep's slide), through Plotly's own exporter.

Kaleido (v1, requirements.txt) drives a Chrome or Chromium already on the machine: Debian's
``/usr/bin/chromium`` (``bash scripts/install_browser.sh``), or the one ``BROWSER_PATH`` names.
Nothing is fetched: the page kaleido renders in loads plotly.js from the installed plotly
package, and MathJax (which it would take from a CDN) is turned off. Without kaleido or a browser
the PNG is unavailable, said in one line (``PngUnavailable``); everything else is still written.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from demo.errors import DemoError

# Chromium's start and one figure take 2-5 s on a busy 2-core machine; a hung browser is given up.
RENDER_TIMEOUT_S = 60.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PngUnavailable(DemoError):
    """The PNG could not be made here (no kaleido, no browser, the browser failed): one line why."""


def figure_png(fig: go.Figure, width_px: int, height_px: int) -> bytes:
    """The figure rendered at ``width_px`` x ``height_px`` (scale 1), as PNG bytes. Blocking
    (seconds: a browser starts); call it from a thread in an event loop."""
    try:
        import kaleido
        from kaleido.errors import ChromeNotFoundError
    except ImportError:
        raise PngUnavailable("no PNG: Plotly's exporter (kaleido) is not installed: "
                             "pip install -r requirements.txt") from None
    opts: dict[str, Any] = dict(format="png", width=width_px, height=height_px, scale=1)
    try:
        data = kaleido.calc_fig_sync(fig.to_dict(), opts=opts,
                                     kopts=dict(mathjax=False, timeout=RENDER_TIMEOUT_S))
    except ChromeNotFoundError:
        raise PngUnavailable("no PNG: no Chrome or Chromium found for Plotly's exporter: install one "
                             "(bash scripts/install_browser.sh) or set BROWSER_PATH") from None
    except Exception as e:  # the browser failed to start, crashed or timed out
        first = (str(e).splitlines() or [""])[0][:200]
        raise PngUnavailable(f"no PNG: Plotly's exporter failed ({type(e).__name__}: {first})") from e
    if not isinstance(data, bytes) or not data.startswith(PNG_SIGNATURE):
        raise PngUnavailable("no PNG: Plotly's exporter returned something that is not a PNG")
    return data


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header; ValueError when it is not a PNG."""
    if not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
