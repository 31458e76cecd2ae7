"""A session preset raced turn by turn: the agent race.

A session (a preset with ``turns``, demo.presets) is played one turn after another, each turn a race
of the baseline and every arm in the race's order (demo.race.stream_race). Each side carries its own
answer, tool calls included, into its next turn (demo.results.answer_message and next_turn), then the
turn's logged messages (the tool result, a user's reply): as an agent would. A turn lands with its
race's figures; the session's figure per arm is its decode speedup over all the turns landed so far
(every turn's decode tokens over every turn's decode seconds, each side: demo.measure.pooled_decode_rate).
A side that fails, or Stop, ends the session after that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from pydantic import BaseModel, Field

from demo.measure import pooled_decode_rate
from demo.presets import Turn
from demo.race import stream_race
from demo.results import RaceRequest, RaceResult, RaceSnapshot, answer_message, next_turn
from demo.settings import Settings


class TurnResult(BaseModel):
    """One turn that landed: its number (from 1), its label, its race."""

    index: int
    label: str = ""
    race: RaceResult


class ArmSession(BaseModel):
    """One arm over the turns landed so far: its decode speedup over the baseline's (each side's
    decode tokens over its decode seconds, every turn pooled), n/a with the reason."""

    name: str
    speedup: float | None = None
    identical_turns: int = 0  # turns whose answer (text and tool calls) was the baseline's
    na_reasons: dict[str, str] = Field(default_factory=dict)


class SessionResult(BaseModel):
    """A session so far: the turns raced (a stopped or failed one last), out of ``turns_total``, and
    each arm's session figure over the turns every side finished (``landed``)."""

    preset: str | None = None
    turns_total: int
    labels: list[str] = Field(default_factory=list)  # every turn's label, in order ("" when it has none)
    turns: list[TurnResult] = Field(default_factory=list)
    arms: dict[str, ArmSession] = Field(default_factory=dict)

    @property
    def landed(self) -> int:
        """How many turns every side finished: the turns the session's figures are over."""
        return sum(1 for t in self.turns if t.race.outcome == "done")

    @property
    def complete(self) -> bool:
        """Every turn landed, each finished by every side."""
        return len(self.turns) == self.turns_total and all(t.race.outcome == "done" for t in self.turns)


class SessionSnapshot(BaseModel):
    """The session at one moment: the turn racing (from 1), its race's snapshot, the turns landed."""

    turn: int
    snapshot: RaceSnapshot
    session: SessionResult


def session_figures(races: Sequence[RaceResult]) -> dict[str, ArmSession]:
    """Each arm's session figures over ``races`` (the turns landed, in order)."""
    if not races:
        return {}
    base_rate, base_why = pooled_decode_rate([r.baseline for r in races])
    out: dict[str, ArmSession] = {}
    for name in races[0].arms:
        sides = [r.arms[name].side for r in races if name in r.arms]
        same = sum(1 for r in races if name in r.arms and r.arms[name].identical_text)
        arm = ArmSession(name=name, identical_turns=same)
        rate, why = pooled_decode_rate(sides)
        if base_rate and rate:
            arm.speedup = rate / base_rate
        else:
            arm.na_reasons["speedup"] = f"baseline: {base_why}" if base_why else f"{name}: {why}"
        out[name] = arm
    return out


def side_names(settings: Settings) -> list[str]:
    """The sides of a race by name, as stream_race keys them: the baseline, then each arm."""
    return ["baseline", *(e.arm for e in settings.arm_endpoints() if e.arm is not None)]


async def stream_session(req: RaceRequest, turns: Sequence[Turn], settings: Settings, *, first_label: str = "",
                         interval_s: float = 0.05,
                         stop: asyncio.Event | None = None) -> AsyncGenerator[SessionSnapshot, None]:
    """Race the session: ``req`` is its first turn (its messages, tools, sampling, order), ``turns``
    the rest. Yields a SessionSnapshot per race snapshot; a turn's last one has its result and the
    session with that turn landed. ``stop`` (an asyncio.Event) ends the turn racing and the session."""
    names = side_names(settings)
    histories = {name: list(req.messages or []) for name in names}
    session = SessionResult(preset=req.preset, turns_total=1 + len(turns),
                            labels=[first_label, *(t.label for t in turns)])
    last: RaceResult | None = None
    for index in range(1, session.turns_total + 1):
        if last is not None:
            logged = turns[index - 2].messages
            for name in names:
                side = last.baseline if name == "baseline" else last.arms[name].side
                histories[name] = next_turn(histories[name], answer_message(side.text, side.tool_calls, index - 1),
                                             logged)
        own = {name: req.model_copy(update={"messages": histories[name]}) for name in names}
        last = None
        async for snap in stream_race(own["baseline"], settings, interval_s=interval_s, stop=stop,
                                      side_requests=own):
            if snap.result is not None:
                last = snap.result
                session = session.model_copy(update={
                    "turns": [*session.turns, TurnResult(index=index, label=session.labels[index - 1], race=last)]})
                session.arms = session_figures([t.race for t in session.turns if t.race.outcome == "done"])
            yield SessionSnapshot(turn=index, snapshot=snap, session=session)
        if last is None or last.outcome != "done":
            return  # stopped, or a side failed: it has no answer to carry into the next turn
