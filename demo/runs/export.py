"""One race as a file: a self-contained HTML page that replays a saved run at its real timing.

``python -m demo export RUN.json --out race.html`` (demo/cli/export.py; :func:`export_file` for the
page's buttons) writes one HTML file for slides and follow-up emails. It holds:

- the run itself (the whole RaceResult) as JSON in a ``<script type="application/json">``
  block, escaped so that nothing in model output or prompts can close the block;
- the playback timeline, built here by feeding the saved ChunkEvents through the same
  SideMeter the live race uses (so a chunk's token count and its burst class are the page's);
- the final figures, rendered here by the page's own formatters (demo.view), shown at the end;
- a small inline player (no library, no network) that appends each chunk when its time comes,
  with the live token count and elapsed time per pane. It computes nothing else.

An N-user race (demo.load.engine.UsersRace) plays user 1's answers; its final figures are the step's:
the per-user speedup and the throughput ratio labelled "N users", and each side's step tiles.

A race of several arms (speculative servers) has a pane per arm after the baseline's, each with
its own text, tiles and acceptance, and ends on every arm's speedup (and acceptance, tokens per
step, efficiency, identical text) against the baseline. The panes' ids and titles are the live
page's (demo.view.pane_key, demo.view.saved_pane_titles); a run of one arm has the pair's two panes.

A strict Content-Security-Policy allows only this script and this stylesheet, by hash. Model
and prompt text reach the page only through ``textContent`` (or ``esc`` in the figures).
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from common.files import atomic_write
from demo import view
from demo.assets import static_text, stylesheet
from demo.errors import DemoError
from demo.load.engine import UsersRace
from demo.measure import SideMeter, efficiency
from demo.pages import macro, render
from demo.results import SIDES, RaceResult, RaceSnapshot, Side, SideResult, SideSnapshot
from demo.runs.store import Run, race_of, read_record, run_stem

# Refuse runs that would make a page too large to mail (and a saved run too large to read).
MAX_EXPORT_BYTES = 10_000_000


class ExportError(DemoError):
    """The export cannot be made: the message is one line saying what failed and what to do."""


class ExportTooLarge(ExportError):
    """The exported page would be over ``MAX_EXPORT_BYTES``: it is not written."""

    pass


# --------------------------------------------------------------------------- the data


def side_timeline(saved: SideResult, cancelled: bool = False) -> dict[str, Any]:
    """One pane's playback: chunks ``[t_s, tokens brought, running tokens, burst class, text]``
    (token counts None when the server sent no running usage), its end time and how it ended, and
    the answer's tool calls ``[name, arguments]`` with the time their last piece arrived."""
    meter = SideMeter(saved.side, saved.url, t0=0.0)
    chunks: list[list[Any]] = []
    for ev in saved.events:
        parts, before = len(meter.text_parts), meter.tokens
        meter.feed(ev)
        text = "".join(meter.text_parts[parts:])
        running = meter.tokens if meter.has_usage else None
        brought = None if running is None else running - before
        if not text and not brought:
            continue
        # As on the page (view.text_html): single-token chunks stay plain, larger ones are shaded.
        cls = view.burst_class(brought) if brought is not None and brought > 1 else ""
        chunks.append([ev.t_s, brought, running, cls, text])
    end_s = max((ev.t_s for ev in saved.events), default=0.0)
    # The answer's tool calls, shown whole (name, arguments) once their last piece has arrived.
    calls = [[c.name, c.arguments] for c in meter.tool_calls] or [[c.name, c.arguments] for c in saved.tool_calls]
    calls_s = max((ev.t_s for ev in saved.events if ev.tool_calls), default=0.0)
    if not saved.events and saved.text:
        # No timeline was saved: the answer is shown whole, and the status says why it did not stream.
        return {"chunks": [[0.0, None, saved.completion_tokens, "", saved.text]], "end_s": 0.0,
                "tool_calls": calls, "tool_calls_s": 0.0,
                "end_state": "done" if saved.complete else "error",
                "end_text": "no timeline was saved with this run: the answer is shown whole",
                "tokens_known": saved.completion_tokens is not None}
    if saved.complete:
        state, text = "done", "done"
    elif cancelled:
        state, text = "stopped", f"stopped: {saved.error or 'the race was stopped'}"
    elif saved.error:
        state, text = "error", f"{saved.side.capitalize()} failed: {saved.error}"
    else:
        state, text = "error", "the stream ended without finishing"
    return {"chunks": chunks, "end_s": end_s, "end_state": state, "end_text": text,
            "tool_calls": calls, "tool_calls_s": calls_s, "tokens_known": any(c[2] is not None for c in chunks)}


