#!/usr/bin/env bash
# Debian's Prometheus for the monitoring e2e test and `python -m servers monitor` (no Docker needed).
# Only the binary is used: the package's own service is not started (tests run their own instance).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
    echo "[prometheus] $(prometheus --version 2>&1 | head -n 1)"
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "[prometheus] not installed and cannot apt-get it here: the Prometheus e2e test will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the package must not start its service in a container or CI box.
policy=/usr/sbin/policy-rc.d
created=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
fi
trap 'if [[ $created == 1 ]]; then rm -f "$policy"; fi' EXIT
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
echo "[prometheus] installed $(prometheus --version 2>&1 | head -n 1)"
