"""Every sleep in tests/ and harness/ is in tests/sleeps.txt with its reason: a wait polls for its
condition (common/waiting.py) instead, and a new fixed sleep fails here until it is listed."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from common.paths import ROOT
from common.waiting import WaitTimeout, held_within, wait_for

ALLOW_LIST = ROOT / "tests" / "sleeps.txt"
# time.sleep(…), asyncio.sleep(…), call_soon(time.sleep, …), Playwright's wait_for_timeout(…)
SLEEP = re.compile(r"\bsleep\b\s*[(,]|\bwait_for_timeout\(")
# This scanner (its examples). The one polling loop, common/waiting.py, is outside tests/ and harness/.
NOT_SCANNED = ("tests/test_sleeps.py",)

Key = tuple[str, str]


def code_of(line: str) -> str:
    """A line as the allow-list names it: stripped, its trailing "  # comment" off."""
    return line.split("  #", 1)[0].strip()


def sleeps_in(files: dict[str, str]) -> Counter[Key]:
    """(file, code) of each line that sleeps, counted, in {relative path: source}."""
    return Counter((path, code) for path, text in files.items() if path not in NOT_SCANNED
                   for code in map(code_of, text.splitlines()) if not code.startswith("#") and SLEEP.search(code))


def allowed(text: str) -> tuple[Counter[Key], list[str]]:
    """The allow-list's (file, code) entries counted, and its lines that give no reason."""
    entries: Counter[Key] = Counter()
    bad = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or not all(parts):
            bad.append(line)
            continue
        entries[(parts[0], parts[1])] += 1
    return entries, bad


def tree() -> dict[str, str]:
    """Every Python file of tests/ and harness/, by its path from the root."""
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
            for d in ("tests", "harness") for p in sorted((ROOT / d).rglob("*.py"))}


def test_every_sleep_is_listed_with_its_reason_and_every_entry_still_sleeps() -> None:
    found = sleeps_in(tree())
    listed, bad = allowed(ALLOW_LIST.read_text(encoding="utf-8"))
    assert not bad, f"tests/sleeps.txt lines without FILE | CODE | WHY: {bad}"
    unlisted, gone = found - listed, listed - found
    assert not unlisted, ("sleeps not in tests/sleeps.txt (poll for the condition with common/waiting.py, or "
                          f"list the sleep with its reason): {sorted(unlisted)}")
    assert not gone, f"tests/sleeps.txt lists sleeps that are no longer there: {sorted(gone)}"
    assert sum(found.values()) >= 40  # the scan sees the tree's sleeps: a broken pattern finds none


def test_a_new_unlisted_sleep_is_found_and_a_listed_one_is_not() -> None:
    listed, _ = allowed("tests/test_x.py | time.sleep(3) | a negative check\n")
    src = "def f():\n    time.sleep(3)  # listed\n    await asyncio.sleep(0.1)\n    page.wait_for_timeout(50)\n"
    found = sleeps_in({"tests/test_x.py": src})
    assert found - listed == Counter({("tests/test_x.py", "await asyncio.sleep(0.1)"): 1,
                                      ("tests/test_x.py", "page.wait_for_timeout(50)"): 1})
    # the same line twice needs two entries; a comment mentioning sleep( is not a sleep
    assert sleeps_in({"tests/test_x.py": "time.sleep(3)\ntime.sleep(3)\nx = 1  # no time.sleep(1) here\n"}) - listed \
        == Counter({("tests/test_x.py", "time.sleep(3)"): 1})
    assert allowed("tests/test_x.py | time.sleep(3) |\n")[1] == ["tests/test_x.py | time.sleep(3) |"]


def test_the_wait_helpers_poll_for_the_condition_and_say_what_they_waited_for() -> None:
    calls: Iterator[Exception | bool] = iter([OSError("between writes"), False, True])

    def cond() -> bool:
        c = next(calls)
        if isinstance(c, Exception):
            raise c
        return c

    assert wait_for(cond, 5, "the third look", poll_s=0.01) < 5
    assert not held_within(lambda: False, 0.05, poll_s=0.01)
    try:
        wait_for(lambda: False, 0.05, "a thing that never comes", poll_s=0.01)
    except WaitTimeout as e:
        assert str(e) == "not within 0.05 s: a thing that never comes"
    else:
        raise AssertionError("wait_for returned for a condition that never held")