def prompt_lines(result: RaceResult) -> list[list[str]]:
    """The race's prompt as [role, text] rows: each chat message, else one ["prompt", text] row."""
    req = result.request
    if req.messages:
        return [[m.role, m.text] for m in req.messages]
    return [["prompt", req.prompt or ""]]


def several_arms(result: RaceResult) -> bool:
    """Whether ``result`` is drawn with a pane per arm (the exported page, the Replay tab), else as
    the pair's two panes."""
    return len(result.arms) > 1


def panes(result: RaceResult) -> list[tuple[str, SideResult]]:
    """The page's panes in order, (id, saved side): the baseline, the first arm ("speculative"),
    then every other arm, each by its pane key (demo.view.pane_key; names are slugs, so safe in an id)."""
    rest = [(view.pane_key(i, name), arm.side) for i, (name, arm) in enumerate(result.arms.items()) if i]
    return [(side, getattr(result, side)) for side in SIDES] + rest


def pane_arm(result: RaceResult, pane: str) -> str | None:
    """The arm a pane shows (None: the baseline's)."""
    if pane == "baseline":
        return None
    return next((name for i, name in enumerate(result.arms) if view.pane_key(i, name) == pane), None)


def arm_race(result: RaceResult, name: str) -> RaceResult:
    """The race as a race of one arm, ``name``: its side in ``speculative`` and its figures beside it
    (so the page's own formatters show one arm's headline as they show a one-arm race's)."""
    return result.model_copy(update={"arms": {name: result.arms[name]}})


def player_data(result: RaceResult) -> dict[str, Any]:
    """The player's data: the prompt, the panes in order, each pane's timeline and the longest end time (s)."""
    sides = {pane: side_timeline(saved, result.cancelled) for pane, saved in panes(result)}
    return {"prompt": prompt_lines(result), "panes": list(sides), "sides": sides,
            "duration_s": max(s["end_s"] for s in sides.values())}


def embed_json(data: object) -> str:
    """JSON safe inside a <script> block: no '<', '>' or '&' outside escapes, so no '</script>'."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, sub in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, sub)
    return text


def csp_hash(source: str) -> str:
    """The CSP source for an inline script or style: its SHA-256 as ``'sha256-BASE64'``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


# --------------------------------------------------------------------------- the figures


def _when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def efficiency_html(result: RaceResult) -> str:
    """The efficiency tile as escaped HTML: decode speedup ÷ tokens per step, or "n/a" with the reason."""
    spec = result.speculative.spec
    length = spec.mean_acceptance_length if spec else None
    value = efficiency(result.speedup, length)
    why = None
    if value is None and result.speedup is None:
        why = result.na_reasons.get("speedup") or "the speedup is unknown"
    elif value is None:
        why = (spec.na_reasons.get("mean_acceptance_length") if spec else None) or "tokens per step unknown"
    return str(_fragment("efficiency")(value, view.na_label(why)))


def _side_of(pane: str) -> Side:
    return "baseline" if pane == "baseline" else "speculative"


def _saved(result: RaceResult, pane: str) -> SideResult:
    return dict(panes(result))[pane]


def final_tiles_html(result: RaceResult, pane: str) -> str:
    """A pane's final tiles as escaped HTML, as the race's page showed them when it ended."""
    saved, side = _saved(result, pane), _side_of(pane)
    snap = SideSnapshot(side=side, status="done" if saved.complete else "error")
    return view.tiles_html(side, view.side_tiles(snap, saved, side == "speculative"))


# --------------------------------------------------------------------------- the page

# The page's stylesheet and player (demo/static/export.css, burst.css, export.js), inlined in
# every exported page. Constant text (their hashes are in the CSP): the data comes only from
# #race-data.
PAGE_CSS = stylesheet("export.css", "burst.css")
PLAYER_JS = static_text("export.js")


def content_security_policy() -> str:
    """The exported page's Content-Security-Policy: nothing loads; only the player script and stylesheet run."""
    return (f"default-src 'none'; script-src {csp_hash(PLAYER_JS)}; style-src {csp_hash(PAGE_CSS)}; "
            "base-uri 'none'; form-action 'none'")


def _pane(result: RaceResult, pane: str, users: UsersRace | None = None) -> dict[str, Any]:
    """A pane as the page template draws it: its id (a pane key: a slug), its arm and, from demo.view's
    builders (each escapes every value it shows), its title, final tiles and an N-user race's step tiles."""
    return {"id": pane, "arm": pane_arm(result, pane) if several_arms(result) else None,
            "title": Markup(view.pane_title_html(view.saved_pane_titles(result)[pane])),
            "final_tiles": Markup(final_tiles_html(result, pane)),
            "step_tiles": Markup(_step_tiles(users, result, pane))}


