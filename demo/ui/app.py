"""Build the whole page: the Race, Evaluate and Replay tabs, and how it is launched.

A tab is a module ``demo.ui.<name>_tab`` whose ``build(settings, ...)`` lays out its content
inside the current ``gr.Tab`` and wires its events; add one by importing it here.
"""

from __future__ import annotations

import logging

import gradio as gr

from demo.live.booth import Booth
from demo.live.budget import StreamBudget
from demo.live.session import RaceRegistry
from demo.settings import Settings
from demo.ui import booth_view, evaluate_tab, race_tab, replay_tab
from demo.ui.theme import CSS, make_theme

log = logging.getLogger(__name__)

# Ctrl+Enter starts a race, Escape stops it, from anywhere on the page. Start (the button or
# the key) does nothing more while this page's race waits or runs, or was just asked for and
# the app has not answered yet (the app refuses such a press too: demo.live.session).
KEYS_JS = """
let sdChanges = 0;  // updates of the status line seen so far
let sdPressed = null;  // [sdChanges when Start was last let through, when]
const sdWatch = () => {
  const el = document.getElementById('sd-run-status');
  if (el && !el.sdWatched) {
    el.sdWatched = true;
    new MutationObserver(() => { sdChanges += 1; })
      .observe(el, {childList: true, subtree: true, characterData: true, attributes: true});
  }
};
const sdBusy = () => {
  const s = document.querySelector('#sd-run-status .sd-run-status');
  if (s && (s.dataset.state === 'waiting' || s.dataset.state === 'running')) return true;
  return sdPressed !== null && sdPressed[0] === sdChanges && Date.now() - sdPressed[1] < 5000;
};
document.addEventListener('click', (e) => {
  if (!(e.target instanceof Element) || !e.target.closest('#sd-start')) return;
  sdWatch();
  if (sdBusy()) { e.stopImmediatePropagation(); e.preventDefault(); return; }
  sdPressed = [sdChanges, Date.now()];
}, true);
document.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
    document.getElementById('sd-start')?.click(); e.preventDefault();
  }
  else if (e.key === 'Escape') { document.getElementById('sd-stop')?.click(); }
});
"""


# While a race runs the app changes the race area at least once a second (tiles, or a
# "no token for N s" line when a server is silent). When nothing has arrived for
# SPECDEMO_UI_STALL_NOTICE_S the page, not the app, says so: the presenter is never left
# looking at a frozen "Racing…" (a lost connection to the app, or an app that stopped answering).
STALL_JS = """
(() => {
  const LIMIT_MS = %s * 1000;
  let last = Date.now();
  const seen = new WeakSet();
  const watch = () => {
    for (const id of ['sd-run-status', 'sd-tiles-baseline', 'sd-tiles-speculative',
                      'sd-status-baseline', 'sd-status-speculative', 'sd-text-baseline', 'sd-text-speculative']) {
      const el = document.getElementById(id);
      if (el && !seen.has(el)) {
        seen.add(el);
        new MutationObserver(() => { last = Date.now(); })
          .observe(el, {childList: true, subtree: true, characterData: true, attributes: true});
      }
    }
  };
  setInterval(() => {
    watch();
    const status = document.querySelector('#sd-run-status .sd-run-status');
    const running = status && status.dataset.state === 'running';
    let notice = document.getElementById('sd-stall');
    if (running && Date.now() - last > LIMIT_MS) {
      if (!notice) {
        notice = document.createElement('div');
        notice.id = 'sd-stall';
        notice.setAttribute('role', 'alert');
        document.body.appendChild(notice);
      }
      const s = Math.round((Date.now() - last) / 1000);
      notice.textContent = 'No update from the app for ' + s + ' s: the connection to it may be lost. ' +
        'If nothing changes, reload the page (saved runs are under Replay) and check the app is running.';
    } else if (notice) {
      notice.remove();
    }
  }, 1000);
})();
"""


def launch_js(stall_notice_s: float = 15.0, booth: bool = False) -> str:
    # Gradio follows the viewer's light/dark preference; a stage page is always dark.
    return ("() => { document.body.classList.add('dark');" + KEYS_JS + STALL_JS % float(stall_notice_s)
            + (booth_view.BOOTH_JS if booth else "") + "}")


def build_app(settings: Settings, registry: RaceRegistry | None = None,
              budget: StreamBudget | None = None) -> gr.Blocks:
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
            with gr.Tab("Race", id="race"):
                race = race_tab.build(settings, registry, workload, budget)
            with gr.Tab("Evaluate", id="evaluate"):
                evaluate_tab.build(settings, workload, budget)
            with gr.Tab("Replay", id="replay"):
                replay_tab.build(settings)
        if settings.booth:  # the show: one per app, watched by every open page
            booth = Booth(settings, race.presets, visitor_racing=lambda: registry.active() > 0)
            booth_view.wire(page, booth, race, caption, touch)
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
