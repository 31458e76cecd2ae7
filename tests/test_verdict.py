"""The verdict's decisions and words, from cells with known figures."""

from __future__ import annotations

import pytest

from demo.measure import over_bound
from demo.sweep.crossover import find_crossover
from demo.sweep.models import BatchStats, CellResult, CellSettings, SideCell, Spread, SweepResult, SweepSpec
from demo.sweep.pooling import expected_tokens_per_step
from demo.sweep.verdict import GAIN_NONE, GAIN_WORTH, decide, verdicts


def cell(preset: str, concurrency: int, speedup: float | None, *, temperature: float = 0.0,
         accepted: int = 70, drafted: int = 100, drafts: int = 25, k: int = 4, kv: float | None = 0.2,
         ttft_s: float = 0.1, e2e_s: float = 2.0, errors: list[str] | None = None) -> CellResult:
    settings = CellSettings(preset=preset, temperature=temperature, concurrency=concurrency, max_tokens=256,
                            api="chat", repeats=3, warmup=1, order="sequential",
                            baseline_url="http://b", speculative_url="http://s")
    batch = BatchStats(side="speculative", requests=concurrency, ok_requests=concurrency,
                       accepted_tokens=accepted, draft_tokens=drafted, drafts=drafts, num_spec_tokens=k,
                       acceptance_source="per_request")
    base = SideCell(side="baseline", ttft_p50_s=ttft_s, e2e_p50_s=e2e_s, prefill_share=ttft_s / e2e_s,
                    kv_cache_usage_peak_perc=kv)
    spec = SideCell(side="speculative", batches=[batch], kv_cache_usage_peak_perc=kv)
    c = CellResult.model_validate({"settings": settings, "baseline": base, "speculative": spec, "errors": errors or []})
    arm = c.first_arm
    if speedup is not None:
        arm.throughput_ratio = Spread(median=speedup, min=speedup * 0.95, max=speedup * 1.05, n=3)
        arm.speedup = Spread(median=speedup * 1.2, min=speedup, max=speedup * 1.3, n=3)
        arm.e2e_speedup = speedup
    else:
        c.status = "failed"
        arm.na_reasons["throughput_ratio"] = (errors or ["not measured"])[0]
    arm.acceptance_rate = accepted / drafted
    arm.mean_acceptance_length = 1 + accepted / drafts
    return c


def test_theory_formula() -> None:
    assert expected_tokens_per_step(0.5, 4) == pytest.approx(1.9375)
    assert expected_tokens_per_step(0.0, 4) == pytest.approx(1.0)
    assert expected_tokens_per_step(1.0, 4) == pytest.approx(5.0)
    assert expected_tokens_per_step(0.8, 3) == pytest.approx((1 - 0.8 ** 4) / 0.2)
    assert expected_tokens_per_step(None, 4) is None and expected_tokens_per_step(0.5, None) is None


def test_structured_output_that_pays_everywhere_is_enable() -> None:
    v = decide([cell("json_reformat", 1, 2.1), cell("json_reformat", 4, 2.0)], "JSON")
    assert v.decision == "enable"
    assert v.headline.startswith("json_reformat (T=0) at concurrency 1: throughput ratio 2.10× (speedup 2.52×), "
                                  "acceptance 70%")
    assert "at concurrency 4 still 2.00×" in v.headline
    items = {i.name: i for i in v.checklist}
    assert items["structuredness"].status == "good" and "acceptance 70%" in items["structuredness"].text
    assert items["memory headroom"].status == "good" and "20%" in items["memory headroom"].text
    assert items["concurrency"].status == "good"
    assert items["prefill share"].status == "good" and "5%" in items["prefill share"].text
    # Theory next to the measured tokens per step: a = 0.7, k = 4; measured 1 + 70/25 = 3.8.
    assert v.expected_tokens_per_step == pytest.approx((1 - 0.7 ** 5) / 0.3)
    assert v.measured_tokens_per_step == pytest.approx(3.8)
    assert "2.77" in items["structuredness"].text and "3.80" in items["structuredness"].text


