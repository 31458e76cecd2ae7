"""The timing stage's margins: each figure checked against its truth there records the share of its
bound it used, and the stage prints them all at its end (tests/conftest.py's terminal summary), so a
run shows how close its checks came, not only that they passed.

    assert within(measured, truth, 0.05, "baseline ITL p50 at 1 req/s")   # relative bound
    assert inside(late_s, 0.05, "replay gap 3, baseline")                   # absolute bound
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Margin:
    """One checked figure: what it is, and the share of its bound it used (over 1: it missed)."""

    what: str
    used: float


MARGINS: list[Margin] = []  # this process's checks, in order


def inside(off: float, bound: float, what: str) -> bool:
    """``|off| <= bound``, recorded as the share of the bound it used."""
    used = abs(off) / bound
    MARGINS.append(Margin(what, used))
    return used <= 1.0


def within(measured: float | None, truth: float, share: float, what: str) -> bool:
    """``measured`` within ``share`` (0.05: 5%) of ``truth``, recorded; a missing figure misses."""
    if measured is None or truth == 0:
        MARGINS.append(Margin(what, float("inf")))
        return False
    return inside(measured / truth - 1, share, what)


def summary(margins: list[Margin] = MARGINS, worst: int = 5) -> list[str]:
    """Lines for the log: how many figures, the worst share used, the ``worst`` closest calls."""
    if not margins:
        return []
    ranked = sorted(margins, key=lambda m: m.used, reverse=True)
    lines = [f"margins: {len(margins)} figure(s) checked against their truth; "
             f"the closest used {ranked[0].used:.2f} of its bound"]
    lines += [f"  {m.used:5.2f}  {m.what}" for m in ranked[:worst]]
    return lines
