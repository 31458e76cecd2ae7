"""A recommended speculation schedule, from a measurement: per measured users band, the k that gave
users the fastest decode, as vLLM's ``num_speculative_tokens_per_batch_size`` (vLLM >= 0.32).

Input: the cells of a load sweep (each step's ``LoadStep.cell``) or the evaluator's concurrency
cells of one workload. The candidates at each measured count are the baseline (k = 0) and every
measured arm (its k is the one the server reported, ``ArmCell.num_spec_tokens``); an arm named
``adaptive`` (a server already running a schedule) is not a candidate: its k changes with load. The
best is the highest per-user decode tokens/s (median over users); with an SLO, the best of those
that meet it (a minimum per-user decode tokens/s, a maximum ITL p95), else the best with "none meets
the SLO" in its reason.

Bands: one per measured count, from that count to the next one minus 1, the first from 1 (vLLM
needs every batch size covered: below the lowest count it is that count's k, said so); the last
ends at the highest count measured, and vLLM keeps its k above it (the schedule's last range carries
forward): never extrapolated, said so. Adjacent bands with the same k merge. vLLM's schedule is by
batch size (requests running at once) and we measure users: with one request per user they are the
same count.

"Configured but off": a server with speculation configured and drafting off (the adaptive arm at a
count where it drafted nothing) may still be slower than the baseline. When the sweep has that arm,
``configured_but_off`` gives its per-user decode tokens/s over the baseline's at every such count,
says at which it costs, and whether routing the recommendation's k = 0 band to a server without
speculation beats k = 0 on one server (from the worst count of that band); else n/a with the reason.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from demo.fmt import fmt_number, fmt_speedup, or_na
from demo.slo import Slo
from demo.sweep.crossover import GAIN_NONE
from demo.sweep.models import (
    Band,
    CellResult,
    NoRecommendation,
    OffCost,
    OffPoint,
    Recommendation,
    SweepResult,
)

ADAPTIVE_ARM = "adaptive"  # servers/arms.py's arm with a schedule: measured for the off cost, not a candidate
# Below this, a server with speculation configured and drafting off costs enough to route around it.
OFF_COST_WORTH = 0.97
BATCH_NOTE = ("vLLM schedules by batch size (requests running at once); with one request per user, "
              "users and batch size are the same count")


class ServerPoint(BaseModel):
    """One server (the baseline or an arm) at one measured users count."""

    users: int = Field(ge=1)
    server: str  # "baseline" or the arm's name
    k: int | None = Field(None, ge=0)  # 0 for the baseline; None: the arm's k is not known
    per_user_decode_tokens_per_s: float | None = None
    itl_p95_s: float | None = None
    drafts: int | None = None  # drafts the server made in the measured batches (None: not known)


def server_points(cells: Sequence[CellResult]) -> list[ServerPoint]:
    """Every server's point per cell (one workload's cells: the caller picks them)."""
    out: list[ServerPoint] = []
    for c in cells:
        users = c.settings.concurrency
        base = c.baseline
        out.append(ServerPoint(users=users, server="baseline", k=0, itl_p95_s=base.itl_p95_s,
                               per_user_decode_tokens_per_s=base.decode_tokens_per_s.median
                               if base.decode_tokens_per_s else None))
        for name, arm in c.arms.items():
            drafts = [b.drafts for b in arm.side.batches]
            out.append(ServerPoint(
                users=users, server=name, k=arm.num_spec_tokens, itl_p95_s=arm.side.itl_p95_s,
                per_user_decode_tokens_per_s=arm.side.decode_tokens_per_s.median if arm.side.decode_tokens_per_s
                else None, drafts=sum(d for d in drafts if d is not None) if drafts and None not in drafts else None))
    return out


def sweep_cells(result: SweepResult) -> tuple[str | None, list[CellResult]]:
    """The evaluator's cells of one workload over several concurrency counts: the workload file's,
    else the first preset's at its first temperature with more than one count (None: none has)."""
    groups: dict[tuple[str, float | None], list[CellResult]] = {}
    for c in result.cells:
        groups.setdefault((c.settings.preset, c.settings.temperature), []).append(c)
    ranked = sorted(groups.items(), key=lambda kv: kv[1][0].settings.kind != "workload")
    for (name, _), cells in ranked:
        if len({c.settings.concurrency for c in cells}) > 1:
            return name, sorted(cells, key=lambda c: c.settings.concurrency)
    return None, []


