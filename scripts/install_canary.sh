#!/usr/bin/env bash
# Debian's HAProxy (the canary's router) and Alertmanager (the rollback's alert path) for
# `python -m servers canary` and its tests (tests/test_canary*.py; skipped with a reason without
# them). Only the binaries are used: the packages' own services are not started.
set -euo pipefail
missing=()
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v prometheus-alertmanager >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "[canary] $(haproxy -v 2>&1 | head -n 1); $(prometheus-alertmanager --version 2>&1 | head -n 1)"
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "[canary] ${missing[*]} not installed and cannot apt-get here: the canary tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the packages must not start their services in a container or CI box.
policy=/usr/sbin/policy-rc.d
created=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
fi
trap 'if [[ $created == 1 ]]; then rm -f "$policy"; fi' EXIT
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[canary] installed $(haproxy -v 2>&1 | head -n 1); $(prometheus-alertmanager --version 2>&1 | head -n 1)"
