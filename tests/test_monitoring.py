"""The compose `monitoring` profile (Prometheus + Grafana), its files, the dashboards' queries
against a real vLLM's /metrics (the captured fixtures), and `python -m servers monitor`.
Without Docker or Prometheus; each check also runs on a broken copy to show it can fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.paths import ROOT
from servers import monitor
from servers.launcher import flag_value
from tests.promql import PROMETHEUS_SERIES, dashboard_queries, exposed_names, metric_names
from tests.test_compose import ENV_EXAMPLE, check_schema, compose, parse_dotenv, raw_compose

MON = ROOT / "monitoring"
DASHBOARDS = sorted((MON / "grafana" / "dashboards").glob("*.json"))
FIXTURES = sorted((ROOT / "tests" / "fixtures").glob("metrics-*.txt"))
PROFILE_SETS: list[set[str]] = [set(), {"pair"}, {"cpu"}, {"monitoring"}, {"pair", "monitoring"},
                                 {"cpu", "monitoring"}, {"methods"}, {"methods", "monitoring"}]


def fixture_names() -> set[str]:
    names: set[str] = set()
    for f in FIXTURES:
        names |= exposed_names(f.read_text())
    return names


def dashboard(name: str) -> dict[str, Any]:
    return json.loads((MON / "grafana" / "dashboards" / name).read_text())


# ---------------------------------------------------------------- checks

def check_dashboard_metrics(dash: dict[str, Any], known: set[str]) -> list[str]:
    problems = []
    queries = list(dashboard_queries(dash))
    if not queries:
        problems.append(f"{dash.get('title')}: no queries found")
    for q in queries:
        for name in sorted(metric_names(q) - known - PROMETHEUS_SERIES):
            problems.append(f"{dash.get('title')}: {name} is not in a real vLLM's /metrics (query {q[:80]}...)")
    return problems


def active_services(doc: dict[str, Any], profiles: set[str]) -> set[str]:
    return {n for n, s in doc["services"].items() if not s.get("profiles") or set(s["profiles"]) & profiles}


def check_profile_set(doc: dict[str, Any], profiles: set[str]) -> list[str]:
    """What `docker compose --profile ... config` rejects: an active service depending on an inactive one."""
    active = active_services(doc, profiles)
    problems = []
    for name in sorted(active):
        deps = doc["services"][name].get("depends_on") or []
        for dep in deps if isinstance(deps, list) else list(deps):
            if dep not in active:
                problems.append(f"profiles {sorted(profiles)}: {name} depends on {dep}, which is not started")
    return problems


def check_monitoring_services(doc: dict[str, Any]) -> list[str]:
    s = doc["services"]
    problems = []
    for name, image in (("prometheus", monitor.PROMETHEUS_IMAGE), ("grafana", monitor.GRAFANA_IMAGE)):
        if s[name].get("image") != image:
            problems.append(f"{name}: image {s[name].get('image')!r}, servers/monitor.py pins {image!r}")
        if s[name].get("profiles") != ["monitoring"]:
            problems.append(f"{name}: must be in profile monitoring only")
        for port in s[name].get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                problems.append(f"{name}: publishes {port} beyond 127.0.0.1")
    env = s["grafana"].get("environment") or {}
    if env.get("GF_AUTH_ANONYMOUS_ENABLED") != "true" or env.get("GF_AUTH_ANONYMOUS_ORG_ROLE") != "Viewer":
        problems.append("grafana: anonymous viewer login must be on, with role Viewer (not Editor/Admin)")
    for key, var in (("GF_SECURITY_ADMIN_USER", "GRAFANA_ADMIN_USER"),
                     ("GF_SECURITY_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD")):
        if not re.fullmatch(r"\$\{" + var + r"(:-[^}]*)?\}", str(env.get(key, ""))):
            problems.append(f"grafana: {key} must come from .env (${{{var}}}), got {env.get(key)!r}")
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in s["prometheus"].get("volumes", [])}
    if mounts.get("/etc/prometheus/prometheus.yml") != "./monitoring/prometheus/prometheus.yml":
        problems.append("prometheus: must mount ./monitoring/prometheus/prometheus.yml")
    if mounts.get(monitor.COMPOSE_RULES) != "./monitoring/prometheus/guardrails.rules.yml":
        problems.append(f"prometheus: must mount ./monitoring/prometheus/guardrails.rules.yml at "
                        f"{monitor.COMPOSE_RULES}")
    return problems


# ---------------------------------------------------------------- the real files

def test_prometheus_config_is_generated_and_scrapes_both_servers_every_5_s() -> None:
    text = (MON / "prometheus" / "prometheus.yml").read_text()
    config = monitor.scrape_config(monitor.COMPOSE_TARGETS, monitor.COMPOSE_ARM_TARGETS,
                                   rule_files=[monitor.COMPOSE_RULES])
    want = monitor.config_text(config, monitor.HEADER)
    assert text == want, (
        "regenerate: python -m servers.monitor compose-config > monitoring/prometheus/prometheus.yml")
    cfg = yaml.safe_load(text)
    job = cfg["scrape_configs"][0]
    assert job["scrape_interval"] == "5s" and job["metrics_path"] == "/metrics"
    services = raw_compose()["services"]
    labels = {}
    for group in job["static_configs"]:
        for target in group["targets"]:
            svc, port = target.split(":")
            assert flag_value(services[svc]["command"], "--port") == port, target
            labels[svc] = (group["labels"]["role"], group["labels"]["arm"])
    assert labels == {"baseline": ("baseline", "baseline"), "baseline-cpu": ("baseline", "baseline"),
                      "speculative": ("speculative", "speculative"), "speculative-cpu": ("speculative", "speculative"),
                      # Profile methods: every arm scraped, each its own line.
                      "methods-baseline": ("baseline", "baseline"), "methods-ngram": ("speculative", "ngram"),
                      "methods-eagle3": ("speculative", "eagle3"), "methods-draft": ("speculative", "draft"),
                      "methods-adaptive": ("speculative", "adaptive"),
                      "methods-suffix": ("speculative", "suffix")}


def mounted(config_text: str) -> str:
    """The compose config with the rules file at the host path compose mounts there."""
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in raw_compose()["services"]["prometheus"]["volumes"]}
    return config_text.replace(monitor.COMPOSE_RULES, str(ROOT / mounts[monitor.COMPOSE_RULES]))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_accepts_the_config_and_the_rules_it_loads(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(mounted((MON / "prometheus" / "prometheus.yml").read_text()))
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "guardrails.rules.yml" in done.stdout and "SUCCESS" in done.stdout


def test_prometheus_loads_the_guardrails_and_the_default_is_empty_and_says_how_to_fill_it() -> None:
    cfg = yaml.safe_load((MON / "prometheus" / "prometheus.yml").read_text())
    assert cfg["rule_files"] == [monitor.COMPOSE_RULES]
    text = monitor.GUARDRAILS_RULES.read_text()
    assert yaml.safe_load(text) == {"groups": []}
    assert "python -m demo guardrails --from OUT/results.json --out monitoring/prometheus" in text


def test_grafana_provisioning_points_at_the_prometheus_service_and_the_dashboards() -> None:
    ds = yaml.safe_load((MON / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == f"http://prometheus:{monitor.PROMETHEUS_PORT}"
    assert source["jsonData"]["timeInterval"] == f"{monitor.SCRAPE_INTERVAL_S}s"
    prov = yaml.safe_load((MON / "grafana" / "provisioning" / "dashboards" / "specdemo.yml").read_text())
    (provider,) = prov["providers"]
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in raw_compose()["services"]["grafana"]["volumes"]}
    assert mounts[provider["options"]["path"]] == "./monitoring/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./monitoring/grafana/provisioning"
    home = raw_compose()["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (MON / "grafana" / "dashboards" / Path(home).name).exists() and home.startswith(provider["options"]["path"])
    uids = [json.loads(d.read_text())["uid"] for d in DASHBOARDS]
    assert len(uids) == len(set(uids)) == 2, uids


def test_compose_monitoring_services_are_pinned_local_and_take_credentials_from_env() -> None:
    assert check_monitoring_services(raw_compose()) == []
    env = parse_dotenv(ENV_EXAMPLE.read_text())
    assert env["GRAFANA_ADMIN_PASSWORD"] == "", ".env.example must not carry a real password"
    doc = compose({"GRAFANA_ADMIN_PASSWORD": "s3cret"})
    assert doc["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"
    assert "s3cret" not in (ROOT / "docker-compose.yml").read_text()


@pytest.mark.parametrize("profiles", PROFILE_SETS, ids=lambda p: "+".join(sorted(p)) or "default")
def test_every_profile_combination_is_valid(profiles: set[str]) -> None:
    doc = compose(parse_dotenv(ENV_EXAMPLE.read_text()))
    active = active_services(doc, profiles)
    doc["services"] = {k: v for k, v in doc["services"].items() if k in active}
    assert check_schema(doc) == []
    assert check_profile_set(compose(), profiles) == []
    assert ("grafana" in active) == ("monitoring" in profiles)


def test_helm_values_carry_the_guardrails_for_kube_prometheus_stack(tmp_path: Path) -> None:
    from servers import kubernetes as k8s

    for values_file in sorted((ROOT / "deploy" / "kubernetes").glob("*/values.yaml")):
        values = yaml.safe_load(values_file.read_text())
        rules = values["kube-prometheus-stack"]["additionalPrometheusRulesMap"]
        assert rules == {"specdemo-guardrails": {"groups": []}}, values_file  # the shipped default
    rule = {"alert": "SpecAcceptanceBelowFloor", "expr": "vector(1) < 0.5", "for": "10m"}
    mine = tmp_path / "guardrails.rules.yml"
    mine.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
    assert k8s.guardrail_rules(mine) == {"specdemo-guardrails": {"groups": [{"name": "g", "rules": [rule]}]}}


def test_our_dashboard_shows_the_guardrails_alert_state_per_arm() -> None:
    (panel,) = [p for p in dashboard("specdemo_pair.json")["panels"] if "ALERTS" in json.dumps(p)]
    (target,) = panel["targets"]
    assert target["expr"] == 'max by (arm, alertname, alertstate) (ALERTS{alertname=~"Spec.*"})'
    assert "{{alertstate}}" in target["legendFormat"]


def test_every_dashboard_metric_exists_in_a_real_vllm_metrics_page() -> None:
    known = fixture_names()
    assert "vllm:spec_decode_num_drafts_total" in known and "vllm:inter_token_latency_seconds_bucket" in known
    assert {d.name for d in DASHBOARDS} == {"vllm_speculative_decoding.json", "specdemo_pair.json"}
    for path in DASHBOARDS:
        assert check_dashboard_metrics(json.loads(path.read_text()), known) == [], path.name


def test_our_dashboard_shows_the_pair_side_by_side() -> None:
    dash = dashboard("specdemo_pair.json")
    queries = list(dashboard_queries(dash))
    names = set().union(*(metric_names(q) for q in queries))
    assert {"vllm:generation_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
            "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total", "vllm:num_requests_running",
            "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= names
    generation = next(q for q in queries if "generation_tokens_total" in q)
    assert "by (arm)" in generation, "the baseline and each arm must be separate series"
    for q in queries:  # every server reports the same model_name: only the arm label separates them
        assert "by (arm" in q, q
    legends = [t["legendFormat"] for p in dash["panels"] for t in p.get("targets", [])]
    assert all("{{arm}}" in legend for legend in legends), legends


def test_vllm_dashboard_is_the_upstream_copy_with_its_source_recorded() -> None:
    text = (MON / "grafana" / "dashboards" / "vllm_speculative_decoding.json").read_text()
    assert len(text) == 32742 and json.loads(text)["uid"] == "vllm-spec-decode"
    sources = (MON / "grafana" / "dashboards" / "SOURCES.md").read_text()
    assert "b29712c6b2ed0daa860e65e2bbb8cd73365efbf8" in sources and "Apache" in sources
    assert (ROOT / "LICENSES" / "Apache-2.0.txt").read_text().lstrip().startswith("Apache License")


# ---------------------------------------------------------------- the checks catch broken input

def test_promql_parser_finds_names_and_skips_the_rest() -> None:
    q = ('sum by (position, le) (rate(vllm:a_total{job=~"$job", x="rate(b)"}[$__rate_interval])) '
         '/ on () group_left () (sum(rate(c:d_total[5m] offset 1m)) > 0) + histogram_quantile(0.9, e_bucket) - 1e3')
    assert metric_names(q) == {"vllm:a_total", "c:d_total", "e_bucket"}
    assert metric_names("up") == {"up"} and metric_names("vector(1)") == set()
    variables = {"templating": {"list": [{"query": 'label_values(vllm:x{a="b"}, job)'}]}}
    assert list(dashboard_queries(variables)) == ["vllm:x"]


def test_metric_check_catches_a_name_vllm_does_not_expose() -> None:
    dash = dashboard("specdemo_pair.json")
    dash["panels"][1]["targets"][0]["expr"] = dash["panels"][1]["targets"][0]["expr"].replace(
        "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_draft_tokens_total")
    problems = check_dashboard_metrics(dash, fixture_names())
    assert len(problems) == 1 and "vllm:spec_decode_draft_tokens_total" in problems[0]


def test_compose_checks_catch_broken_monitoring_services() -> None:
    doc = raw_compose()
    doc["services"]["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] = "Admin"
    doc["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] = "hunter2"
    doc["services"]["prometheus"]["ports"] = ["9090:9090"]
    doc["services"]["prometheus"]["image"] = "prom/prometheus:latest"
    problems = check_monitoring_services(doc)
    for needle in ("anonymous", "GF_SECURITY_ADMIN_PASSWORD", "beyond 127.0.0.1", "pins"):
        assert any(needle in p for p in problems), needle
    doc = raw_compose()
    doc["services"]["prometheus"]["volumes"] = [v for v in doc["services"]["prometheus"]["volumes"]
                                                if "guardrails" not in str(v)]
    assert any("guardrails.rules.yml" in p for p in check_monitoring_services(doc))
    doc = raw_compose()
    doc["services"]["grafana"]["depends_on"] = ["prometheus", "app-cpu"]
    assert any("grafana depends on app-cpu" in p for p in check_profile_set(doc, {"monitoring"}))
    assert check_profile_set(doc, {"monitoring", "cpu"}) == []


# ---------------------------------------------------------------- python -m servers monitor

def test_monitor_says_what_is_missing_without_prometheus(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run([sys.executable, "-m", "servers", "monitor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": str(empty), "HOME": str(tmp_path)})
    assert done.returncode == 1
    assert "Prometheus is not installed" in done.stderr and "apt-get install prometheus" in done.stderr
    assert "Grafana" in done.stderr and "docker compose --profile monitoring" in done.stderr


def test_monitor_runs_prometheus_with_the_launcher_targets(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "args.json"
    fake = bin_dir / "prometheus"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(log)!r}, 'w'))\n")
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "SPECDEMO_SERVERS_BASELINE_PORT": "18000", "SPECDEMO_SERVERS_SPECULATIVE_PORT": "18001"}
    cmd = [sys.executable, "-m", "servers", "monitor", "--port", "19090", "--data-dir", str(tmp_path / "p")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    args = json.loads(log.read_text())
    assert "--web.listen-address=127.0.0.1:19090" in args
    config = yaml.safe_load((tmp_path / "p" / "prometheus.yml").read_text())
    assert config == monitor.scrape_config({"baseline": ["127.0.0.1:18000"], "speculative": ["127.0.0.1:18001"]},
                                           rule_files=[str(monitor.GUARDRAILS_RULES)])
    assert "http://127.0.0.1:19090" in done.stdout and "127.0.0.1:18001/metrics" in done.stdout
    no_rules = subprocess.run([*cmd, "--rules", str(tmp_path / "none.yml")], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env=env)
    assert no_rules.returncode == 2 and "--rules" in no_rules.stderr and "no such file" in no_rules.stderr
    printed = subprocess.run([sys.executable, "-m", "servers", "monitor", "--print-config", "--baseline", "h:1"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert yaml.safe_load(printed.stdout)["scrape_configs"][0]["static_configs"][0]["targets"] == ["h:1"]


def test_servers_help_lists_monitor_with_its_flags() -> None:
    from servers.__main__ import build_parser

    parser = build_parser()
    assert "monitor" in parser.format_help()
    args = parser.parse_args(["monitor", "--print-config", "--baseline", "h:1", "--port", "19091"])
    assert (args.command, args.print_config, args.baseline, args.port) == ("monitor", True, "h:1", 19091)