def test_gain_that_falls_with_concurrency_is_depends_and_says_where() -> None:
    v = decide([cell("json_reformat", 1, 2.1), cell("json_reformat", 4, 1.5), cell("json_reformat", 16, 1.1)], "JSON")
    assert v.decision == "depends"
    assert ("at concurrency 1: throughput ratio 2.10× (speedup 2.52×), acceptance 70%; at concurrency 16 the "
            "throughput ratio falls to 1.10×") in v.headline
    assert "Enable for concurrency up to 4, not beyond" in v.headline
    conc = next(i for i in v.checklist if i.name == "concurrency")
    assert conc.status == "mixed" and "2.10× at 1, 1.50× at 4, 1.10× at 16" in conc.text
    # The crossover, the load sweep's own function: 1.10x at 16 is neither paying nor losing.
    assert "pays up to 4 concurrent requests; from 16 the gain is too small to count" in conc.text


def test_free_form_text_with_no_gain_is_dont() -> None:
    v = decide([cell("poetry", 1, 0.97, temperature=1.0, accepted=10, drafted=100),
                cell("poetry", 2, 0.9, temperature=1.0, accepted=10, drafted=100)], "Poetry")
    assert v.decision == "don't"
    assert "acceptance 10%" in v.headline and "Drafts are mostly rejected" in v.headline
    assert next(i for i in v.checklist if i.name == "structuredness").status == "bad"


def test_full_kv_cache_turns_enable_into_depends() -> None:
    v = decide([cell("json_reformat", 1, 2.0, kv=0.93)], "JSON")
    assert v.decision == "depends"
    mem = next(i for i in v.checklist if i.name == "memory headroom")
    assert mem.status == "bad" and "93%" in mem.text


def test_prefill_heavy_workload_says_why_the_gain_is_small() -> None:
    v = decide([cell("rag_long", 1, 1.1, ttft_s=1.4, e2e_s=2.0)], "RAG")
    assert v.decision == "depends"
    pre = next(i for i in v.checklist if i.name == "prefill share")
    assert pre.status == "bad" and "70%" in pre.text
    assert "a speedup of 1.32× shows as 1.10× end to end" in pre.text


def test_no_figures_is_unknown_with_the_error() -> None:
    v = decide([cell("sql", 1, None, errors=["speculative: Cannot reach http://s"])], "SQL")
    assert v.decision == "unknown"
    assert "Cannot reach http://s" in v.headline


def test_unknown_kv_and_acceptance_say_na_with_reason() -> None:
    c = cell("sql", 1, 1.5, kv=None)
    c.speculative.batches = []
    c.speculative.na_reasons["kv_cache_usage_peak_perc"] = "the server's /metrics gave no KV-cache usage"
    c.first_arm.na_reasons["acceptance_rate"] = "the server reports no speculative metrics"
    v = decide([c], "SQL")
    items = {i.name: i for i in v.checklist}
    assert items["structuredness"].status == "unknown" and "no speculative metrics" in items["structuredness"].text
    assert items["memory headroom"].status == "unknown" and "no KV-cache usage" in items["memory headroom"].text
    assert v.expected_tokens_per_step is None


def test_one_verdict_per_preset_and_temperature_in_sweep_order() -> None:
    spec = SweepSpec(baseline_url="http://b", speculative_url="http://s", presets=["json_reformat", "poetry"])
    result = SweepResult(spec=spec, preset_titles={"poetry": "Poetry"}, cells=[
        cell("json_reformat", 1, 2.0), cell("json_reformat", 2, 1.9),
        cell("poetry", 1, 1.0, temperature=0.0), cell("poetry", 1, 0.9, temperature=1.0)])
    vs = verdicts(result)
    assert [(v.preset, v.temperature) for v in vs] == [("json_reformat", 0.0), ("poetry", 0.0), ("poetry", 1.0)]
    assert vs[1].title == "Poetry" and vs[0].title == "json_reformat"


