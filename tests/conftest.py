"""Shared pytest fixtures. Stand-in vLLM servers: real HTTP on 127.0.0.1 (see harness/standin/)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import demo.settings as settings_mod
from demo.client import settle_heap
from harness import margins
from harness.standin import Standin, StandinBehavior

# Parallel runs (scripts/test.sh: pytest-xdist, ``-n 3 --dist loadscope --no-loadscope-reorder``,
# with the scheduler below). The unit of work is a module: its tests run on one worker, in order,
# so a module-scoped app, browser or server pair starts once and its fixed artifact names cannot
# collide. The modules of a group in GROUPS run one after the other on one worker, never beside
# each other; the groups go out first, longest first, so that no worker is left with a long one at
# the end while the others idle. (Not xdist_group marks: with pytest 9, xdist 3.8's
# --dist loadgroup no longer groups anything, as it renames item._nodeid, which pytest 9 ignores.)
GROUPS: dict[str, tuple[str, ...]] = {
    # The page in Chromium with an app subprocess each (~8 min serial): one page module at a time.
    "browser": ("tests/browser/", "tests/test_export_browser.py", "tests/test_report_browser.py"),
}
# Modules that wait far more than they compute (0.3-0.4 of a core) and check no rate against a
# truth: marked ``beside_e2e``. scripts/test.sh runs them beside the end-to-end suite, on the core
# its sequential races leave idle, instead of in the fast stage, one pytest per lane, the lanes side
# by side; ``pytest -m "not e2e"`` still runs them with the rest (test_vllm_args.py, marked e2e too,
# only where the CPU vLLM venv is).
# The guardrails' and the canary's real Prometheus (and Alertmanager) wait for its scrapes, rule
# evaluations and `for`: ~110 s of waiting per run (CI, 2026-12-04), with light stand-in traffic and
# no rate checked against a truth (the canary's split and streaming checks stay in tests/test_canary.py,
# in the fast stage).
# Two page modules that check behaviour, not rates (faults shown where the user looks; viewers sharing
# the stream budget): 111 s of the page group's ~10 min, with Chromium waiting on the stand-ins' pacing
# (2026-12-04: the e2e stage had 174 s to spare beside its 188 s of these modules).
# The soak (booth mode for 2 minutes in Chromium, ~2.5 min for 26 CPU-s) in a lane of its own: after the
# first lane's ~6 min it would outlast the e2e suite; in the fast stage it held one worker for 2.5 min.
# The booth page's tests after it (a visitor's pause, a server down and back, a load turn: each waits
# on the show's clock, ~1 min in all): that lane had ~290 s to spare beside the e2e suite's ~470 s
# (CI, 2026-12-06), and the fast stage, at ~600 s the longest, drops them.
# The agent page (three panes replaying captured tool-call streams, ~90 s with its app's start) after
# them: its figures are checked as ratios whose truths are 2x apart, no rate against a truth within
# a few percent. The page group is the fast stage's longest worker on three workers (its ~8 min of
# the stage's ~8.5), so each page module moved out shortens the stage by its own time; this lane
# ran 273 s beside the e2e suite's 485 s (CI, 2026-12-07).
# The canary tab (its router's share and a rollback, ~60 s with its app's start; shares and states,
# no rate against a truth) last: the lane ran 353-375 s beside the e2e suite's 503-604 s (CI
# q6/b16, 2026-12-07), and the fast stage, 498 s then, drops it.
BESIDE_E2E_LANES: tuple[tuple[str, ...], ...] = (
    ("tests/test_launcher.py", "tests/test_supervisor.py", "tests/test_vllm_args.py",
     "tests/test_guardrails.py", "tests/test_canary_rollback.py", "tests/test_canary_view.py",
     "tests/browser/test_faults_page.py", "tests/browser/test_users_page.py"),
    ("tests/test_soak.py", "tests/browser/test_booth_page.py", "tests/browser/test_agent_page.py",
     "tests/browser/test_canary_page.py"),
)
BESIDE_E2E = tuple(path for lane in BESIDE_E2E_LANES for path in lane)
# The timing stage (scripts/test.sh, last; marked ``timing``; the fast stage leaves them out): the
# claims that our figures match a real stream's truth within a few percent, run with nothing else of
# ours on the machine (the e2e pair stopped, no other stage), a pytest per lane, the lanes side by
# side. Each check waits on its stand-ins' pacing at ~0.07 of a core, so two lanes leave a busy
# neighbour its core. Each figure's share of its bound is recorded (harness/margins.py) and the lane
# prints them. The logic behind each figure is checked on given clocks in the fast stage
# (tests/test_given_clock.py); here only the accuracy against real time is.
# A test id without its parameters takes every parameter. Test time per lane (2026-12-06, -n 2 beside
# other work, AMD EPYC): ~180-190 s each; add an id to the lane that keeps the lanes' times close.
TIMING_LANES: tuple[tuple[str, ...], ...] = (
    ("tests/test_load_rate.py::test_rate_sweep_matches_the_truth_below_around_and_above_saturation",
     "tests/test_verify_schedule.py::test_the_recommended_schedule_is_restarted_and_swept_again",
     "tests/test_whatif.py::test_the_whatifs_figures_match_the_truth_at_each_length",
     "tests/test_sweep.py::test_speedups_and_acceptance_match_the_truth",
     "tests/test_sweep.py::test_simultaneous_order_starts_both_batches_together",
     "tests/test_sweep_workload.py::test_per_request_speedup_and_acceptance_match_the_truth",
     "tests/test_tool_calls.py::test_a_race_whose_answers_are_the_same_tool_call_is_identical",
     "tests/test_users_race.py::test_four_users_per_user_speedup_matches_the_standins_truth",
     "tests/test_session_preset.py::test_each_turns_speedup_and_the_sessions_match_the_truth_with_each_side_carrying_its_own",
     "tests/test_standin.py::test_truth_rate_is_the_configured_rate",
     "tests/test_standin.py::test_speed_falls_with_streams_in_flight",
     "tests/test_canary.py::test_a_race_through_the_router_streams_the_same_chunks_at_the_same_rate"),
    ("tests/test_load_replay.py::test_replay_keeps_the_traces_gaps_over_the_speed_on_every_server",
     "tests/test_load_sweep.py::test_load_sweep_speedup_matches_truth_and_finds_the_crossover",
     "tests/test_load_sweep.py::test_race_with_users_measures_a_batch_per_side",
     "tests/test_load_sweep.py::test_the_client_reports_its_own_headroom",
     "tests/test_load_sweep.py::test_the_evaluators_checklist_finds_the_same_crossover",
     "tests/test_load_rate.py::test_the_schedule_is_seeded_and_every_server_gets_the_same_send_times",
     "tests/test_segments.py::test_per_segment_speedups_match_the_truth_and_the_sentence_routes_by_tag",
     "tests/test_methods.py::test_race_of_three_arms_measures_each_against_its_truth",
     "tests/test_methods.py::test_race_with_users_measures_every_arm",
     "tests/test_load_rate_stream.py::test_rate_frames_draw_each_step_from_its_records_and_match_the_truth",
     "tests/test_sweep_agents.py::test_a_session_played_turn_by_turn_carries_each_sides_own_answer",
     "tests/test_sweep_agents.py::test_session_truth_with_tool_calls_per_turn_speedups_match_the_stand_ins",
     "tests/test_sweep_rate.py::test_sweep_rate_matches_the_truth_and_the_report_says_its_capacity",
     "tests/test_bench_client_streams.py::test_our_client_matches_the_standin_truth_within_5_percent",
     "tests/test_measure_truth.py::test_multi_token_chunks_measured_right",
     "tests/test_measure_truth.py::test_chunk_counting_would_have_failed",
     # One sweep whose verdict rests on its figures landing in the designed bands (speedup ~3x,
     # throughput ratio 1.10, between 1.05 and 1.15): the module's four tests share it.
     "tests/test_ratio_names.py::test_the_prefill_heavy_workload_gets_the_one_reconciling_sentence",
     "tests/test_ratio_names.py::test_the_report_names_every_ratio",
     "tests/test_ratio_names.py::test_the_evaluate_tab_names_every_ratio",
     "tests/test_ratio_names.py::test_the_cli_summary_names_every_ratio"),
)
TIMING = tuple(test_id for lane in TIMING_LANES for test_id in lane)
# Where the tests marked ``e2e`` live: scripts/test.sh's e2e stage collects only these paths (the
# whole suite's collection takes ~8 s), and a collection fails on an e2e test elsewhere.
E2E_PATHS = ("tests/e2e/", "tests/test_chat_template.py", "tests/test_vllm_args.py")


def module_of(nodeid: str) -> str:
    """A test's module path, e.g. tests/test_soak.py."""
    return nodeid.split("::", 1)[0]


