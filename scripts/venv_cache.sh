# Sourced by scripts/setup_app.sh and scripts/setup_cpu_servers.sh: where a venv lives.
#
#   venv_in_cache NAME HASH LINK
#
# sets VENV to the folder to set up. A LINK that is a real folder (a venv made in the checkout
# before) is kept and updated in place. Otherwise the venv lives in the cache,
# ${XDG_CACHE_HOME:-~/.cache}/specdemo/NAME-<first 12 of HASH>, and LINK is a symlink to it: another
# checkout of the same requirements (a CI clone, a worktree) finds it ready instead of installing
# it again. One setup at a time per cached venv: the caller holds its lock (fd 9) until it exits.
#
#   venv_up_to_date HASH CHECK...
#
# succeeds when VENV was set up from HASH (its stamp) and still runs CHECK (a command line).
#   venv_stamp HASH      # after a good setup
venv_in_cache() {
    local name="$1" hash="$2" link="$3"
    if [[ -d "$link" && ! -L "$link" ]]; then
        VENV="$link"
        return 0
    fi
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/specdemo"
    VENV="$cache/$name-${hash:0:12}"
    mkdir -p "$cache"
    ln -sfn "$VENV" "$link"
    exec 9>"$VENV.lock"
    flock 9
}

venv_up_to_date() {
    local hash="$1"
    shift
    [[ -f "$VENV/.specdemo-requirements.sha256" && "$(cat "$VENV/.specdemo-requirements.sha256")" == "$hash" ]] \
        && "$@" >/dev/null 2>&1
}

venv_stamp() {
    echo "$1" >"$VENV/.specdemo-requirements.sha256"
}
