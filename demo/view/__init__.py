"""Pure formatting: snapshots and results in, strings and escaped HTML out.

The page shows exactly what the measurement core computed (demo/measure.py, demo/race.py);
this package only rounds numbers for display and builds markup. No Gradio here, so every
function is unit-tested on its own. Model output and preset text are untrusted: everything
that did not come from this package goes through ``esc`` (demo/fmt.py) before it lands in HTML. Each
shown figure also carries its exact value in ``data-value`` so tests can compare the page
with the saved RaceResult without rounding.

The modules behind it are private, one part of the page each: ``_tiles``, ``_text``, ``_headline``,
``_history``, ``_panes``, ``_servers`` (``_common``: the words they share).
"""

from __future__ import annotations

from demo.view._common import (
    ORDER_LABELS,
    ORDER_NOTES,
    PENDING,
    na_label,
)
from demo.view._headline import (
    MAX_STOP_SHOWN_CHARS,
    OVER_BOUND_HEAD,
    arm_speedup_html,
    cpu_arms_order_note,
    identical_badge_html,
    loop_note_html,
    order_html,
    over_bound_html,
    pane_title_html,
    reference_speedup_html,
    run_status_html,
    sampling_note,
    sampling_text,
    session_badge_html,
    session_speedup_html,
    session_status_text,
    spec_pane_title,
    spec_title_note,
    speedup_class,
    speedup_html,
    turns_strip_html,
    users_speedup_html,
)
from demo.view._history import (
    HISTORY_HEADERS,
    HistoryRow,
    history_csv,
    history_row,
    history_table,
    users_history_row,
)
from demo.view._panes import (
    PaneView,
    arm_left_out_view,
    arm_pane_view,
    arm_title,
    pane_key,
    pane_view,
    saved_pane_titles,
)
from demo.view._servers import (
    recording_banner_html,
    server_banner_html,
    server_panel_html,
)
from demo.view._text import (
    burst_class,
    burst_legend_html,
    text_html,
    tool_calls_html,
)
from demo.view._tiles import (
    STEP_PENDING,
    Tile,
    TileKey,
    side_status_html,
    side_tiles,
    tiles_html,
    users_step_html,
    users_strip_html,
    users_tiles,
    users_tiles_html,
)

__all__ = [
    "HISTORY_HEADERS",
    "HistoryRow",
    "MAX_STOP_SHOWN_CHARS",
    "ORDER_LABELS",
    "ORDER_NOTES",
    "OVER_BOUND_HEAD",
    "PENDING",
    "PaneView",
    "STEP_PENDING",
    "Tile",
    "TileKey",
    "arm_left_out_view",
    "arm_pane_view",
    "arm_speedup_html",
    "arm_title",
    "burst_class",
    "burst_legend_html",
    "cpu_arms_order_note",
    "history_csv",
    "history_row",
    "history_table",
    "identical_badge_html",
    "loop_note_html",
    "na_label",
    "order_html",
    "over_bound_html",
    "pane_key",
    "pane_title_html",
    "pane_view",
    "recording_banner_html",
    "reference_speedup_html",
    "run_status_html",
    "sampling_note",
    "sampling_text",
    "saved_pane_titles",
    "server_banner_html",
    "server_panel_html",
    "session_badge_html",
    "session_speedup_html",
    "session_status_text",
    "side_status_html",
    "side_tiles",
    "spec_pane_title",
    "spec_title_note",
    "speedup_class",
    "speedup_html",
    "text_html",
    "tiles_html",
    "tool_calls_html",
    "turns_strip_html",
    "users_history_row",
    "users_speedup_html",
    "users_step_html",
    "users_strip_html",
    "users_tiles",
    "users_tiles_html",
]
