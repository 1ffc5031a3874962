"""deploy/k8s/gateway.yaml: every object validates against the Kubernetes API schemas (shipped in
the kubernetes-validate package: nothing is fetched), and the numbers in it agree with the
gateway's own config: probes on /readyz and /healthz, a grace period over the drain delay plus
the shutdown budget, a PodDisruptionBudget and a CPU autoscaler on the Deployment, and no secret
outside Secret references."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.config import Settings, load_config
from gateway.errors import ConfigError
from gateway.pipeline.auth import open_bind_problem

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "gateway.yaml"
# The oldest Kubernetes still in common support, and the newest the package knows.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def _kind(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs() if d["kind"] == kind]
    return doc


def _container() -> dict[str, Any]:
    (container,) = _kind("Deployment")["spec"]["template"]["spec"]["containers"]
    return container


# What an operator puts in the `gateway-secrets` Secret, by the env var each key becomes.
SECRETS = {
    "GW_AUTH__ADMIN_KEY": "admin-0123456789abcdef",
    "GW_DATABASE__URL": "postgresql+psycopg://gw:pw@postgres/gateway",
    "GW_AUTH__KEYS": '[{"name": "me", "key": "sk-0123456789abcdef"}]',
    "TOGETHER_API_KEY": "x",
}


def _settings(secrets: dict[str, str] = SECRETS) -> Settings:
    """The ConfigMap's config.yaml as a pod loads it: the container's plain env values, and those
    of its Secret references that `secrets` holds."""
    config = yaml.safe_load(_kind("ConfigMap")["data"]["config.yaml"])
    env = {e["name"]: e["value"] for e in _container()["env"] if "value" in e}
    from_secret = {e["name"] for e in _container()["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert secrets.keys() <= from_secret
    return load_config(environ={**env, **secrets}, **config)


def _validate(doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_against_the_kubernetes_schemas(version: str) -> None:
    docs = _docs()
    assert {d["kind"] for d in docs} == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
    for doc in docs:
        _validate(doc, version)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["spec"].__setitem__("replicas", "two"),  # wrong type
        lambda d: d["spec"]["template"]["spec"].__setitem__("terminationGracePeriod", 40),  # unknown field (a typo)
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"].pop("port"),  # required
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"][0].__setitem__("value", 8080),  # not a string
    ],
)
def test_a_broken_deployment_fails_validation(breakage: Any) -> None:
    broken = copy.deepcopy(_kind("Deployment"))
    breakage(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken, VERSIONS[-1])


def test_a_broken_autoscaler_and_budget_fail_validation() -> None:
    hpa = copy.deepcopy(_kind("HorizontalPodAutoscaler"))
    hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] = "70%"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(hpa, VERSIONS[-1])
    pdb = copy.deepcopy(_kind("PodDisruptionBudget"))
    pdb["spec"]["minAvailable"] = [1]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(pdb, VERSIONS[-1])


def test_probes_point_at_readyz_and_healthz_on_the_served_port() -> None:
    container = _container()
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port_names["http"] == _settings().server.port
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # Liveness must not kill a pod that is merely slow to answer under load.
    liveness = container["livenessProbe"]
    assert liveness.get("timeoutSeconds", 1) * liveness.get("failureThreshold", 3) >= 10


def test_the_grace_period_covers_the_drain_delay_and_the_shutdown_budget() -> None:
    pod = _kind("Deployment")["spec"]["template"]["spec"]
    server = _settings().server
    pre_stop = _container().get("lifecycle", {}).get("preStop")
    pre_stop_s = 0.0
    if pre_stop is not None:  # only a `sleep N` is understood here
        pre_stop_s = float(pre_stop["exec"]["command"][1]) if "exec" in pre_stop else float(pre_stop["sleep"]["seconds"])
    # The drain delay is what lets the endpoints' removal reach every proxy before the listener closes.
    assert server.drain_delay_s >= 5
    needed = pre_stop_s + server.drain_delay_s + server.shutdown_timeout_s
    assert pod["terminationGracePeriodSeconds"] >= needed + 5, (pod["terminationGracePeriodSeconds"], needed)


def test_the_budget_and_the_autoscaler_govern_the_deployment() -> None:
    deployment = _kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pdb = _kind("PodDisruptionBudget")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    hpa = _kind("HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]
    # A voluntary disruption always leaves a replica serving, and the budget never blocks every drain.
    assert 1 <= pdb["minAvailable"] < hpa["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["maxReplicas"]
    # The CPU target needs a CPU request to be measured against.
    assert _container()["resources"]["requests"]["cpu"]
    service = _kind("Service")["spec"]
    assert service["selector"].items() <= labels.items()


SECRET_ENV = re.compile(r"KEY|TOKEN|PASSWORD|SECRET|DATABASE__URL")


def test_secrets_come_from_secret_references_only() -> None:
    container = _container()
    assert "Secret" not in {d["kind"] for d in _docs()}  # no secret is shipped in the manifest
    for env in container["env"]:
        if SECRET_ENV.search(env["name"]):
            assert "value" not in env and "secretKeyRef" in env["valueFrom"], env
    text = _kind("ConfigMap")["data"]["config.yaml"]
    config = yaml.safe_load(text)
    assert "admin_key" not in config.get("auth", {}) and "keys" not in config.get("auth", {})
    assert "database" not in config  # its URL carries a password: GW_DATABASE__URL from the Secret
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text)  # no password in any URL
    for provider in config["providers"]:
        assert "api_key" not in provider and provider["api_key_env"] in {e["name"] for e in container["env"]}


def test_the_pod_starts_with_its_secrets() -> None:
    settings = _settings()
    assert settings.server.host == "0.0.0.0" and settings.server.require_auth
    assert settings.database.url.startswith("postgresql") and settings.persistence.enabled
    assert open_bind_problem(settings) is None
    mount = {m["name"]: m["mountPath"] for m in _container()["volumeMounts"]}
    args = _container()["args"]
    assert args[args.index("--config") + 1] == mount["config"] + "/config.yaml"
    assert Path(settings.persistence.spill_path).parent == Path(mount["spill"])
    # Only the gateway keys may be absent (they can live in the database): without any other
    # reference the kubelet does not start the container, and without a provider's key the config fails.
    optional = {e["name"] for e in _container()["env"] if e.get("valueFrom", {}).get("secretKeyRef", {}).get("optional")}
    assert optional == {"GW_AUTH__KEYS"}
    with pytest.raises(ConfigError, match="TOGETHER_API_KEY"):
        _settings({k: v for k, v in SECRETS.items() if k != "TOGETHER_API_KEY"})
