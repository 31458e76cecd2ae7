"""Look of the page: a dark, high-contrast theme with large figures, for a projector."""

from __future__ import annotations

import gradio as gr

from demo.view import burst_css


def make_theme() -> gr.themes.Base:
    return gr.themes.Base(
        primary_hue=gr.themes.colors.amber,
        neutral_hue=gr.themes.colors.slate,
        text_size=gr.themes.sizes.text_lg,
        spacing_size=gr.themes.sizes.spacing_sm,
        radius_size=gr.themes.sizes.radius_sm,
        font=[gr.themes.Font(f) for f in ("ui-sans-serif", "system-ui", "sans-serif")],  # offline: no web fonts
        font_mono=[gr.themes.Font(f) for f in ("ui-monospace", "DejaVu Sans Mono", "monospace")],
    ).set(
        layout_gap="6px",
        block_padding="4px 8px",
        body_background_fill_dark="#0b0f17",
        block_background_fill_dark="#121826",
        body_text_color_dark="#f2f4f8",
        block_label_text_color_dark="#c9d1dd",
        border_color_primary_dark="#2a3446",
        button_primary_background_fill_dark="#ffb000",
        button_primary_text_color_dark="#0b0f17",
        button_primary_background_fill_hover_dark="#ffc640",
    )


