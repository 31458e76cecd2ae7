"""demo/live/session.py: one race per page session; Start pressed again while it waits or runs
is refused, and the race events those presses chain do nothing, before or after the race."""

from __future__ import annotations

from demo.live.session import MAX_UNTAKEN, RaceRegistry


def test_presses_while_a_race_waits_or_runs_are_refused_and_their_events_do_nothing() -> None:
    reg = RaceRegistry()
    armed = reg.arm("s")
    assert armed is not None
    assert [reg.arm("s") for _ in range(9)] == [None] * 9  # nine more presses, refused
    # The events chained to the ten presses: one runs the race, the other nine do nothing,
    # whether they come while it runs or, queued behind it, after it ended.
    assert reg.claim("s") is armed
    assert [reg.claim("s") for _ in range(4)] == [None] * 4
    reg.drop("s", armed)
    assert [reg.claim("s") for _ in range(5)] == [None] * 5
    # Then the page takes a new race.
    again = reg.arm("s")
    assert again is not None and again is not armed and reg.claim("s") is again


def test_a_call_without_start_runs_once_at_a_time_and_other_sessions_are_free() -> None:
    reg = RaceRegistry()
    api = reg.claim("api")  # the API calls the race event without the page's Start
    assert api is not None and api.claimed
    assert reg.claim("api") is None  # a second call while it runs
    assert reg.arm("other") is not None  # another page is not held up
    reg.drop("api", api)
    assert reg.claim("api") is not None


def test_a_race_end_is_taken_once_and_never_by_the_next_race() -> None:
    reg = RaceRegistry()
    control = reg.claim("s")
    assert control is not None
    reg.hand_over("s", "end-1")
    reg.drop("s", control)
    assert reg.take("s") == "end-1"
    assert reg.take("s") is None  # an event chained to a refused press draws nothing
    reg.hand_over("s", "never taken")
    assert reg.claim("s") is not None
    assert reg.take("s") is None  # the next race does not inherit it
    for i in range(MAX_UNTAKEN + 5):  # ends nobody takes (tabs closed) do not pile up
        reg.hand_over(f"gone{i}", i)
    assert reg.take("gone0") is None and reg.take(f"gone{MAX_UNTAKEN + 4}") == MAX_UNTAKEN + 4
