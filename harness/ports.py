"""A free TCP port on 127.0.0.1, for test servers and for URLs that must refuse connections."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Ports from below the kernel's ephemeral range: a port the kernel hands out for bind(0) or an
# outgoing connection's own end may be taken by another process between our pick and the
# server's bind (an app once failed to start on one: "Cannot find empty port"); these never are.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now: a random one below the ephemeral range
    that binds, or the kernel's pick when that range leaves no room below it."""
    top = _ephemeral_start() - 1
    for _ in range(100 if top - LOWEST >= 1_000 else 0):
        port = random.randint(LOWEST, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
