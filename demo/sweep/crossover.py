"""Where speculation stops paying as load grows: one function, shared by the load sweep and the
evaluator's concurrency checklist item, with the verdict's own thresholds.

Given measured (users, gain) points, a gain at or above ``GAIN_WORTH`` pays, one below
``GAIN_NONE`` loses (no gain worth the name), one between is neither. The crossover is read off
the measured counts only, never extrapolated: ``pays_up_to_users`` is the largest count of the
run of paying counts from the lowest one (None when the lowest does not pay: it never pays from
the start), ``loses_from_users`` the lowest count above it that loses (None when none does: with
every count paying, "it pays at every count measured"). Users (the race's and the load sweep's)
and concurrency (the evaluator's) are the same quantity: streams at once per server.

With several arms (speculative servers), ``choose_arms`` runs ``find_crossover`` per arm and writes
the one line both the load sweep and the verdict show: "for this workload, enable eagle3 up to 16
concurrent requests; ngram pays only up to 2; draft never".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from demo.fmt import fmt_speedup

# At or above this at a concurrency, speculation "pays" there. n-gram speculation costs no second
# model and little memory, so a 15% gain is worth one flag; a draft model asks for more.
GAIN_WORTH = 1.15
GAIN_NONE = 1.05  # below this there is no gain worth the name


class Crossover(BaseModel):
    """Where the gain crosses the thresholds, between measured counts (None: see the module's doc)."""

    pays_up_to_users: int | None = None
    loses_from_users: int | None = None
    # The lowest measured count above the paying run that does not pay (gain < GAIN_WORTH); equal
    # to loses_from_users unless a count in between is neither paying nor losing.
    stops_paying_from_users: int | None = None
    measured_users: list[int] = Field(default_factory=list)  # the counts that had a gain, ascending
    gain_worth: float = GAIN_WORTH
    gain_none: float = GAIN_NONE
    text: str = ""  # one sentence, e.g. "speculation pays up to 8 users and loses from 16 on these servers"


def find_crossover(points: Sequence[tuple[int, float | None]], noun: str = "user") -> Crossover:
    """The crossover of measured (count, gain) points; a None gain (a failed step) is left out.
    ``noun`` names the count in the sentence ("user", or "concurrent request")."""
    known = sorted((u, g) for u, g in points if g is not None)
    out = Crossover(measured_users=[u for u, _ in known])
    if not known:
        out.text = "no crossover: no count produced a gain"
        return out

    def many(n: int) -> str:
        return f"{n} {noun}" + ("" if n == 1 else "s")

    paying = 0
    while paying < len(known) and known[paying][1] >= GAIN_WORTH:
        paying += 1
    if paying:
        out.pays_up_to_users = known[paying - 1][0]
    rest = known[paying:]
    if rest:
        out.stops_paying_from_users = rest[0][0]
    out.loses_from_users = next((u for u, g in rest if g < GAIN_NONE), None)
    top = known[-1][0]
    thresholds = f"(pays: ≥ {fmt_speedup(GAIN_WORTH)}, loses: < {fmt_speedup(GAIN_NONE)})"
    if not rest:
        out.text = f"it pays at every count measured (up to {many(top)}) {thresholds}"
        return out
    if out.pays_up_to_users is None:
        out.text = (f"speculation does not pay at any count measured, from {many(known[0][0])} "
                    f"({fmt_speedup(known[0][1])}) to {many(top)} {thresholds}")
        return out
    pays = f"speculation pays up to {many(out.pays_up_to_users)}"
    if out.loses_from_users is None:
        out.text = (f"{pays}; from {out.stops_paying_from_users} the gain is too small to count but it never "
                    f"loses (up to {many(top)}) {thresholds}")
    elif out.loses_from_users == out.stops_paying_from_users:
        out.text = f"{pays} and loses from {out.loses_from_users} on these servers {thresholds}"
    else:
        out.text = (f"{pays}, gains too little to count from {out.stops_paying_from_users} and loses from "
                    f"{out.loses_from_users} on these servers {thresholds}")
    again = [u for u, g in rest if g >= GAIN_WORTH]
    if again:
        out.text += f"; it pays again at {', '.join(map(str, again))} (the gain does not fall steadily)"
    return out


class ArmsChoice(BaseModel):
    """Which arm to enable, from every arm's measured (count, gain) points: the load sweep's and the
    verdict's one line over several arms (``choose_arms``)."""

    crossovers: dict[str, Crossover] = Field(default_factory=dict)  # per arm, in the arms' order
    # Per measured count, the arm with the highest gain that pays there (None: no arm pays there).
    best_by_users: dict[int, str | None] = Field(default_factory=dict)
    text: str = ""  # "for this workload, enable eagle3 up to 16 concurrent requests; ngram pays only up to 2; ..."


def choose_arms(points: Mapping[str, Sequence[tuple[int, float | None]]], noun: str = "user") -> ArmsChoice:
    """Each arm's crossover (find_crossover, the same thresholds) and the one line that says which arm to
    enable up to which count: the arm that pays up to the highest count first (ties: the higher gain at
    the lowest count), then what each other arm pays up to, or that it never pays; and, when the best
    arm is not the same at every count where one pays (of the counts every arm was measured at), the
    best per count."""
    out = ArmsChoice(crossovers={name: find_crossover(pts, noun=noun) for name, pts in points.items()})
    gains = {name: {u: g for u, g in pts if g is not None} for name, pts in points.items()}
    for u in sorted({u for g in gains.values() for u in g}):
        paying = [(g[u], name) for name, g in gains.items() if u in g and g[u] >= GAIN_WORTH]
        out.best_by_users[u] = max(paying)[1] if paying else None

    def many(n: int) -> str:
        return f"{n} {noun}" + ("" if n == 1 else "s")

    def reach(name: str) -> tuple[int, float]:
        c = out.crossovers[name]
        g = gains[name]
        return (c.pays_up_to_users or 0, g[min(g)] if g else 0.0)

    measured = [name for name in points if gains[name]]
    if not measured:
        out.text = "for this workload, no arm produced a gain: nothing to choose"
        return out
    ranked = sorted(measured, key=reach, reverse=True)
    parts: list[str] = []
    for i, name in enumerate(ranked):
        c = out.crossovers[name]
        if c.pays_up_to_users is None:
            parts.append(f"{name} never")
        elif c.stops_paying_from_users is None:
            parts.append(f"{'enable ' if i == 0 else ''}{name} "
                         f"{'up to' if i == 0 else 'pays up to'} {many(c.pays_up_to_users)} (every count measured)")
        elif i == 0:
            parts.append(f"enable {name} up to {many(c.pays_up_to_users)}")
        else:
            parts.append(f"{name} pays only up to {c.pays_up_to_users}")
    if ranked and out.crossovers[ranked[0]].pays_up_to_users is None:
        parts = ["enable none: no arm pays at any count measured"]
    unmeasured = [name for name in points if not gains[name]]
    parts += [f"{name} not measured" for name in unmeasured]
    # Compared only where every measured arm was measured (a count one arm lacks decides nothing).
    common = set.intersection(*(set(gains[name]) for name in measured))
    best = {u: a for u, a in out.best_by_users.items() if a is not None and u in common}
    if len(set(best.values())) > 1:
        runs: list[tuple[str, list[int]]] = []  # consecutive measured counts with the same best arm
        for u, a in best.items():
            if runs and runs[-1][0] == a:
                runs[-1][1].append(u)
            else:
                runs.append((a, [u]))
        parts.append("best by count: " + ", ".join(
            f"{a} at {us[0]}" + (f"-{us[-1]}" if len(us) > 1 else "") for a, us in runs))
    out.text = "for this workload, " + "; ".join(parts)
    return out