def work_unit(nodeid: str) -> str:
    """The group a test runs in: its GROUPS entry, or else its module."""
    module = module_of(nodeid)
    return next((g for g, paths in GROUPS.items() if any(module.startswith(p) for p in paths)), module)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the BESIDE_E2E and TIMING tests, refuse an e2e test outside E2E_PATHS,
    and put the GROUPS first, in GROUPS' order."""
    for item in items:
        if module_of(item.nodeid) in BESIDE_E2E:
            item.add_marker(pytest.mark.beside_e2e)
        if item.nodeid.split("[", 1)[0] in TIMING:
            item.add_marker(pytest.mark.timing)
        if item.get_closest_marker("e2e") and not module_of(item.nodeid).startswith(E2E_PATHS):
            raise pytest.UsageError(f"{item.nodeid} is marked e2e outside E2E_PATHS (tests/conftest.py): "
                                    "scripts/test.sh's e2e stage would not collect it")
    rank = {g: i for i, g in enumerate(GROUPS)}
    items.sort(key=lambda it: rank.get(work_unit(it.nodeid), len(rank)))  # stable: modules keep their order


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker in a session of its own. Under Linux's autogroups each session is scheduled
    as one group, so each worker, with what it starts (stand-ins, an app, Chromium), gets a fair
    share of the cores as one unit: the page group's Chromium, a dozen threads in one worker, cannot
    crowd out the client whose rates the other worker checks (in one session, the two workers
    share the session's share thread by thread). A busy neighbour in its own session keeps its
    share (docs/development.md#a-busy-machine)."""
    if hasattr(config, "workerinput") and os.getsid(0) != os.getpid():
        os.setsid()


def pytest_collection_finish(session: pytest.Session) -> None:
    """A worker's heap after collecting (~218,000 objects) out of the collector's reach, as the
    page and the CLI do: an automatic full collection over it (~120 ms here) at the first or last
    token of a 1 s stream measured in this process would move its rate by ~12%."""
    settle_heap()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The margins the timing checks used (harness/margins.py), at the end of the run's log."""
    for line in margins.summary():
        terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByGroup(config, log)


@pytest.fixture(autouse=True)
def _no_launcher_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A test's Settings() never reads the checkout's logs/servers/client.env: a pair (or arms)
    started there by `python -m servers up` must not change what a test configures. Tests of
    that record set their own (tests/test_settings.py)."""
    monkeypatch.setattr(settings_mod, "LAUNCHER_CLIENT_ENV", tmp_path / "no-launcher" / "client.env")


@pytest.fixture
def standin_factory() -> Iterator[Callable[..., Standin]]:
    """Start stand-in servers on free ports: ``s = standin_factory(speculative=True, ...)``.

    Takes a StandinBehavior or its fields as keywords; every server is stopped after the test.
    """
    started: list[Standin] = []

    def make(behavior: StandinBehavior | None = None, **fields: object) -> Standin:
        s = Standin(behavior or StandinBehavior(**fields)).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def standin_pair() -> Iterator[tuple[Standin, Standin]]:
    """(baseline, speculative): 200 tok/s one token per chunk vs 500 tok/s in chunks of 1/3/5/2."""
    with Standin.pair() as pair:
        yield pair
