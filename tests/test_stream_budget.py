"""The page's one budget of streams (demo.live.budget): never exceeded, first come first served,
nothing left held, a run that can never fit refused at once."""

from __future__ import annotations

import asyncio

import pytest

from demo.live.budget import StreamBudget, streams_needed, waiting_text
from demo.settings import Settings


def test_streams_needed_counts_every_server_at_once_only_when_simultaneous() -> None:
    assert streams_needed(8, 2, "simultaneous") == 16
    assert streams_needed(8, 2, "sequential") == 8
    assert streams_needed(1, 4, "simultaneous") == 4


def test_the_default_budget_lets_one_viewer_run_the_most_users_on_both_servers() -> None:
    s = Settings(max_users=32)
    assert s.stream_budget() == streams_needed(32, 2, "simultaneous") == 64
    assert Settings(max_users=32, max_streams=40).stream_budget() == 40


def test_a_run_over_the_whole_budget_is_refused_with_one_line() -> None:
    budget = StreamBudget(10)
    with pytest.raises(ValueError) as e:
        budget.ask(11)
    assert "11 streams" in str(e.value) and "budget of 10" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError):
        budget.ask(0)
    assert budget.in_use == 0 and budget.waiting == 0


def test_two_viewers_asking_for_the_most_never_exceed_it_and_the_second_waits_its_turn() -> None:
    async def main() -> None:
        budget = StreamBudget(64)
        first = budget.ask(64)
        assert first.granted and budget.in_use == 64
        second = budget.ask(64)
        assert not second.granted and not await second.wait(0.05)
        assert "64 of the page's 64 are in use" in waiting_text(second)
        small = budget.ask(2)  # first come first served: a small run does not overtake the waiting one
        assert not small.granted and "1 ahead of you" in waiting_text(small)
        first.release()
        assert await second.wait(1.0) and budget.in_use == 64 and not small.granted
        second.release()
        assert await small.wait(1.0) and budget.in_use == 2
        small.release()
        small.release()  # a second release gives nothing back twice
        assert budget.in_use == 0 and budget.waiting == 0

    asyncio.run(main())


def test_leaving_the_queue_and_a_cancelled_holder_give_everything_back() -> None:
    async def main() -> None:
        budget = StreamBudget(4)

        async def hold_forever() -> None:
            async with budget.hold(4):
                await asyncio.Event().wait()

        task = asyncio.create_task(hold_forever())
        await asyncio.sleep(0)
        assert budget.in_use == 4
        queued = budget.ask(3)
        queued.release()  # the viewer closed the tab while waiting
        assert budget.waiting == 0
        task.cancel()  # Stop: the holder's streams come back
        with pytest.raises(asyncio.CancelledError):
            await task
        assert budget.in_use == 0
        assert (await asyncio.wait_for(budget.hold(4).__aenter__(), 1.0)).granted

    asyncio.run(main())
