#!/usr/bin/env bash
# THE test command (README, .ci/run): sets everything up from the project's own files, checks
# lint, types and layers (ruff, mypy, lint-imports, and Biome for the page's JS and CSS; a finding
# fails the run before any test),
# and runs every test: fast ones (stand-in servers on 127.0.0.1), browser ones (headless
# Chromium), then the end-to-end suite against two real CPU vLLM servers (started beside
# the fast tests, or else by its fixture; stopped after), with the modules marked beside_e2e
# (tests/conftest.py) beside it; that stage also parses every generated vLLM command with vLLM's
# own parser (tests/test_vllm_args.py) and has a real Prometheus scrape the servers
# (tests/e2e/test_prometheus_e2e.py).
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh --fast     # skip the real-vLLM end-to-end suite
#   bash scripts/test.sh --busy     # the same, with one core kept busy throughout (a shared runner)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
T0=$(date +%s)
stamp() { echo "[test] $* (+$(( $(date +%s) - T0 )) s)"; }
fast=0 busy=0
for arg in "$@"; do
    case "$arg" in
        --fast) fast=1 ;;
        --busy) busy=1 ;;
        *) echo "usage: bash scripts/test.sh [--fast] [--busy]" >&2; exit 2 ;;
    esac
done

# --busy: one busy loop (harness/busy.py) in a session of its own at our priority (nice 0 as CI
# runs), for the whole run, as a shared runner's neighbour would be: the check before submitting
# timing-sensitive code (docs/development.md#tests). Stopped by the EXIT trap below, and it ends by
# itself after 2.5 h if that never runs. python3, not the venv's: it starts before the venv exists.
busy_pid=""
if [[ $busy -eq 1 ]]; then
    busy_pid=$(python3 -m harness.busy start)
    trap 'python3 -m harness.busy stop "$busy_pid" || true' EXIT  # until the full trap below
    stamp "one core kept busy: a busy loop, PID $busy_pid, in its own session"
fi

mkdir -p artifacts
# What only the end-to-end stage needs is done in the background, each into its own log, while the
# app venv, the browser, lint and the fast tests run: the CPU vLLM venv (a pip install, mostly
# network and disk; ~2-3 min on a clean machine) and then, once the app venv is there too, the e2e
# pair's start (a warm start takes 2-3 min here sharing the cores; a cold one converts the model and
# compiles for several more; idle after that it takes ~3% of a core); Debian's Prometheus once the
# browser's apt-get is done (both use apt). The fast stage checks no figure against real time, so
# nothing of this can move its verdict; the timing stage runs after the pair is stopped.
# The pair at its normal priority: at nice 19 (which servers/procs.py carries to each server's
# session under Linux's autogroups) it took only idle CPU and its start stretched over the fast
# stage. A start that fails costs nothing: the e2e fixture starts its own pair. Its command,
# environment (timeouts), run dir and ports are the fixture's too, from one module:
# harness/e2e_pair.py. Exit 97: the venv did not install.
SETUP_FAILED=97
pair_pid="" prom_pid="" lane_pids=() pair_started=""
rm -f artifacts/app-ready
if [[ $fast -eq 0 ]]; then
    { bash scripts/setup_cpu_servers.sh >artifacts/setup-cpu-servers.log 2>&1 || exit $SETUP_FAILED
      until [[ -e artifacts/app-ready ]]; do sleep 1; done
      exec .venv/bin/python -m harness.e2e_pair up >artifacts/servers-e2e-up.log 2>&1; } &
    pair_pid=$! pair_started=1
fi
trap 'for p in $pair_pid $prom_pid ${lane_pids[*]:-}; do kill "$p" 2>/dev/null || true; done
      [[ -z "$pair_started" ]] || .venv/bin/python -m harness.e2e_pair down >/dev/null 2>&1 || true
      [[ -z "$busy_pid" ]] || python3 -m harness.busy stop "$busy_pid" || true' EXIT

bash scripts/setup_app.sh
bash scripts/install_browser.sh
touch artifacts/app-ready
stamp "app venv and browser ready"
if [[ $fast -eq 0 ]]; then
    # For tests/e2e/test_prometheus_e2e.py (skipped with a reason without it), and HAProxy and
    # Alertmanager for the canary's tests (tests/test_canary*.py) after it: both use apt.
    { bash scripts/install_prometheus.sh && bash scripts/install_canary.sh; } >artifacts/install-prometheus.log 2>&1 &
    prom_pid=$!
