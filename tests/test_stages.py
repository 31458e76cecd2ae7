"""The suite's stages (scripts/test.sh) read their paths from tests/conftest.py: each name there must
still name a test or a path, or a stage would quietly run less than it says."""

from __future__ import annotations

import importlib
import os
import re

import pytest

from demo.settings import ROOT
from tests.conftest import BESIDE_E2E, E2E_PATHS, GROUPS, TIMING, TIMING_LANES

TEST_SH = (ROOT / "scripts" / "test.sh").read_text()


def test_every_timing_entry_names_a_test_function() -> None:
    for nodeid in TIMING:
        path, name = nodeid.split("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, name, None)) and name.startswith("test_"), nodeid


def test_every_stage_path_exists() -> None:
    for path in (*BESIDE_E2E, *E2E_PATHS, *(p for paths in GROUPS.values() for p in paths)):
        assert (ROOT / path).exists(), path


def test_each_module_beside_e2e_is_in_one_lane_and_none_is_a_timing_one() -> None:
    assert len(BESIDE_E2E) == len(set(BESIDE_E2E)), BESIDE_E2E  # the lanes' paths, in order
    assert "BESIDE_E2E_LANES" in TEST_SH
    # A module beside the e2e suite has company by design: it holds no check of the timing stage.
    timing = {nodeid.split("::")[0] for nodeid in TIMING}
    assert not timing & set(BESIDE_E2E) and not any(p.startswith(E2E_PATHS) for p in timing), timing


def test_the_fast_stage_leaves_the_timing_checks_to_their_own_stage() -> None:
    marks = re.findall(r'^marks="([^"]*)"', TEST_SH, re.M)
    assert marks == ["not e2e and not timing"], marks
    assert "TIMING_LANES" in TEST_SH and 'start_lanes timing timing "${timing_lanes[@]}"' in TEST_SH


def test_the_timing_stage_runs_last_after_the_pair_is_stopped() -> None:
    """Nothing else of ours beside it: not the fast stage, not the e2e suite, not the pair's start."""
    timing = TEST_SH.index("harness.idle")  # the stage begins by asking how idle the machine is
    assert TEST_SH.rindex("harness.e2e_pair down") < timing  # the explicit stop, not the EXIT trap's
    assert TEST_SH.index('start_lanes beside-e2e') < TEST_SH.index('wait_lanes beside-e2e') < timing
    assert TEST_SH.index('-m "$marks"') < timing
    rest = TEST_SH[timing:]
    assert "exit $status" in rest
    # After it, only the timing lanes start: all of them side by side, or each alone.
    starts = [line.strip() for line in rest.splitlines() if "start_lanes" in line]
    assert starts == ['start_lanes timing timing "${timing_lanes[@]}"',
                      'start_lanes "timing-$((n + 1))" timing "${timing_lanes[$n]}"'], starts


def test_the_timing_lanes_run_side_by_side_only_with_a_core_idle_for_each() -> None:
    """Beside a neighbour the lanes would share the one core it leaves (docs/development.md#a-busy-machine)."""
    rest = TEST_SH[TEST_SH.index("harness.idle"):]
    side_by_side, one_by_one = rest.index('"${timing_lanes[@]}"'), rest.index('for n in "${!timing_lanes[@]}"')
    guard = rest[:side_by_side]
    assert "idle >= lanes - 0.5" in guard and 'lanes="${#timing_lanes[@]}"' in guard
    assert side_by_side < rest.index("else") < one_by_one


def test_each_timing_check_is_in_one_lane() -> None:
    assert len(TIMING) == len(set(TIMING)), TIMING  # the lanes' ids, in order
    # Two light lanes (~0.07 of a core each) leave a busy neighbour its core; a third lane would be
    # company of the kind the stage exists to avoid (tests/conftest.py).
    assert 1 <= len(TIMING_LANES) <= 2, TIMING_LANES


def test_an_xdist_worker_runs_in_a_session_of_its_own() -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("not an xdist worker: scripts/test.sh's fast stage runs this with -n 2")
    assert os.getsid(0) == os.getpid()
