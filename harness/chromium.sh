#!/bin/sh
# Debian's Chromium, as harness/chromium.py launches it through Playwright. Playwright starts the
# browser in a session of its own, which Linux's autogroups schedule as a group of its own at nice 0
# whatever the browser's nice: niced (harness/idle.py), it would still take a full share of the
# cores. Like servers/procs.py's keep_nice_in_session, this carries the nice value over to the
# session's autogroup first; at nice 0 it does nothing.
n=$(nice)
if [ "$n" -gt 0 ] && [ -w /proc/self/autogroup ]; then
    echo "$n" >/proc/self/autogroup 2>/dev/null || true
fi
exec /usr/bin/chromium "$@"
