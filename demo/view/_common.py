"""The words every part of the page shares: the pending mark, the order's labels and notes, an n/a label."""

from __future__ import annotations

from demo.fmt import NA

PENDING = "…"

ORDER_LABELS: dict[str, str] = {
    "simultaneous": "Simultaneous race",
    "sequential": "Sequential A/B",
}
ORDER_NOTES: dict[str, str] = {
    "simultaneous": "Both servers run at the same time. On one GPU they compete for it; on CPU cores, "
    "this page and its browser take time from the servers when no core is spare. So both speeds, "
    "and often the speedup, read lower; sequential A/B is the fair comparison.",
    "sequential": "Baseline first, then speculative, same prompt: each server has the "
    "machine to itself. The fair comparison.",
}


def na_label(reason: str | None) -> str:
    """'n/a (reason)', or plain 'n/a' when nobody said why."""
    return f"{NA} ({reason})" if reason else NA
