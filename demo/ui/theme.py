"""Look of the page: a dark, high-contrast theme with large figures, for a projector."""

from __future__ import annotations

import gradio as gr

from demo import palette
from demo.assets import stylesheet


def make_theme() -> gr.themes.Base:
    """The page's Gradio theme: amber on slate, large text, tight spacing, system fonts (nothing downloaded)."""
    return gr.themes.Base(
        primary_hue=gr.themes.colors.amber,
        neutral_hue=gr.themes.colors.slate,
        text_size=gr.themes.sizes.text_lg,
        spacing_size=gr.themes.sizes.spacing_sm,
        radius_size=gr.themes.sizes.radius_sm,
        font=[gr.themes.Font(f) for f in ("ui-sans-serif", "system-ui", "sans-serif")],  # offline: no web fonts
        font_mono=[gr.themes.Font(f) for f in ("ui-monospace", "DejaVu Sans Mono", "monospace")],
    ).set(
        layout_gap="6px",
        block_padding="4px 8px",
        body_background_fill_dark=palette.BG,
        block_background_fill_dark=palette.SURFACE,
        body_text_color_dark=palette.TEXT,
        block_label_text_color_dark=palette.TEXT_DIM,
        border_color_primary_dark=palette.BORDER,
        button_primary_background_fill_dark=palette.ACCENT,
        button_primary_text_color_dark=palette.BG,
        button_primary_background_fill_hover_dark=palette.ACCENT_HOVER,
    )


# The page's stylesheet (demo/static/): the palette, the page, the burst shading.
CSS = stylesheet("page.css", "burst.css", "load.css", "canary.css")
