"""The run's status line in words: a finished race's, and a failure that is the app's own fault
(the Race tab, the booth and the Evaluate tab all say it this way); a quiet side's line while its
server says it is working on the request.
"""

from __future__ import annotations

from demo import view
from demo.results import SIDES, RaceResult, SideSnapshot


def internal_error_text(exc: BaseException) -> str:
    """One line for a failure that is the app's own fault, not a server's."""
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"internal error: {type(exc).__name__}: {first} (the app's log has the details)"


def final_status(result: RaceResult, saved: str | None, stopped_because: str | None = None,
                 save_note: str | None = None, users: int = 1, lead: str | None = None) -> str:
    """``users`` > 1: an N-user race, whose ``result`` is user 1's. ``lead``: what opens the detail (a
    session's turns, whose ``result`` is its last turn's)."""
    state = result.outcome
    who = f"{users} users · " if users > 1 else ""
    who = f"{lead} · {who}" if lead else who
    detail = f"{who}{view.ORDER_LABELS[result.order]} · {view.sampling_text(result.request)}" + (
        " · run saved" if saved else "")
    if save_note:
        detail = f"{detail} · {save_note}"
    if state == "stopped" and stopped_because:
        detail = f"{stopped_because} · {detail}"
    if state == "error":
        failed = [s for s in SIDES if getattr(result, s).error]
        what = "user 1 of " if users > 1 else ""
        detail = f"{what}{' and '.join(failed)} failed (see the pane) · " + detail
    # Several arms stopped: every request was aborted, not "both".
    text = "Stopped: every request was aborted" if state == "stopped" and len(result.arms) > 1 else None
    return view.run_status_html(state, detail, text=text)


def server_working_text(snap: SideSnapshot, quiet_s: float, wait_max_s: float) -> str | None:
    """A quiet side's status line while the client waits on its server past the read timeout
    because the server's /metrics says it is working (``snap.server_wait``): before the first token
    "prefill: 48 s, the server is working"; None when it is not waiting so."""
    wait = snap.server_wait
    if wait is None or snap.status not in ("waiting", "streaming"):
        return None
    what = f"prefill: {snap.elapsed_s:.0f} s" if snap.status == "waiting" else f"nothing new for {quiet_s:.0f} s"
    why = " (queued, or its grammar being built)" if wait.running == 0 and wait.waiting > 0 else ""
    return f"{what}, the server is working{why} (waits up to {wait_max_s:g} s)"
