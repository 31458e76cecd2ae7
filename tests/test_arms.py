"""servers/arms.py: the named arm configs, the arms' ports and cores on a CPU, and the one
function that splits a GPU between the servers of the methods setup."""

from __future__ import annotations

import pytest

from common.arm_name import ARM_NAME_MAX_CHARS
from servers.arms import (
    ARM_CONFIGS,
    METHODS,
    ArmConfig,
    MethodsSetup,
    adaptive_config,
    cpu_arms,
    get_arm_config,
    gpu_memory_shares,
    min_gpu_memory_gib,
)
from servers.config import NGRAM_CONFIG
from servers.profiles import MAX_GPU_MEMORY_SUM, PROFILES


def test_named_arms_carry_their_method_and_today_s_default_is_the_ngram_arm() -> None:
    assert {"ngram", "ngram-k2", "eagle3", "draft"} <= set(ARM_CONFIGS)
    assert ARM_CONFIGS["ngram"].speculative_config == NGRAM_CONFIG
    assert ARM_CONFIGS["ngram-k2"].speculative_config["num_speculative_tokens"] == 2
    assert ARM_CONFIGS["eagle3"].speculative_config == PROFILES["llama-eagle3"].speculative_config
    assert ARM_CONFIGS["draft"].method == "draft_model"
    assert all(a.target is None for a in ARM_CONFIGS.values() if a.method == "ngram")
    whatif = ARM_CONFIGS["eagle3-whatif"]
    assert whatif.what_if and whatif.speculative_config == PROFILES["llama-whatif"].speculative_config
    assert [a.name for a in ARM_CONFIGS.values() if a.what_if] == ["eagle3-whatif"]
    with pytest.raises(KeyError, match="unknown arm 'medusa'; choose from: ngram"):
        get_arm_config("medusa")
    with pytest.raises(ValueError, match="needs a 'method'"):
        ArmConfig(name="x", summary="", speculative_config={"num_speculative_tokens": 2})
    with pytest.raises(ValueError):
        ArmConfig(name="Bad Name", summary="", speculative_config=dict(NGRAM_CONFIG))


def test_cpu_arms_take_consecutive_ports_and_one_core_each_after_the_baseline() -> None:
    arms = cpu_arms(["ngram", "ngram-k2"])
    assert [(a.name, a.port, a.cores) for a in arms] == [("ngram", 8001, "1"), ("ngram-k2", 8002, "2")]
    assert arms[0].speculative_config == NGRAM_CONFIG  # the first arm is today's speculative server
    with pytest.raises(ValueError, match="each arm once"):
        cpu_arms(["ngram", "ngram"])


def test_memory_shares_are_proportional_never_sum_above_the_cap_and_fit_the_minimum_gpu() -> None:
    needs = {"a": 10.0, "b": 20.0, "c": 30.0}
    shares = gpu_memory_shares(needs)
    assert shares == {"a": 0.15, "b": 0.3, "c": 0.45}
    assert min_gpu_memory_gib(needs, shares) == 67  # 30 / 0.45 = 66.7
    odd = gpu_memory_shares({"a": 1.0, "b": 1.0, "c": 1.0})
    assert odd == {"a": 0.3, "b": 0.3, "c": 0.3} and sum(odd.values()) <= MAX_GPU_MEMORY_SUM
    with pytest.raises(ValueError, match="needs some memory"):
        gpu_memory_shares({"a": 0.0})


def test_methods_setup_one_target_a_baseline_and_five_arms() -> None:
    assert METHODS.servers == ("baseline", "ngram", "eagle3", "draft", "adaptive", "suffix")
    configs = METHODS.server_configs()
    assert {c.model for c in configs.values()} == {PROFILES["llama-eagle3"].model}
    assert [c.port for c in configs.values()] == [8000, 8001, 8002, 8003, 8004, 8005]
    assert configs["baseline"].role == "baseline" and configs["baseline"].speculative_config is None
    assert configs["eagle3"].speculative_config == ARM_CONFIGS["eagle3"].speculative_config
    shares = METHODS.shares()
    assert [c.gpu_memory_utilization for c in configs.values()] == list(shares.values())
    assert sum(shares.values()) <= MAX_GPU_MEMORY_SUM + 1e-9
    # Each server's share of the stated minimum GPU holds what it needs; one GiB less does not.
    gib = METHODS.min_gpu_memory_gib()
    needs = METHODS.needs_gib()
    assert all(shares[n] * gib >= needs[n] for n in needs)
    assert any(shares[n] * (gib - 1) < needs[n] for n in needs)
    assert gib > 80, "six bf16 copies of an 8B target do not fit an 80 GB GPU"


