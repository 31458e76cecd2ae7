"""The "Canary" tab: traffic through the canary's router at a set rate, the live share, each path's
figures, the switch to what speculation does badly, the rollback and its timeline.

Layout and wiring only: the logic is demo/live/canary_stage.py (``CanaryStage``, one per app, shared by
every viewer: there is one router). The view is redrawn every POLL_S seconds by a ``gr.Timer``
that starts when the tab is first opened, so the other tabs pay nothing for it; each tick reads
the canary's status and its Prometheus, never a vLLM server's /metrics.
"""

from __future__ import annotations

import gradio as gr

from demo.live.canary_stage import (
    BAD_PRESET,
    DEFAULT_MAX_TOKENS,
    GOOD_PRESET,
    CanaryStage,
    frame_html,
    status_html,
)
from demo.live.status import internal_error_text
from servers.canary import CanaryError

POLL_S = 2.0

INTRO = (f"Eligible traffic (`x-specdemo-eligible: 1`) through the canary's router, open loop, on "
         f"**{GOOD_PRESET}**. **Switch** sends **{BAD_PRESET} at T=1**: the acceptance falls, the guardrail "
         "fires, the share goes to 0. **Recovery is manual.** The canary runs apart: `python -m servers canary up`.")


def _view(stage: CanaryStage, said: str | None = None, failed: bool = False, max_age_s: float = 0.0) -> tuple[str, str]:
    """(the one line, the view) after an action that said ``said`` (a failure when ``failed``); a
    timer's tick takes a frame up to ``max_age_s`` old (another viewer's)."""
    frame = stage.poll(max_age_s)
    text, state = stage.line(frame, said, failed)
    return status_html(text, state), frame_html(frame)


def build(stage: CanaryStage) -> gr.Timer:
    """Lay the tab out inside the current ``gr.Tab`` and wire its events; returns its timer (the
    caller starts it when the tab is selected)."""
    gr.Markdown(INTRO, elem_id="sd-canary-intro")
    with gr.Row():
        rate = gr.Number(value=1.0, label="Rate (requests/s)", elem_id="sd-canary-rate")
        max_tokens = gr.Number(value=DEFAULT_MAX_TOKENS, precision=0, label="Max tokens per request",
                               elem_id="sd-canary-max-tokens")
        start = gr.Button(f"Start traffic ({GOOD_PRESET})", variant="primary", elem_id="sd-canary-start")
        stop = gr.Button("Stop traffic", elem_id="sd-canary-stop")
    with gr.Row():
        switch = gr.Button(f"Switch to {BAD_PRESET} at T=1", variant="stop", elem_id="sd-canary-switch")
        share = gr.Number(value=10, precision=0, label="Share % of eligible traffic (manual recovery)",
                          elem_id="sd-canary-share-input")
        set_share = gr.Button("Set share", elem_id="sd-canary-set-share")
    line = gr.HTML(elem_id="sd-canary-status")
    view = gr.HTML(elem_id="sd-canary-view")
    timer = gr.Timer(POLL_S, active=False)
    outputs = [line, view]

    def act(what: str, fn: object, *args: object) -> tuple[str, str]:
        try:
            said = fn(*args)  # type: ignore[operator]
        except (ValueError, CanaryError, OSError) as e:  # bad input and the canary's one-line errors
            return _view(stage, str(e), failed=True)
        except Exception as e:  # the app's own fault: one line, the log has the rest
            return _view(stage, internal_error_text(e), failed=True)
        return _view(stage, said or what)

    start.click(lambda r, m: act("started", stage.start, r, m if m is not None else DEFAULT_MAX_TOKENS),
                inputs=[rate, max_tokens], outputs=outputs, show_progress="hidden")
    stop.click(lambda: act("traffic stopped", stage.stop), outputs=outputs, show_progress="hidden")
    switch.click(lambda: act("switched", stage.switch), outputs=outputs, show_progress="hidden")
    set_share.click(lambda p: act("share set", stage.set_share, p), inputs=[share], outputs=outputs,
                    show_progress="hidden")
    timer.tick(lambda: _view(stage, max_age_s=POLL_S / 2), outputs=outputs, show_progress="hidden")
    return timer