def arm_users(users: UsersRace, name: str) -> UsersRace:
    """An N-user race as a race of one arm, ``name``: its step figures in the step's speculative ones."""
    return users.model_copy(update={"step": users.step.arm_view(name)})


def _step_tiles(users: UsersRace | None, result: RaceResult, pane: str) -> str:
    """An N-user race's step figures for one pane, under user 1's tiles; nothing for one user."""
    if users is None:
        return ""
    arm = pane_arm(result, pane)
    if arm is None or not several_arms(result) or arm not in users.step.arms:
        return view.users_step_html(_side_of(pane), users)
    return view.users_step_html("speculative", arm_users(users, arm))


def _headline(result: RaceResult, users: UsersRace | None) -> str:
    if users is not None and len(users.step.arms) > 1:
        return "".join(_arm_step_headline(result, users, name) for name in users.step.arms) + _recorded_note(
            result, users)
    if several_arms(result):
        return "".join(_arm_headline(result, name) for name in result.arms)
    if users is not None:  # the step's per-user speedup and throughput ratio, not user 1's
        return view.users_speedup_html(users.users, users.step, running=False) + view.identical_badge_html(result)
    return _one_headline(result)


def _one_headline(result: RaceResult) -> str:
    snapshot = RaceSnapshot(order=result.order, baseline=SideSnapshot(side="baseline"),
                            speculative=SideSnapshot(side="speculative"), result=result)
    return view.speedup_html(snapshot) + view.identical_badge_html(result) + efficiency_html(result)


ARM_TILES = ("acceptance_rate", "mean_acceptance_length")  # under each arm's speedup, with several arms


def _fragment(name: str) -> Callable[..., Markup]:
    """One of the page's own fragments (templates/_export.html.j2): every value it shows autoescaped."""
    return macro("_export.html.j2", name)


def _arm_block(name: str, label: str | None, figures: str) -> str:
    # figures: demo.view's fragments (and efficiency_html's), each escaping every value it shows.
    return str(_fragment("arm_block")(name, label, Markup(figures)))


def _arm_headline(result: RaceResult, name: str) -> str:
    """One arm's figures against the baseline, as a one-arm race shows them, under the arm's name;
    acceptance and tokens per step from its saved metrics."""
    arm = result.arms[name]
    snap = SideSnapshot(side="speculative", status="done" if arm.side.complete else "error")
    acc = view.tiles_html("speculative", [t for t in view.side_tiles(snap, arm.side, True) if t.key in ARM_TILES])
    return _arm_block(name, arm.label, _one_headline(arm_race(result, name)) + acc)


def _recorded(result: RaceResult, users: UsersRace) -> dict[str, str]:
    """The step's arms whose user 1 the recording holds -> that arm's name in the race (the race
    keeps the first arms, in order; a race of one arm names it as the run was saved)."""
    return dict(zip(users.step.arms, result.arms, strict=False))


def _arm_step_headline(result: RaceResult, users: UsersRace, name: str) -> str:
    """One arm of an N-user race: the step's per-user speedup and throughput ratio for that arm, and
    its step tiles; the identical badge where its user 1's answer was recorded."""
    u = arm_users(users, name)
    kept = _recorded(result, users).get(name)
    badge = view.identical_badge_html(arm_race(result, kept)) if kept is not None else ""
    label = result.arms[kept].label if kept is not None else None
    return _arm_block(name, label, view.users_speedup_html(u.users, u.step, running=False) + badge
                      + view.users_tiles_html("speculative", u.step.speculative))


def _recorded_note(result: RaceResult, users: UsersRace) -> str:
    """Which arms' answers the panes replay, when the recording holds fewer than the step measured."""
    kept = _recorded(result, users)
    if len(kept) >= len(users.step.arms):
        return ""
    return str(_fragment("recorded_note")(list(kept)))


CHART_W, CHART_H, CHART_PAD = 900, 220, 40  # the tokens chart's viewBox and margin, in SVG units


