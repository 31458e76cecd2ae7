"""A race request from the page's input, without Gradio: the preset or workload request the
dropdown names, the text its prompt box shows, and the RaceRequest when Start is pressed.
"""

from __future__ import annotations

from pydantic import ValidationError

from demo import view
from demo.fmt import validation_summary
from demo.presets import Preset
from demo.results import Message, Order, RaceRequest
from demo.settings import Settings
from demo.workload import Workload, WorkloadRequest

FREE_PROMPT = "(free prompt)"
# The preset dropdown's value for a request of the uploaded workload: "workload:<id>" (a preset's
# name never holds a colon).
WORKLOAD_PREFIX = "workload:"
MAX_WORKLOAD_CHOICES = 200  # a 10,000-line file would make the dropdown unusable: its first 200


def default_order(settings: Settings) -> tuple[Order, str | None]:
    """The Order control's default and why, when there is a reason to say: a race of two or more
    arms on CPU servers is sequential (they would share the machine's cores, and a simultaneous
    race would measure the sharing, not the methods); else the simultaneous race."""
    arms = len(settings.arm_endpoints())
    if arms > 1 and settings.server_device == "cpu":
        return "sequential", view.cpu_arms_order_note(arms)
    return "simultaneous", None


def preset_user_text(preset: Preset) -> str:
    """The text the prompt box shows for a preset: its last user message."""
    users = [m.text for m in preset.messages if m.role == "user"]
    return users[-1] if users else preset.messages[-1].text


def workload_choices(workload: Workload | None) -> list[tuple[str, str]]:
    """The dropdown entries for the uploaded workload's first MAX_WORKLOAD_CHOICES requests:
    ('workload: <id>', 'workload:<id>')."""
    requests = workload.requests[:MAX_WORKLOAD_CHOICES] if workload else []
    return [(f"workload: {r.id}", WORKLOAD_PREFIX + r.id) for r in requests]


def workload_request(workload: Workload | None, choice: str | None) -> WorkloadRequest | None:
    """The request a 'workload:<id>' dropdown value names, if the loaded workload has it."""
    if workload is None or not choice or not choice.startswith(WORKLOAD_PREFIX):
        return None
    rid = choice.removeprefix(WORKLOAD_PREFIX)
    return next((r for r in workload.requests if r.id == rid), None)


def workload_user_text(req: WorkloadRequest) -> str:
    """The text the prompt box shows for a workload request: its last user message, or its prompt."""
    if req.prompt is not None:
        return req.prompt
    users = [m.text for m in req.messages or [] if m.role == "user"]
    return users[-1] if users else req.prompt_text


def build_request(presets: dict[str, Preset], preset_name: str | None, prompt: str,
                  temperature: float, max_tokens: float, order: str, workload: Workload | None = None) -> RaceRequest:
    """The preset's (or the workload request's) messages, seed and sampling fields (top_p, stop,
    response_format...) when its prompt is unchanged; an edited prompt is a free prompt, sent
    without them.

    Every argument is page input, validated here (``order`` by RaceRequest). Raises ValueError
    with a one-line message for input the servers should never see.
    """
    preset = presets.get(preset_name or "")
    wreq = workload_request(workload, preset_name)
    try:
        tokens = int(max_tokens)
        if wreq is not None and prompt == workload_user_text(wreq):
            # The line's own seed and sampling fields, as the Evaluate tab sends them.
            return RaceRequest(**{**dict(wreq.to_race_request()), "preset": WORKLOAD_PREFIX + wreq.id,
                                  "temperature": temperature, "max_tokens": tokens, "order": order})
        if preset is not None and prompt == preset_user_text(preset):
            return preset.to_request(temperature=temperature, max_tokens=tokens, order=order)
        return RaceRequest(messages=[Message(role="user", content=prompt)], temperature=temperature,
                           max_tokens=tokens, order=order)
    except (ValidationError, TypeError) as e:
        if isinstance(e, ValidationError):
            raise ValueError(f"Invalid {validation_summary(e)}.") from e
        raise ValueError(f"Invalid input: {e}.") from e
