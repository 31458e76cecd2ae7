"""demo/view/: formatting and escaping of what the page shows."""

from __future__ import annotations

import csv
import io
import re

from demo import view
from demo.fmt import esc
from demo.results import RaceRequest, RaceResult, RaceSnapshot, SideResult, SideSnapshot, SpecStats
from demo.settings import Endpoint
from harness.given_clock import Pace, given_race

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def sample_result(**kw) -> RaceResult:
    base = SideResult(side="baseline", url="http://b", completion_tokens=200, ttft_s=0.05,
                      decode_tokens_per_s=33.3333, e2e_s=6.05, text="abc def",
                      tokens_per_chunk={1: 200}, complete=True)
    spec = SideResult(side="speculative", url="http://s", completion_tokens=200, ttft_s=0.06,
                      decode_tokens_per_s=97.123, e2e_s=2.1, text="abc def",
                      tokens_per_chunk={1: 20, 3: 30, 5: 16}, complete=True,
                      spec=SpecStats(source="per_request", acceptance_rate=0.7123,
                                     mean_acceptance_length=3.85, num_spec_tokens=4,
                                     per_position_acceptance=[0.9, 0.7, 0.5, 0.3]))
    fields = dict(order="simultaneous", preset="json", request=RaceRequest(temperature=0.0), baseline=base,
                  speculative=spec, speedup=2.9137, e2e_speedup=2.88, identical_text=True)
    fields.update(kw)
    return RaceResult(**fields)


def sample_snapshot(result: RaceResult | None = None, **side_kw) -> RaceSnapshot:
    b = SideSnapshot(side="baseline", status="streaming", text="ab", completion_tokens=2,
                     elapsed_s=0.5, ttft_s=0.05, tokens_per_s=30.0,
                     bursts=[(0.05, 1, "a"), (0.08, 1, "b")])
    s = SideSnapshot(side="speculative", status="streaming", text="abcd", completion_tokens=4,
                     elapsed_s=0.5, ttft_s=0.06, tokens_per_s=90.0,
                     bursts=[(0.06, 1, "a"), (0.09, 3, "bcd")], **side_kw)
    return RaceSnapshot(order="simultaneous", baseline=b, speculative=s, result=result)


def test_escape_model_output_in_text_and_bursts() -> None:
    snap = SideSnapshot(side="speculative", text=EVIL, bursts=[(0.1, 3, EVIL), (0.2, 1, "&ok")])
    html = view.text_html("speculative", snap, shade=True)
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "onerror=&quot;" in html and "&amp;ok" in html
    # Text-only fallback (no bursts) is escaped too.
    html2 = view.text_html("baseline", SideSnapshot(side="baseline", text=EVIL), shade=False)
    assert "<script" not in html2 and "&lt;img" in html2


def test_burst_classes_by_tokens_in_chunk() -> None:
    assert [view.burst_class(n) for n in (0, 1, 2, 3, 4, 5, 9)] == ["b0", "b1", "b2", "b3", "b4", "b5", "b5"]
    snap = SideSnapshot(side="speculative", bursts=[(0.1, 1, "x"), (0.2, 4, "yyyy")])
    html = view.text_html("speculative", snap, shade=True)
    # One token per chunk stays plain text; a 4-token burst is shaded.
    assert re.search(r'>x<span class="b4"[^>]*>yyyy</span>', html)
    assert 'class="b1"' not in html


def test_live_tiles_show_snapshot_figures_and_pending_acceptance() -> None:
    tiles = {t.key: t for t in view.side_tiles(sample_snapshot().speculative, None, speculative=True)}
    assert tiles["tokens_per_s"].text == "90.0" and tiles["tokens_per_s"].value == 90.0
    assert tiles["tokens_per_s"].note == "live"
    assert tiles["tokens"].text == "4"
    assert tiles["ttft_s"].text == "60 ms"
    assert tiles["acceptance_rate"].text == view.PENDING


