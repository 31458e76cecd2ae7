"""Build the whole page: the Race, Evaluate, Replay and Canary tabs, and how it is launched.

A tab is a module ``demo.ui.<name>_tab`` whose ``build(settings, ...)`` lays out its content
inside the current ``gr.Tab`` and wires its events; add one by importing it here.
"""

from __future__ import annotations

import logging

import gradio as gr

from demo.assets import static_text
from demo.live.booth import Booth
from demo.live.budget import StreamBudget
from demo.live.canary_stage import CanaryStage
from demo.live.session import RaceRegistry
from demo.settings import Settings
from demo.ui import booth_view, canary_tab, evaluate_tab, load_panel, race_tab, replay_tab
from demo.ui.theme import CSS, make_theme

log = logging.getLogger(__name__)

# The page's script (demo/static/page.js): Ctrl+Enter and Escape, Start pressed once, the notice
# when the app has not updated a running race for SPECDEMO_UI_STALL_NOTICE_S.
PAGE_JS = static_text("page.js")


def launch_js(stall_notice_s: float = 15.0, booth: bool = False) -> str:
    """The page's on-load script: dark mode, the stall notice after ``stall_notice_s`` seconds, the page's JS.

    With ``booth``, the booth's script too. Returns the JavaScript function's source, for Gradio's ``js``."""
    # Gradio follows the viewer's light/dark preference; a stage page is always dark.
    return ("() => { document.body.classList.add('dark');\n"
            f"const SD_STALL_NOTICE_S = {float(stall_notice_s)!r};\n"
            + PAGE_JS + (booth_view.BOOTH_JS if booth else "") + "\n}")


def build_app(settings: Settings, registry: RaceRegistry | None = None,
              budget: StreamBudget | None = None) -> gr.Blocks:
    """Build the whole page: the Race tab (with its load section), the Evaluate, Replay and Canary tabs.

    ``registry`` and ``budget`` are shared by every viewer of the app (new ones when not given). With
    ``settings.booth`` the booth show runs on the page; otherwise each page load probes the servers. Returns the
    Gradio Blocks, not launched."""
    registry = registry or RaceRegistry()
    # One budget of streams for every viewer of this app together: the Race tab's races and load
    # sweeps and the Evaluate tab's sweeps all hold theirs here while they run (demo.live.budget).
    budget = budget or StreamBudget(settings.stream_budget())
    with gr.Blocks(title="Speculative decoding: live race", fill_width=True) as page:
        # The workload uploaded in the Evaluate tab (a Workload dump, or None), raced in the Race tab.
        workload = gr.State(None)
        if settings.booth:
            caption, touch = booth_view.build_caption()
        with gr.Tabs():
            with gr.Tab("Race", id="race") as race_page:
                race = race_tab.build(settings, registry, workload, budget)
                load = load_panel.build(settings, budget, preset=race.preset, prompt=race.prompt,
                                        temperature=race.temperature, workload=workload)
            with gr.Tab("Evaluate", id="evaluate") as evaluate_page:
                evaluate_tab.build(settings, workload, budget)
            with gr.Tab("Replay", id="replay") as replay_page:
                replay_tab.build(settings)
            with gr.Tab("Canary", id="canary") as canary_page:
                canary = CanaryStage(settings, race.presets, settings.canary_run_dir)
                canary_timer = canary_tab.build(canary)
        # The canary view polls only while its tab is open.
        canary_page.select(lambda: gr.Timer(active=True), outputs=canary_timer, show_progress="hidden")
        for other in (race_page, evaluate_page, replay_page):
            other.select(lambda: gr.Timer(active=False), outputs=canary_timer, show_progress="hidden")
        if settings.booth:  # the show: one per app, watched by every open page
            booth = Booth(settings, race.presets, budget=load.budget,
                          visitor_racing=lambda: registry.active() > 0 or load.registry.active() > 0)
            booth_view.build(page, booth, race, caption, touch, load)
        else:
            page.load(race.on_probe, outputs=race.server_outputs, show_progress="hidden")

    page.queue(default_concurrency_limit=settings.max_concurrent_races)
    return page


LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def exposure_warning(settings: Settings) -> str | None:
    """A loud warning when the page is reachable beyond this machine without a login."""
    exposed = settings.ui_share or settings.ui_host not in LOCAL_HOSTS
    if not exposed or settings.ui_auth is not None:
        return None
    where = "a public share link" if settings.ui_share else f"host {settings.ui_host}"
    return ("!!! WARNING: the page is reachable beyond this machine "
            f"({where}) WITHOUT a login.\n"
            "!!! Anyone who reaches it can run prompts on your servers. "
            "Set SPECDEMO_UI_AUTH=user:password, or bind to 127.0.0.1.")


def launch_kwargs(settings: Settings) -> dict:
    """Arguments for Blocks.launch from settings: bind, share, login, look."""
    auth = None
    if settings.ui_auth is not None:
        user, sep, password = settings.ui_auth.get_secret_value().partition(":")
        if not sep or not user or not password:
            raise ValueError("SPECDEMO_UI_AUTH must be 'user:password'.")
        auth = (user, password)
    return dict(
        server_name=settings.ui_host,
        server_port=settings.ui_port,
        share=settings.ui_share,
        auth=auth,
        theme=make_theme(),
        css=CSS + booth_view.BOOTH_CSS,
        js=launch_js(settings.ui_stall_notice_s, settings.booth),
        show_error=False,
        footer_links=[],
    )