def sweep_recommendation(result: SweepResult, slo: Slo | None = None) -> Recommendation | NoRecommendation:
    """The schedule from an evaluator sweep's concurrency cells (results.json's ``recommendation``)."""
    name, cells = sweep_cells(result)
    if not cells:
        return NoRecommendation(reason="no concurrency cells: the sweep measured one concurrency per workload "
                                       "(run it with --concurrency 1,2,4,8,16)")
    configs = {a.name: {"method": a.method} for a in result.spec.arms if a.method}
    return recommend(server_points(cells), configs, slo, workload=name)


def _meets(p: ServerPoint, slo: Slo | None) -> bool:
    """The point meets the target on its ITL p95 and per-user speed (an unknown figure does not)."""
    if slo is None:
        return True
    return slo.check(lambda figure, q: p.itl_p95_s if (figure, q) == ("itl", 95) else None,
                     p.per_user_decode_tokens_per_s).meets is True


def _best(points: Sequence[ServerPoint], slo: Slo | None) -> tuple[ServerPoint, bool]:
    """The fastest candidate meeting the SLO (True), else the fastest of all (False)."""
    meeting = [p for p in points if _meets(p, slo)]
    pool = meeting or list(points)
    return max(pool, key=lambda p: (p.per_user_decode_tokens_per_s or 0.0, -(p.k or 0))), bool(meeting)


def _candidates(points: Sequence[ServerPoint]) -> dict[int, list[ServerPoint]]:
    """Per measured count, the candidates with a known speed and k (the adaptive arm left out)."""
    by: dict[int, list[ServerPoint]] = {}
    for p in points:
        if p.server != ADAPTIVE_ARM and p.k is not None and p.per_user_decode_tokens_per_s is not None:
            by.setdefault(p.users, []).append(p)
    return {u: by[u] for u in sorted(by) if any(p.server == "baseline" for p in by[u])}


def _users(n: int) -> str:
    return f"{n} user" + ("" if n == 1 else "s")


def _why(p: ServerPoint, base: ServerPoint, met: bool, slo: Slo | None) -> str:
    rate = f"{or_na(fmt_number(p.per_user_decode_tokens_per_s, 1))} tokens/s per user"
    if p.server == "baseline":
        text = f"at {_users(p.users)} the baseline (k=0) was fastest: {rate}"
    else:
        ratio = (p.per_user_decode_tokens_per_s or 0) / (base.per_user_decode_tokens_per_s or 1)
        text = f"at {_users(p.users)} {p.server} (k={p.k}) was fastest: {rate}, speedup {fmt_speedup(ratio)}"
    if slo is not None:
        text += f"; meets {slo.describe()}" if met else f"; none meets {slo.describe()}: the fastest"
    return text


def _bands(chosen: list[tuple[ServerPoint, ServerPoint, bool]], slo: Slo | None) -> list[Band]:
    counts = [p.users for p, _, _ in chosen]
    bands: list[Band] = []
    for i, (p, base, met) in enumerate(chosen):
        lo = 1 if i == 0 else counts[i]
        hi = counts[i + 1] - 1 if i + 1 < len(counts) else counts[i]
        why = _why(p, base, met, slo)
        if bands and bands[-1].k == p.k:
            bands[-1].users_to, bands[-1].why = hi, f"{bands[-1].why}; {why}"
            bands[-1].measured_users.append(p.users)
            continue
        bands.append(Band(users_from=lo, users_to=hi, k=p.k or 0, server=p.server, why=why,
                          per_user_decode_tokens_per_s=p.per_user_decode_tokens_per_s,
                          baseline_tokens_per_s=base.per_user_decode_tokens_per_s, measured_users=[p.users]))
    if counts[0] > 1:
        bands[0].why += f"; 1-{counts[0] - 1} users not measured: the k of {counts[0]}"
    bands[-1].why += (f"; above {counts[-1]} users (not measured) vLLM keeps this k: the schedule's last "
                      f"range carries forward")
    return bands


