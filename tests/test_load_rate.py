"""Open-loop load (``python -m demo load --rate``, demo/load/rate.py and demo/load/arrivals.py) against
stand-ins whose requests slow down with the requests already running (``slowdown_per_running``), a
different factor on each side, so that the baseline holds more requests per second than the faster
speculative side: the gain falls with the rate and turns into a loss.

Every truth is computed from what the stand-ins recorded themselves (their send times, their queue
times), never from a formula a busy machine would bend. Steps are short (2 to 3 s of arrivals).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.waiting import wait_for
from demo.cli import main
from demo.load.arrivals import MAX_ARRIVAL_WINDOW_S, ArrivalSchedule, draw_schedule, parse_rates
from demo.load.engine import LoadResult, LoadSpec, run_load
from demo.load.rate import side_figures
from demo.load.rate_models import RateLoad, RateSide, RateStep
from demo.load.rate_summary import batch_of, capacity_of, crossover_of
from demo.measure import percentile, spread_gaps_s
from demo.metrics import histogram_quantile, parse_metrics, tpot_mean_between
from demo.results import SideResult
from demo.settings import ROOT, Settings
from demo.slo import Slo, SloBound
from demo.workload import WorkloadRequest
from harness.margins import within
from harness.standin import Standin, StandinBehavior, Truth
from harness.standin_process import process_pair
from tests.signals import interruptible

TOKENS = 24
# Unloaded: the baseline 20 ms a token, the speculative side 8 ms (chunks of 1, 3, 2 tokens): gaps long
# against a busy machine's scheduling delay (a late read merges chunks and shortens the gaps seen). A
# request arriving with r running is slowed by 1 + x r for its whole life: x = 0.3 on the baseline,
# 2 on the speculative side, so the speculative side saturates first and its gain turns to a loss. Each
# chunk is also slowed by 1 + 0.05 (n - 1) for the n streams in flight as it goes (slowdown_in_flight): a
# request's gaps are not one plateau, so an ITL median never sits on the edge between two requests' plateaus.
BASE = StandinBehavior(tokens_per_s=50, ttft_s=0.02, slowdown_per_running=0.3, slowdown_in_flight=0.05)
SPEC = StandinBehavior(tokens_per_s=125, ttft_s=0.02, slowdown_per_running=2.0, slowdown_in_flight=0.05,
                       speculative=True, chunk_sizes=[1, 3, 2])
RATES = [1, 2.5, 8]  # below both capacities (~4 and ~2.5 req/s), around the speculative side's, above both
DURATION_S = 7.0  # with seed 1: 9, 24 and 44 requests


@pytest.fixture(autouse=True)
def _no_saved_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")


def request() -> WorkloadRequest:
    return WorkloadRequest(id="prompt", api="chat", messages=[{"role": "user", "content": "say something"}],
                           max_tokens=TOKENS, temperature=0.0)


# --------------------------------------------------------------------------- truths from the records


def truth_itl(truths: list[Truth]) -> list[float]:
    """Every token's gap as the stand-in sent it (a chunk's gap spread over its tokens, as the client does)."""
    return [g for t in truths if t.outcome == "completed"
            for g in spread_gaps_s(list(zip(t.chunk_send_times, t.chunk_sizes_sent, strict=True)))]


def truth_completed_per_s(truths: list[Truth], first_offset_s: float) -> float:
    """Completed requests over the step's time, as the product defines it (demo/load/rate.py
    RateSide.duration_s): from its start (the first request's arrival less its scheduled offset) to
    the last token sent, or, where the step cut requests, to the cut (when the stand-in saw the last
    of them end)."""
    done = [t for t in truths if t.outcome == "completed"]
    start = min(t.t_request for t in truths) - first_offset_s
    cut = [t.t_end for t in truths if t.outcome == "aborted" and t.t_end is not None]
    end = max(cut) if cut else max(t.t_last_token_sent or 0 for t in done)
    return len(done) / (end - start)


def truth_speedup(base: list[Truth], spec: list[Truth]) -> float:
    rate = [statistics.median(t.decode_tokens_per_s for t in side if t.decode_tokens_per_s) for side in (base, spec)]
    return rate[1] / rate[0]


def split(truths: list[Truth], steps: list[RateStep]) -> list[list[Truth]]:
    """A server's records cut into its steps (each step sent its schedule's requests, in order)."""
    out, i = [], 0
    for s in steps:
        n = len(s.schedule.offsets_s)
        out.append(truths[i:i + n])
        i += n
    return out


# --------------------------------------------------------------------------- against the stand-ins


def test_rate_sweep_matches_the_truth_below_around_and_above_saturation(capsys) -> None:
    with process_pair(BASE, SPEC) as (base, spec):
        assert main(["load", "--baseline-url", base.url, "--speculative-url", spec.url, "--prompt", "say something",
                     "--max-tokens", str(TOKENS), "--temperature", "0", "--rate", ",".join(map(str, RATES)),
                     "--duration", str(DURATION_S), "--drain-s", "8", "--arrival-seed", "1", "--json",
                     "--no-progress"]) == 0
        out = json.loads(capsys.readouterr().out)
        truths = {"baseline": base.truth(), "speculative": spec.truth()}
    steps = [RateStep.model_validate(s) for s in out["rate_steps"]]
    assert [s.rate_requests_per_s for s in steps] == RATES
    per = {name: split(t, steps) for name, t in truths.items()}
    saturated = []
    for k, step in enumerate(steps):
        first = step.schedule.offsets_s[0]
        for side in step.servers():
            tr = per[side.name][k]
            assert side.accounted and side.sent == len(step.schedule.offsets_s) == len(tr)
            assert side.finished == sum(t.outcome == "completed" for t in tr)
            at = f"{side.name} at {step.rate_requests_per_s:g} req/s"
            assert within(side.completed_requests_per_s, truth_completed_per_s(tr, first), 0.05,
                          f"completed req/s, {at}"), (
                step.rate_requests_per_s, side.name, side.completed_requests_per_s, truth_completed_per_s(tr, first))
            itl = percentile(truth_itl(tr), 50)
            assert itl is not None and within(side.itl_s["p50"], itl, 0.05, f"ITL p50, {at}"), (
                side.name, side.itl_s, itl)
            tpot = statistics.median((t.t_last_token_sent - t.t_first_token_sent) / (t.completion_tokens - 1)
                                     for t in tr if t.outcome == "completed" and t.t_last_token_sent
                                     and t.t_first_token_sent)
            # vllm bench serve's TPOT
            assert within(side.tpot_s["p50"], tpot, 0.05, f"TPOT p50, {at}"), (side.name, side.tpot_s, tpot)
            # Queueing: none on these stand-ins (no max_num_seqs), and the histogram says exactly that.
            assert side.queue_time_mean_s == 0.0 and side.queue_time_requests == side.finished
            saturated.append((step.rate_requests_per_s, side.name, side.saturated))
    # Below saturation, neither falls behind; far above it, both do (the truth: its finishes trail its arrivals).
    assert not any(sat for rate, _, sat in saturated if rate == RATES[0])
    assert all(sat for rate, _, sat in saturated if rate == RATES[-1])
    # The stand-ins' step time grew with the running batch: the decode rate they sent falls as the rate rises.
    for name, steps_truths in per.items():
        rates_sent = [statistics.median(t.decode_tokens_per_s for t in tr if t.decode_tokens_per_s)
                      for tr in steps_truths]
        assert rates_sent[0] > rates_sent[1] > rates_sent[2], (name, rates_sent)
    # The crossover in req/s between the same two rates as the truth's gain crossing 1.
    gains = [truth_speedup(per["baseline"][k], per["speculative"][k]) for k in range(len(steps))]
    k = next(i for i, g in enumerate(gains) if g < 1)
    assert k > 0, gains
    ours = crossover_of([(s.rate_requests_per_s, s.arms["speculative"].speedup) for s in steps])
    assert ours.break_even_between == (RATES[k - 1], RATES[k]), (gains, ours)
    assert out["summary"]["crossovers"]["speculative"]["break_even_between"] == [RATES[k - 1], RATES[k]]
    # Capacity under an ITL p50 SLO set between two measured rates: within 10% of the truth's, found the same way.
    truth_p50 = [percentile(truth_itl(per["baseline"][k]), 50) or 0.0 for k in range(len(steps))]
    bound_ms = 1000 * (truth_p50[0] * truth_p50[1]) ** 0.5
    slo = Slo(itl=SloBound(ms=bound_ms, percentile=50))
    truth_sides = [RateSide(name="baseline", rate_requests_per_s=s.rate_requests_per_s, sent=1, finished=1,
                            slo_figures_s={"itl": p}) for s, p in zip(steps, truth_p50, strict=True)]
    measured_sides = [s.baseline.model_copy(update={"slo_figures_s": {"itl": s.baseline.itl_s["p50"]}})
                      for s in steps]
    truth_cap, our_cap = capacity_of("baseline", truth_sides, slo), capacity_of("baseline", measured_sides, slo)
    assert truth_cap.requests_per_s is not None and RATES[0] < truth_cap.requests_per_s < RATES[1]
    assert within(our_cap.requests_per_s, truth_cap.requests_per_s, 0.10, "capacity under the ITL SLO"), (
        our_cap, truth_cap)
    # The schedule's bands, keyed by batch size, name the rates that produced those batches: every rate once.
    bands = out["recommendation"]["bands"]
    assert sorted(r for b in bands for r in b["rates_requests_per_s"]) == RATES
    # Each rate sits in the band of the batch it produced (batch_of: the running mean, rounded, at least 1;
    # a mean under 0.5, a quiet step sampled between requests, is batch 1), the last band taking any above.
    for b in bands:
        for s in steps:
            if s.rate_requests_per_s in b["rates_requests_per_s"]:
                batch = batch_of(s)
                assert batch is not None and b["users_from"] <= batch, (b, s.rate_requests_per_s, batch)
                assert batch <= b["users_to"] or b is bands[-1], (b, s.rate_requests_per_s, batch)


def test_the_schedule_is_seeded_and_every_server_gets_the_same_send_times() -> None:
    a = draw_schedule(4, "poisson", seed=3, duration_s=2.5)
    assert a == draw_schedule(4, "poisson", seed=3, duration_s=2.5)
    assert a.offsets_s != draw_schedule(4, "poisson", seed=4, duration_s=2.5).offsets_s
    load = RateLoad(rates=[4], duration_s=2.5, seed=3, drain_s=3)
    with Standin.pair(StandinBehavior(tokens_per_s=400, ttft_s=0.01)) as (base, spec):
        settings = Settings(baseline_url=base.url, speculative_url=spec.url)
        spec_ = LoadSpec(rate=load, workload="prompt", max_tokens=8, temperature=0, baseline_url=base.url,
                         speculative_url=spec.url)
        result = asyncio.run(run_load(spec_, request(), settings))
        received = {name: [t.t_request for t in s.truth] for name, s in (("baseline", base), ("speculative", spec))}
    step = result.rate_steps[0]
    assert step.schedule.offsets_s == load.schedule(0).offsets_s  # replayed: the same times
    sends = step.schedule.offsets_s
    for name, times in received.items():
        assert len(times) == len(sends)
        # Each server received every request at its scheduled offset (from the first one): typically within
        # 20 ms, and none later than 200 ms on a busy machine (another seed's times are ~250 ms apart).
        lags = [abs((t - times[0]) - (o - sends[0])) for t, o in zip(times, sends, strict=True)]
        assert statistics.median(lags) < 0.02 and max(lags) < 0.2, (name, lags)
    gaps = [b - s for b, s in zip(received["baseline"], received["speculative"], strict=True)]
    spread = [abs(g - statistics.median(gaps)) for g in gaps]
    assert statistics.median(spread) < 0.02 and max(spread) < 0.2  # the same traffic, one step's time apart
    assert all(side.send_lag_max_ms is not None and side.send_lag_max_ms < 200 for side in step.servers())


def test_ten_times_over_capacity_ends_in_stated_time_with_every_request_accounted_for() -> None:
    # One slot (max_num_seqs 1), 0.4 s a request: it holds 2.5 req/s. Sent 25 req/s for 1.2 s.
    b = StandinBehavior(tokens_per_s=50, ttft_s=0.02, max_num_seqs=1)
    load = RateLoad(rates=[25], duration_s=1.2, drain_s=1.0, seed=1)
    with Standin(b) as base, Standin(b.model_copy(update={"speculative": True})) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url)
        spec_ = LoadSpec(rate=load, workload="prompt", max_tokens=20, temperature=0, baseline_url=base.url,
                         speculative_url=spec.url)
        t0 = time.monotonic()
        result = asyncio.run(run_load(spec_, request(), settings))
        elapsed = time.monotonic() - t0
        assert base.wait_idle(5) and spec.wait_idle(5)  # every cut stream was closed: nothing left behind
        truths = [t for t in base.truth if t.outcome == "completed"]
    step = result.rate_steps[0]
    bound = step.baseline.bound_s
    assert bound == pytest.approx(step.schedule.window_s + 1.0)
    assert elapsed < 2 * bound + 3  # two servers, each ended at its bound (plus the scrapes)
    for side in step.servers():
        assert side.accounted and side.sent == len(step.schedule.offsets_s) > 20
        assert side.cut > 0 and side.saturated and "cut" in side.saturation_note
        assert side.duration_s is not None and side.duration_s <= bound + 0.5
        assert side.running_p95 is None or side.running_p95 <= 1  # one slot: never more than one running
    # Queueing from vllm:request_queue_time_seconds: the finished requests' mean wait, as the stand-in recorded
    # it. The bound cuts at most one request mid-stream (one slot), and that one may complete on the stand-in
    # just as the client stops reading it, before or after the scrape that ends the step: the client then
    # finished one fewer, the scrape counted one fewer or none fewer. The scrape's mean is exactly that of
    # the completions it counted, the first ones.
    counted = step.baseline.queue_time_requests
    assert counted is not None and len(truths) - 1 <= counted <= len(truths), (counted, len(truths))
    assert len(truths) - 1 <= step.baseline.finished <= len(truths), (step.baseline.finished, len(truths))
    mean = statistics.mean(t.queue_time_s for t in sorted(truths, key=lambda t: t.t_end or 0.0)[:counted])
    assert mean > 0.1 and step.baseline.queue_time_mean_s == pytest.approx(mean, rel=1e-6)
    assert result.rate_summary is not None and result.rate_summary.stopped_note == ""  # the only rate


# --------------------------------------------------------------------------- arithmetic and input


def test_arrival_laws_have_the_asked_rate_and_burstiness() -> None:
    for law, shape in (("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)):
        s = draw_schedule(10, law, burstiness=shape, seed=5, requests=4000)  # type: ignore[arg-type]
        gaps = [b - a for a, b in zip([0.0, *s.offsets_s], s.offsets_s, strict=False)]
        mean = statistics.mean(gaps)
        assert mean == pytest.approx(0.1, rel=0.05)
        assert (statistics.pvariance(gaps) / mean**2) == pytest.approx(1 / shape, rel=0.15)  # gamma: CV² = 1/shape
    c = draw_schedule(2, "constant", duration_s=3)
    assert c.offsets_s == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5]) and c.offered_requests_per_s == pytest.approx(5 / 3)
    n = draw_schedule(2, "poisson", seed=1, requests=16, normalized=True)
    assert n.offsets_s[-1] == pytest.approx(8.0)  # as vllm bench serve: N requests span N/rate
    with pytest.raises(ValueError, match="backwards at request 3"):
        ArrivalSchedule.from_offsets([0.0, 1.0, 0.5])
    assert ArrivalSchedule.from_offsets([0.0, 0.5, 2.0]).rate_requests_per_s == pytest.approx(1.5)


def test_tpot_mean_is_vllm_bench_serves_beside_the_servers_own() -> None:
    # Given requests (no clock read): TPOT per request is (e2e - TTFT) / (tokens - 1); their mean is vllm
    # bench serve's "Mean TPOT". The server's own mean of the same figure comes from its histogram between
    # the step's two scrapes (here 2 requests finished on it, 0.05 s a token between them).
    done = [SideResult(side="speculative", url="http://127.0.0.1:1", complete=True, done=True, ttft_s=0.5,
                       e2e_s=0.5 + per * (n - 1), completion_tokens=n)
            for per, n in ((0.02, 11), (0.03, 31), (0.1, 101))]
    one_token = SideResult(side="speculative", url="http://127.0.0.1:1", complete=True, done=True, ttft_s=0.5,
                           e2e_s=0.5, completion_tokens=1)  # no TPOT: one token
    schedule = ArrivalSchedule.from_offsets([0.0, 1.0, 2.0, 3.0])
    hist = "vllm:request_time_per_output_token_seconds"
    before = parse_metrics(f"{hist}_sum 1.5\n{hist}_count 7\n")
    after = parse_metrics(f"{hist}_sum 1.6\n{hist}_count 9\n")
    side = side_figures("speculative", schedule, [*done, one_token], 0, 10.0, 20.0, Slo(), before, after, [], [],
                        [], None)
    assert side.tpot_mean_s == pytest.approx(0.05) and side.tpot_s["p50"] == pytest.approx(0.03)  # mean, not median
    assert side.server_tpot_mean_s == pytest.approx(0.05) and "server_tpot_mean_s" not in side.na_reasons
    # No scrape, or nothing finished on the server between them: n/a, with the reason.
    alone = ArrivalSchedule.from_offsets([0.0])
    none = side_figures("speculative", alone, [one_token], 0, 10.0, 20.0, Slo(), before, before, [], [], [], None)
    assert none.tpot_mean_s is None and none.na_reasons["tpot_mean_s"] == "no finished request had two tokens or more"
    assert none.na_reasons["server_tpot_mean_s"] == "no request finished in the window"
    unscraped = side_figures("speculative", alone, done[:1], 0, 10.0, 20.0, Slo(), None, None, [], [], [], None)
    assert unscraped.na_reasons["server_tpot_mean_s"] == "/metrics was not scraped"
    bare = parse_metrics("vllm:num_requests_running 0\n")
    assert tpot_mean_between(bare, bare) == (None, 0, f"the server exports no {hist}")


def test_capacity_is_interpolated_and_never_extrapolated() -> None:
    slo = Slo(itl=SloBound(ms=100, percentile=99))

    def side(rate: float, itl_ms: float | None, cut: int = 0) -> RateSide:
        return RateSide(name="x", rate_requests_per_s=rate, sent=10, finished=10 - cut, cut=cut,
                        slo_figures_s={"itl": None if itl_ms is None else itl_ms / 1000})

    c = capacity_of("x", [side(1, 50), side(2, 80), side(4, 120)], slo)
    assert c.requests_per_s == pytest.approx(3.0) and "interpolated" in c.method
    assert capacity_of("x", [side(1, 50), side(2, 60)], slo).at_least
    assert capacity_of("x", [side(1, 150), side(2, 160)], slo).requests_per_s is None
    assert capacity_of("x", [side(1, 50), side(2, 80, cut=3)], slo).requests_per_s == 1  # lost requests: no line
    x = crossover_of([(1, 2.0), (2, 1.5), (4, 0.5)])
    assert x.pays_up_to_rate == 2 and x.loses_from_rate == 4 and x.break_even_rate == pytest.approx(3.0)
    assert "pays below" in x.text


def test_queue_time_histogram_quantiles() -> None:
    s = Standin(StandinBehavior())
    text = s._counters.render(s.behavior, 0, 0)
    assert parse_metrics(text).queue_time_seconds_count == 0
    s._counters.hists["vllm:request_queue_time_seconds"].observe_many(0.4, 10)
    m = parse_metrics(s._counters.render(s.behavior, 0, 0))
    assert m.queue_time_seconds_count == 10 and m.queue_time_seconds_sum == pytest.approx(4.0)
    q = histogram_quantile(m.queue_time_seconds_buckets, 0.5)
    assert q is not None and 0.3 <= q <= 0.5  # inside the bucket (0.3, 0.5]
    assert histogram_quantile({0.1: 0.0, float("inf"): 0.0}, 0.5) is None


@pytest.mark.parametrize(("flags", "words"), [
    (["--rate", "0", "--duration", "2"], "--rate must be requests per second above 0, got 0"),
    (["--rate", "1,-2", "--duration", "2"], "above 0"),
    (["--rate", "1", "--duration", str(MAX_ARRIVAL_WINDOW_S + 1)], f"time bound of {MAX_ARRIVAL_WINDOW_S:g} s"),
    (["--rate", "0.1", "--requests", "100"], "1000 s: past the sweep's time bound"),
    (["--rate", "1", "--duration", "2", "--slo-itl-ms", "50", "--slo-itl-p", "100"], "--slo-itl-p must be"),
    (["--rate", "1", "--duration", "2", "--slo-ttft-p", "0"], "--slo-ttft-p must be"),
    (["--rate", "1"], "--rate needs each step's length: --duration S or --requests N"),
    (["--users", "1", "--slo-e2e-ms", "900"], "--slo-e2e-ms is for open-loop load"),
    (["--rate", "0.1", "--duration", "1"], "holds no request"),
    (["--rate", "1", "--duration", "2", "--order", "simultaneous"], "--order is for --users"),
])
def test_bad_input_is_one_line(flags: list[str], words: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["load", "--baseline-url", "http://127.0.0.1:9", "--speculative-url", "http://127.0.0.1:9",
              "--prompt", "hi", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert parse_rates("2,1,2") == [1.0, 2.0]


def test_load_json_keeps_rate_steps_and_the_schedule_reads_it(tmp_path: Path, capsys) -> None:
    load = RateLoad(rates=[3], duration_s=2.5, drain_s=2, slo=Slo(e2e=SloBound(ms=2000)))
    with Standin.pair(StandinBehavior(tokens_per_s=400, ttft_s=0.01)) as (base, spec):
        assert main(["load", "--baseline-url", base.url, "--speculative-url", spec.url, "--prompt", "hi",
                     "--max-tokens", "8", "--rate", "3", "--duration", "2.5", "--drain-s", "2", "--slo-e2e-ms", "2000",
                     "--out", str(tmp_path), "--no-progress"]) == 0
    saved = LoadResult.model_validate_json((tmp_path / "load.json").read_text())
    assert saved.spec.rate is not None and saved.spec.rate.slo == load.slo
    assert len(saved.rate_steps) == 1 and saved.rate_summary is not None
    assert saved.rate_steps[0].baseline.goodput_requests_per_s is not None
    assert "req/s" in (tmp_path / "load.html").read_text()
    capsys.readouterr()
    assert main(["schedule", str(tmp_path / "load.json")]) == 0  # keyed by batch size, naming the rate
    assert "(seen at 3 req/s): k=4" in capsys.readouterr().out


def test_failed_requests_keep_their_error_and_timeouts_are_counted() -> None:
    stall = StandinBehavior(tokens_per_s=200, ttft_s=0.01, fault="stall", fault_after_chunks=2, stall_s=5)
    broken = StandinBehavior(tokens_per_s=200, ttft_s=0.01, fault="server_error", speculative=True)
    load = RateLoad(rates=[4], duration_s=1.0, drain_s=3, seed=2)
    with Standin(stall) as base, Standin(broken) as spec:
        settings = Settings(baseline_url=base.url, speculative_url=spec.url, read_timeout_s=0.5)
        spec_ = LoadSpec(rate=load, workload="prompt", max_tokens=10, temperature=0, baseline_url=base.url,
                         speculative_url=spec.url)
        result = asyncio.run(run_load(spec_, request(), settings))
        assert base.wait_idle(5)
    step = result.rate_steps[0]
    b, s = step.baseline, step.arms["speculative"].side
    assert b.sent == b.failed == b.timeouts > 0 and b.accounted and "stalled" in b.errors[0]
    assert b.errors[0].startswith(f"{b.sent} x ")
    assert s.sent == s.failed > 0 and s.timeouts == 0 and "fault=server_error" in s.errors[0], s.errors
    assert b.completed_requests_per_s is None and "no request finished" in b.na_reasons["completed_requests_per_s"]
    assert step.arms["speculative"].speedup is None and step.arms["speculative"].na_reasons["speedup"]


def test_ctrl_c_keeps_the_rate_steps_measured_and_leaves_no_stream_open(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with Standin.pair(StandinBehavior(tokens_per_s=100, ttft_s=0.01)) as (base, spec):
        cmd = [sys.executable, "-m", "demo", "load", "--baseline-url", base.url, "--speculative-url", spec.url,
               "--prompt", "hi", "--max-tokens", "20", "--rate", "3,6,9", "--duration", "1.5", "--drain-s", "2",
               "--out", str(out)]
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
        try:
            wait_for(lambda: LoadResult.model_validate_json((out / "load.json").read_text()).rate_steps != [],
                     60, "the first rate step written")
            wait_for(lambda: base.open_streams + spec.open_streams > 0, 30, "a stream of the second step open")
            proc.send_signal(signal.SIGINT)
            _stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert base.wait_idle(5) and spec.wait_idle(5)  # every stream closed
    assert proc.returncode == 130, stderr
    assert "interrupted: 1 step(s) measured" in stderr
    saved = LoadResult.model_validate_json((out / "load.json").read_text())
    assert saved.interrupted and len(saved.rate_steps) == 1 and saved.rate_steps[0].baseline.accounted
    assert "Interrupted" in (out / "load.html").read_text()


def test_arrival_i_sends_request_i_of_a_list_wrapping_round() -> None:
    reqs = [WorkloadRequest(id=w, api="chat", messages=[{"role": "user", "content": w}], max_tokens=4, temperature=0)
            for w in ("ALPHA", "BRAVO", "CHARLIE")]
    load = RateLoad(rates=[8], requests=7, arrivals="constant", drain_s=2)  # 125 ms apart: received in order
    with Standin.pair(StandinBehavior(tokens_per_s=400, ttft_s=0.01)) as (base, spec):
        settings = Settings(baseline_url=base.url, speculative_url=spec.url)
        spec_ = LoadSpec(rate=load, workload="prompt", max_tokens=4, temperature=0, baseline_url=base.url,
                         speculative_url=spec.url)
        result = asyncio.run(run_load(spec_, reqs, settings))
        for server in (base, spec):
            sent = [next(w for w in ("ALPHA", "BRAVO", "CHARLIE") if w in t.prompt) for t in server.truth]
            assert sent == ["ALPHA", "BRAVO", "CHARLIE"] * 2 + ["ALPHA"]
    assert all(side.finished == 7 for side in result.rate_steps[0].servers())
