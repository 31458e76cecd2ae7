"""``python -m demo whatif``: its flags, its table and JSON, and the command; the what-if itself
(a load step per forced acceptance length against the baseline, the answer line) is
demo/load/whatif.py (docs/whatif.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from demo.cli.args import UsageError, add_server_args, settings_from_args, usage_error
from demo.cli.load import load_request, load_spec_of_flags, users_arg
from demo.client import run_streams
from demo.errors import BadInput
from demo.fmt import fmt_number, fmt_speedup, or_na
from demo.load.whatif import DEFAULT_LENGTHS, WhatifResult, check_length, parse_lengths, run_whatif


def parse_length_urls(values: list[str]) -> dict[float, str]:
    """``--length-url L=URL`` values -> {L: URL}; UsageError (one line) when one is not."""
    out: dict[float, str] = {}
    for v in values:
        length, sep, url = v.partition("=")
        url = url.strip()
        try:
            value = float(length)
        except ValueError:
            value = None
        if not sep or not url or value is None:
            raise UsageError(f"--length-url takes L=URL (e.g. 3=http://gpu:8103), got {v!r}")
        try:
            check_length(value, "length-url")
        except BadInput as e:
            raise usage_error(e) from None
        if value in out:
            raise UsageError(f"--length-url {value:g} is given twice: one server per length")
        out[value] = url
    return out


def servers_for(lengths: list[float], urls: dict[float, str]) -> dict[float, str]:
    """Each length's server, in the lengths' order; UsageError naming what is missing or unknown."""
    unknown = sorted(set(urls) - set(lengths))
    if unknown:
        raise UsageError(f"--length-url {', '.join(f'{v:g}' for v in unknown)}: not in --lengths "
                         f"({', '.join(f'{v:g}' for v in lengths)}); add it there or drop its --length-url")
    missing = [v for v in lengths if v not in urls]
    if missing:
        raise UsageError(f"no server for length {', '.join(f'{v:g}' for v in missing)}: give each length of "
                         "--lengths its what-if server as --length-url L=URL (or leave it out of --lengths)")
    return {v: urls[v] for v in lengths}


def add_whatif_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``whatif`` sub-command and its options to ``sub``; it runs ``cmd_whatif``."""
    p = sub.add_parser("whatif", help="the speedup a drafter reaching acceptance length L would buy here "
                       "(servers with vLLM's synthetic acceptance, GPU)",
                       description="Races the baseline against one what-if server per acceptance length (vLLM "
                                   ">= 0.32, speculative_config \"rejection_sample_method\": \"synthetic\", "
                                   "\"synthetic_acceptance_length\": L) at --users users, and prints per length "
                                   "the speedup, throughput ratio, measured tokens per step and efficiency. The "
                                   "what-if servers' text is not the target's. See docs/whatif.md.")
    add_server_args(p)
    for action in p._actions:  # the what-if's servers are --length-url; these two are refused (cmd_whatif)
        if action.dest in ("arm", "speculative_url"):
            action.help = argparse.SUPPRESS
    p.add_argument("--lengths", default=DEFAULT_LENGTHS, help="forced mean acceptance lengths, comma-separated, "
                   f"each at least 1 (default {DEFAULT_LENGTHS}); each needs its server in --length-url")
    p.add_argument("--length-url", action="append", default=[], metavar="L=URL",
                   help="the what-if server of length L, e.g. 3=http://gpu:8103 (repeatable: one per length)")
    p.add_argument("--users", default="1", help="users at once per server (the load): one count, default 1")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="a preset name from presets/ (default: json_reformat)")
    src.add_argument("--prompt", help="a free prompt")
    p.add_argument("--order", choices=["sequential", "simultaneous"], default="sequential",
                   help="sequential (default): the baseline batch, then the what-if batch, each server alone")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--api", choices=["chat", "completions"])
    p.add_argument("--repeats", type=int, default=1, help="measured batches per server per length (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up batches per server per length (default 1)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_whatif)


def whatif_table(r: WhatifResult) -> str:
    """The what-if run as a plain-text table: a row per acceptance length, then the errors, answer and notes."""
    many = f"{r.users} user" + ("" if r.users == 1 else "s")
    order = "sequential A/B (each server alone)" if r.order == "sequential" else "simultaneous"
    lines = [f"What-if: {r.workload}, {r.max_tokens} tokens, {many}, {order}, {r.repeats} repeat(s)", ""]
    head = ["length", "speedup", "throughput ratio", "tokens/step", "efficiency", "n/a"]
    widths = [6, 8, 16, 11, 10, 0]
    lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for p in r.points:
        na = ("failed: see the error below" if p.errors
              else "; ".join(f"{k}: {v}" for k, v in p.na_reasons.items()))
        cells = [f"{p.length:g}", or_na(fmt_speedup(p.speedup)), or_na(fmt_speedup(p.throughput_ratio)),
                 or_na(fmt_number(p.tokens_per_step, 2)), or_na(fmt_number(p.efficiency, 2)), na]
        lines.append("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        lines += [f"{'':8}error: {e}" for e in p.errors]
        if p.note:
            lines.append(f"{'':8}note: {p.note}")
    lines += ["", r.answer, "", *(f"Note: {n}." for n in r.notes)]
    if r.interrupted:
        lines.append("Interrupted: the lengths above are those measured.")
    return "\n".join(lines)


def whatif_json(r: WhatifResult) -> dict[str, Any]:
    """The what-if run as JSON (what ``whatif --json`` prints)."""
    return r.model_dump(mode="json")


def cmd_whatif(args: argparse.Namespace) -> int:
    """Run ``python -m demo whatif``: race the baseline against each length's what-if server at one users count.

    Prints a table (or JSON). Returns 0 when some length measured a speedup, 1 when none did, 130 on Ctrl-C.
    Raises UsageError on bad options (``--arm``, ``--speculative-url``, several users counts)."""
    for flag, given in (("--arm", args.arm), ("--speculative-url", args.speculative_url)):
        if given:
            raise UsageError(f"{flag} is not for whatif: give each length's what-if server as --length-url L=URL")
    try:
        lengths = parse_lengths(args.lengths)
    except BadInput as e:
        raise usage_error(e) from None
    servers = servers_for(lengths, parse_length_urls(args.length_url))
    settings = settings_from_args(args)
    users = users_arg(args.users, settings)
    if len(users) != 1:
        raise UsageError(f"--users takes one count for whatif (the load it is measured at), got {args.users!r}")
    if not args.preset and not args.prompt:
        args.preset = "json_reformat"
    req = load_request(args, settings)
    spec = load_spec_of_flags(settings, req, users, args.order, args.repeats, args.warmup)
    result = WhatifResult(users=users[0], order=spec.order, workload=spec.workload, max_tokens=spec.max_tokens,
                          temperature=spec.temperature, repeats=spec.repeats, warmup=spec.warmup,
                          baseline_url=spec.baseline_url)

    def say(label: str) -> None:
        if not args.no_progress:
            print(f"  {label}", file=sys.stderr, flush=True)

    try:
        run_streams(run_whatif(spec, req, servers, settings, result, on_progress=say))
    except KeyboardInterrupt:
        result.interrupted = True
        print(f"interrupted: {len(result.points)} length(s) measured", file=sys.stderr)
        print(json.dumps(whatif_json(result)) if args.json else whatif_table(result))
        return 130
    print(json.dumps(whatif_json(result)) if args.json else whatif_table(result))
    return 0 if any(p.speedup is not None for p in result.points) else 1