fi

# Lint, types and layers first (config in pyproject.toml; Biome's, for the page's JS and CSS in
# demo/static/, in biome.jsonc): all run, any finding fails the run.
# mypy's cache lives beside the venvs: a clone checks again only the files whose hash changed.
lint=0
.venv/bin/ruff check . || lint=1
MYPY_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/specdemo/mypy" .venv/bin/mypy || lint=1
.venv/bin/lint-imports --no-cache || lint=1
.venv/bin/biome lint --error-on-warnings || lint=1
stamp "ruff, mypy, lint-imports and biome done (exit $lint)"
[[ $lint -eq 0 ]] || exit $lint

if [[ -n "$prom_pid" ]]; then
    prom=0
    wait "$prom_pid" || prom=$?
    prom_pid=""
    cat artifacts/install-prometheus.log
    [[ $prom -eq 0 ]] || echo "[test] Prometheus not installed; its e2e test will skip"
fi

# The stages, in order, each one's reason in docs/development.md#the-stages:
# 1. Fast and browser tests: logic checked on given clocks, the page with assertions that wait, the
#    stand-ins' protocol and faults; no figure checked against real time, so the e2e pair's start
#    (a cold one compiles for minutes) and a busy neighbour may share the cores with them.
#    Three workers (pytest-xdist) on two cores: these tests wait on stand-ins' pacing more than they
#    compute (two workers kept 0.8 of the two cores busy), and no verdict here reads a clock, so a
#    third worker costs nothing but wall time saved (504 s -> 398 s, docs/benchmarks.md "CI"). A
#    module's tests stay together on one worker; the page modules run one at a time on one worker
#    (tests/conftest.py: GROUPS, first), which is then the stage's longest.
#    With the e2e stage to follow, the modules that wait more than they compute (marked beside_e2e,
#    tests/conftest.py) run beside it instead, on the core its sequential races leave idle.
# 2. The end-to-end suite against the real CPU pair, once its start is done.
# 3. The timing stage (TIMING_LANES, marked timing): our figures against a real stream's truth, with
#    nothing else of ours on the machine: after the pair is stopped, a pytest per lane.
marks="not e2e and not timing"
[[ $fast -eq 1 ]] || marks="$marks and not beside_e2e"
status=0
# --durations: the 20 slowest tests in the log, where the stage's time goes.
.venv/bin/python -m pytest -m "$marks" -q -p no:cacheprovider -n 3 --dist loadscope --no-loadscope-reorder \
    --durations=20 || status=$?