def off_cost(points: Sequence[ServerPoint], off_band_users: Sequence[int] | None = None) -> OffCost:
    """The adaptive arm with drafting off (0 drafts) over the baseline, at every count it drafted nothing.

    Says at which counts "off" costs (below OFF_COST_WORTH) and by how much. The routing advice rests on
    the worst of ``off_band_users`` (the measured counts of the recommendation's k = 0 bands) where the
    arm was off, else on the worst of every off count, said so.
    """
    base = {p.users: p for p in points if p.server == "baseline"}
    off = [p for p in points if p.server == ADAPTIVE_ARM and p.drafts == 0
           and p.per_user_decode_tokens_per_s is not None and base.get(p.users) is not None
           and base[p.users].per_user_decode_tokens_per_s]
    if not any(p.server == ADAPTIVE_ARM for p in points):
        return OffCost(text=f"n/a: the sweep has no '{ADAPTIVE_ARM}' arm (a server with a schedule) to measure "
                            "speculation configured but off")
    if not off:
        return OffCost(text=f"n/a: the '{ADAPTIVE_ARM}' arm drafted at every count measured (or its drafts are "
                            "not known): no count shows it with drafting off")
    per = [OffPoint(users=p.users, ratio=(p.per_user_decode_tokens_per_s or 0)
                    / (base[p.users].per_user_decode_tokens_per_s or 1)) for p in sorted(off, key=lambda p: p.users)]
    costs = [o for o in per if o.ratio < OFF_COST_WORTH]
    in_band = [o for o in per if o.users in set(off_band_users or ())]
    worst = min(in_band or per, key=lambda o: o.ratio)
    route = worst.ratio < OFF_COST_WORTH
    each = ", ".join(f"{fmt_speedup(o.ratio)} at {_users(o.users)}" for o in per)
    cost_line = (f"off costs at {', '.join(str(o.users) for o in costs)} users "
                 f"({fmt_speedup(min(o.ratio for o in costs))} at worst)" if costs
                 else "off costs nothing at the counts measured")
    where = (f"in the k=0 band ({', '.join(str(o.users) for o in in_band)} users measured with it off)" if in_band
             else "with no k=0 band measured with it off, over every off count")
    verdict = (f"route the k=0 band to a server without speculation: it is faster than k=0 on one server "
               f"({fmt_speedup(worst.ratio)} at {_users(worst.users)})" if route
               else "k=0 on one server costs nothing worth a second server")
    return OffCost(users=worst.users, ratio=worst.ratio, route_to_baseline=route, by_users=per,
                   costs_at_users=[o.users for o in costs],
                   text=f"with drafting off, {ADAPTIVE_ARM} ran at {each} of the baseline's per-user decode "
                        f"tokens/s: {cost_line}; {where}: {verdict}")


def _ratio(p: ServerPoint | None, base: ServerPoint | None) -> float | None:
    if p is None or base is None or not p.per_user_decode_tokens_per_s or not base.per_user_decode_tokens_per_s:
        return None
    return p.per_user_decode_tokens_per_s / base.per_user_decode_tokens_per_s