def test_final_tiles_show_the_result_exactly() -> None:
    r = sample_result()
    tiles = {t.key: t for t in view.side_tiles(sample_snapshot(r).speculative, r.speculative, True)}
    assert tiles["tokens_per_s"].value == 97.123 and tiles["tokens_per_s"].text == "97.1"
    assert tiles["acceptance_rate"].text == "71%" and tiles["acceptance_rate"].value == 0.7123
    assert tiles["mean_acceptance_length"].text == "3.85"
    assert tiles["elapsed_s"].value == 2.1
    html = view.tiles_html("speculative", list(tiles.values()))
    assert 'data-key="tokens_per_s" data-side="speculative" data-value="97.123"' in html


def test_unknown_figures_say_na_with_reason() -> None:
    r = sample_result()
    r.speculative.spec = None
    r.speculative.na_reasons["spec"] = "server sent no speculative metrics"
    r.baseline.decode_tokens_per_s = None
    r.baseline.na_reasons["decode_tokens_per_s"] = "only one token"
    b = {t.key: t for t in view.side_tiles(sample_snapshot(r).baseline, r.baseline, False)}
    assert b["tokens_per_s"].text == "n/a" and b["tokens_per_s"].note == "only one token"
    s = {t.key: t for t in view.side_tiles(sample_snapshot(r).speculative, r.speculative, True)}
    assert s["acceptance_rate"].text == "n/a"
    assert s["acceptance_rate"].note == "server sent no speculative metrics"
    assert view.na_label("x") == "n/a (x)" and view.na_label(None) == "n/a"


def test_speedup_only_from_the_result() -> None:
    assert view.PENDING in view.speedup_html(sample_snapshot())  # live: not computed in the UI
    live = sample_snapshot().model_copy(update={"live_speedup": 3.0})  # the core's live figure, shown as is
    assert "3.00×" in view.speedup_html(live) and "live decode speedup" in view.speedup_html(live)
    html = view.speedup_html(sample_snapshot(sample_result()))
    assert "2.91×" in html and 'data-value="2.9137"' in html and "end to end 2.88×" in html
    na = sample_result(speedup=None, na_reasons={"speedup": "baseline failed"})
    assert "baseline failed" in view.speedup_html(sample_snapshot(na))


def test_a_speedup_over_the_bound_is_flagged_where_the_headline_would_be() -> None:
    """Issue 52: 4x at 2.95 tokens per step (a given clock) is no result: "run again" in the multiple's
    place, the reason under it, escaped; the live headline is as always."""
    over = given_race(Pace(tokens_per_s=30), {"eagle3": Pace(tokens_per_s=120, chunk_sizes=(3,), speculative=True)},
                      60)
    assert over.over_bound is not None and over.speedup is not None
    html = view.speedup_html(sample_snapshot(over))
    value = re.search(r'<div class="sd-speedup-value">([^<]*)</div>', html)
    assert value is not None and value.group(1) == "run again"  # not the multiple
    assert 'data-state="over-bound"' in html and "sd-over-bound" in html and "sd-win" not in html
    assert f'data-value="{over.speedup!r}"' in html  # the exact figure stays, for the record
    assert esc(over.over_bound) in html and "efficiency 1.36 &gt; 1: speedup 4.00× at" in html
    assert "> 1:" not in html  # the reason is escaped
    fair = given_race(Pace(tokens_per_s=30), {"eagle3": Pace(tokens_per_s=60, chunk_sizes=(3,), speculative=True)},
                      60)
    html = view.speedup_html(sample_snapshot(fair))
    assert 'data-state="final"' in html and "2.00×" in html and "over-bound" not in html and "run again" not in html
    live = view.speedup_html(sample_snapshot().model_copy(update={"live_speedup": 4.0}))
    assert "4.00×" in live and "over-bound" not in live