CSS = """
.gradio-container { max-width: 100% !important; padding: 2px 10px !important; }
.gradio-container .tab-wrapper, .gradio-container .tab-container { min-height: 0 !important; }
#sd-controls .block { padding: 4px 8px !important; }
#sd-controls .wrap { gap: 4px !important; }
footer { display: none !important; }
#sd-controls { gap: 6px !important; }
#sd-controls textarea { font-size: 15px !important; }
/* at most 4 lines, so Start never drops below a 720-pixel screen */
.sd-expect { font-size: 15px; color: #ffd37a; min-height: 1.2em; display: -webkit-box;
  -webkit-line-clamp: 4; -webkit-box-orient: vertical; overflow: hidden; }
.sd-header { display: flex; align-items: center; gap: 18px; }
.sd-speedup { text-align: center; min-width: 250px; }
.sd-speedup-value { font-size: 54px; font-weight: 800; line-height: 1.0; color: #f2f4f8;
  font-variant-numeric: tabular-nums; }
.sd-speedup.sd-win .sd-speedup-value { color: #4ade80; }
.sd-speedup.sd-loss .sd-speedup-value { color: #f87171; }
.sd-speedup-label { font-size: 14px; color: #c9d1dd; }
.sd-loop { font-size: 13px; font-weight: 600; color: #ffd37a; max-width: 320px; margin: 4px auto 0; }
.sd-loop-detail { font-size: 12px; font-weight: 400; color: #c9d1dd; }
.sd-mode-label { font-size: 22px; font-weight: 700; color: #ffb000; }
.sd-mode-note { font-size: 13px; color: #c9d1dd; max-width: 520px; }
.sd-run-detail { font-size: 13px; font-weight: 400; color: #c9d1dd; }
.sd-run-status { font-size: 16px; font-weight: 600; color: #f2f4f8; padding: 2px 0; }
.sd-run-status[data-state="waiting"] { color: #ffd37a; }
.sd-run-status[data-state="error"] { color: #f87171; }
.sd-badge-sub { font-size: 12px; font-weight: 400; }
.sd-badge { font-size: 16px; font-weight: 700; padding: 4px 10px; border-radius: 8px; }
.sd-badge-ok { background: #14532d; color: #dcfce7; }
.sd-badge-warn { background: #7c2d12; color: #ffedd5; }
.sd-badge-neutral { background: #1e293b; color: #e2e8f0; }
.sd-diff { font-size: 13px; font-weight: 400; display: flex; flex-direction: column; white-space: pre-wrap; }
.sd-banner { background: #7f1d1d; color: #fff; border: 2px solid #f87171; border-radius: 8px;
  padding: 6px 12px; font-size: 16px; font-weight: 600; }
.sd-banner ul { margin: 0; padding-left: 18px; }
#sd-stall { position: fixed; top: 12px; left: 50%; transform: translateX(-50%); z-index: 1000;
  max-width: 900px; background: #7f1d1d; color: #fff; border: 2px solid #f87171; border-radius: 8px;
  padding: 10px 16px; font-size: 20px; font-weight: 700; box-shadow: 0 4px 24px rgba(0,0,0,.6); }
.sd-banner code, .sd-banner li { color: #fff; }
.sd-pane-title { font-size: 22px; font-weight: 800; color: #f2f4f8; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
.sd-pane-note { font-size: 12px; font-weight: 400; color: #94a3b8; }
#sd-pane-speculative .sd-pane-title { color: #ffb000; }
.sd-tiles { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 6px; }
.sd-tile-note.sd-live { position: absolute; top: 3px; right: 6px; color: #4ade80; font-weight: 700; }
.sd-tile { position: relative; min-width: 0; background: #1a2233; border: 1px solid #2a3446; border-radius: 8px;
  padding: 2px 8px; }
.sd-tile-label { font-size: 13px; color: #c9d1dd; text-transform: uppercase; letter-spacing: .04em; }
.sd-tile-value { font-size: 28px; font-weight: 800; color: #f2f4f8; line-height: 1.1;
  font-variant-numeric: tabular-nums; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.sd-tile[data-key="tokens_per_s"] .sd-tile-value { font-size: 34px; color: #ffd37a; }
.sd-tile.sd-na .sd-tile-value { color: #94a3b8; }
/* An n/a reason wraps inside its tile (two lines at most) instead of widening the pane. */
.sd-tile-note { font-size: 12px; color: #94a3b8; overflow-wrap: anywhere; display: -webkit-box;
  -webkit-line-clamp: 2; -webkit-box-orient: vertical; overflow: hidden; }
.sd-side-status { font-size: 14px; color: #c9d1dd; }
/* An N-user race: one small bar per user (tokens so far out of max tokens), then the step's tiles. */
.sd-users { margin-bottom: 4px; }
.sd-users-label, .sd-users-step, .sd-speedup-ratio { font-size: 13px; color: #c9d1dd; }
.sd-users-bars { display: flex; gap: 2px; }
.sd-u { display: block; flex: 1 1 0; min-width: 3px; height: 12px; border-radius: 2px;
  background: linear-gradient(90deg, #60a5fa var(--p), #1a2233 var(--p)); border: 1px solid #2a3446; }
.sd-u-done { background: #4ade80; }
.sd-u-error { background: #f87171; }
/* The step's seven tiles, compact: the pane's text must stay on the one screen. */
.sd-users-tiles .sd-tiles { grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 4px; }
.sd-users-tiles .sd-tile-label { font-size: 11px; }
.sd-users-tiles .sd-tile-value { font-size: 20px; }
.sd-users-tiles .sd-tile-note { font-size: 11px; -webkit-line-clamp: 1; }
.sd-u-cancelled { background: linear-gradient(90deg, #94a3b8 var(--p), #1a2233 var(--p)); }
.sd-status-quiet { color: #ffd37a; font-weight: 700; }
.sd-side-error { font-size: 15px; background: #7f1d1d; color: #fff; padding: 4px 8px; border-radius: 6px; }
/* column-reverse keeps the view pinned to the newest text while it streams */
/* pin short text to the top (in column-reverse the free space is below) */
.sd-text > .sd-text-body, .sd-idle > .sd-text-body { margin-bottom: auto !important; margin-top: 0 !important; }
.sd-text, .sd-idle { height: 232px; overflow-y: auto; display: flex; flex-direction: column-reverse;
  white-space: pre-wrap; word-break: break-word;
  font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 16px; line-height: 1.35;
  background: #0f1522; color: #f2f4f8; border: 1px solid #2a3446; border-radius: 8px; padding: 6px 8px; }
.sd-placeholder { color: #64748b; font-style: italic; }
.sd-legend { font-size: 12px; color: #c9d1dd; }
.sd-legend span { padding: 0 5px; margin-left: 3px; border-radius: 3px; }
.sd-legend .b1 { border: 1px solid #2a3446; }
.sd-servers { width: 100%; font-size: 15px; border-collapse: collapse; }
.sd-servers td, .sd-servers th { padding: 4px 8px; border-bottom: 1px solid #2a3446; text-align: left; }
.sd-ok { color: #4ade80; font-weight: 700; } .sd-bad { color: #f87171; font-weight: 700; }
/* Evaluate tab: the upload's status, and report.html's workload sections (demo.sweep.report_workload) */
.sd-upload { font-size: 14px; } .sd-upload-ok { color: #4ade80; }
.sd-upload-issue { color: #ffd37a; overflow-wrap: anywhere; }
.sd-upload-error { color: #f87171; font-weight: 600; overflow-wrap: anywhere; }
#sd-eval-summary .lead { font-size: 18px; background: #121826; border-left: 4px solid #3ccf91;
  padding: 10px 14px; border-radius: 4px; margin: 4px 0; }
.sd-eval-workloads h3 { font-size: 18px; margin: 14px 0 6px; }
.sd-eval-workloads .workload-profile, .sd-eval-workloads .capacity { margin: 6px 0 14px; }
.sd-eval-workloads table { border-collapse: collapse; width: 100%; font-size: 14px; margin: 6px 0; }
.sd-eval-workloads th, .sd-eval-workloads td { border: 1px solid #2a3446; padding: 3px 6px; text-align: right;
  vertical-align: top; }
.sd-eval-workloads th { background: #1a2233; }
.sd-eval-workloads td.l, .sd-eval-workloads th.l { text-align: left; overflow-wrap: anywhere; }
.sd-eval-workloads .scroll { overflow-x: auto; }
.sd-eval-workloads .gain-most td:nth-child(2) { color: #4ade80; }
.sd-eval-workloads .gain-least td:nth-child(2) { color: #f87171; }
.sd-eval-workloads .capacity-points td[data-meets="yes"] { color: #4ade80; }
.sd-eval-workloads .capacity-points td[data-meets="no"] { color: #f87171; }
.sd-eval-workloads .saving { font-size: 16px; }
.sd-eval-workloads .na, .sd-eval-workloads .muted, #sd-eval-summary .muted { color: #94a3b8; }
.sd-eval-workloads .mono { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 12px; }
""" + burst_css(".sd-text") + burst_css(".sd-legend")
