"""A race frame's panes: each side's or arm's tiles, status and text, keyed and titled."""

from __future__ import annotations

from pydantic import BaseModel

from demo.fmt import NA, esc
from demo.results import (
    RaceResult,
    RaceSnapshot,
    Side,
    SideSnapshot,
)
from demo.view._headline import arm_speedup_html, spec_pane_title
from demo.view._text import text_html
from demo.view._tiles import side_status_html, side_tiles, tiles_html

# ---------------------------------------------------------------- race frame

class PaneView(BaseModel):
    """Everything one pane shows for one snapshot."""

    status_html: str
    tiles_html: str
    text_html: str
    headline_html: str | None = None  # an arm's own headline, in a race of several arms


def pane_key(index: int, name: str) -> str:
    """An arm's pane key (its element ids: ``sd-pane-<key>``): the first arm is "speculative", as
    with one arm; another is its name ("arm-speculative" for a later arm of that name)."""
    if index == 0:
        return "speculative"
    return f"arm-{name}" if name in ("speculative", "baseline") else name


def arm_title(name: str, label: str | None, method: str | None, k: int | None = None) -> str:
    """An arm's pane title in a race of several: 'eagle3 (EAGLE3, k=3)'; what is unknown reads n/a."""
    parts = [method or NA] + ([f"k={k}"] if k is not None else [])
    return f"{label or name} ({', '.join(parts)})"


def saved_pane_titles(result: RaceResult) -> dict[str, str]:
    """Each pane's title (plain text) for a saved race, by pane key (pane_key), in the race's order.

    'Baseline'; then 'Speculative (ngram, k=4)' in a race of one arm, or 'eagle3 (EAGLE3, k=3)'
    for each arm of several: the words the live page uses, from what the run saved. Replay and the
    export take their titles from here.
    """
    arms = list(result.arms.values())
    out = {"baseline": "Baseline"}
    for i, a in enumerate(arms):
        k = a.side.spec.num_spec_tokens if a.side.spec is not None else None
        one = len(arms) == 1
        out[pane_key(i, a.name)] = spec_pane_title(a.method, k) if one else arm_title(a.name, a.label, a.method, k)
    return out


def arm_pane_view(name: str, snapshot: RaceSnapshot) -> PaneView:
    """Everything an arm's pane shows for one snapshot in a race of several arms: its status,
    tiles and text as the speculative pane's, and its own headline against the baseline."""
    arm = snapshot.arms[name]
    result = snapshot.result.arms.get(name) if snapshot.result is not None else None
    side_result = result.side if result is not None else None
    return PaneView(
        status_html=side_status_html("speculative", arm.side, who=arm.label or name),
        tiles_html=tiles_html("speculative", side_tiles(arm.side, side_result, True)),
        text_html=text_html("speculative", arm.side, shade=True),
        headline_html=arm_speedup_html(name, arm, result, running=True),
    )


def arm_left_out_view(name: str, users: int) -> PaneView:
    """An arm's pane while an N-user race runs (a race of several arms): the load engine races the
    first arm only, and the pane says so instead of keeping the last race's figures."""
    note = f"not in this race: {users} users race the first arm only (set Users to 1 to race every arm)"
    return PaneView(
        status_html=f'<div class="sd-side-status sd-status-left-out" data-side="speculative" data-arm="{esc(name)}" '
                    f'title="{esc(note)}">{esc(note)}</div>',
        tiles_html="",
        text_html=(f'<div class="sd-idle" data-side="speculative"><div class="sd-text-body sd-placeholder">'
                   f"{esc(note)}</div></div>"),
        headline_html=(f'<div class="sd-speedup sd-arm-speedup" data-arm="{esc(name)}" data-state="na">'
                       f'<div class="sd-speedup-value sd-na">{esc(NA)}</div>'
                       f'<div class="sd-speedup-label">{esc(f"not raced with {users} users")}</div></div>'),
    )


def pane_view(side: Side, snapshot: RaceSnapshot) -> PaneView:
    """Everything a side's pane shows for one snapshot: its status, tiles and text."""
    snap: SideSnapshot = getattr(snapshot, side)
    result = getattr(snapshot.result, side) if snapshot.result is not None else None
    speculative = side == "speculative"
    return PaneView(
        status_html=side_status_html(side, snap),
        tiles_html=tiles_html(side, side_tiles(snap, result, speculative)),
        text_html=text_html(side, snap, shade=True),
    )
