# Sourced by scripts/install_prometheus.sh and scripts/install_canary.sh: Debian packages whose
# binaries a test or a command runs, installed only where missing.
#
#   apt_install LABEL WHAT COMMAND:PACKAGE...
#
# installs the PACKAGE of each COMMAND not on PATH. Where nothing is missing, or where it cannot
# apt-get (not root, no apt-get), it says so on one line and returns 0: WHAT (e.g. "the canary
# tests") will be skipped, with their reason. The packages' own services are never started: a
# policy-rc.d that answers 101 is in place during the install, and removed after if we made it.
apt_install() {
    local label="$1" what="$2" pair missing=()
    shift 2
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    [[ ${#missing[@]} -gt 0 ]] || return 0
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "[$label] ${missing[*]} not installed and cannot apt-get here: $what will be skipped" >&2
        return 0
    fi
    (
        export DEBIAN_FRONTEND=noninteractive
        policy=/usr/sbin/policy-rc.d
        created=0
        if [[ ! -e "$policy" ]]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
        fi
        trap 'if [[ $created == 1 ]]; then rm -f "$policy"; fi' EXIT
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    )
    echo "[$label] installed ${missing[*]}"
}
