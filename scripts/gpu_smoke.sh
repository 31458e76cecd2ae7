#!/usr/bin/env bash
# GPU smoke check, one command: bring the compose stack up on this GPU box, wait until both vLLM
# servers are healthy, race the json_reformat preset (sequential: the fair A/B on one GPU),
# print speedup and acceptance, and tear the stack down again (also on Ctrl-C or failure).
#
#   scripts/gpu_smoke.sh                          # the pair from .env, else llama-eagle3 (needs HF_TOKEN)
#   SPEC_PROFILE=qwen3-draft scripts/gpu_smoke.sh # another pair from servers/profiles.py (needs python3 + pydantic)
#   SMOKE_KEEP=1 scripts/gpu_smoke.sh             # leave the stack running afterwards
#   SMOKE_TIMEOUT_S=3600 scripts/gpu_smoke.sh     # wait longer for both servers (default 45 min)
#
# Exit 0 only when both servers answered the race without error. Whatever happens, it ends with a
# one-screen PASS/FAIL summary and a JSON record (GPU, image, pair, time to healthy, speedups,
# acceptance) on the last line of stdout, also saved to logs/gpu-smoke-<UTC time>.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TIMEOUT_S="${SMOKE_TIMEOUT_S:-2700}"  # first start downloads ~17 GB per model family
KEEP="${SMOKE_KEEP:-0}"
PRESET="${SMOKE_PRESET:-json_reformat}"
POLL_S="${SMOKE_POLL_S:-15}"
# Where the host reaches the servers: docker-compose.yml publishes them on these ports.
BASELINE_URL="${SMOKE_BASELINE_URL:-http://127.0.0.1:8000}"
SPECULATIVE_URL="${SMOKE_SPECULATIVE_URL:-http://127.0.0.1:8001}"
WORK="$(mktemp -d)"
UP_PID=""
COMPOSE=(docker compose -f "$ROOT/docker-compose.yml" --profile pair)
T0=$(date +%s)
STARTED_AT="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
RECORD_FILE="${SMOKE_RECORD:-$ROOT/logs/gpu-smoke-$(date -u +%Y%m%dT%H%M%SZ).json}"
REASON=""
GPU_NAME="unknown (no nvidia-smi)"
IMAGE="unknown"
PAIR=""
HEALTHY_S_baseline="null"
HEALTHY_S_speculative="null"

log() { printf '[gpu-smoke %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; REASON="$(printf '%s\n' "$*" | head -n 1)"; exit 1; }
# json_str TEXT: TEXT as a JSON string literal (backslashes, quotes, control characters escaped).
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\000-\037')"; }
meta_json() {
    printf '{"started_at": %s, "gpu": %s, "image": %s, "pair": %s, "preset": %s, "time_to_healthy_s": {"baseline": %s, "speculative": %s}}' \
        "$(json_str "$STARTED_AT")" "$(json_str "$GPU_NAME")" "$(json_str "$IMAGE")" "$(json_str "$PAIR")" \
        "$(json_str "$PRESET")" "$HEALTHY_S_baseline" "$HEALTHY_S_speculative"
}

# summary RC: the one-screen verdict and the JSON record (the race's figures when it ran).
summary() {
    local rc="$1" verdict record
    verdict=$([[ "$rc" == 0 ]] && echo PASS || echo FAIL)
    if [[ -s "$WORK/record.json" ]]; then
        record="$(cat "$WORK/record.json")"
    else
        record="$(meta_json)"
        record="${record%\}}, \"result\": \"fail\", \"reason\": $(json_str "${REASON:-exit $rc}"), \"total_s\": $(( $(date +%s) - T0 ))}"
    fi
    mkdir -p "$(dirname "$RECORD_FILE")" 2>/dev/null && printf '%s\n' "$record" >"$RECORD_FILE" 2>/dev/null || true
    {
        echo "==================== GPU smoke: $verdict ===================="
        echo "GPU:    $GPU_NAME"
        echo "image:  $IMAGE"
        echo "pair:   $PAIR    preset: $PRESET"
        echo "healthy after: baseline ${HEALTHY_S_baseline} s, speculative ${HEALTHY_S_speculative} s"
        if [[ -s "$WORK/report.txt" ]]; then sed 's/^/        /' "$WORK/report.txt"; fi
        [[ "$verdict" == FAIL ]] && echo "reason: ${REASON:-exit $rc}"
        echo "record: $RECORD_FILE"
        echo "=========================================================="
    } >&2
    printf '%s\n' "$record"
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n "$UP_PID" ]] && kill -0 "$UP_PID" 2>/dev/null; then
        kill "$UP_PID" 2>/dev/null || true
    fi
    if [[ "$KEEP" == "1" ]]; then
        log "SMOKE_KEEP=1: leaving the stack up (stop it with: docker compose down)"
    else
        log "tearing down: docker compose down"
        "${COMPOSE[@]}" down --remove-orphans >/dev/null 2>&1 || log "warning: docker compose down failed; run it by hand"
    fi
    summary "$rc"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---- preflight: say what is missing before pulling 20 GB ----
