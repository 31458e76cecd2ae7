"""The loop label: an answer that ends in one short span repeated (the small default model stuck)
is drafted perfectly by n-gram, so its speedup is not typical. One detector
(demo.measure.repetition), shown under the page's speedup, in the exported race and in the sweep's
per-request table."""

from __future__ import annotations

import json
from pathlib import Path

from demo.measure import LOOP_MIN_CHARS, LOOP_NOTE, SideMeter, repetition
from demo.race import compare
from demo.results import ChunkEvent, Message, RaceRequest, RaceResult, RaceSnapshot, SideResult, SideSnapshot
from demo.runs.export import export_html
from demo.sweep.profile import RankedRequest
from demo.sweep.report_workload import ranked_rows_html
from demo.view import speedup_html

FIXTURES = Path(__file__).parent / "fixtures"
# The baseline's answer to json_reformat on the CPU pair (SmolLM2-135M, T=0, 400 tokens),
# captured 2026-12-01: it ends in '"book", ' nineteen times.
LOOPING = (FIXTURES / "looping_answer_json_reformat.txt").read_text()
# The baseline's answer to the summarization preset as it was before 2026-12-04 (asked for "one
# paragraph of about 150 words", no penalty), on the CPU pair: a 100-character sentence repeated
# to the 256-token cap. Identical on both sides, headlined 1.91x-5.49x with no label then.
LOOPING_SENTENCE = (FIXTURES / "looping_answer_summarization.txt").read_text()
# Every greedy preset's right answer on the CPU pair (2026-12-04, identical on both sides; the
# answer checks of tests/e2e/test_preset_answers.py hold on each).
RIGHT_ANSWERS = {p.stem: p.read_text() for p in sorted((FIXTURES / "answers").glob("*.txt"))}


