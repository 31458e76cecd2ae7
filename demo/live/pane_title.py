"""The speculative pane's title line: its method and k, from the settings, the server or the
last run, and what is unknown said as n/a with the reason.
"""

from __future__ import annotations

from demo import view
from demo.results import RaceResult
from demo.server_info import ServerInfo
from demo.settings import Settings


def spec_title(settings: Settings, infos: list[ServerInfo] | None, result: RaceResult | None) -> str:
    """The speculative pane's title line (HTML): 'Speculative (method, k)' from the launcher's
    settings, the server, or the last run; what is unknown says n/a and why."""
    method, k = settings.spec_method, settings.spec_num_tokens
    spec_info = next((i for i in infos or [] if i.side == "speculative"), None)
    if spec_info is not None:
        method = method or spec_info.spec_method
        k = k or spec_info.spec_num_tokens
    if k is None and result is not None and result.speculative.spec is not None:
        k = result.speculative.spec.num_spec_tokens
    return view.pane_title_html(view.spec_pane_title(method, k), view.spec_title_note(method, k))
