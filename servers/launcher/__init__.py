"""Start, check and stop the vLLM servers this launcher owns: the baseline and the speculative
server, or (``--arms ngram,ngram-k2``) the baseline and up to three speculative arms.

Flags come only from ServerConfig.vllm_args(); this module adds the process side: environment,
core pinning, logs, the state file, waiting for /health with a progress display, and stopping
exactly the processes it started.
"""

from __future__ import annotations

from servers.launcher._plan import (
    API_SERVER_MODULE,
    SETUP_COMMAND,
    SUFFIX_SETUP_COMMAND,
    LauncherError,
    Plan,
    Server,
    chat_template,
    check_cores,
    check_ports,
    check_runtime,
    check_speculative_config,
    flag_value,
    in_process_worker_env,
    plan,
    report_error,
    resolve_model,
    server_config,
    server_cpus,
    server_env,
    servers,
    speculative_config_of,
)
from servers.launcher._records import (
    health_ok,
    live_records,
    ours_alive,
    stop_records,
)
from servers.launcher._status import (
    down,
    kernels_text,
    print_status,
    status_rows,
    supervisor_line,
)
from servers.launcher._up import (
    Started,
    already_running,
    start_pair,
    wait_healthy,
)

__all__ = [
    "API_SERVER_MODULE",
    "LauncherError",
    "Plan",
    "SETUP_COMMAND",
    "SUFFIX_SETUP_COMMAND",
    "Server",
    "Started",
    "already_running",
    "chat_template",
    "check_cores",
    "check_ports",
    "check_runtime",
    "check_speculative_config",
    "down",
    "flag_value",
    "health_ok",
    "in_process_worker_env",
    "kernels_text",
    "live_records",
    "ours_alive",
    "plan",
    "print_status",
    "report_error",
    "resolve_model",
    "server_config",
    "server_cpus",
    "server_env",
    "servers",
    "speculative_config_of",
    "start_pair",
    "status_rows",
    "stop_records",
    "supervisor_line",
    "wait_healthy",
]
