"""The live layer: a race as the page shows it, without Gradio. The request from the page's input
(request), snapshots as Frames with the chart throttled (frames), a running race's frames and
their watchdog (frame_stream), the status line (status), saving a run (saving), the speculative
pane's title (pane_title), one race per browser session (session), and booth mode's show (booth).
Above the library (demo/*, demo/sweep), below the page (demo/ui), which maps it onto components."""
