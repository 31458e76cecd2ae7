"""The shipped presets load, say what they claim, and a broken preset file is reported, not fatal."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from demo.presets import Preset, load_presets
from demo.sampling import sampling_body
from demo.tool_request import tool_body

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
EXPECTED_NAMES = {"json_reformat", "json_reformat_schema", "sql", "code_edit", "poetry", "rag_long", "summarization",
                  "agent_loop", "agent_session"}

# The GPL v3 is shipped verbatim (its licence forbids changing it); docs/SOURCES.md records this hash.
GPL_SHA256 = "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986"
# The sentence that answers rag_long's question, as the reader sees it (line breaks folded): the
# document's last paragraph. (SmolLM2-135M could not quote section 0's definition from 7,600 tokens
# back; asked about the last paragraph, it names the license right: tests/e2e/test_preset_answers.py.)
RAG_ANSWER = ("If this is what you want to do, use the GNU Lesser General Public License instead of this "
              "License.")
# SmolLM2's tokenizer gives 7,639 tokens for the 35,149-char GPL (0.217 tokens/char, see
# docs/SOURCES.md, 7,722 for the whole rag_long prompt); 0.22 is that ratio plus ~1%.
TOKENS_PER_CHAR_UPPER = 0.22
CONTEXT_TOKENS = 8192
CHAT_TEMPLATE_TOKENS = 30  # ChatML markers around two messages, generously


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.fixture(scope="module")
def shipped() -> dict[str, Preset]:
    presets, errors = load_presets(PRESETS_DIR)
    assert errors == [], errors
    return presets


def test_expected_presets_are_shipped(shipped: dict[str, Preset]) -> None:
    assert set(shipped) == EXPECTED_NAMES


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_preset_is_complete_for_the_audience(shipped: dict[str, Preset], name: str) -> None:
    preset = shipped[name]
    assert preset.title.strip()
    assert preset.expect.strip() and "\n" not in preset.expect, "expect must be one line"
    # A system message, then the conversation so far, ending with the user's turn (the agent loop
    # carries earlier assistant turns: its tool calls).
    roles = [m.role for m in preset.messages]
    assert roles[0] == "system" and roles[-1] == "user"
    assert roles[1:] == ["user", "assistant"] * (len(roles) // 2 - 1) + ["user"], roles
    assert all(m.text.strip() for m in preset.messages)
    assert preset.api == "chat"
    # A session's turns add up (agent_session: five turns), so each is shorter.
    low, high = (120, 160) if preset.session else (200, 512)
    assert low <= preset.max_tokens <= high, "decode long enough to show the effect, short enough to wait for"
    # Every {{placeholder}} was filled from its include file.
    assert all("{{" not in m.text for m in preset.messages)
    for rel in preset.include.values():
        assert (PRESETS_DIR / rel).read_text(encoding="utf-8") in preset.messages[-1].text


def test_temperatures(shipped: dict[str, Preset]) -> None:
    assert shipped["poetry"].temperature == 1.0
    # Greedy everywhere else, so both servers must produce identical text.
    assert all(p.temperature == 0.0 for n, p in shipped.items() if n != "poetry")


def test_only_two_presets_set_sampling_fields(shipped: dict[str, Preset]) -> None:
    # Every other preset sends what it always sent: temperature and max tokens, the server's defaults.
    # The schema preset sends its response_format; summarization a frequency penalty (without it the
    # CPU model's summary ended in one sentence repeated: presets/summarization.yaml).
    # (The tool fields are not sampling: agent_session offers tools, demo/tool_request.py.)
    assert {n for n, p in shipped.items() if sampling_body(p).keys() - tool_body(p).keys() or p.seed is not None} == {
        "json_reformat_schema", "summarization"}
    assert {n for n, p in shipped.items() if tool_body(p)} == {"agent_session"}
    assert sampling_body(shipped["summarization"]) == {"frequency_penalty": 0.4}


def _walk(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every sub-schema of ``schema`` (properties and array items), itself first."""
    out = [schema]
    for sub in schema.get("properties", {}).values():
        out += _walk(sub)
    if isinstance(schema.get("items"), dict):
        out += _walk(schema["items"])
    return out