def test_a_speedup_over_its_tokens_per_step_that_a_cheap_verification_step_explains_is_headlined_with_why() -> None:
    """On a host whose verification step was timed at 0.87 of a plain one (the launcher's warm-up), 3.39x
    at 2.95 tokens per step (efficiency 1.15) is a result: headlined, the reason under it, escaped."""
    spec = Pace(tokens_per_s=30 * 2.95 * 1.15, chunk_sizes=(3,), speculative=True)
    timed = {"eagle3": Endpoint(side="speculative", url="given://eagle3", arm="eagle3", step_cost=0.87)}
    r = given_race(Pace(tokens_per_s=30), {"eagle3": spec}, 60, endpoints=timed)
    assert r.over_bound is None and r.step_cost_note is not None
    html = view.speedup_html(sample_snapshot(r))
    assert 'data-state="final"' in html and "3.39×" in html and "run again" not in html
    note = ("efficiency 1.15 > 1: 3.39× at 2.95 tokens per step, since a verification step here was timed at "
            "0.87x a plain one (the servers' warm-up)")
    assert r.step_cost_note == note
    assert f'<div class="sd-step-cost" title="{esc(note)}">{esc(note)}</div>' in html and "> 1:" not in html
    untimed = view.speedup_html(sample_snapshot(given_race(Pace(tokens_per_s=30), {"eagle3": spec}, 60)))
    assert "run again" in untimed and "sd-step-cost" not in untimed  # a server not timed: the bound is 1


def test_identical_badge() -> None:
    assert 'data-identical="true"' in view.identical_badge_html(sample_result())
    r = sample_result(identical_text=False, first_difference=4)
    r.speculative.text = "abc <b>X"
    html = view.identical_badge_html(r)
    assert "character 4" in html and "&lt;b&gt;X" in html and "<b>X" not in html
    hot = sample_result(request=RaceRequest(temperature=1.0), identical_text=False)
    assert 'data-identical="not-compared"' in view.identical_badge_html(hot)
    unknown = sample_result(identical_text=None, na_reasons={"identical_text": "stopped early"})
    assert "n/a (stopped early)" in view.identical_badge_html(unknown)


def test_errors_and_titles_are_escaped() -> None:
    snap = SideSnapshot(side="baseline", status="error", error="Cannot reach <x>: start it")
    html = view.side_status_html("baseline", snap)
    assert "&lt;x&gt;" in html and 'role="alert"' in html
    assert view.spec_pane_title("ngram", 4) == "Speculative (ngram, k=4)"
    assert view.spec_title_note("ngram", 4) is None
    assert view.spec_pane_title(None, None) == "Speculative (n/a, k n/a)"
    note = view.spec_title_note(None, 4)
    assert note is not None and "SPECDEMO_SPEC_METHOD" in note
    html = view.pane_title_html("Speculative (<m>, k=4)", "why <x>")
    assert "&lt;m&gt;" in html and "n/a: why &lt;x&gt;" in html and "<m>" not in html


def test_order_labels() -> None:
    # Simultaneous order says why it reads lower, on a GPU and on CPU cores (issue 52).
    simultaneous = view.order_html("simultaneous")
    assert "one GPU they compete" in simultaneous and "on CPU cores, this page and its browser" in simultaneous
    assert "read lower" in simultaneous
    assert "Sequential A/B" in view.order_html("sequential")


def test_history_rows_and_csv() -> None:
    r1 = sample_result()
    r2 = sample_result(preset="=cmd()", speedup=None, cancelled=True)
    rows = [view.history_row(r1), view.history_row(r2)]
    table = view.history_table(rows)
    assert table[0][1] == "=cmd()" and table[0][6] == "n/a" and table[0][-1] == "stopped"
    assert table[1][6] == "2.91×" and table[1][7] == "71%"
    parsed = list(csv.DictReader(io.StringIO(view.history_csv(rows))))
    assert parsed[0]["speedup"] == "2.9137" and parsed[0]["acceptance_rate"] == "0.7123"
    assert parsed[1]["preset"] == "'=cmd()"  # no formula injection in spreadsheets
    assert len(view.HISTORY_HEADERS) == len(table[0])


