"""Playing a saved race back at its real timing, without Gradio: the Replay tab and the booth's
recordings (demo.live.booth) feed these snapshots through the same frames as a live race.

The saved ChunkEvents are fed, at the times they first arrived, into the same SideMeter the live
race uses; the last snapshot carries the saved result, so the final figures are the saved ones.
A race of several arms plays back every arm (``RaceSnapshot.arms``), the first as ``speculative``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

from demo import view
from demo.measure import SideMeter
from demo.results import LEGACY_ORDER, ArmSnapshot, ChunkEvent, RaceResult, RaceSnapshot, SideResult
from demo.runs.store import load_stem_parts, stem_parts

FRAME_INTERVAL_S = 0.05  # at most ~20 page updates per second, as the live race


def run_label(path: Path) -> str:
    """'2026-11-29 13:00:49 UTC · json_reformat · sequential' from the saved file's name (a load
    sweep's: '… · json_reformat · load sweep')."""
    parts = stem_parts(path)
    if parts is None:
        load = load_stem_parts(path)
        if load is None:
            return path.name
        when = datetime.strptime(load[0], "%Y%m%dT%H%M%S").strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{when} · {load[1]} · load sweep"
    when = datetime.strptime(parts.stamp, "%Y%m%dT%H%M%S").strftime("%Y-%m-%d %H:%M:%S UTC")
    users = f" · {parts.users} users" if parts.users > 1 else ""
    return f"{when} · {parts.preset} · {view.ORDER_LABELS[LEGACY_ORDER.get(parts.order, parts.order)]}{users}"


def saved_sides(result: RaceResult) -> dict[str, SideResult]:
    """"baseline" and each arm by name -> its saved side (the first arm's is ``speculative``)."""
    return {"baseline": result.baseline, **{name: a.side for name, a in result.arms.items()}}


def timeline(result: RaceResult) -> list[tuple[float, str, ChunkEvent]]:
    """Every side's saved events in arrival order (each side timed from its own request), with the
    side's key: "baseline" or the arm's name."""
    events = [(ev.t_s, key, ev) for key, side in saved_sides(result).items() for ev in side.events]
    return sorted(events, key=lambda e: e[0])


async def replay_snapshots(result: RaceResult, interval_s: float = FRAME_INTERVAL_S) -> AsyncIterator[RaceSnapshot]:
    """Snapshots at the recording's real timing; the last one carries the saved result."""
    t0 = time.perf_counter()
    sides = saved_sides(result)
    meters: dict[str, SideMeter] = {}
    for key, saved in sides.items():
        meters[key] = SideMeter(saved.side, saved.url, t0=t0)
        meters[key].model = saved.model
    last_t = {key: max((e.t_s for e in saved.events), default=0.0) for key, saved in sides.items()}
    failed: set[str] = set()
    first = next(iter(result.arms))

    def snap(final: bool = False) -> RaceSnapshot:
        arms = {name: ArmSnapshot(name=name, label=a.label, method=a.method, side=meters[name].snapshot())
                for name, a in result.arms.items()}
        return RaceSnapshot(order=result.order, baseline=meters["baseline"].snapshot(),
                            speculative=arms[first].side, result=result if final else None, arms=arms)

    def settle(now: float) -> None:
        # A side that failed (or was stopped) in the recording fails here at its last event.
        for side, saved in sides.items():
            if saved.error and side not in failed and now >= last_t[side]:
                failed.add(side)
                if result.cancelled and not saved.complete:
                    meters[side].cancel()
                else:
                    meters[side].fail(saved.error)

    items = timeline(result)
    i = 0
    settle(0.0)
    yield snap()
    while i < len(items):
        now = time.perf_counter() - t0
        if items[i][0] > now:
            await asyncio.sleep(min(items[i][0] - now, 1.0))
            continue
        while i < len(items) and items[i][0] <= now:
            _t, side, ev = items[i]
            meters[side].feed(ev)
            i += 1
        settle(now)
        yield snap()
        await asyncio.sleep(interval_s)  # many chunks fold into one frame
    settle(float("inf"))
    yield snap(final=True)
