"""Parse vLLM command lines with vLLM's own argument parser; run by the CPU vLLM venv's python.

    .venv-vllm/bin/python tests/vllm_args_check.py COMMANDS.json RESULTS.json

COMMANDS.json: a list of {"label": str, "argv": [...]} (argv after `vllm serve`). For each, the
serve parser (``make_arg_parser`` over ``FlexibleArgumentParser``, as `vllm serve` builds it)
parses the argv, ``validate_parsed_serve_args`` checks it, and ``AsyncEngineArgs.from_cli_args``
builds the engine arguments (no engine is created, nothing is downloaded); the API server's own
start check (``validate_api_server_args``: the tool-call parser is a registered one) runs too. Every key of
``--speculative-config`` must be a field of ``vllm.config.SpeculativeConfig`` and its ``method``
one of ``SpeculativeMethod``; ``rejection_sample_method`` one of ``RejectionSampleMethod``, and a
synthetic-acceptance config (``"rejection_sample_method": "synthetic"``) is resolved with
SpeculativeConfig's own ``_resolve_synthetic_acceptance_rates`` (the range and exclusivity checks its
``__post_init__`` runs: building the whole SpeculativeConfig offline is not possible, it needs the
target's model config from the hub). A dynamic schedule (``num_speculative_tokens_per_batch_size``,
vLLM >= 0.32) is expanded with ``build_dynamic_sd_schedule_lookup``, as the scheduler does when the
engine starts (its validation: ranges, order, the first at 1, k >= 0), for the command's
--max-num-seqs (vLLM's default 256 when not given), and each k must be at most
num_speculative_tokens (vLLM would clamp it silently). Writes one JSON object {label: {"ok", "error", "engine_args"}} to
RESULTS.json (vLLM logs to stdout) and exits 0: the caller decides which labels must pass and
which must fail. Uses only vLLM and the standard library: it runs outside the app's venv.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import typing
from typing import Any


def _literal_values(tp: Any) -> set[str]:
    """All strings of a (nested) Literal / Optional[Literal] type."""
    out: set[str] = set()
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.add(arg)
        elif arg is not type(None):
            out |= _literal_values(arg)
    return out


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _synthetic_problems(spec: dict[str, Any], rejection_methods: set[str], spec_class: Any) -> list[str]:
    """What SpeculativeConfig.__post_init__ would say of the rejection-sampling keys."""
    how = spec.get("rejection_sample_method", "standard")
    if how not in rejection_methods:
        return [f"--speculative-config rejection_sample_method {how!r} is not one of {sorted(rejection_methods)}"]
    rates, length = spec.get("synthetic_acceptance_rates"), spec.get("synthetic_acceptance_length")
    if how != "synthetic":
        if rates is not None or length is not None:
            return ["--speculative-config: synthetic_acceptance_rates / synthetic_acceptance_length "
                    "are only valid with rejection_sample_method='synthetic'"]
        return []
    try:
        spec_class._resolve_synthetic_acceptance_rates(int(spec.get("num_speculative_tokens") or 0), rates, length)
    except (ValueError, TypeError) as e:
        return [f"--speculative-config synthetic: {e}"]
    return []


def _schedule_problems(spec: dict[str, Any], max_num_seqs: int | None) -> list[str]:
    """What vLLM's scheduler would say of the dynamic schedule when the engine starts."""
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    if schedule is None:
        return []
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    k = int(spec.get("num_speculative_tokens") or 0)
    try:
        build_dynamic_sd_schedule_lookup(schedule, max_num_seqs or 256, k)
    except (ValueError, TypeError) as e:
        return [f"--speculative-config schedule: {e}"]
    too_big = [entry for entry in schedule if int(entry[2]) > k]
    return [f"--speculative-config schedule: k {too_big[0][2]} above num_speculative_tokens {k}"] if too_big else []


def main(path: str, out_path: str) -> int:
    from vllm.config import SpeculativeConfig
    from vllm.config.speculative import RejectionSampleMethod, SpeculativeMethod
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.launchers.launcher import validate_api_server_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spec_fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    methods = _literal_values(SpeculativeMethod)
    rejection_methods = _literal_values(RejectionSampleMethod)
    commands = json.loads(open(path, encoding="utf-8").read())
    results: dict[str, dict[str, Any]] = {}
    for cmd in commands:
        label, argv = cmd["label"], [str(a) for a in cmd["argv"]]
        result: dict[str, Any] = {"ok": False, "error": None, "engine_args": None}
        results[label] = result
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                args = parser.parse_args(argv)
        except SystemExit:
            result["error"] = "parser: " + (stderr.getvalue().strip().splitlines() or ["exit"])[-1]
            continue
        try:
            if getattr(args, "model_tag", None):
                args.model = args.model_tag  # what `vllm serve MODEL` does (vllm/entrypoints/cli/serve.py)
            validate_parsed_serve_args(args)
            validate_api_server_args(args)  # what the API server checks at start: the tool-call parser's name
            engine = AsyncEngineArgs.from_cli_args(args)
        except Exception as e:  # vLLM raises many kinds here; report whichever with its message
            result["error"] = f"engine args: {type(e).__name__}: {e}"
            continue
        spec = engine.speculative_config
        problems = []
        if spec is not None:
            if not isinstance(spec, dict):
                problems.append(f"--speculative-config is not a JSON object: {spec!r}")
            else:
                problems += [f"--speculative-config key {k!r} is not a SpeculativeConfig field"
                             for k in sorted(set(spec) - spec_fields)]
                if spec.get("method") not in methods:
                    problems.append(f"--speculative-config method {spec.get('method')!r} is not one of vLLM's methods")
                problems += _synthetic_problems(spec, rejection_methods, SpeculativeConfig)
                problems += _schedule_problems(spec, engine.max_num_seqs)
        if problems:
            result["error"] = "; ".join(problems)
            continue
        result["ok"] = True
        result["engine_args"] = {f.name: _jsonable(getattr(engine, f.name)) for f in dataclasses.fields(engine)}
        result["frontend"] = {k: _jsonable(getattr(args, k, None)) for k in (
            "host", "port", "served_model_name", "chat_template", "enable_auto_tool_choice", "tool_call_parser")}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
