"""The servers' banner and panel, and the recording banner."""

from __future__ import annotations

from demo.fmt import NA, esc, fmt_percent
from demo.results import (
    RaceResult,
)
from demo.server_info import ServerInfo, down_message
from demo.view._common import ORDER_LABELS, na_label
from demo.view._headline import sampling_text, spec_pane_title, spec_title_note

# ---------------------------------------------------------------- servers

def server_banner_html(infos: list[ServerInfo]) -> str:
    """A loud banner for each server that is down, saying what to do; empty when all is well."""
    down = [i for i in infos if not i.healthy]
    if not down:
        return ""
    items = "".join(f"<li>{esc(down_message(i))}</li>" for i in down)
    return f'<div class="sd-banner" role="alert" data-down="{len(down)}"><ul>{items}</ul></div>'


def server_panel_html(infos: list[ServerInfo], grafana_url: str | None = None) -> str:
    """The Servers panel (HTML): each server up or down (and why), its model, method and k, KV cache.

    With ``grafana_url``, a link to the dashboard.
    """
    rows = []
    for i in infos:
        if i.healthy:
            health = '<span class="sd-ok">● up</span>'
        else:
            health = f'<span class="sd-bad">● down</span> {esc(i.error or "")}'
        model = i.model or na_label("unknown")
        if i.max_model_len:
            model += f" · context {i.max_model_len}"
        if i.side == "speculative":
            spec = spec_pane_title(i.spec_method, i.spec_num_tokens).removeprefix("Speculative ")
            if i.spec_source:
                spec += f" from {i.spec_source}"
            note = spec_title_note(i.spec_method, i.spec_num_tokens)
            if note:
                spec += f" (n/a: {note})"
        else:
            spec = "none (baseline)"
        if i.kv_cache_usage_perc is not None:
            kv = fmt_percent(i.kv_cache_usage_perc) or NA
        else:
            kv = na_label(i.metrics_error or ("server down" if not i.healthy else "not reported"))
        rows.append(
            f'<tr data-side="{esc(i.side)}" data-healthy="{str(i.healthy).lower()}">'
            f"<td>{esc(i.arm or i.side)}</td><td>{esc(i.url)}</td><td>{health}</td><td>{esc(model)}</td>"
            f"<td>{esc(spec)}</td><td>{esc(kv)}</td></tr>"
        )
    head = "<tr><th>side</th><th>URL</th><th>health</th><th>model</th><th>speculation</th><th>KV cache</th></tr>"
    link = (f'<p class="sd-grafana"><a href="{esc(grafana_url)}" target="_blank" rel="noopener noreferrer">'
            "Grafana: both servers over time</a></p>") if grafana_url else ""
    return f'<table class="sd-servers">{head}{"".join(rows)}</table>{link}'


def recording_banner_html(result: RaceResult | None, note: str | None = None) -> str:
    """The RECORDING banner over a played-back run; ``note`` is a small line under it (the booth's
    "live again in …")."""
    if result is None:
        return ('<div class="sd-banner sd-recording" data-recording="none">Pick a saved run and press '
                "Play: it is played back at its real timing, labelled as a recording.</div>")
    when = result.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    req = result.request
    what = f"{result.preset or 'free prompt'} · {ORDER_LABELS[result.order]} · {sampling_text(req)} · " \
           f"max {req.max_tokens} tokens"
    return (f'<div class="sd-banner sd-recording" role="status" data-recording="true" '
            'style="border:3px solid var(--sd-alert);padding:10px 14px;border-radius:8px;font-size:22px;'
            'font-weight:700">'
            f"● RECORDING of {esc(when)}, not live"
            f'<div style="font-size:15px;font-weight:400">{esc(what)}</div>'
            + (f'<div class="sd-live-again" style="font-size:15px;font-weight:400">{esc(note)}</div>' if note else "")
            + "</div>")
