"""The sampling vocabulary (demo/sampling.py): validated, and sent only when set."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from demo.client import request_body
from demo.results import Message, RaceRequest
from demo.sampling import ResponseFormat, sampling_body
from demo.workload import WorkloadRequest

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_a_request_without_sampling_fields_sends_what_it_sent_before():
    body = request_body(RaceRequest(prompt="hi", max_tokens=8), "m")
    assert set(body) == {"model", "temperature", "max_tokens", "stream", "stream_options", "messages"}


def test_every_set_field_is_sent_as_openai_and_vllm_read_it():
    req = RaceRequest(prompt="hi", top_p=0.9, top_k=40, min_p=0.05, stop="END", presence_penalty=0.5,
                      frequency_penalty=-0.5, repetition_penalty=1.1, seed=7,
                      response_format={"type": "json_schema", "json_schema": {"name": "rec", "schema": SCHEMA}})
    body = request_body(req, "m")
    assert body["top_p"] == 0.9 and body["top_k"] == 40 and body["min_p"] == 0.05
    assert body["stop"] == ["END"]  # one string is a list of one
    assert body["presence_penalty"] == 0.5 and body["frequency_penalty"] == -0.5
    assert body["repetition_penalty"] == 1.1 and body["seed"] == 7
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "rec", "schema": SCHEMA}}
    assert req.structured


def test_a_workload_line_carries_its_sampling_and_seed_into_the_race_request():
    w = WorkloadRequest(id="a", api="chat", messages=[Message(role="user", content="x")], top_p=0.5,
                        stop=["\n\n"], seed=3, response_format={"type": "json_object"}, tag="code")
    req = w.to_race_request(seed=99)
    assert req.seed == 3  # the line's own seed wins over the sweep's
    assert sampling_body(req) == {"top_p": 0.5, "stop": ["\n\n"], "response_format": {"type": "json_object"}}
    assert WorkloadRequest(id="b", api="chat", messages=w.messages).to_race_request(seed=99).seed == 99


@pytest.mark.parametrize("bad", [
    {"top_p": 0}, {"top_p": 1.5}, {"top_k": -2}, {"min_p": 2}, {"presence_penalty": 3},
    {"repetition_penalty": 0}, {"stop": ["x"] * 17}, {"stop": [""]},
    {"response_format": {"type": "xml"}}, {"response_format": {"type": "json_schema"}},
    {"response_format": {"type": "json_object", "json_schema": {"schema": {}}}},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": {"x": "y" * 70_000}}}},
])
def test_out_of_bounds_sampling_is_refused(bad):
    with pytest.raises(ValidationError):
        RaceRequest(prompt="hi", **bad)


def test_a_saved_request_round_trips_with_its_response_format():
    req = RaceRequest(prompt="hi", response_format=ResponseFormat(type="json_schema",
                                                                   json_schema={"schema": SCHEMA}))
    saved = req.model_dump_json()
    assert '"schema":' in saved and "schema_" not in saved
    again = RaceRequest.model_validate_json(saved)
    assert again.response_format == req.response_format
    # A record saved before the sampling fields existed keeps loading, with none of them set.
    old = RaceRequest.model_validate({"prompt": "hi", "temperature": 0.0, "max_tokens": 8, "mode": "sequential"})
    assert sampling_body(old) == {} and old.order == "sequential"


def test_a_sweep_of_a_preset_sends_the_presets_own_sampling():
    from demo.presets import resolve_presets
    from demo.settings import ROOT
    from demo.sweep.models import CellSettings
    from demo.sweep.plan import cell_requests

    presets = resolve_presets(["json_reformat_schema"], ROOT / "presets")
    cell = CellSettings(preset="json_reformat_schema", temperature=0.0, concurrency=1, max_tokens=64, api="chat",
                        repeats=1, warmup=0, order="sequential", baseline_url="b", speculative_url="s")
    (req,) = cell_requests(cell, presets, None)
    assert req.structured and req.response_format == presets["json_reformat_schema"].response_format