def test_pane_view_final() -> None:
    r = sample_result()
    pv = view.pane_view("baseline", sample_snapshot(r))
    assert 'data-value="33.3333"' in pv.tiles_html


def test_server_banner_and_panel() -> None:
    from demo.server_info import ServerInfo
    up = ServerInfo(side="baseline", url="http://127.0.0.1:8000", healthy=True, model="smollm2",
                    max_model_len=2048, kv_cache_usage_perc=0.25)
    down = ServerInfo(side="speculative", url="http://127.0.0.1:8001", error="connection <refused>")
    assert view.server_banner_html([up]) == ""
    banner = view.server_banner_html([up, down])
    assert "python -m servers up" in banner and "&lt;refused&gt;" in banner and "8001" in banner
    panel = view.server_panel_html([up, down])
    assert "25%" in panel and "context 2048" in panel and 'data-healthy="false"' in panel


def test_quiet_server_status() -> None:
    snap = SideSnapshot(side="baseline", status="streaming")
    html = view.side_status_html("baseline", snap, quiet_s=3.2, timeout_s=60)
    assert "nothing from the server for 3 s" in html and "gives up after 60 s" in html
    done = SideSnapshot(side="baseline", status="done")
    assert "nothing" not in view.side_status_html("baseline", done, quiet_s=9)


def test_server_panel_links_to_grafana_only_when_set_and_escapes_the_url() -> None:
    from demo.server_info import ServerInfo
    up = ServerInfo(side="baseline", url="http://127.0.0.1:8000", healthy=True, model="smollm2")
    assert "sd-grafana" not in view.server_panel_html([up]) and "<a " not in view.server_panel_html([up])
    panel = view.server_panel_html([up], "http://127.0.0.1:3000/d/specdemo-pair?a=1&b=2")
    href = "http://127.0.0.1:3000/d/specdemo-pair?a=1&amp;b=2"
    assert f'<a href="{href}" target="_blank" rel="noopener noreferrer">' in panel
    hostile = view.server_panel_html([up], 'http://x/"><script>alert(1)</script>')
    assert "<script>" not in hostile and "&quot;&gt;&lt;script&gt;" in hostile


def test_streamed_text_markup_only_grows_so_gradio_sends_what_was_added() -> None:
    # Gradio diffs each streamed value against the last: a value that starts with the last one
    # goes to the page as an "append" of the new part, not as the whole pane again.
    from gradio.utils import diff

    bursts = [(0.1, 1, "a<"), (0.2, 3, "b&c"), (0.3, 1, "d")]
    frames = [view.text_html("speculative", SideSnapshot(side="speculative", bursts=bursts[:n]), shade=True)
              for n in range(1, len(bursts) + 1)]
    for before, after in zip(frames, frames[1:], strict=False):
        assert after.startswith(before)
        assert diff(before, after) == [["append", [], after[len(before):]]]
    assert frames[-1].endswith('<span class="b3" title="3 tokens in one step">b&amp;c</span>d')


def test_live_figures_change_the_markup_only_when_their_text_changes() -> None:
    # A live tokens/s of 90.01 and 90.04 both read "90.0": the tile's markup must not differ, or
    # the browser redraws it in every frame. The exact figure is written once final.
    def live_html(rate: float) -> str:
        snap = sample_snapshot().speculative.model_copy(update={"tokens_per_s": rate})
        return view.tiles_html("speculative", view.side_tiles(snap, None, speculative=True))

    assert live_html(90.01) == live_html(90.04)
    assert live_html(90.01) != live_html(91.0)
    assert "data-value" not in live_html(90.01).split('data-key="tokens_per_s"')[1].split(">")[0]
    r = sample_result()
    final = view.tiles_html("speculative", view.side_tiles(sample_snapshot(r).speculative, r.speculative, True))
    assert 'data-key="tokens_per_s" data-side="speculative" data-value="97.123"' in final
    running = [view.speedup_html(sample_snapshot().model_copy(update={"live_speedup": x})) for x in (2.501, 2.504)]
    assert running[0] == running[1] and ">2.50×<" in running[0]