def test_a_gain_beyond_the_tokens_per_step_is_noise_and_not_counted() -> None:
    # Acceptance 0%: every step delivers 1 token, so 1.28x can only be a busy machine's noise.
    v = decide([cell("poetry", 1, 1.28, temperature=1.0, accepted=0, drafted=52, drafts=13),
                cell("poetry", 2, 0.86, temperature=1.0, accepted=0, drafted=172, drafts=43)], "Poetry")
    assert v.decision == "don't"
    assert "at concurrency 1: throughput ratio 1.00× (speedup 1.54×), acceptance 0%" in v.headline
    assert "a throughput ratio of 1.28× measured at concurrency 1 is more than the 1.00 tokens per step" in v.headline
    assert v.reconcile is None  # the speedup, bounded the same way, decides alike


def test_a_cell_over_the_bound_is_named_in_the_headline_with_the_reason() -> None:
    # At 1, speedup 4.00x at 3.80 tokens per step (efficiency 1.05): the baseline was slowed, a cell to
    # run again. The verdict names it with the reason; its gain counts as every gain does, at most up to
    # the tokens per step delivered (bounded_gain), so the decision is the same as without the flag.
    slowed = cell("json_reformat", 1, 2.1)
    slowed.first_arm.speedup = Spread(median=4.0, min=3.9, max=4.1, n=3)
    reason = over_bound(4.0, 3.8, "cell")
    assert slowed.first_arm.over_bound == reason and reason is not None and reason.startswith("efficiency 1.05 > 1")
    fair = cell("json_reformat", 1, 2.1)
    flagged, plain = (decide([c, cell("json_reformat", 4, 1.0)], "JSON") for c in (slowed, fair))
    assert flagged.decision == plain.decision == "depends"
    assert f"(concurrency 1: {reason})" in flagged.headline and "efficiency" not in plain.headline


@pytest.mark.parametrize(("points", "pays", "loses", "text"), [
    ([(1, 2.0), (2, 1.4), (4, 0.9), (8, 0.7)], 2, 4,
     "speculation pays up to 2 users and loses from 4 on these servers"),
    ([(1, 1.9), (2, 1.7), (4, 1.4), (8, 1.31), (16, 1.37), (32, 1.2)], 32, None,
     "it pays at every count measured (up to 32 users)"),
    ([(1, 1.0), (2, 0.9)], None, 1, "speculation does not pay at any count measured, from 1 user (1.00×) to 2 users"),
    ([(1, 1.5), (4, 1.1), (8, 1.0)], 1, 8, "speculation pays up to 1 user, gains too little to count from 4 and loses "
                                           "from 8"),
    ([(8, 0.8), (1, 1.5), (2, None), (4, 1.2)], 4, 8, "speculation pays up to 4 users and loses from 8"),
])
def test_crossover_between_measured_counts(points, pays, loses, text) -> None:
    c = find_crossover(points)
    assert (c.pays_up_to_users, c.loses_from_users) == (pays, loses)
    assert c.text.startswith(text)
    assert "1.15×" in c.text and "1.05×" in c.text  # the thresholds are named
    assert (c.gain_worth, c.gain_none) == (GAIN_WORTH, GAIN_NONE)


def test_crossover_says_when_the_gain_comes_back_and_never_extrapolates() -> None:
    c = find_crossover([(1, 1.5), (2, 1.0), (4, 1.3)])
    assert (c.pays_up_to_users, c.loses_from_users) == (1, 2)
    assert "pays again at 4" in c.text
    assert find_crossover([]).pays_up_to_users is None and "no count" in find_crossover([]).text


def test_a_prefill_heavy_workload_gets_one_sentence_that_reconciles_its_two_ratios() -> None:
    # Decode gains 2.7x, but prefill is 56% of each request: the throughput ratio, 1.1x, decides.
    c = cell("rag", 1, 1.1, ttft_s=1.12, e2e_s=2.0, accepted=80, drafted=100, drafts=20)
    c.first_arm.speedup = Spread(median=2.7, min=2.6, max=2.8, n=3)
    v = decide([c], "RAG")
    assert v.decision == "depends"
    assert v.reconcile == ("Decode gains a speedup of 2.70× but prefill is 56% of each request, and speculation "
                           "does not speed it up: end to end the throughput ratio is 1.10×, and the verdict "
                           "rests on it.")
    # Both ratios deciding alike: no sentence.
    assert decide([cell("json_reformat", 1, 2.1)], "JSON").reconcile is None
