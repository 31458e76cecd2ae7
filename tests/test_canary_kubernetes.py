"""The canary's split on Kubernetes: a Gateway API HTTPRoute, and its rollback patch, valid offline.

The route (deploy/kubernetes/canary/httproute.yaml, servers/kubernetes.py) and the route after the
rollback patch (rollback-patch.yaml, RFC 6902 as `kubectl patch --type=json` applies it) validate
against the HTTPRoute v1 schema vendored from kubernetes-sigs/gateway-api v1.6.1
(deploy/kubernetes/vendor/SOURCES.md). A broken route fails the same check. Fast stage.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
import yaml

from common.canary_rules import DEFAULT_HEADER
from servers import kubernetes as k8s

CANARY = k8s.DEPLOY_DIR / "canary"
SCHEMA = k8s.DEPLOY_DIR / "vendor" / "gateway-api-v1.6.1.httproute-v1.schema.json"


def problems(route: dict[str, Any]) -> list[str]:
    """Schema errors, and the checks the CRD states as CEL rules that jsonschema does not run."""
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    found = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(route)]
    if route.get("apiVersion") != "gateway.networking.k8s.io/v1" or route.get("kind") != "HTTPRoute":
        found.append("not a gateway.networking.k8s.io/v1 HTTPRoute")
    for i, rule in enumerate(route.get("spec", {}).get("rules", [])):
        if sum(r.get("weight", 1) for r in rule.get("backendRefs", [])) == 0 and i != 0:
            found.append(f"rule {i}: every weight 0 (no backend serves it)")
    return found


def apply_json_patch(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902's ``test`` and ``replace`` (the ops the rollback uses); ValueError when a test fails."""
    out = copy.deepcopy(doc)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        key: Any = int(last) if isinstance(node, list) else last
        if op["op"] == "test":
            if node[key] != op["value"]:
                raise ValueError(f"test failed at {op['path']}: {node[key]!r} != {op['value']!r}")
        elif op["op"] == "replace":
            node[key]  # noqa: B018 - replace needs the target to exist (RFC 6902 4.3)
            node[key] = op["value"]
        else:
            raise ValueError(f"op {op['op']} not used by the rollback")
    return out


def committed_route() -> dict[str, Any]:
    (route,) = list(yaml.safe_load_all(CANARY.joinpath("httproute.yaml").read_text()))
    return dict(route)


def weights(route: dict[str, Any]) -> dict[str, int]:
    return {r["name"]: r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]}


def test_the_committed_route_is_the_generators_and_validates() -> None:
    route = committed_route()
    assert route == k8s.canary_httproute()
    assert problems(route) == []
    eligible, rest = route["spec"]["rules"]
    assert eligible["matches"] == [{"headers": [{"type": "Exact", "name": DEFAULT_HEADER, "value": "1"}]}]
    assert weights(route) == {k8s.engine_service("baseline"): 100 - k8s.CANARY_SHARE,
                              k8s.engine_service("speculative"): k8s.CANARY_SHARE}
    assert [r["name"] for r in rest["backendRefs"]] == [k8s.engine_service("baseline")]  # ineligible: baseline only
    assert f"http://{k8s.engine_service('speculative')}:{k8s.ENGINE_SERVICE_PORT}" == k8s.engine_url("speculative")


def test_the_rollback_patch_sets_the_speculative_weight_to_0_and_the_result_validates() -> None:
    patch = yaml.safe_load(CANARY.joinpath("rollback-patch.yaml").read_text())
    assert patch == k8s.canary_rollback_patch()
    rolled = apply_json_patch(committed_route(), patch)
    assert problems(rolled) == []
    assert weights(rolled) == {k8s.engine_service("baseline"): 100, k8s.engine_service("speculative"): 0}
    assert rolled["spec"]["rules"][1] == committed_route()["spec"]["rules"][1]
    # Applied to a route whose backends moved, the patch's tests refuse it instead of zeroing the baseline.
    swapped = committed_route()
    swapped["spec"]["rules"][0]["backendRefs"].reverse()
    with pytest.raises(ValueError, match="test failed"):
        apply_json_patch(swapped, patch)


def test_the_schema_check_catches_a_broken_route() -> None:
    bad = committed_route()
    bad["spec"]["rules"][0]["backendRefs"][1]["weight"] = -1
    bad["spec"]["rules"][0]["matches"][0]["headers"][0]["type"] = "Fuzzy"
    bad["spec"]["parentRefs"] = "specdemo-gateway"
    found = problems(bad)
    assert any("weight" in p and "minimum" in p for p in found), found
    assert any("Fuzzy" in p for p in found) and any(p.startswith("spec/parentRefs") for p in found), found
    with pytest.raises(ValueError, match="outside 0-100"):
        k8s.canary_httproute(share=101)
