"""The n-gram grid: speculative speed for several speculative configs against the running baseline.

    python -m benchmarks.spec_grid                        # the default grid, presets below
    python -m benchmarks.spec_grid --grid '{"num_speculative_tokens":6}' '{"prompt_lookup_min":1}'
    python -m benchmarks.spec_grid --presets json_reformat poetry --repeat 2 --port 8011
    python -m benchmarks.spec_grid --grid '{}' --extra-args=--enforce-eager --env VLLM_X=1

Needs the launcher's pair (`python -m servers up`): its baseline is the reference. For each
config (a JSON object merged over the launcher's speculative config) one more speculative server
is started exactly as the launcher starts its own (same flags, environment, core, caches), on
--port, warmed up, raced against the baseline in sequential order, and stopped. The pair's own
speculative server stays up, idle. Prints, per config and preset: decode tokens/s of each side,
speedup, tokens per verification step (mean acceptance length), efficiency (speedup / tokens per
step: 1.0 is the bound) and whether the greedy text is identical; then the start time of each
config's server. --extra-args and --env change how that server is started (a launcher lever to
try on the speculative side before making it the default for both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bench_presets import preset_request, preset_row, print_table
from demo.race import run_race
from demo.settings import Settings
from servers import procs
from servers.launcher import health_ok, plan, resolve_model, server_cpus, wait_healthy
from servers.settings import ROOT, LauncherSettings
from servers.state import ServerRecord
from servers.warmup import warm_up

DEFAULT_GRID = [
    {"num_speculative_tokens": 2},
    {"num_speculative_tokens": 3},
    {"num_speculative_tokens": 4},
    {"num_speculative_tokens": 6},
    {"num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
]
DEFAULT_PRESETS = ["json_reformat", "code_edit", "poetry"]


def start_speculative(base: LauncherSettings, overrides: dict[str, Any], port: int, log_dir: Path,
                      extra_args: str = "", env: dict[str, str] | None = None) -> tuple[Any, float]:
    """One speculative server as the launcher would start it, with ``overrides`` in its config
    (and ``extra_args``, ``env`` added); returns (process, seconds to healthy)."""
    s = base.model_copy(update={"speculative_config": {**base.speculative_config, **overrides},
                                "speculative_port": port, "run_dir": log_dir,
                                "extra_args": f"{base.extra_args} {extra_args}".strip()})
    model = resolve_model(s, sys.stderr)
    p = next(p for p in plan(s, model) if p.role == "speculative")
    p.env.update(env or {})
    p.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(p.log_path, "w") as f:
        f.write(f"# {json.dumps(overrides)}\n")
    proc = procs.spawn(p.cmd, p.env, p.log_path, ROOT, cpus=server_cpus(s, "speculative"))
    rec = ServerRecord(role="speculative", url=p.url, pid=proc.pid, pgid=proc.pid,
                       start_ticks=procs.start_ticks(proc.pid) or 0, log_path=p.log_path,
                       served_model_name=p.config.served_model_name, model=p.config.model, command=p.cmd,
                       started_at=datetime.now(UTC), start_kind="warm")
    try:
        wait_healthy(s, [(p, proc, rec)], sys.stdout)  # the launcher's own wait: phases, exit, timeout
    except BaseException:
        procs.stop_group(proc.pid, s.stop_timeout_s)
        raise
    assert rec.time_to_healthy_s is not None
    return proc, rec.time_to_healthy_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.spec_grid", description=__doc__.splitlines()[0])
    ap.add_argument("--grid", nargs="+", type=json.loads, default=DEFAULT_GRID,
                    help="speculative-config overrides, one JSON object each")
    ap.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--extra-args", default="", help="more vLLM flags for the grid's server")
    ap.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE", help="environment of the grid's server")
    ap.add_argument("--json", action="store_true", help="also print all figures as one JSON object")
    a = ap.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in a.env)

    base = LauncherSettings()
    settings = Settings(save_runs=False)
    if not health_ok(settings.baseline_url):
        print(f"error: no baseline at {settings.baseline_url}: start the pair with `python -m servers up`",
              file=sys.stderr)
        return 2
    spec_url = f"http://{base.host}:{a.port}"
    race_settings = settings.model_copy(update={"speculative_url": spec_url})
    log_dir = base.run_dir / "grid"
    results = []
    for overrides in a.grid:
        config = {**base.speculative_config, **overrides}
        print(f"\n== {json.dumps(config)} {a.extra_args} {' '.join(a.env)}".rstrip(), flush=True)
        proc, start_s = start_speculative(base, overrides, a.port, log_dir, a.extra_args, env)
        try:
            w = warm_up(spec_url, base.served_model_name, base.warmup_timeout_s)
            print(f"healthy after {start_s:.0f} s; {w.line('speculative')}", flush=True)
            rows = []
            for name in a.presets:
                runs = [asyncio.run(run_race(preset_request(race_settings, name, None, warmup=False), race_settings))
                        for _ in range(a.repeat)]
                rows.append(preset_row(name, runs))
            print_table(rows)
            results.append({"config": config, "start_s": start_s, "presets": rows})
        finally:
            procs.stop_group(proc.pid, base.stop_timeout_s)
    if a.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