def test_the_json_schema_preset_is_json_reformat_under_a_schema_matching_its_record(
        shipped: dict[str, Preset]) -> None:
    free, constrained = shipped["json_reformat"], shipped["json_reformat_schema"]
    # The same record and task, the same length: only the response_format differs.
    assert constrained.messages == free.messages
    assert (constrained.temperature, constrained.max_tokens, constrained.api) == (
        free.temperature, free.max_tokens, free.api)
    rf = constrained.response_format
    assert rf is not None and rf.type == "json_schema" and rf.json_schema is not None
    schema = rf.json_schema.schema_
    record = json.loads(free.messages[-1].text.splitlines()[1])
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(record, schema)  # the record itself is a valid answer
    assert list(schema["properties"]) == list(record)  # field by field, in the record's order
    nodes = _walk(schema)
    assert all("maxItems" in s for s in nodes if s.get("type") == "array"), "an array without maxItems can loop"
    assert all("maxLength" in s or "enum" in s for s in nodes if s.get("type") == "string")
    assert all(s.get("additionalProperties") is False for s in nodes if s.get("type") == "object")
    # Its request carries the schema, as both sides receive it.
    body = sampling_body(constrained.to_request())
    assert body == {"response_format": {"type": "json_schema", "json_schema": {
        "name": "order_record", "strict": True, "schema": schema}}}


def test_sampling_fields_in_a_preset_file_reach_its_request(tmp_path: Path) -> None:
    sampling = r"""top_p: 0.9
top_k: 40
min_p: 0.05
stop: ["\n\n", END]
presence_penalty: 0.5
frequency_penalty: -0.5
repetition_penalty: 1.1
seed: 7
response_format: {type: json_object}
"""
    (tmp_path / "s.yaml").write_text(GOOD_BODY + sampling, encoding="utf-8")
    presets, errors = load_presets(tmp_path)
    assert errors == []
    req = presets["s"].to_request(top_p=0.5)  # a change on top (a CLI flag) wins over the file
    assert sampling_body(req) == {"top_p": 0.5, "top_k": 40, "min_p": 0.05, "stop": ["\n\n", "END"],
                                  "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
                                  "response_format": {"type": "json_object"}}
    assert req.seed == 7


def test_rag_document_is_long_real_and_fits_the_context(shipped: dict[str, Preset]) -> None:
    preset = shipped["rag_long"]
    doc_path = PRESETS_DIR / preset.include["doc"]
    doc = doc_path.read_text(encoding="utf-8")

    assert len(doc) / 4 >= 6000, "the stated estimate rule (chars/4) must reach 6,000 tokens"
    assert hashlib.sha256(doc_path.read_bytes()).hexdigest() == GPL_SHA256, "the GPL must stay verbatim"
    assert doc.lstrip().startswith("GNU GENERAL PUBLIC LICENSE")

    prompt_chars = sum(len(m.text) for m in preset.messages)
    estimate = prompt_chars * TOKENS_PER_CHAR_UPPER + CHAT_TEMPLATE_TOKENS + preset.max_tokens
    assert estimate < CONTEXT_TOKENS, f"~{estimate:.0f} tokens would not fit SmolLM2's {CONTEXT_TOKENS}"


def test_rag_question_is_answered_by_a_sentence_that_is_in_the_document(shipped: dict[str, Preset]) -> None:
    preset = shipped["rag_long"]
    doc = (PRESETS_DIR / preset.include["doc"]).read_text(encoding="utf-8")
    question = preset.messages[-1].text.rsplit(doc, 1)[1]

    folded = _fold(doc)
    assert folded.count(RAG_ANSWER) == 1
    assert RAG_ANSWER in folded[-400:]  # in the last paragraph
    assert "last paragraph" in question.lower() and "linking proprietary applications" in question


