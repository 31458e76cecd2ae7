"""The whole HTML pages the project writes (report.html, load.html, the exported race page), rendered
from Jinja2 templates (demo/templates/*.html.j2) with autoescape on: every value is escaped unless it
is marked safe (``markupsafe.Markup``), so a forgotten escape cannot exist. One environment, made once.

Escaping is demo.fmt.esc's (quotes included: ``&quot;``, ``&#x27;``), the same as every fragment of the
page, so a value reads the same wherever it is shown. Small fragments for Gradio components stay
functions (demo/view/); a page that shows one passes it as Markup, at one place, saying why it is safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import jinja2
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from demo.assets import REPORT_CSP, REPORT_CSS
from demo.fmt import esc, fmt_percent, fmt_speedup, fmt_temperature, or_na


@jinja2.pass_eval_context
def _finalize(eval_ctx: jinja2.nodes.EvalContext, value: Any) -> Any:
    """Autoescape's escaping, as demo.fmt.esc does it; a value marked safe (Markup) stays as it is.
    Only under autoescape: with it off, nothing is escaped (tests/test_page_escaping.py checks that)."""
    if eval_ctx.autoescape and not hasattr(value, "__html__"):
        return Markup(esc(value))  # esc() escapes <, >, & and both quotes: the value is now safe text
    return value


ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("demo", "templates"),
    autoescape=jinja2.select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True, default=True),
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
# Formatting only, as the Python builders do it (demo/fmt.py): no figure is computed in a template.
ENV.filters.update(fmt=format, repr=repr, na=or_na)
ENV.globals.update(fmt_percent=fmt_percent, fmt_speedup=fmt_speedup, fmt_temperature=fmt_temperature)


def render(name: str, **context: Any) -> str:
    """The template ``name`` (in demo/templates/) rendered with ``context``, autoescaped."""
    return ENV.get_template(name).render(**context)


def macro(name: str, macro_name: str) -> Callable[..., Markup]:
    """A macro of the template ``name``: a fragment a page and a Gradio component share (or a page's own,
    composed in Python), called with plain values; its output (Markup) has every value autoescaped."""
    return cast(Callable[..., Markup], getattr(ENV.get_template(name).module, macro_name))


def report_assets() -> dict[str, Markup]:
    """What every page of figures (report.html, load.html; templates/_report_page.html.j2) inlines: its CSP,
    its stylesheet and plotly.js. Each is marked safe here, and only here: our own text, not a user's."""
    return {
        "csp": Markup(REPORT_CSP),  # our constant, without '"', '<' or '&': its quotes stay as a CSP writes them
        "css": Markup(REPORT_CSS),  # our stylesheets (demo/static/), inlined whole
        "plotly_js": Markup(get_plotlyjs()),  # plotly.js itself, inlined once
    }
