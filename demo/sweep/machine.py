"""What the sweep ran on: the machine (platform, CPUs, memory, GPUs) and the server's vLLM version."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import httpx

from demo.settings import Settings
from demo.sweep.models import MachineInfo


def machine_info() -> MachineInfo:
    """Describe this machine: platform, Python, CPU count, total memory in GB and the GPUs nvidia-smi lists.

    Memory is None where /proc/meminfo cannot be read; the GPU list is empty without nvidia-smi."""
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=5, check=False)
            gpus = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    return MachineInfo(platform=platform.platform(), python=platform.python_version(),
                       cpu_count=os.cpu_count(), memory_total_gb=mem, gpus=gpus)


async def server_version(http: httpx.AsyncClient, url: str, settings: Settings) -> str | None:
    """vLLM's version from GET /version; None when the server does not say."""
    try:
        resp = await http.get(url.rstrip("/") + "/version", timeout=settings.probe_timeout_s)
        version = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if version else None
