"""Soak test of booth mode: the page races presets by itself for M minutes while its servers are killed.

    python -m benchmarks.soak --minutes M [--servers cpu|standin] [--seed S]
                              [--kills speculative,baseline] [--out DIR] [--pause-s 2]

What runs:
- servers: ``cpu`` (default) uses the real CPU vLLM pair (``python -m servers up --detach`` when it
  is not running, said so, and ``down`` at the end only then: the pair is left as found);
  ``standin`` runs two stand-ins (benchmarks/soak_standin.py) under the real supervisor, on free
  ports, with their run dir under the output folder; always torn down.
- the app: ``python app.py --booth`` in a subprocess on a free port, with its own runs dir under
  the output folder and a short pause between races.
- the page: headless Chromium (Playwright on /usr/bin/chromium) keeps it open for M minutes; it is
  polled every few seconds for the booth caption and for any error marker, and its console
  errors (and uncaught script errors) are collected.
- kills: each server in --kills is killed once (SIGKILL to its process group leader, from the
  launcher's state file) at a random time: the window [lead, M minutes - tail] is cut into one
  slot per kill and each lands at a uniform random time in its slot. A kill also waits until a
  live race has been saved (so the booth has a recording to show), for a bounded time until the
  server is streaming a live race's answer with at least half of it still to come (the hardest
  moment: the race fails mid-way; judged from the server's /metrics, not from the page, which
  lags), and until the kill before it has healed and a live race has run again.

What is measured (files in --out: races.jsonl, samples.jsonl, events.jsonl, summary.json, app.log):
- per booth race, from the app's ``booth-race {json}`` log lines: source (live / recording /
  none), outcome, speedup, the saved file (checked on disk when the line is read).
- every minute: RSS of the app, the supervisor and each server (summed over its process group),
  and the disk used by the runs dir.
- per kill: kill -> healthy (the supervisor restarted it and /health answers) and kill -> live
  (the first live race that started after it was healthy again); mid-race when the live race on
  at the kill failed (the kill cut it), whatever the soak aimed at.
- the summary and a PASS/FAIL line: no lost run, every kill done and healed (live again), no error
  marker on the page (a failed side, an error state, Gradio's error toast), no console error, no
  live race failed outside an outage, app memory growth < 50 MB/h (judged for runs of 20 minutes or more).

Every wait is bounded; Ctrl-C (or SIGTERM) stops what this started and leaves the pair as found.
"""