stamp "fast and browser tests done (exit $status)"
# Each later stage's paths, from tests/conftest.py, one lane a line: "timing" or "beside", then its
# paths (the whole suite's collection takes ~8 s; a stage collects only its own). Assigned first, so
# that a failing lookup stops the script (set -e) instead of leaving pytest no path, which would run
# everything.
stages=$(.venv/bin/python -c "from tests.conftest import BESIDE_E2E_LANES, E2E_PATHS, TIMING_LANES
print('e2e', *E2E_PATHS)
for kind, lanes in (('timing', TIMING_LANES), ('beside', BESIDE_E2E_LANES)):
    for lane in lanes: print(kind, *lane)")
e2e_paths=$(sed -n 's/^e2e //p' <<<"$stages")
mapfile -t timing_lanes < <(sed -n 's/^timing //p' <<<"$stages")
mapfile -t beside_lanes < <(sed -n 's/^beside //p' <<<"$stages")

# start_lanes NAME MARK LANE...: a pytest per lane in the background (-m MARK over the lane's
# paths), each one's output in artifacts/NAME-N.log; their PIDs in lane_pids (the EXIT trap's).
start_lanes() {
    local name=$1 mark=$2 i
    shift 2
    lane_pids=()
    for i in $(seq 1 $#); do
        # shellcheck disable=SC2086  # the paths, one word each
        .venv/bin/python -m pytest -m "$mark" -q -p no:cacheprovider --durations=10 ${!i} \
            >"artifacts/$name-$i.log" 2>&1 &
        lane_pids+=($!)
    done
}
# wait_lanes NAME WHAT: wait for each lane start_lanes started, print its log and its exit; the
# first failing exit in lanes_status.
wait_lanes() {
    local name=$1 what=$2 i lane of
    lanes_status=0
    for i in "${!lane_pids[@]}"; do
        lane=0
        wait "${lane_pids[$i]}" || lane=$?
        cat "artifacts/$name-$((i + 1)).log"
        of=""
        [[ ${#lane_pids[@]} -eq 1 ]] || of=", lane $((i + 1)) of ${#lane_pids[@]}"
        stamp "$what$of, done (exit $lane)"
        [[ $lanes_status -eq 0 ]] && lanes_status=$lane
    done
    lane_pids=()
}

up=0
if [[ -n "$pair_pid" ]]; then
    wait "$pair_pid" || up=$?
    pair_pid=""
    cat artifacts/setup-cpu-servers.log
    [[ $up -eq $SETUP_FAILED ]] || cat artifacts/servers-e2e-up.log
    stamp "the CPU vLLM venv and the e2e pair's start in the background done (exit $up)"
fi
if [[ $fast -eq 0 && $up -eq $SETUP_FAILED ]]; then
    echo "[test] the CPU vLLM venv failed to install (log above, artifacts/setup-cpu-servers.log):" \
         "end-to-end tests not run"
    [[ $status -eq 0 ]] && status=1
elif [[ $fast -eq 0 ]]; then
    # The beside_e2e modules, a pytest per lane (tests/conftest.py: BESIDE_E2E_LANES).
    start_lanes beside-e2e beside_e2e "${beside_lanes[@]}"
    e2e=0
    # shellcheck disable=SC2086
    .venv/bin/python -m pytest -m "e2e and not beside_e2e" -q -p no:cacheprovider -s --durations=15 \
        $e2e_paths || e2e=$?
    stamp "end-to-end tests done (exit $e2e)"
    wait_lanes beside-e2e "the tests beside them"
    beside=$lanes_status
    [[ $status -eq 0 ]] && status=$e2e
    [[ $status -eq 0 ]] && status=$beside
    # The pair stopped before the timing stage (the e2e fixture stops a pair of its own itself).
    if [[ -n "$pair_started" ]]; then
        .venv/bin/python -m harness.e2e_pair down >>artifacts/servers-e2e-up.log 2>&1 || true
        pair_started=""
        stamp "the e2e pair stopped"
    fi
fi

# The timing stage, last: nothing else of ours runs (no stage beside it, no server starting, the
# pair stopped); each lane prints the margins its figures used (harness/margins.py). Its lanes side
# by side only when the machine has a core idle for each (harness/idle.py); beside a neighbour (a
# busy loop, another job) one after another, so that no lane's client and stand-ins wait for a core
# while another lane (its start: imports, stand-ins) holds the one left: with the lanes side by side
# beside one busy loop, a run read the first ITL median of lane 1 5.6% off its truth (the run's
# first minute; the same sweep then read within 0.5% three times beside a busy loop;
# docs/development.md#a-busy-machine).
idle=$(.venv/bin/python -m harness.idle --seconds 3)
if awk -v idle="$idle" -v lanes="${#timing_lanes[@]}" 'BEGIN { exit !(idle >= lanes - 0.5) }'; then
    stamp "the timing stage: ${#timing_lanes[@]} lanes side by side ($idle cores idle)"
    start_lanes timing timing "${timing_lanes[@]}"
    wait_lanes timing "the timing stage"
    timing_status=$lanes_status
else
    stamp "the timing stage: ${#timing_lanes[@]} lanes one after another (only $idle cores idle)"
    timing_status=0
    for n in "${!timing_lanes[@]}"; do
        start_lanes "timing-$((n + 1))" timing "${timing_lanes[$n]}"
        wait_lanes "timing-$((n + 1))" "the timing stage's lane $((n + 1)) of ${#timing_lanes[@]}, alone"
        [[ $timing_status -eq 0 ]] && timing_status=$lanes_status
    done
fi
[[ $status -eq 0 ]] && status=$timing_status
exit $status
