"""Live frames set every output: Gradio rebuilds a component for each output a frame leaves
out (demo/ui/outputs.py). The race handler runs here against stand-in servers on 127.0.0.1."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.components.plot import PlotData

from demo import charts
from demo.live.session import RaceRegistry
from demo.settings import Settings
from demo.ui.app import build_app
from demo.ui.outputs import StreamOutputs


def _is_skip(value: object) -> bool:
    return isinstance(value, dict) and value == gr.skip()


def test_stream_outputs_resend_the_last_value_and_skip_only_before_the_first() -> None:
    with gr.Blocks():
        a, b, fig = gr.HTML(), gr.HTML(), gr.Plot()
    stream = StreamOutputs([a, b, fig])
    first = stream.values({a: "A1", b: None, fig: None})
    assert first[0] == "A1" and _is_skip(first[1]) and _is_skip(first[2])
    assert stream.values({b: "B1"})[:2] == ["A1", "B1"]
    assert stream.values({a: "A2"})[:2] == ["A2", "B1"]
    with gr.Blocks():
        other = gr.HTML()
    with pytest.raises(KeyError):
        stream.values({other: "x"})


def test_a_figure_is_serialised_once_and_resent_as_it_was() -> None:
    with gr.Blocks():
        a, fig = gr.HTML(), gr.Plot()
    stream = StreamOutputs([a, fig])
    figure = charts.race_figure(None)
    sent = stream.values({a: "A1", fig: figure})[1]
    assert isinstance(sent, PlotData) and sent.type == "plotly"
    assert json.loads(sent.plot)["layout"] == json.loads(figure.to_json())["layout"]
    again = stream.values({a: "A2"})[1]
    assert again is sent  # not serialised a second time, and not left out (no gr.skip())
    assert fig.postprocess(again) is again  # Gradio sends a serialised figure as it is
    newer = stream.values({fig: charts.race_figure(None)})[1]
    assert isinstance(newer, PlotData) and newer is not sent


@pytest.mark.asyncio
async def test_a_race_frame_leaves_nothing_out(standin_factory) -> None:
    base = standin_factory(tokens_per_s=300)
    spec = standin_factory(speculative=True, tokens_per_s=600, chunk_sizes=[1, 3])
    settings = Settings(baseline_url=base.url, speculative_url=spec.url, save_runs=False)
    registry = RaceRegistry()
    app = build_app(settings, registry)
    fns = {f.name: f for f in app.fns.values()}
    race, finish = fns["on_race"], fns["on_finish"].fn
    assert race.fn is not None and finish is not None
    elem = [c.elem_id for c in race.outputs]
    request = SimpleNamespace(session_hash="t-outputs")
    frames = [f async for f in race.fn(None, "Say hello.", 0.0, 40, "simultaneous", None, 1, request)]
    live = [f for f in frames if isinstance(f, list)]
    assert len(live) >= 5 and len(live) == len(frames), frames
    for frame in live[1:]:  # the first frame comes before anything is known
        left_out = [elem[i] or i for i, v in enumerate(frame) if _is_skip(v)]
        assert not left_out, f"a live frame left out {left_out}"
    # The race's end is handed over once, for on_finish.
    end = registry.take("t-outputs")
    assert end is not None and registry.take("t-outputs") is None
    assert end.result.speculative.completion_tokens == 40
    assert 'data-state="done"' in end.status

    # The follow-up draws the rest once, the final status with it: "done" means all is drawn.
    registry.hand_over("t-outputs", end)
    rest = {c.elem_id: v for c, v in (await finish([], [], request)).items()}
    assert {"sd-run-status", "sd-badge", "sd-acc-plot", "sd-chunk-plot", "sd-history"} <= set(rest)
    assert rest["sd-run-status"] == end.status
    # No result (on_race said why already, or it was drawn): nothing changes.
    nothing = {c.elem_id: v for c, v in (await finish([], [], request)).items()}
    assert list(nothing) == ["sd-acc-plot"] and _is_skip(nothing["sd-acc-plot"])
