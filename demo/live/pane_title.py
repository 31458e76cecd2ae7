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


def arm_titles(settings: Settings, infos: list[ServerInfo] | None, result: RaceResult | None) -> dict[str, str]:
    """Every arm's pane title (HTML) by pane key (demo.view.pane_key). One arm: the speculative
    pane's title (spec_title). Several: 'name (method, k=…)' each, the first arm's method
    and k as spec_title finds them, another's from its SPECDEMO_ARMS entry, its probe and the last run."""
    arms = settings.arm_endpoints()
    if len(arms) <= 1:
        return {"speculative": spec_title(settings, infos, result)}
    out: dict[str, str] = {}
    for i, e in enumerate(arms):
        name = e.arm or f"arm {i + 1}"
        info = next((x for x in infos or [] if x.side == "speculative" and x.arm == e.arm), None)
        method = (settings.spec_method if i == 0 else None) or e.method or (info.spec_method if info else None)
        k = (settings.spec_num_tokens if i == 0 else None) or (info.spec_num_tokens if info else None)
        run = (result.first_arm if i == 0 else result.arms.get(name)) if result else None
        if k is None and run is not None and run.side.spec is not None:
            k = run.side.spec.num_spec_tokens
        title = view.arm_title(name, e.label, method, k)
        out[view.pane_key(i, name)] = view.pane_title_html(title, None if method else "method: set it in SPECDEMO_ARMS")
    return out


def recorded_arm_titles(result: RaceResult) -> list[str]:
    """Each arm's pane title (HTML) in the replay of a saved race of several arms, in the race's
    order: 'eagle3 (EAGLE3, k=3)', from what the run saved (its label, method and k). No
    "(recorded)": the compact panes' one line has no room, and the banner says it."""
    titles = view.saved_pane_titles(result)
    return [view.pane_title_html(title) for key, title in titles.items() if key != "baseline"]