def sse_text(path: Path) -> str:
    """The answer text of a captured vLLM stream."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                out.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
    return "".join(out)


def test_the_captured_json_reformat_answer_ends_in_a_loop() -> None:
    rep = repetition(LOOPING)
    assert rep is not None
    assert rep.unit == '"book", '
    assert rep.tail_chars == 153 and rep.repeats > 19
    assert abs(rep.share - 153 / len(LOOPING)) < 1e-9
    assert rep.tail_tokens is None  # no chunks given


def test_real_answers_that_do_not_loop_are_not_labelled() -> None:
    answers = {p.name: sse_text(p) for p in sorted(FIXTURES.glob("stream-*.sse"))}
    answers = {k: v for k, v in answers.items() if len(v) >= LOOP_MIN_CHARS}
    assert len(answers) >= 4, sorted(answers)
    assert {k: repetition(v) for k, v in answers.items()} == dict.fromkeys(answers)
    # Structure repeats with other values, a short refrain, a loop too short to count.
    items = ",\n".join(f'  {{"id": {i}, "name": "item {i}"}}' for i in range(12))
    assert repetition(f"[\n{items}\n]") is None
    assert repetition("Ha ha ha ha ha!") is None
    assert repetition("x" * (LOOP_MIN_CHARS - 1)) is None
    assert repetition("") is None


def test_a_whole_sentence_repeated_is_a_loop() -> None:
    rep = repetition(LOOPING_SENTENCE)
    assert rep is not None
    assert rep.unit == ("Python community make decisions based on the best available information. "
                        "It is designed to help the\n")
    assert rep.repeats >= 7 and rep.tail_chars >= 700
    # A line of code repeated three times, and a sentence three times: what a person calls a loop.
    line = "        result = compute_the_next_value(result, step)\n"
    assert repetition("def f():\n" + line * 3) is not None
    sentence = "The PEP process is designed to be flexible and can be adjusted to the needs of the PEPs. "
    assert repetition("A summary. " + sentence * 3) is not None
    assert repetition("A summary. " + sentence * 2) is None  # twice is not yet a loop


def test_honest_repetition_and_every_presets_right_answer_are_not_loops() -> None:
    assert set(RIGHT_ANSWERS) == {"agent_loop", "code_edit", "json_reformat", "json_reformat_schema", "rag_long",
                                  "sql", "summarization"}
    assert {k: repetition(v) for k, v in RIGHT_ANSWERS.items()} == dict.fromkeys(RIGHT_ANSWERS)
    records = json.dumps([{"id": i, "name": "Widget", "price": 9.99, "tags": ["a", "b"]} for i in range(20)], indent=2)
    table = "| region | q1 | q2 |\n|---|---|---|\n" + "".join(f"| r{i} | {i * 3} | {i * 7} |\n" for i in range(20))
    code = "".join(f"    user[\"{f}\"] = {f}\n" for f in ("name", "email", "phone", "age", "city", "country"))
    tests = "".join(f"    assert parse({i}) == {i * i}\n" for i in range(15))
    for honest in (records, table, code, tests):
        assert repetition(honest) is None, honest[-200:]


def test_a_loop_cut_mid_unit_and_its_tokens_from_the_chunks() -> None:
    text = "Answer: " + "ab " * 50 + "a"
    chunks = [(1, "Answer: ")] + [(1, "ab ")] * 50 + [(1, "a")]
    rep = repetition(text, chunks)
    # The space that ends "Answer: " already belongs to the loop: " ab" x 50, then "a".
    assert rep is not None and rep.unit == " ab"
    assert rep.tail_chars == 152 and rep.tail_tokens == 52  # the chunks the tail spans, the first in part
    # A 100,000-character answer of one letter: bounded work, the whole tail measured.
    long = repetition("a" * 100_000)
    assert long is not None and long.unit == "a" and long.share == 1.0


def side(text: str, t_first: float = 0.1) -> SideResult:
    meter = SideMeter("baseline", "http://x", t0=0.0)
    meter.feed(ChunkEvent(t_s=t_first, text=text[:10], completion_tokens=1))
    meter.feed(ChunkEvent(t_s=t_first + 2.0, text=text[10:], completion_tokens=100, finish_reason="length"))
    meter.feed(ChunkEvent(t_s=t_first + 2.0, done=True))
    return meter.result()


def test_the_label_is_under_the_speedup_on_the_page_and_in_the_export() -> None:
    looping, plain = side(LOOPING), side("An answer with no loop at its end, " * 2 + "and then it stops.")
    assert looping.repetition is not None and looping.repetition.tail_tokens is not None
    assert plain.repetition is None
    req = RaceRequest(messages=[Message(role="user", content="reformat")], max_tokens=101)
    spec = looping.model_copy(update={"side": "speculative", "decode_tokens_per_s": 100.0})
    result = compare(req, looping.model_copy(update={"decode_tokens_per_s": 40.0}), spec)
    html = speedup_html_for(result)
    assert LOOP_NOTE in html and ('data-loop="baseline"' in html or 'data-loop="speculative"' in html)
    assert "&quot;book&quot;," in html and "repeated 19 times" in html
    assert LOOP_NOTE in export_html(result)
    calm = compare(req, plain.model_copy(update={"decode_tokens_per_s": 40.0}),
                   plain.model_copy(update={"side": "speculative", "decode_tokens_per_s": 100.0}))
    assert LOOP_NOTE not in speedup_html_for(calm) and LOOP_NOTE not in export_html(calm)


def speedup_html_for(result: RaceResult) -> str:
    return speedup_html(RaceSnapshot(order=result.order, baseline=SideSnapshot(side="baseline"),
                                     speculative=SideSnapshot(side="speculative"), result=result))


def test_the_sweeps_per_request_table_labels_a_looping_request() -> None:
    row = RankedRequest(id="r1", speedup=2.4, loop=True, prompt_sha256="0" * 64, prompt_preview="Reformat this")
    calm = row.model_copy(update={"id": "r2", "loop": False})
    html = ranked_rows_html([row, calm], redacted=False)
    first, second = html.split('<tr data-request="r2"')
    assert LOOP_NOTE in first and LOOP_NOTE not in second


def _loop_by_full_scan(text: str) -> tuple[int, int] | None:
    """By hand, without shortcuts: for every unit, the longest tail (within the scan) that repeats with
    that period, char by char; the longest that counts as a loop (the shortest unit on a tie), then
    its tail over the whole text. (tail characters, unit) or None."""
    from demo.measure import LOOP_MAX_UNIT_CHARS, LOOP_MIN_REPEATS, LOOP_SCAN_CHARS

    def tail(unit: int, limit: int) -> int:
        m = 0
        while m < limit - unit and text[len(text) - 1 - m] == text[len(text) - 1 - m - unit]:
            m += 1
        return m + unit

    n, best = len(text), (0, 0)
    scan = min(n, LOOP_SCAN_CHARS)
    for unit in range(1, min(LOOP_MAX_UNIT_CHARS, n // LOOP_MIN_REPEATS) + 1):
        length = tail(unit, scan)
        if length > best[0] and length >= max(LOOP_MIN_CHARS, LOOP_MIN_REPEATS * unit):
            best = (length, unit)
    return (tail(best[1], n), best[1]) if best[1] else None


def test_the_detectors_shortcuts_find_what_a_full_scan_finds() -> None:
    """repetition() skips a unit with one comparison and stops once a tail spans the scan (a
    thousand-token loop took 5 ms a stream before, 0.01 ms after): on 2,000 answers, looping or
    not, cut mid-unit or not, it finds the same loop as a char-by-char scan of every unit."""
    import random

    rnd = random.Random(53)
    words = ["the", "a", "book", '"book", ', "sea\n", "x", "ab", "wind and boats. ", "{\"id\": 1}, "]
    looping = 0
    for _ in range(2000):
        head = "".join(rnd.choice(words) for _ in range(rnd.randint(0, 200)))
        unit = "".join(rnd.choice(words) for _ in range(rnd.randint(1, 12)))
        text = head + unit * rnd.randint(0, 30) + unit[: rnd.randint(0, len(unit))]
        want = _loop_by_full_scan(text)
        rep = repetition(text)
        assert (None if rep is None else (rep.tail_chars, len(rep.unit))) == want, text[-120:]
        looping += want is not None
    assert 500 < looping < 1900  # both kinds were drawn
    # A short loop at the very end inside a longer one: the longer tail wins, not the first found.
    nested = ("a" * 150 + "b") * 4 + "a" * 150
    rep = repetition(nested)
    assert rep is not None and (rep.tail_chars, len(rep.unit)) == _loop_by_full_scan(nested) == (len(nested), 151)
