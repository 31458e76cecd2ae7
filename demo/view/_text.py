"""The streamed text with burst shading (a class per tokens in a chunk), tool calls, the legend."""

from __future__ import annotations

from collections.abc import Sequence

from demo.fmt import NA, esc
from demo.results import (
    Side,
    SideSnapshot,
    ToolCall,
)

# ---------------------------------------------------------------- text with burst shading

def burst_class(tokens: int) -> str:
    """CSS class by tokens in one chunk: b1 (one token) ... b5 (five or more), b0 unknown (their
    shading: demo/static/burst.css)."""
    if tokens <= 0:
        return "b0"
    return f"b{min(tokens, 5)}"


def text_html(side: Side, snap: SideSnapshot, shade: bool) -> str:
    """The streamed text, escaped; with ``shade``, each multi-token chunk in a span classed by its
    burst size. Single-token chunks stay plain text: the markup stays small on long answers.

    Append-only while a side streams: the markup ends with the text, no closing tags (the
    browser closes the two divs), so each frame's value starts with the last one's and Gradio
    sends the page only what was added ("append" in its stream diff), not the whole pane."""
    body: list[str] = []
    if snap.bursts:
        for _t, tokens, chunk in snap.bursts:
            if not chunk:
                continue
            if shade and tokens != 1:
                body.append(f'<span class="{burst_class(tokens)}" title="{tokens} tokens in one step">'
                            f"{esc(chunk)}</span>")
            else:
                body.append(esc(chunk))
    elif snap.text:
        body.append(esc(snap.text))
    body.append(tool_calls_html(snap.tool_calls))
    return f'<div class="sd-text" data-side="{esc(side)}"><div class="sd-text-body">{"".join(body)}'


def tool_calls_html(calls: Sequence[ToolCall]) -> str:
    """An answer's tool calls after its text, each a block: its function's name and its arguments'
    JSON as the server streamed it, escaped. Append-only like the text: the last call's block is
    left open, so while its arguments stream each frame only adds to the markup."""
    blocks = [f'<div class="sd-tool-call" data-tool-call="{i}"><span class="sd-tool-call-label">tool call</span> '
              f'<span class="sd-tool-name">{esc(c.name) or NA}</span><code class="sd-tool-args">{esc(c.arguments)}'
              for i, c in enumerate(calls)]
    return "</code></div>".join(blocks)


def burst_legend_html() -> str:
    """The legend of the text's shading: tokens accepted in one verification step, 1 to 5+."""
    cells = "".join(
        f'<span class="{c}">{esc(label)}</span>'
        for c, label in (("b1", "1 token"), ("b2", "2"), ("b3", "3"), ("b4", "4"), ("b5", "5+ per step")))
    return f'<div class="sd-legend">Shading = tokens accepted in one step: {cells}</div>'
