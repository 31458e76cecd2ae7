"""Shared pytest fixtures. Stand-in vLLM servers: real HTTP on 127.0.0.1 (see harness/standin.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from harness.standin import Standin, StandinBehavior


@pytest.fixture
def standin_factory() -> Iterator[Callable[..., Standin]]:
    """Start stand-in servers on free ports: ``s = standin_factory(speculative=True, ...)``.

    Takes a StandinBehavior or its fields as keywords; every server is stopped after the test.
    """
    started: list[Standin] = []

    def make(behavior: StandinBehavior | None = None, **fields: object) -> Standin:
        s = Standin(behavior or StandinBehavior(**fields)).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def standin_pair() -> Iterator[tuple[Standin, Standin]]:
    """(baseline, speculative): 200 tok/s one token per chunk vs 500 tok/s in chunks of 1/3/5/2."""
    with Standin.pair() as pair:
        yield pair
