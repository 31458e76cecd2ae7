"""python -m servers canary up|status|down [--share P]: HAProxy in front of the pair, rolled back by the guardrails.

A share of the ELIGIBLE traffic goes to the speculative server, the rest and every ineligible
request to the baseline (docs/canary.md). The router is Debian's HAProxy (scripts/install_canary.sh):

- eligibility (common/canary_rules.py, a file the evaluator writes) becomes HAProxy ACLs: a request
  header's value, or a JSON body field's value read with ``option http-buffer-request`` and
  ``json_query``; a rule it cannot express is refused in one line (``expressible``);
- the split is a backend of the two servers with weights share and 100 - share, balanced by
  weighted round robin (deterministic: over N requests the split is within one request of the share);
- ``--share P`` sets both weights live through HAProxy's runtime API (its admin unix socket), no
  restart; ``--share 0`` is the rollback; ``status`` reads the weights and per-server counts back;
- responses are streamed as they come (HAProxy buffers requests only): SSE passes unchanged;
- one log line per request (router.log): request id, backend, status, duration.

With ``--rules FILE`` (the guardrails the evaluator wrote), ``up`` also runs the alert path:
Prometheus (scraping the pair, evaluating the rules with ``--alert-for`` and ``--alert-window``),
Debian's Alertmanager routing every alert to a webhook, and the canary's receiver
(servers/canary_receiver.py) that sets the share to 0 for an alert it knows and logs it. Nothing of
ours reads the metrics. Recovery is manual: ``--share P`` again.

Every process runs in its own session; the state file (RUN_DIR/state.json) names them, and
``down`` stops exactly those.
"""

from __future__ import annotations

from servers.canary._admin import (
    admin,
    append_event,
    parse_share,
    read_events,
    read_share,
    request_counts,
    set_share,
)
from servers.canary._alerts import (
    alertmanager_config,
    prometheus_config,
    stage_rules,
)
from servers.canary._cli import (
    add_arguments,
    main,
    run,
)
from servers.canary._haproxy import (
    EXPRESSIBLE,
    check_eligibility,
    expressible,
    haproxy_config,
)
from servers.canary._run import (
    change_share,
    down,
    pair_urls,
    read_canary,
    state_path,
    status,
    status_data,
    up,
)
from servers.canary._state import (
    ADMIN_TIMEOUT_S,
    ALERTMANAGER_PORT,
    BACKEND_HEADER,
    BASELINE_BACKEND,
    BODY_BUFFER_BYTES,
    DESCRIPTION,
    FALLBACK,
    HEALTH_TIMEOUT_S,
    MAX_RULES_BYTES,
    MAX_SOCKET_PATH,
    METRICS_PORT,
    PAIR_RUN_DIR,
    PROMETHEUS_PORT,
    READY_TIMEOUT_S,
    RECEIVER_PORT,
    REQUEST_ID_HEADER,
    ROUTER_JOB,
    ROUTER_PORT,
    RUN_DIR,
    SPLIT_BACKEND,
    STOP_TIMEOUT_S,
    STREAM_TIMEOUT,
    CanaryError,
    CanaryState,
    ProcRecord,
)

__all__ = [
    "ADMIN_TIMEOUT_S",
    "ALERTMANAGER_PORT",
    "BACKEND_HEADER",
    "BASELINE_BACKEND",
    "BODY_BUFFER_BYTES",
    "CanaryError",
    "CanaryState",
    "DESCRIPTION",
    "EXPRESSIBLE",
    "FALLBACK",
    "HEALTH_TIMEOUT_S",
    "MAX_RULES_BYTES",
    "MAX_SOCKET_PATH",
    "METRICS_PORT",
    "PAIR_RUN_DIR",
    "PROMETHEUS_PORT",
    "ProcRecord",
    "READY_TIMEOUT_S",
    "RECEIVER_PORT",
    "REQUEST_ID_HEADER",
    "ROUTER_JOB",
    "ROUTER_PORT",
    "RUN_DIR",
    "SPLIT_BACKEND",
    "STOP_TIMEOUT_S",
    "STREAM_TIMEOUT",
    "add_arguments",
    "admin",
    "alertmanager_config",
    "append_event",
    "change_share",
    "check_eligibility",
    "down",
    "expressible",
    "haproxy_config",
    "main",
    "pair_urls",
    "parse_share",
    "prometheus_config",
    "read_canary",
    "read_events",
    "read_share",
    "request_counts",
    "run",
    "set_share",
    "stage_rules",
    "state_path",
    "status",
    "status_data",
    "up",
]