def test_summarization_text_is_about_a_thousand_words(shipped: dict[str, Preset]) -> None:
    text = (PRESETS_DIR / shipped["summarization"].include["text"]).read_text(encoding="utf-8")
    assert 900 <= len(text.split()) <= 1100
    assert "PEP stands for Python Enhancement Proposal." in text


def test_every_shipped_document_has_a_recorded_source() -> None:
    sources = (PRESETS_DIR / "docs" / "SOURCES.md").read_text(encoding="utf-8")
    docs = [p.name for p in (PRESETS_DIR / "docs").iterdir() if p.name != "SOURCES.md"]
    assert docs
    for name in docs:
        assert f"`{name}`" in sources, f"{name} has no source/licence entry in docs/SOURCES.md"


GOOD_BODY = "title: T\nexpect: E\nmessages:\n  - role: user\n    content: hi\n"

BROKEN = {
    "bad_yaml": ("title: T\nexpect: [unclosed\nmessages: []\n", ["line 3"]),
    "missing_field": ("expect: E\nmessages:\n  - role: user\n    content: hi\n", ["title", "required"]),
    "wrong_type": (GOOD_BODY + "temperature: hot\n", ["temperature", "number"]),
    "wrong_nested": (GOOD_BODY.replace("role: user", "role: robot"), ["messages.0.role"]),
    "out_of_range": (GOOD_BODY + "max_tokens: 0\n", ["max_tokens"]),
    "unknown_field": (GOOD_BODY + "colour: red\n", ["colour", "extra"]),
    "top_p_out_of_range": (GOOD_BODY + "top_p: 1.5\n", ["top_p", "1"]),
    "stop_not_text": (GOOD_BODY + "stop:\n  - a: 1\n", ["stop.0"]),
    "unknown_response_format": (GOOD_BODY + "response_format:\n  type: xml\n", ["response_format.type"]),
    "schema_missing": (GOOD_BODY + "response_format:\n  type: json_schema\n", ["response_format", "json_schema"]),
    "unsafe_tag": (
        "title: T\nexpect: E\nmessages: !!python/object/apply:os.system [\"touch {marker}\"]\n",
        ["line 3", "python/object/apply"],
    ),
    "not_a_mapping": ("- just\n- a list\n", ["mapping"]),
    "missing_include": (
        GOOD_BODY.replace("content: hi", "content: '{{{{doc}}}}'") + "include:\n  doc: docs/nope.txt\n",
        ["nope.txt"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_file_is_reported_by_file_and_field_and_the_rest_still_load(
    tmp_path: Path, case: str
) -> None:
    folder = tmp_path / "presets"
    shutil.copytree(PRESETS_DIR, folder)
    marker = tmp_path / "unsafe-yaml-ran"
    body, words = BROKEN[case]
    (folder / f"zz_{case}.yaml").write_text(body.format(marker=marker), encoding="utf-8")

    presets, errors = load_presets(folder)

    assert set(presets) == EXPECTED_NAMES
    assert len(errors) == 1
    error = errors[0]
    assert error.file == f"zz_{case}.yaml"
    assert "\n" not in error.message
    for word in words:
        assert word.lower() in error.message.lower(), error.message
    assert not marker.exists(), "a YAML tag executed code"


def test_duplicate_name_is_reported_and_first_one_kept(tmp_path: Path) -> None:
    folder = tmp_path / "presets"
    shutil.copytree(PRESETS_DIR, folder)
    (folder / "zz_copy.yaml").write_text("name: poetry\n" + GOOD_BODY, encoding="utf-8")

    presets, errors = load_presets(folder)

    assert presets["poetry"].temperature == 1.0
    assert [(e.file, "duplicate" in e.message) for e in errors] == [("zz_copy.yaml", True)]
