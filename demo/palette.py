"""The palette for Python: the colours of demo/static/palette.css (the one place they are
written, as CSS custom properties ``--sd-NAME``), for what needs a colour value rather than a
``var(--sd-NAME)``: the Gradio theme and the Plotly figures.
"""

from __future__ import annotations

import re

from demo.assets import static_text

_VARIABLE = re.compile(r"--sd-([a-z0-9-]+)\s*:\s*(#[0-9a-fA-F]{3,8})\s*;")

PALETTE: dict[str, str] = dict(_VARIABLE.findall(static_text("palette.css")))


def color(name: str) -> str:
    """The colour ``--sd-NAME`` of palette.css (KeyError for a name it does not define)."""
    return PALETTE[name]


def rgba(hex_color: str, alpha: float) -> str:
    """``#rrggbb`` with an opacity, as CSS/Plotly ``rgba(r,g,b,a)``."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


BG = color("bg")
SURFACE = color("surface")
BORDER = color("border")
TEXT = color("text")
TEXT_DIM = color("text-dim")
ACCENT = color("accent")
ACCENT_HOVER = color("accent-hover")
ALERT = color("alert")
GREEN = color("green")
BLUE = color("blue")
VIOLET = color("violet")
BASELINE = color("baseline")
GRID = color("grid")
AXIS = color("axis")
# One colour per arm (speculative server), in the arms' order: the first keeps the speculative
# colour; the page's panes (page.css: .sd-arm-2, .sd-arm-3), the race chart and the load curves.
ARM_COLORS: tuple[str, ...] = (ACCENT, GREEN, VIOLET)


def arm_color(index: int) -> str:
    """The colour of the arm at ``index`` (0: the first arm), wrapping round past the last."""
    return ARM_COLORS[index % len(ARM_COLORS)]
