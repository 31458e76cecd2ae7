"""Copy-ness: the share of the answer's word 3-grams found in the prompt, checked on hand-counted cases."""

from __future__ import annotations

import pytest

from demo.measure import copyness, words


def test_words_keep_case_and_split_punctuation() -> None:
    assert words('{"id": 7, "Name": x_1}') == ["{", '"', "id", '"', ":", "7", ",", '"', "Name", '"', ":", "x_1", "}"]
    assert words("  ") == []


@pytest.mark.parametrize("prompt, answer, expected", [
    ("the quick brown fox jumps", "the quick brown fox", 1.0),  # 2 of 2 trigrams
    ("the quick brown fox jumps", "the quick brown cat sat", 1 / 3),  # "the quick brown" only
    ("alpha beta gamma", "delta epsilon zeta eta", 0.0),
    ("a b c", "a b c a b c", 2 / 4),  # repeats count per position: abc, bca, cab, abc
    ("The Cat sat", "the cat sat", 0.0),  # exact tokens, as the drafter matches them
    ("", "one two three", 0.0),
    # Reordered JSON keys: 8 of the answer's 13 trigrams occur in the prompt (counted by hand).
    ('{"id": 7, "name": "Ada"}', '{"name": "Ada", "id": 7}', 8 / 13),
])
def test_known_values(prompt: str, answer: str, expected: float) -> None:
    value, why = copyness(prompt, answer)
    assert why is None
    assert value == pytest.approx(expected)


def test_other_n() -> None:
    assert copyness("a b c d", "a b x d", n=2) == (pytest.approx(1 / 3), None)  # ab yes, bx no, xd no


@pytest.mark.parametrize("answer, reason", [
    ("", "the answer is empty"),
    (" \n ", "the answer is empty"),
    ("two words", "the answer has fewer than 3 words"),
])
def test_none_with_a_reason(answer: str, reason: str) -> None:
    assert copyness("two words and more", answer) == (None, reason)


def test_deterministic_and_bounded() -> None:
    prompt = "SELECT name FROM customers WHERE country = 'DE' ORDER BY name"
    answer = "SELECT name FROM customers WHERE country = 'FR'"
    first = copyness(prompt, answer)
    assert first == copyness(prompt, answer)
    assert first[0] is not None and 0.0 < first[0] < 1.0
