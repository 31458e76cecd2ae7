"""The load engine beyond one machine (``--ray ADDRESS``, demo/load/fleet.py): a local two-node Ray
cluster on this one machine (Ray's own way to test multi-node code, ``ray.cluster_utils.Cluster``),
started and stopped here, two stand-ins in their own processes.

What must hold: every request of a step accounted for once, sent by workers on two different nodes,
the one schedule kept from one start (the stand-ins' own arrival records), one load.json; a
closed-loop step through the same workers; the workers' headroom merged (the worst one's);
no Ray imported without --ray; a cluster that is not there is one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.cli import main
from demo.load.engine import LoadResult
from demo.settings import ROOT
from demo.sweep.headroom import ClientHeadroom
from harness.standin import StandinBehavior
from harness.standin_process import process_pair

ray = pytest.importorskip("ray", reason="Ray is optional: pip install -r requirements-ray.txt")

from demo.load.fleet import RayFleet, fleet_at, worst_headroom  # noqa: E402
from harness.ray_cluster import local_cluster  # noqa: E402

BEHAVIOR = StandinBehavior(tokens_per_s=200, ttft_s=0.02)
RATE = 1.0  # requests/s of the rate step, sent at constant gaps: each request has a slot of 1 s


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a local cluster of two nodes, one CPU each (harness/ray_cluster.py)."""
    with local_cluster(2) as address:
        yield address


@pytest.fixture(autouse=True)
def _no_saved_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECDEMO_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDEMO_SAVE_RUNS", "false")


def test_a_rate_step_is_shared_by_workers_on_two_nodes_and_every_request_counted(cluster: str,
                                                                              tmp_path: Path, capsys) -> None:
    fleet = fleet_at(cluster, 2)
    assert isinstance(fleet, RayFleet) and fleet.workers == 2 and fleet.strategy == "STRICT_SPREAD"
    where = fleet.placement()
    assert len({node for node, _pid in where}) == 2 and len({pid for _node, pid in where}) == 2
    with process_pair(BEHAVIOR, BEHAVIOR) as (base, spec):
        assert main(["load", "--baseline-url", base.url, "--speculative-url", spec.url, "--rate", str(RATE),
                     "--requests", "8", "--arrivals", "constant", "--ray", cluster, "--ray-workers", "2",
                     "--max-tokens", "20", "--prompt", "hi", "--no-progress", "--out", str(tmp_path / "o")]) == 0
        truths = {"baseline": base.truth(), "speculative": spec.truth()}
    saved = LoadResult.model_validate_json((tmp_path / "o" / "load.json").read_text())
    [step] = saved.rate_steps
    offsets = step.schedule.offsets_s
    for side in step.servers():
        tr = truths[side.name]
        assert side.sent == side.finished == len(offsets) == len(tr) == 8 and side.accounted
        assert side.client is not None and side.client.loop_lag_p95_ms is not None  # the worst worker's
        # One schedule from one start: each request reached its stand-in in its own slot of the
        # schedule (nearer its offset from the first than any other's: within half the 1 s gap). A
        # worker that kept a start of its own (its now, or its part's first offset) is a slot or two
        # out; a late machine is a few hundred ms at most.
        arrivals = sorted(t.t_request for t in tr)
        drift = [abs((a - arrivals[0]) - (o - offsets[0])) for a, o in zip(arrivals, offsets, strict=True)]
        assert max(drift) < 0.5 / RATE, drift
    capsys.readouterr()


def test_a_closed_loop_step_through_the_workers(cluster: str, tmp_path: Path, capsys) -> None:
    with process_pair(BEHAVIOR, BEHAVIOR) as (base, spec):
        assert main(["load", "--baseline-url", base.url, "--speculative-url", spec.url, "--users", "4",
                     "--max-tokens", "20", "--prompt", "hi", "--ray", cluster, "--ray-workers", "2",
                     "--no-progress", "--out", str(tmp_path / "o")]) == 0
        n_base = len(base.truth())
    saved = LoadResult.model_validate_json((tmp_path / "o" / "load.json").read_text())
    [step] = saved.steps
    assert step.baseline.ok_users == step.users == 4 and n_base >= 4
    assert step.baseline.client_loop_lag_p95_ms is not None  # the worst worker's
    capsys.readouterr()


def test_the_merged_headroom_is_the_worst_workers() -> None:
    calm = ClientHeadroom(loop_lag_p95_ms=2.0, loop_lag_max_ms=5.0, cpu_share=0.3)
    late = ClientHeadroom(loop_lag_p95_ms=40.0, loop_lag_max_ms=90.0, cpu_share=0.6, limited=True,
                          note="the client's event loop ran 40 ms late")
    assert worst_headroom([calm, late]) == late and worst_headroom([calm, None]) == calm
    assert worst_headroom([None]) is None


def test_without_ray_nothing_of_ray_is_imported() -> None:
    code = ("import sys, demo.cli, demo.load.engine, demo.sweep.runner, demo.load.fleet; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_cluster_that_is_not_there_is_one_line(capsys) -> None:
    code = ("from demo.cli import main; import sys; sys.exit(main(['load', '--rate', '1', '--requests', '1', "
            "'--ray', '127.0.0.1:1', '--baseline-url', 'http://127.0.0.1:9', '--speculative-url', "
            "'http://127.0.0.1:9', '--prompt', 'hi', '--no-progress']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines and "--ray 127.0.0.1:1" in lines[-1] and "Traceback" not in out.stderr, out.stderr
    json.dumps(lines)  # printable
