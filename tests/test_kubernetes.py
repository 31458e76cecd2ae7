"""deploy/kubernetes/: generated from servers/profiles.py, validated offline (page manifests with
kubernetes-validate's bundled schemas, Helm values with the production-stack chart's vendored
values.schema.json), and in agreement with compose and the launcher for every profile.
(vLLM's own parser reads the Helm commands in tests/test_vllm_args.py.)"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from common.paths import ROOT
from servers import kubernetes as k8s
from servers.arms import METHODS
from servers.profiles import PROFILES
from tests.commands import Command, all_commands
from tests.test_compose import raw_compose

DEPLOY = ROOT / "deploy" / "kubernetes"
SCHEMA = DEPLOY / "vendor" / f"vllm-stack-{k8s.CHART_VERSION}.values.schema.json"
K8S_VERSION = "1.37.0"  # newest schema kubernetes-validate 1.37.0 bundles
GPU_PROFILES = [p for p in PROFILES.values() if p.device == "gpu"]


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# ---------------------------------------------------------------- checks

def check_manifest(doc: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {e.message} at {list(e.path)}"]
    return []


def unknown_keys(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Keys the chart's schema does not declare (its schema allows extras; a typo would be ignored)."""
    problems = []
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in value.items():
            if key not in schema["properties"]:
                problems.append(f"{where}/{key}: not a key of the chart's values")
            else:
                problems += unknown_keys(sub, schema["properties"][key], f"{where}/{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += unknown_keys(item, schema["items"], f"{where}/{i}")
    return problems


def check_values(values: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]
    return problems + unknown_keys(values, schema)


def check_page(docs: list[dict[str, Any]], profile_name: str) -> list[str]:
    profile = PROFILES[profile_name]
    problems = []
    dep = next((d for d in docs if d["kind"] == "Deployment"), None)
    svc = next((d for d in docs if d["kind"] == "Service"), None)
    if dep is None or svc is None:
        return ["needs a Deployment and a Service"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    if not pod.get("securityContext", {}).get("runAsNonRoot") or pod["securityContext"].get("runAsUser") in (0, None):
        problems.append("the page must run as non-root (runAsNonRoot, runAsUser != 0)")
    if c.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation must be false")
    if "readinessProbe" not in c:
        problems.append("no readinessProbe")
    if not {"cpu", "memory"} <= set(c.get("resources", {}).get("requests", {})):
        problems.append("resource requests for cpu and memory are missing")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    for role in ("baseline", "speculative"):
        want = f"http://{k8s.RELEASE}-{role}-engine-service:{k8s.ENGINE_SERVICE_PORT}"
        if env.get(f"SPECDEMO_{role.upper()}_URL") != want:
            problems.append(f"SPECDEMO_{role.upper()}_URL={env.get(f'SPECDEMO_{role.upper()}_URL')!r}, "
                            f"the chart names the service {want}")
    if env.get("SPECDEMO_SPEC_METHOD") != profile.method:
        problems.append(f"SPECDEMO_SPEC_METHOD must be {profile.method}")
    if env.get("SPECDEMO_SERVER_DEVICE") != "gpu":  # as compose's GPU app: several arms race at once
        problems.append(f"SPECDEMO_SERVER_DEVICE={env.get('SPECDEMO_SERVER_DEVICE')!r}, the engines are GPUs: 'gpu'")
    if svc["spec"]["selector"] != dep["spec"]["selector"]["matchLabels"]:
        problems.append("the Service does not select the Deployment's pods")
    return problems


# ---------------------------------------------------------------- the real files

def test_committed_files_are_the_generators_output() -> None:
    want = k8s.generated_files()
    for path, text in want.items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: python -m servers.kubernetes write"
    on_disk = {p for p in DEPLOY.rglob("*.yaml")}
    assert on_disk == set(want), f"files not made by the generator: {sorted(on_disk - set(want))}"
    assert {p.parent.name for p in DEPLOY.glob("*/values.yaml")} == {p.name for p in GPU_PROFILES} | {"methods"}


@pytest.mark.parametrize("profile", [p.name for p in GPU_PROFILES])
def test_page_manifests_are_valid_kubernetes_and_safe(profile: str) -> None:
    docs = load_all(DEPLOY / profile / "page.yaml")
    for doc in docs:
        assert check_manifest(doc) == []
    assert check_page(docs, profile) == []


def test_dashboards_configmap_is_valid_and_carries_our_dashboards() -> None:
    (cm,) = load_all(DEPLOY / "grafana-dashboards.yaml")
    assert check_manifest(cm) == []
    assert cm["metadata"]["labels"] == {"grafana_dashboard": "1"}  # kube-prometheus-stack's sidecar label
    assert set(cm["data"]) == {"vllm_speculative_decoding.json", "specdemo_pair.json"}
    assert len(yaml.safe_dump(cm)) < 900_000, "a ConfigMap holds at most 1 MiB"


@pytest.mark.parametrize("profile", [p.name for p in GPU_PROFILES])
def test_helm_values_match_the_charts_schema_and_run_the_pair(profile: str) -> None:
    (values,) = load_all(DEPLOY / profile / "values.yaml")
    assert check_values(values) == []
    specs = values["servingEngineSpec"]["modelSpec"]
    assert [s["name"] for s in specs] == ["baseline", "speculative"]
    assert len({s["modelURL"] for s in specs}) == 1, "baseline and speculative serve the same model"
    names = [s["vllmConfig"]["extraArgs"][s["vllmConfig"]["extraArgs"].index("--served-model-name") + 1] for s in specs]
    assert len(set(names)) == 2, "distinct served names, or the router pools the two engines"
    base, spec = (s["vllmConfig"]["extraArgs"] for s in specs)
    assert "--speculative-config" not in base and "--speculative-config" in spec
    assert spec[spec.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    image = raw_compose()["x-vllm-gpu"]["image"]
    assert image.endswith(f"{k8s.VLLM_REPOSITORY}:{k8s.VLLM_TAG}}}"), f"compose pins {image}, Helm {k8s.VLLM_TAG}"
    schema = json.loads(SCHEMA.read_text())
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert "vllm-project/production-stack" in (DEPLOY / "vendor" / "SOURCES.md").read_text()


def test_methods_values_run_one_engine_per_arm_of_one_target() -> None:
    (values,) = load_all(DEPLOY / "methods" / "values.yaml")
    assert check_values(values) == []
    specs = values["servingEngineSpec"]["modelSpec"]
    assert [s["name"] for s in specs] == list(METHODS.servers) == ["baseline", "ngram", "eagle3", "draft", "adaptive",
                                                                       "suffix"]
    assert len({s["modelURL"] for s in specs}) == 1 and all(s["requestGPU"] == 1 for s in specs)
    args = {s["name"]: s["vllmConfig"]["extraArgs"] for s in specs}
    assert len({a[a.index("--served-model-name") + 1] for a in args.values()}) == 6, "the router pools equal names"
    # Only the suffix engine runs the image with arctic-inference (docker/Dockerfile.vllm-suffix).
    assert {s["name"]: s["repository"] for s in specs if s["repository"] != "vllm/vllm-openai"} == {
        "suffix": "specdemo/vllm-openai-suffix"}
    assert "--speculative-config" not in args["baseline"]
    configs = METHODS.server_configs()
    for name in METHODS.arms:
        a = args[name]
        assert json.loads(a[a.index("--speculative-config") + 1]) == configs[name].speculative_config
    assert all("--gpu-memory-utilization" not in a for a in args.values()), "a GPU each: vLLM's default share"
    # Prometheus series get the compose labels: role baseline for the engine named baseline, else speculative.
    relabel = values["servingEngineSpec"]["serviceMonitor"]["relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_label_model"], "targetLabel": "arm"} in relabel


@pytest.mark.parametrize("name", METHODS.servers)
def test_methods_compose_and_helm_agree(name: str) -> None:
    by_source = {c["source"]: _flags(c["argv"]) for c in all_commands()
                 if c["profile"] == "methods" and c["role"] == name}
    assert set(by_source) == {"compose", "helm"}
    compose, helm = dict(by_source["compose"]), dict(by_source["helm"])
    for d in (compose, helm):
        d.pop("--host")
        d.pop("--port")
    assert compose.pop("--gpu-memory-utilization")
    assert helm.pop("--enable-prefix-caching") == ""
    assert helm.pop("--served-model-name") == compose.pop("--served-model-name") + f"-{name}"
    assert helm == compose, name


def _flags(argv: list[str]) -> dict[str, str]:
    """--flag value pairs (a leading positional is the model), underscores as dashes."""
    out: dict[str, str] = {}
    rest = list(argv)
    if rest and not rest[0].startswith("--"):
        out["--model"] = rest.pop(0)
    i = 0
    while i < len(rest):
        flag = rest[i].replace("_", "-")
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            out[flag] = rest[i + 1]
            i += 2
        else:
            out[flag] = ""
            i += 1
    return out


@pytest.mark.parametrize("profile", list(PROFILES))
def test_compose_launcher_and_helm_agree(profile: str) -> None:
    commands: list[Command] = [c for c in all_commands() if c["profile"] == profile]
    for role in ("baseline", "speculative"):
        by_source = {c["source"]: _flags(c["argv"]) for c in commands if c["role"] == role}
        assert by_source["compose"] == by_source["launcher"], role
        if PROFILES[profile].device == "cpu":
            assert "helm" not in by_source
            continue
        compose, helm = dict(by_source["compose"]), dict(by_source["helm"])
        # The documented differences (servers/kubernetes.py): host/port from the chart, own GPU,
        # own served name, prefix caching stated.
        for d in (compose, helm):
            d.pop("--host")
            d.pop("--port")
        assert compose.pop("--gpu-memory-utilization")
        assert helm.pop("--enable-prefix-caching") == ""
        assert helm.pop("--served-model-name") == compose.pop("--served-model-name") + f"-{role}"
        assert helm == compose, role


# ---------------------------------------------------------------- the checks catch broken files

def test_manifest_check_catches_schema_errors_and_unknown_fields() -> None:
    docs = load_all(DEPLOY / "llama-eagle3" / "page.yaml")
    broken = copy.deepcopy(docs[0])
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    assert check_manifest(broken)
    broken = copy.deepcopy(docs[0])
    c = broken["spec"]["template"]["spec"]["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")
    assert check_manifest(broken) and "no readinessProbe" in check_page([broken, docs[1]], "llama-eagle3")


def test_page_check_catches_root_missing_requests_and_wrong_urls() -> None:
    docs = load_all(DEPLOY / "llama-eagle3" / "page.yaml")
    pod = docs[0]["spec"]["template"]["spec"]
    pod["securityContext"]["runAsUser"] = 0
    del pod["containers"][0]["resources"]["requests"]
    pod["containers"][0]["env"][2]["value"] = "http://baseline:8000"
    env = pod["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != "SPECDEMO_SERVER_DEVICE"]  # left out: the page's CPU default
    problems = check_page(docs, "llama-eagle3")
    for needle in ("non-root", "requests", "SPECDEMO_BASELINE_URL", "SPECDEMO_SERVER_DEVICE=None"):
        assert any(needle in p for p in problems), needle


def test_values_check_catches_type_errors_and_misspelt_keys() -> None:
    (values,) = load_all(DEPLOY / "llama-eagle3" / "values.yaml")
    broken = copy.deepcopy(values)
    broken["servingEngineSpec"]["modelSpec"][0]["vllmConfig"]["extraArgs"] = "--dtype auto"
    assert any("extraArgs" in p for p in check_values(broken))
    broken = copy.deepcopy(values)
    broken["servingEngineSpec"]["modelSpec"][1]["vllmConfig"]["extraArg"] = ["--x"]
    assert any("extraArg: not a key" in p for p in check_values(broken))