def test_methods_setup_refuses_an_arm_made_for_another_target_or_a_what_if() -> None:
    with pytest.raises(ValueError, match="made for meta-llama/Llama-3.1-8B-Instruct"):
        MethodsSetup(profile="qwen3-draft", arms=("ngram", "eagle3"))
    with pytest.raises(ValueError, match="what-if"):
        MethodsSetup(profile="llama-ngram", arms=("ngram", "eagle3-whatif"))


def test_the_adaptive_arm_is_ngram_with_a_schedule_the_default_or_the_user_s() -> None:
    default = ARM_CONFIGS["adaptive"].speculative_config
    assert default == {**NGRAM_CONFIG, "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 0]]}
    ngram, adaptive = cpu_arms(["ngram", "adaptive"])
    assert (adaptive.port, adaptive.cores, adaptive.speculative_config) == (8002, "2", default)
    mine = [(1, 3, 4), (4, 7, 2), (8, 8, 0)]
    (arm,) = cpu_arms(["adaptive"], adaptive_schedule=mine)
    assert arm.speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 7, 2], [8, 8, 0]]
    assert cpu_arms(["ngram"], adaptive_schedule=mine)[0].speculative_config == NGRAM_CONFIG  # only adaptive's
    assert adaptive_config([(1, 2, 2), (3, 9, 0)])["num_speculative_tokens"] == 2
    with pytest.raises(ValueError, match="ranges overlap"):
        adaptive_config([(1, 4, 4), (3, 9, 0)])
    with pytest.raises(ValueError, match="above num_speculative_tokens=2"):
        ArmConfig(name="x", summary="", speculative_config={**NGRAM_CONFIG, "num_speculative_tokens": 2,
                                                            "num_speculative_tokens_per_batch_size": [[1, 9, 4]]})


@pytest.mark.parametrize(("schedule", "message"), [
    ("[[1, 4, 4], [3, 8, 0]]", "ranges overlap"), ("[[1, 4, -1]]", "k must be >= 0"),
    ("[[2, 4, 4]]", "must start at 1"),
])
def test_up_refuses_a_bad_adaptive_schedule_in_one_line_before_starting_anything(
        schedule: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from servers.__main__ import main

    assert main(["up", "--arms", "ngram,adaptive", "--adaptive-schedule", schedule]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("error: setting adaptive_schedule")


def test_up_starts_the_adaptive_arm_with_the_given_schedule() -> None:
    from servers import launcher
    from servers.settings import LauncherSettings

    s = LauncherSettings(_env_file=None, arms="ngram,adaptive", adaptive_schedule="[[1, 3, 4], [4, 8, 0]]")
    planned = {p.name: p for p in launcher.servers(s)}
    assert list(planned) == ["baseline", "ngram", "adaptive"]
    schedule = (planned["adaptive"].speculative_config or {})["num_speculative_tokens_per_batch_size"]
    assert schedule == [[1, 3, 4], [4, 8, 0]]
    default = {p.name: p for p in launcher.servers(LauncherSettings(_env_file=None, arms="adaptive"))}
    assert default["adaptive"].speculative_config == ARM_CONFIGS["adaptive"].speculative_config


def test_one_arm_name_rule_for_the_launcher_and_the_client() -> None:
    from pydantic import ValidationError

    from demo.settings import ArmSetting
    from servers.arms import Arm

    longest = "a" * ARM_NAME_MAX_CHARS
    assert Arm(name=longest, port=8001, speculative_config=dict(NGRAM_CONFIG)).name == longest
    assert ArmSetting(name=longest, url="http://127.0.0.1:8001").name == longest
    for bad in (longest + "a", "Eagle3", "-ngram", "baseline"):
        with pytest.raises(ValidationError):
            Arm(name=bad, port=8001, speculative_config=dict(NGRAM_CONFIG))
        with pytest.raises(ValidationError):
            ArmSetting(name=bad, url="http://127.0.0.1:8001")
