"""docker-compose.yml brings a dead vLLM server back by itself, as the supervisor of
`python -m servers up` does off Docker (docs/booth.md). Checked on the file, no Docker engine.

A separate file from tests/test_compose.py (whose helpers it reuses) so the check is found by
what it is about: the booth's self-healing.
"""

from __future__ import annotations

import re
from typing import Any

from tests.test_compose import CPU_SERVERS, GPU_SERVERS, compose

# A policy that restarts a crashed container: on-failure (optionally with a retry cap), or
# unless-stopped / always.
RESTARTING = re.compile(r"on-failure(:[1-9][0-9]*)?|unless-stopped|always")
SERVERS = (*GPU_SERVERS.values(), *CPU_SERVERS.values())


def check_restart_policy(doc: dict[str, Any]) -> list[str]:
    problems = []
    for svc in SERVERS:
        policy = str(doc["services"][svc].get("restart", "no"))
        if not RESTARTING.fullmatch(policy):
            problems.append(f"{svc}: restart is {policy!r}; a server that dies must come back by itself "
                            "(on-failure or unless-stopped)")
    return problems


def test_vllm_servers_come_back_by_themselves_after_a_crash() -> None:
    doc = compose()
    assert check_restart_policy(doc) == []
    # on-failure:3 today: Docker retries a crashing server 3 times, then leaves it down (docs/booth.md).
    assert {doc["services"][svc]["restart"] for svc in SERVERS} == {"on-failure:3"}


def test_restart_check_catches_a_server_that_stays_dead() -> None:
    doc = compose()
    doc["services"]["speculative"]["restart"] = "no"
    del doc["services"]["baseline-cpu"]["restart"]
    doc["services"]["speculative-cpu"]["restart"] = "on-failure:0"
    problems = check_restart_policy(doc)
    assert len(problems) == 3, problems
    assert all(svc in " ".join(problems) for svc in ("speculative:", "baseline-cpu:", "speculative-cpu:"))