def adaptive_lesson(points: Sequence[ServerPoint]) -> str:
    """The stage's one line under the curves, read from the measurement: does the adaptive arm keep the
    static arm's gain at the fewest users, and stay at or above the baseline where the static arm loses
    (speedup below GAIN_NONE)? The static arm: the fastest other arm at the fewest users. n/a and why."""
    at = {(p.users, p.server): p for p in points if p.per_user_decode_tokens_per_s}
    counts = sorted({u for u, s in at if s == ADAPTIVE_ARM and (u, "baseline") in at})
    statics = [p for (u, s), p in at.items() if counts and u == counts[0] and s not in ("baseline", ADAPTIVE_ARM)]
    if not counts or not statics:
        return f"n/a: the sweep needs the baseline, '{ADAPTIVE_ARM}' and a static arm at the same counts"
    static = max(statics, key=lambda p: p.per_user_decode_tokens_per_s or 0.0).server
    first = counts[0]
    a0, s0 = _ratio(at.get((first, ADAPTIVE_ARM)), at[(first, "baseline")]), _ratio(at.get((first, static)),
                                                                                   at[(first, "baseline")])
    keeps = a0 is not None and s0 is not None and a0 >= 0.95 * s0
    line = (f"{ADAPTIVE_ARM} {'keeps' if keeps else 'loses'} {static}'s gain at {_users(first)} "
            f"(speedup {fmt_speedup(a0)} vs {fmt_speedup(s0)})")
    losing = [u for u in counts if (r := _ratio(at.get((u, static)), at[(u, "baseline")])) is not None
              and r < GAIN_NONE]
    if not losing:
        return line + f"; {static} never loses at the counts measured"
    ratios = [_ratio(at.get((u, ADAPTIVE_ARM)), at[(u, "baseline")]) or 0.0 for u in losing]
    holds = min(ratios) >= OFF_COST_WORTH
    return (line + f"; where {static} loses ({', '.join(map(str, losing))} users) {ADAPTIVE_ARM} "
            + ("stays at or above the baseline" if holds else "falls below the baseline")
            + f" (speedup {fmt_speedup(min(ratios))} at worst)")


def _method(chosen: list[tuple[ServerPoint, ServerPoint, bool]], configs: Mapping[str, Mapping[str, Any]]
            ) -> dict[str, Any]:
    """The method config of the arm with the largest chosen k (k = 0 everywhere: the first arm's)."""
    arms = [p for p, _, _ in chosen if p.server != "baseline"]
    name = max(arms, key=lambda p: p.k or 0).server if arms else next(iter(configs), "")
    base = dict(configs.get(name) or {})
    base.pop("num_speculative_tokens_per_batch_size", None)
    return base


def _one_method(points: Sequence[ServerPoint], configs: Mapping[str, Mapping[str, Any]]
                ) -> tuple[list[ServerPoint], list[str]]:
    """The points of the arms of one method (a schedule runs one method): that of the fastest arm at the
    lowest measured count, with a note naming the arms left out; all points when the methods agree."""
    method = {n: c["method"] for n, c in configs.items() if c.get("method")}
    if len(set(method.values())) <= 1:
        return list(points), []
    by = _candidates(points)
    arms = [p for p in by[min(by)] if p.server != "baseline"] if by else []
    if not arms:
        return list(points), []
    keep = method.get(max(arms, key=lambda p: p.per_user_decode_tokens_per_s or 0.0).server)
    out = sorted({n for n, m in method.items() if m != keep})
    note = f"arms of another method than {keep} left out (a schedule runs one method): {', '.join(out)}"
    return [p for p in points if p.server not in out], [note]