command -v docker >/dev/null 2>&1 || die "docker not found; install Docker Engine and the NVIDIA Container Toolkit"
docker compose version >/dev/null 2>&1 || die "the Docker Compose v2 plugin is missing ('docker compose version' fails)"
docker info >/dev/null 2>&1 || die "cannot reach the Docker engine: is it running, and may this user use it (docker group)?"
if command -v nvidia-smi >/dev/null 2>&1; then
    GPU_NAME="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1)"
    log "GPU: $GPU_NAME"
else
    log "warning: nvidia-smi not found on the host; the servers will fail if Docker cannot reach a GPU"
fi

# A profile named in the environment wins over .env (compose: shell variables beat .env).
if [[ -n "${SPEC_PROFILE:-}" ]]; then
    PY_HOST="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}"
    "$PY_HOST" -m servers.profiles env "$SPEC_PROFILE" >"$WORK/profile.env" \
        || die "cannot read profile $SPEC_PROFILE (python -m servers.profiles list shows the names)"
    set -a
    # shellcheck source=/dev/null
    . "$WORK/profile.env"
    set +a
fi
# (`|| true`: no .env is fine; with pipefail a failed sed would end the script.)
PAIR="${SPEC_PROFILE:-$( (sed -n 's/^SPEC_PROFILE=//p' .env 2>/dev/null || true) | tail -n 1)}"
PAIR="${PAIR:-llama-eagle3}"
IMAGE="${VLLM_IMAGE:-$( (sed -n 's/^VLLM_IMAGE=//p' .env 2>/dev/null || true) | tail -n 1)}"
IMAGE="${IMAGE:-$("${COMPOSE[@]}" config --images 2>/dev/null | grep -m 1 'vllm-openai' || echo unknown)}"
log "pair: $PAIR (SPEC_PROFILE, else .env, else the default llama-eagle3); image: $IMAGE"
if [[ -z "${HF_TOKEN:-}" ]] && ! grep -qsE '^HF_TOKEN=.+' .env; then
    log "note: HF_TOKEN is not set; the gated Llama models will fail to download (qwen3-draft needs none)"
fi

# ---- up: compose itself waits for the baseline before starting the speculative server ----
log "docker compose up -d --build (logs: docker compose logs -f)"
"${COMPOSE[@]}" up -d --build >"$WORK/up.log" 2>&1 &
UP_PID=$!
UP_RC=""

# up_done: true once the background `compose up` has ended (its exit status kept in UP_RC).
up_done() {
    if [[ -n "$UP_RC" ]]; then return 0; fi
    if kill -0 "$UP_PID" 2>/dev/null; then return 1; fi
    UP_RC=0
    wait "$UP_PID" || UP_RC=$?
    return 0
}
up_failed_die() {
    die "docker compose up failed (exit $UP_RC):
$(tail -n 30 "$WORK/up.log")"
}

container_of() { "${COMPOSE[@]}" ps -a -q "$1" 2>/dev/null | head -n 1; }

# wait_healthy SERVICE: poll the container's health with progress; fail fast on exit/unhealthy.
wait_healthy() {
    local svc="$1" start now cid state last
    start=$(date +%s)
    while :; do
        now=$(date +%s)
        (( now - start > TIMEOUT_S )) && die "$svc not healthy after ${TIMEOUT_S}s; last log lines:
$("${COMPOSE[@]}" logs --tail 30 --no-log-prefix "$svc" 2>&1)"
        cid="$(container_of "$svc")"
        if [[ -z "$cid" ]]; then
            state="not created yet"
            if up_done && [[ "$UP_RC" != 0 ]]; then up_failed_die; fi
        else
            state="$(docker inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$cid" 2>/dev/null || echo unknown)"
            state="${state% }"
        fi
        case "$state" in
            "running healthy")
                printf -v "HEALTHY_S_$svc" '%s' "$(( now - start ))"
                log "$svc healthy after $(( now - start )) s"
                return 0 ;;
            restarting*)
                log "$svc is restarting (it crashed; compose retries up to 3 times): $("${COMPOSE[@]}" logs --tail 1 --no-log-prefix "$svc" 2>&1 | cut -c1-110)" ;;
            exited*|dead*|*unhealthy)
                die "$svc is '$state'; last log lines:
$("${COMPOSE[@]}" logs --tail 40 --no-log-prefix "$svc" 2>&1)
(see docs/gpu-compose.md, 'When a server is unhealthy')" ;;
        esac
        last="$("${COMPOSE[@]}" logs --tail 1 --no-log-prefix "$svc" 2>/dev/null | cut -c1-110)"
        log "waiting for $svc ($state, $(( now - start )) s): ${last:-no output yet}"
        sleep "$POLL_S"
    done
}

wait_healthy baseline
wait_healthy speculative
log "waiting for docker compose up to start the page"
while ! up_done; do sleep 1; done
[[ "$UP_RC" == 0 ]] || up_failed_die
UP_PID=""
log "stack up: page on http://127.0.0.1:7860 (unless SPEC_APP_PUBLISH says otherwise)"

# ---- race: the host's python if it has the app's requirements, else inside the app container ----
RACE_ARGS=(race --preset "$PRESET" --order sequential --warmup --json)
PY="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}"
if "$PY" -c "import demo.cli, httpx, pydantic_settings" >/dev/null 2>&1; then
    log "racing $PRESET from the host ($PY) against $BASELINE_URL and $SPECULATIVE_URL"
    RUN_PY=("$PY")
    "$PY" -m demo "${RACE_ARGS[@]}" --baseline-url "$BASELINE_URL" \
        --speculative-url "$SPECULATIVE_URL" >"$WORK/race.json" || die "the race command failed (exit $?)"
else
    log "racing $PRESET inside the app container (the host python lacks the app's requirements)"
    RUN_PY=("${COMPOSE[@]}" exec -T app python)
    "${COMPOSE[@]}" exec -T app python -m demo "${RACE_ARGS[@]}" --baseline-url http://baseline:8000 \
        --speculative-url http://speculative:8001 >"$WORK/race.json" || die "the race command failed (exit $?)"
fi

# Print the figures; exit 1 when either side reported an error.
REPORT_PY="$(cat <<'PY'
import json, sys

r = json.load(sys.stdin)
b, s = r["baseline"], r["speculative"]
meta = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


print("preset %s, order %s" % (r.get("preset"), r.get("order")))
for name, d in (("baseline", b), ("speculative", s)):
    print("%-11s decode %s tok/s, ttft %s s, %s tokens" % (
        name, fmt(d.get("decode_tokens_per_s"), ".1f"), fmt(d.get("ttft_s"), ".3f"), d.get("completion_tokens")))
print("speedup %sx decode, %sx end-to-end" % (fmt(r.get("speedup"), ".2f"), fmt(r.get("e2e_speedup"), ".2f")))
print("acceptance rate %s, mean acceptance length %s" % (
    fmt(s.get("acceptance_rate"), ".1%"), fmt(s.get("mean_acceptance_length"), ".2f")))
print("identical text: %s" % r.get("identical_text"))
errors = ["%s: %s" % (side, d["error"]) for side, d in (("baseline", b), ("speculative", s)) if d.get("error")]
for e in errors:
    print("error " + e)
record = dict(meta, result="fail" if errors else "pass", reason="; ".join(errors) or None,
              speedup_decode=r.get("speedup"), speedup_e2e=r.get("e2e_speedup"),
              acceptance_rate=s.get("acceptance_rate"), mean_acceptance_length=s.get("mean_acceptance_length"),
              decode_tokens_per_s={"baseline": b.get("decode_tokens_per_s"), "speculative": s.get("decode_tokens_per_s")},
              identical_text=r.get("identical_text"), order=r.get("order"))
print("RECORD " + json.dumps(record))
sys.exit(1 if errors else 0)
PY
)"
REPORT_RC=0
"${RUN_PY[@]}" -c "$REPORT_PY" "$(meta_json)" <"$WORK/race.json" >"$WORK/report.out" || REPORT_RC=$?
grep -v '^RECORD ' "$WORK/report.out" >"$WORK/report.txt" || true
sed -n 's/^RECORD //p' "$WORK/report.out" | tail -n 1 | sed "s/}\$/, \"total_s\": $(( $(date +%s) - T0 ))}/" >"$WORK/record.json"
cat "$WORK/report.txt" >&2
[[ "$REPORT_RC" == 0 ]] || die "the race reported an error (above)"
log "smoke check passed"
