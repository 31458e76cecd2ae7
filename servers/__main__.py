"""python -m servers up [--detach] | status [--json] | down | monitor | canary

Starts the baseline and the speculative vLLM server (default: two CPU servers with SmolLM2-135M
and n-gram speculation) under a supervisor that restarts one that fails (servers/supervisor.py,
docs/booth.md), shows their state, stops them. Every flag also has a setting
(SPECDEMO_SERVERS_<NAME>, or a .env file); a flag wins over the setting.
"""

from __future__ import annotations

import argparse
import sys
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from servers import canary, launcher, monitor, supervisor
from servers.settings import COMMON, UP, CliGroup, LauncherSettings


def cli_fields(group: CliGroup) -> dict[str, FieldInfo]:
    """The settings fields that are flags of the given subcommand group (see settings.cli)."""
    return {
        name: f for name, f in LauncherSettings.model_fields.items()
        if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("cli") == group
    }


def _add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, group: CliGroup) -> None:
    """One flag per settings field of the group: --<name>, its type, choices and help from the field."""
    for name, f in cli_fields(group).items():
        extra = f.json_schema_extra
        assert isinstance(extra, dict)
        flag = "--" + str(extra.get("flag") or name.replace("_", "-"))
        kind = _plain(f.annotation)
        kwargs: dict[str, Any] = {"dest": name, "help": argparse.SUPPRESS if extra.get("hidden") else f.description}
        if get_origin(kind) is Literal:
            kwargs["choices"] = list(get_args(kind))
        elif kind is bool:  # --name / --no-name; unset: the setting's own value
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        else:
            kwargs["metavar"] = flag[2:].replace("-", "_").upper()
            if kind in (int, float):
                kwargs["type"] = kind
        # Anything else (str, Path, JSON) is passed as the string given; the settings validate it.
        parser.add_argument(flag, **kwargs)


def _plain(annotation: Any) -> Any:
    """X for ``X | None``."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if get_origin(annotation) in (Union, UnionType) and len(args) == 1 else annotation


def build_parser() -> argparse.ArgumentParser:
    """The command line: every subcommand and its flags (the settings' own, from servers/settings.py)."""
    p = argparse.ArgumentParser(prog="python -m servers", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    common = argparse.ArgumentParser(add_help=False)
    _add_flags(common.add_argument_group("where (settings SPECDEMO_SERVERS_*)"), COMMON)

    up = sub.add_parser("up", parents=[common], help="start both servers and wait until healthy")
    up.add_argument("--detach", action="store_true", help="return once healthy; stop later with `down`")
    up.add_argument("--profile", help="a named model pair (python -m servers.profiles list); flags given too win")
    _add_flags(up, UP)

    st = sub.add_parser("status", parents=[common], help="health, PID, memory, start time of each server")
    st.add_argument("--json", action="store_true")
    sub.add_parser("down", parents=[common], help="stop the servers this launcher started")

    mon = sub.add_parser("monitor", help="Prometheus scraping both servers (its own flags)",
                         description=monitor.DESCRIPTION)
    monitor.add_arguments(mon)
    can = sub.add_parser("canary", help="HAProxy sending a share of eligible traffic to speculative (its own flags)",
                         description=canary.DESCRIPTION)
    canary.add_arguments(can)
    return p


def launcher_settings(args: argparse.Namespace) -> LauncherSettings:
    """The settings a parsed command line asks for: a profile's, then the flags given over it."""
    overrides: dict[str, Any] = {}
    profile = getattr(args, "profile", None)
    if profile:
        overrides.update(profile_overrides(profile))
    for field in (*cli_fields(COMMON), *cli_fields(UP)):
        value = getattr(args, field, None)
        if value is not None:
            overrides[field] = value
    return LauncherSettings(**overrides)


def profile_overrides(name: str) -> dict[str, Any]:
    """Settings from a named model pair in servers/profiles.py (shared with docker-compose)."""
    from servers.profiles import get_profile

    try:
        p = get_profile(name)
    except KeyError as e:
        raise launcher.LauncherError(str(e.args[0])) from None
    overrides: dict[str, Any] = {
        "device": p.device,
        "served_model_name": p.served_model_name,
        "speculative_config": dict(p.speculative_config),
        "dtype": p.dtype,
        "max_model_len": p.max_model_len,
        "max_num_seqs": p.num_seqs,
        "tool_call_parser": p.tool_call_parser,
    }
    if p.device == "gpu":
        overrides["model"] = p.model
        overrides["baseline_gpu_memory_utilization"] = p.baseline_gpu_memory
        overrides["speculative_gpu_memory_utilization"] = p.speculative_gpu_memory
        overrides["hf_offline"] = False  # a GPU profile names hub ids: vLLM fetches them once
    # A CPU profile keeps model unset: the launcher prepares the local default folder.
    return overrides


def main(argv: list[str] | None = None) -> int:
    """``python -m servers up|status|down|monitor|canary``; return the command's exit code.

    A launcher error or bad settings is one line on stderr (launcher.report_error gives its code).
    """
    args = build_parser().parse_args(argv)
    if args.command == "monitor":  # Prometheus for the pair: its own flags (servers/monitor.py)
        return monitor.run(args)
    if args.command == "canary":  # the router in front of the pair: its own flags (servers/canary/)
        return canary.run(args)
    try:
        s = launcher_settings(args)
        if args.command == "up":
            return supervisor.up(s, detach=args.detach)
        if args.command == "status":
            return launcher.print_status(s, as_json=args.json)
        return launcher.down(s)
    except (launcher.LauncherError, ValidationError, KeyboardInterrupt) as e:
        return launcher.report_error(e)


if __name__ == "__main__":
    sys.exit(main())
