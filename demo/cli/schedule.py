"""``python -m demo schedule FILE``: the recommended schedule (demo/sweep/schedule.py) from a saved
load sweep (load.json) or an evaluator sweep (results.json), with an optional SLO; its table or
JSON. Bad input is one line and exit 2, and nothing is sent to any server: a file that is neither,
a sweep of another model than ``--model``, one without load steps or concurrency cells."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import ValidationError

from demo.cli.args import UsageError
from demo.fmt import validation_summary
from demo.load.engine import LoadResult, recommend_schedule
from demo.load.rate_summary import rate_schedule
from demo.slo import Slo
from demo.sweep.models import NoRecommendation, Recommendation, SweepResult
from demo.sweep.rates import load_result
from demo.sweep.schedule import recommendation_json, recommendation_lines, sweep_cells, sweep_recommendation

MAX_FILE_BYTES = 100_000_000  # a results.json of a long sweep is a few MB


def add_schedule_parser(sub: argparse._SubParsersAction) -> None:
    """The ``schedule`` subcommand's flags."""
    p = sub.add_parser("schedule", help="a schedule of k by batch size from a saved sweep (load.json, results.json)",
                       description="Per measured users band, the k with the best per-user decode tokens/s (the "
                                   "best meeting the SLO, if given), as vLLM's num_speculative_tokens_per_batch_size "
                                   "in a ready --speculative-config.")
    p.add_argument("file", type=Path, help="a load sweep's load.json or an evaluator sweep's results.json")
    p.add_argument("--model", help="refuse a sweep measured on another model (the servers' model names)")
    p.add_argument("--min-user-tokens-per-s", type=float, metavar="N", help="SLO: per-user decode tokens/s, at least")
    p.add_argument("--max-itl-ms", type=float, metavar="MS", help="SLO: inter-token latency p95, at most")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(func=cmd_schedule)


def read_sweep(path: Path) -> LoadResult | SweepResult:
    """load.json or results.json, validated; UsageError (one line, never the file's text) otherwise."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise UsageError(f"{path} is over {MAX_FILE_BYTES / 1e6:g} MB: not a sweep this tool reads")
        raw = path.read_bytes()
        kind = json.loads(raw).get("kind")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except (ValueError, AttributeError):
        raise UsageError(f"{path} is not a JSON object: give a load.json or a results.json") from None
    try:
        return LoadResult.model_validate_json(raw) if kind == "load" else SweepResult.model_validate_json(raw)
    except ValidationError as e:
        what = "load.json" if kind == "load" else "results.json"
        raise UsageError(f"{path} is not a valid {what}: {validation_summary(e, count_rest=True)}") from None


def check_model(result: LoadResult | SweepResult, path: Path, model: str | None) -> None:
    """UsageError when the sweep's servers served another model than ``model`` (unknown: accepted)."""
    if model is None or not isinstance(result, SweepResult):
        return
    served = {s.model for s in result.servers if s.model}
    if served and model not in served:
        raise UsageError(f"{path} was measured on another model than --model: its schedule is not this model's")


def recommend_from(result: LoadResult | SweepResult, path: Path,
                   slo: Slo | None) -> Recommendation | NoRecommendation:
    """The recommendation; UsageError when the sweep has no load steps or concurrency cells."""
    if isinstance(result, SweepResult) and (rated := load_result(result)) is not None:  # sweep --rate
        result = rated
    if isinstance(result, LoadResult) and result.spec.rate is not None:  # open loop: keyed by the batch each rate made
        configs = {a.name: {"method": a.method} for a in result.spec.arm_list() if a.method}
        rec = rate_schedule(result.rate_steps, result.spec.rate.slo, configs, slo)
        if rec is None:
            raise UsageError(f"{path} has no rate step whose running batch was sampled: run longer steps "
                             "(--duration of a few seconds at least)")
        return rec
    if isinstance(result, LoadResult):
        if len([s for s in result.steps if s.status != "failed"]) < 2:
            raise UsageError(f"{path} has fewer than two measured load steps: sweep more user counts "
                             "(python -m demo load --users 1,2,4,8,16)")
        return recommend_schedule(result, slo)
    if not sweep_cells(result)[1]:
        raise UsageError(f"{path} has no concurrency cells (one concurrency per workload): run the sweep with "
                         "--concurrency 1,2,4,8,16")
    return sweep_recommendation(result, slo)


def cmd_schedule(args: argparse.Namespace) -> int:
    """Read, check, recommend, print; 0 with a schedule, 1 without one (its reason printed)."""
    try:
        slo = (Slo.of_ms(itl_ms=args.max_itl_ms, min_user_tokens_per_s=args.min_user_tokens_per_s)
               if args.min_user_tokens_per_s is not None or args.max_itl_ms is not None else None)
    except ValidationError as e:
        raise UsageError(validation_summary(e)) from None
    result = read_sweep(args.file)
    check_model(result, args.file, args.model)
    rec = recommend_from(result, args.file, slo)
    print(json.dumps(recommendation_json(rec)) if args.json else "\n".join(recommendation_lines(rec)))
    return 0 if isinstance(rec, Recommendation) else 1
