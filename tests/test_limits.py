"""One validation place per input (demo/limits.py): a bound is written once, every model that
takes the input has it, and its one-line message reads in the CLI with the flag
(demo.cli.args.usage_error) and on the page with the field's name, no flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pydantic import ValidationError

from demo.cli.args import UsageError, build_request, usage_error
from demo.errors import BadInput
from demo.limits import MAX_TOKENS_LIMIT, TEMPERATURE_MAX
from demo.live.request import build_request as page_request
from demo.presets import Preset
from demo.results import Message, RaceRequest
from demo.settings import Settings
from demo.workload import WorkloadRequest

MODELS = {
    "preset": lambda **kw: Preset(name="p", title="t", expect="e", messages=[Message(role="user", content="x")], **kw),
    "workload line": lambda **kw: WorkloadRequest(id="a", api="chat", messages=[Message(role="user", content="x")],
                                                  **kw),
    "race request": lambda **kw: RaceRequest(messages=[Message(role="user", content="x")], **kw),
}


@pytest.mark.parametrize("model", MODELS)
def test_every_model_has_the_same_bounds(model: str) -> None:
    make = MODELS[model]
    make(temperature=TEMPERATURE_MAX, max_tokens=MAX_TOKENS_LIMIT)  # the bounds themselves are allowed
    for bad, field in (({"temperature": TEMPERATURE_MAX + 0.1}, "temperature"), ({"temperature": -0.1}, "temperature"),
                       ({"max_tokens": MAX_TOKENS_LIMIT + 1}, "max_tokens"), ({"max_tokens": 0}, "max_tokens")):
        with pytest.raises(ValidationError) as info:
            make(**bad)
        assert [err["loc"] for err in info.value.errors()] == [(field,)], (model, bad)


def _args(**kw: object) -> argparse.Namespace:
    base = dict(order="simultaneous", warmup=False, preset=None, prompt="hi", max_tokens=None, temperature=None,
                api=None)
    return argparse.Namespace(**{**base, **kw})


def test_the_cli_names_the_flag_and_the_page_the_field(tmp_path: Path) -> None:
    settings = Settings(presets_dir=tmp_path)
    with pytest.raises(UsageError) as cli:
        build_request(_args(max_tokens=MAX_TOKENS_LIMIT + 1), settings)
    assert str(cli.value) == f"--max-tokens: Input should be less than or equal to {MAX_TOKENS_LIMIT}"
    with pytest.raises(UsageError) as cli:
        build_request(_args(temperature=3.0), settings)
    assert str(cli.value) == "--temperature: Input should be less than or equal to 2"
    with pytest.raises(ValueError) as page:
        page_request({}, None, "hi", 0.0, MAX_TOKENS_LIMIT + 1, "simultaneous")
    assert "max_tokens: Input should be less than or equal to" in str(page.value) and "--" not in str(page.value)


def test_usage_error_names_only_the_commands_flags() -> None:
    with pytest.raises(ValidationError) as info:
        RaceRequest(messages=None, max_tokens=0)
    assert str(usage_error(info.value, {"max_tokens"})) == "--max-tokens: Input should be greater than or equal to 1"
    assert str(usage_error(info.value)) == "max_tokens: Input should be greater than or equal to 1"
    bad = BadInput.about("concurrency", "values must be between 1 and 1024")
    assert str(usage_error(bad)) == "--concurrency values must be between 1 and 1024"
    assert str(bad) == "concurrency values must be between 1 and 1024"