def tokens_chart(result: RaceResult, player: dict[str, Any]) -> dict[str, Any] | None:
    """With several arms, at the end: the tokens each server had sent over time, a line per pane,
    drawn from the timelines the player plays (``player_data``), as the page's inline SVG (no script, no
    network; the colours are the stylesheet's): its scale and each line's points. None for a run of one arm."""
    if not several_arms(result):
        return None
    pts = {pane: [(c[0], c[2]) for c in player["sides"][pane]["chunks"] if c[2] is not None]
           for pane in player["panes"]}
    t_max = max((t for p in pts.values() for t, _ in p), default=0.0) or 1.0
    n_max = max((n for p in pts.values() for _, n in p), default=0) or 1
    w, h, pad = CHART_W, CHART_H, CHART_PAD

    def xy(t: float, n: int) -> str:
        return f"{pad + (w - 2 * pad) * t / t_max:.1f},{h - pad - (h - 2 * pad) * n / n_max:.1f}"

    lines = [{"pane": pane, "name": "baseline" if pane == "baseline" else (pane_arm(result, pane) or pane),
              "last": p[-1][1] if p else 0, "points": " ".join(xy(t, n) for t, n in [(0.0, 0), *p])}
             for pane, p in pts.items()]
    return {"w": w, "h": h, "pad": pad, "t_max": t_max, "n_max": n_max, "lines": lines}


def export_html(run: Run, *, made_at: datetime | None = None,
                max_bytes: int = MAX_EXPORT_BYTES) -> str:
    """The whole page as text (templates/export.html.j2). Raises ExportTooLarge when it would exceed
    ``max_bytes``. Every value is autoescaped; the Markup ones are each safe for the reason given."""
    made_at = made_at or datetime.now(UTC)
    result = race_of(run)
    users = run if isinstance(run, UsersRace) else None
    req = result.request
    order = view.ORDER_LABELS[result.order] + (f" · {users.users} users" if users else "")
    model = result.baseline.model or view.na_label("model not reported")
    what = (f"{model} · {result.preset or 'free prompt'} · {order} · {view.sampling_text(req)}"
            f" · max {req.max_tokens} tokens · exported {_when(made_at)}")
    player = player_data(result)
    page = render(
        "export.html.j2", csp=content_security_policy(), when=_when(result.started_at), order=result.order,
        users=users.users if users else 1, what=what, several=several_arms(result),
        panes=[_pane(result, p, users) for p, _ in panes(result)], chart=tokens_chart(result, player),
        # demo.view's fragments (and this module's, from templates/_export.html.j2): each escapes every value.
        order_label=Markup(view.order_html(result.order)), headline=Markup(_headline(result, users)),
        burst_legend=Markup(view.burst_legend_html()),
        css=Markup(PAGE_CSS), js=Markup(PLAYER_JS),  # our stylesheet and player (demo/static/), hashed in the CSP
        # The run as JSON with '<', '>' and '&' as \u escapes (embed_json): nothing in it can close the block.
        data=Markup(embed_json({"format": "specdemo-race-export/1", "run": run.model_dump(mode="json"),
                                "player": player})))
    size = len(page.encode("utf-8"))
    if size > max_bytes:
        raise ExportTooLarge(f"this race makes a {size / 1e6:.1f} MB page, over the export limit of "
                             f"{max_bytes / 1e6:g} MB: export a shorter race (fewer max_tokens)")
    return page


def write_page(path: Path, text: str) -> None:
    """Write an exported page at ``path``, whole or not at all; ExportError (one line) when it cannot."""
    try:
        atomic_write(path, text)  # never a half-written page
    except OSError as e:
        raise ExportError(f"cannot write {path}: {e.strerror or e}") from e


def export_file(result: Run, dir: Path) -> Path:
    """Write the page under ``dir`` (made if missing) as '<run stem>.html'; returns its path.
    Raises ExportError (ExportTooLarge for an oversize run) with a one-line message."""
    try:
        dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create the folder {dir}: {e.strerror or e}") from e
    path = dir / f"{run_stem(result)}.html"
    write_page(path, export_html(result))
    return path


def export_to_temp(read: Callable[[], Run]) -> tuple[str | None, str]:
    """The page's download: the race ``read`` gives, exported into a fresh temp folder; (its path,
    the status line). A DemoError (no such run, not a run, too large, cannot write) is the status's
    one line, with no file."""
    try:
        out = export_file(read(), Path(tempfile.mkdtemp(prefix="specdemo-export-")))
    except DemoError as e:
        return None, view.run_status_html("error", f"cannot export: {e}")
    return str(out), view.run_status_html("done", f"exported {out.name}: it opens offline in any browser")


# --------------------------------------------------------------------------- a saved run


def run_for_export(path: Path) -> Run:
    """A saved run (runs.read_record: a race or an N-user race), refused before it is read when
    over MAX_EXPORT_BYTES."""
    return read_record(path, MAX_EXPORT_BYTES, "export limit")