def recommend(points: Sequence[ServerPoint], configs: Mapping[str, Mapping[str, Any]] | None = None,
              slo: Slo | None = None, workload: str | None = None) -> Recommendation | NoRecommendation:
    """The schedule from the measured points; ``configs``: each arm's speculative config by name (its
    method's keys; without one, ``{"method": ...}`` is left for the caller to fill)."""
    configs = configs or {}
    points, notes = _one_method(points, configs)
    by = _candidates(points)
    if not by:
        return NoRecommendation(reason="no measured count has both the baseline's and an arm's per-user "
                                       "decode tokens/s with the arm's k known")
    if not any(p.server != "baseline" for ps in by.values() for p in ps):
        return NoRecommendation(reason="no arm with a known k was measured (its k comes from the server's "
                                       "per-request metrics or /metrics)")
    chosen = []
    for ps in by.values():
        best, met = _best(ps, slo)
        chosen.append((best, next(p for p in ps if p.server == "baseline"), met))
    bands = _bands(chosen, slo)
    schedule = [[b.users_from, b.users_to, b.k] for b in bands]
    config = _method(chosen, configs)
    config["num_speculative_tokens"] = max(max(b.k for b in bands), 1)
    config["num_speculative_tokens_per_batch_size"] = schedule
    if "method" not in config:
        notes.append("the arms' method is not known (SPECDEMO_ARMS' method, SPECDEMO_SPEC_METHOD): add "
                     "\"method\" and its keys to the config before deploying it")
    off_band_users = [u for b in bands if b.k == 0 for u in b.measured_users]
    rec = Recommendation(speculative_config=config, bands=bands, configured_but_off=off_cost(points, off_band_users),
                         workload=workload, slo=slo, notes=notes, adaptive_text=adaptive_lesson(points))
    rec.text = one_line(rec)
    return rec


def one_line(rec: Recommendation) -> str:
    """"k=4 for 1-2 users, k=0 (off) from 3 (measured up to 32; batch size = users)"."""
    parts = [f"k={b.k}{' (off)' if b.k == 0 else ''} for {b.users_from}-{b.users_to} users" for b in rec.bands]
    top = rec.bands[-1]
    return (f"recommended schedule: {', '.join(parts)}; above {top.users_to} the last k "
            f"(not measured); batch size = users with one request per user")


def config_json(rec: Recommendation) -> str:
    """The ``--speculative-config`` value, compact JSON."""
    return json.dumps(rec.speculative_config, separators=(",", ":"))


def deploy_snippets(rec: Recommendation) -> dict[str, str]:
    """The same config as a vLLM flag, a compose .env line (SPEC_CONFIG: the pair's speculative
    server) and Helm values (an engine's vllmConfig.extraArgs, YAML)."""
    text = config_json(rec)
    return {
        "flag": f"--speculative-config {shlex.quote(text)}",
        "compose_env": f"SPEC_CONFIG={shlex.quote(text)}",
        "helm": "vllmConfig:\n  extraArgs:\n  - --speculative-config\n  - " + json.dumps(text),
    }


def recommendation_json(rec: Recommendation | NoRecommendation) -> dict[str, Any]:
    """load.json's / results.json's ``recommendation``: the model, plus the deploy snippets; or the reason."""
    if isinstance(rec, NoRecommendation):
        return {"speculative_config": None, "bands": [], "reason": rec.reason}
    return {**rec.model_dump(), "deploy": deploy_snippets(rec), "note": BATCH_NOTE}


def recommendation_lines(rec: Recommendation | NoRecommendation) -> list[str]:
    """The table's lines: the one line, a row per band with its figures, the config and deploy values."""
    if isinstance(rec, NoRecommendation):
        return [f"Recommended schedule: n/a ({rec.reason})"]
    lines = [f"Recommended schedule ({BATCH_NOTE}):"]
    for b in rec.bands:
        seen = ", ".join(f"{r:g}" for r in b.rates_requests_per_s)
        rates = f" (seen at {seen} req/s)" if seen else ""
        lines.append(f"  users {b.users_from}-{b.users_to}{rates}: k={b.k} ({b.server}, "
                     f"{or_na(fmt_number(b.per_user_decode_tokens_per_s, 1))} tok/s per user vs baseline "
                     f"{or_na(fmt_number(b.baseline_tokens_per_s, 1))}): {b.why}")
    lines.append(f"  configured but off: {rec.configured_but_off.text}")
    lines.append(f"  adaptive: {rec.adaptive_text}")
    lines += [f"  note: {n}" for n in rec.notes]
    snippets = deploy_snippets(rec)
    lines += ["  vLLM:    " + snippets["flag"], "  compose (.env): " + snippets["compose_env"],
              f"  Helm (the engine's vllmConfig.extraArgs): [--speculative-config, {json.dumps(config_json(rec))}]"]
    return lines
