"""The Helm chart of deploy/helm/kafka-bigquery-sink, rendered by `helm template` with its default
values and with every value set under its ci/ folder, as `helm install` would render it:

* `helm lint --strict` passes;
* every rendered document passes the same schema validation as the kustomize output (strict
  Kubernetes schemas of the oldest and newest release we claim, the operators' CRD schemas for
  PodMonitor, PrometheusRule and ScaledObject: k8s_schemas.py);
* the rendered config is one the daemon accepts (`kafka-bigquery-sink validate`), the container
  port is the one it listens on, the grace period exceeds its shutdown deadline (and a value set
  that breaks that fails to render), the PrometheusRule and the dashboard are the files of
  deploy/prometheus and deploy/grafana, and the ScaledObject follows the config's group.

helm is built by scripts/tools.sh; the daemon binary is $KBQ_BIN, else target/debug under
$CARGO_TARGET_DIR (scripts/test.sh builds it).
"""

import json
import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from k8s_schemas import ROOT, describe, problems, tools

CHART = ROOT / "deploy" / "helm" / "kafka-bigquery-sink"
VALUE_SETS = ["default"] + sorted(p.name for p in (CHART / "ci").glob("*.yaml"))
# helm's own default Kubernetes version depends on how it was built: name the oldest we claim.
KUBE_VERSION = "1.31.0"
EXPECTED_KINDS = {
    "default": {
        "Deployment",
        "ConfigMap",
        "Service",
        "ServiceAccount",
        "PodDisruptionBudget",
        "NetworkPolicy",
    },
    "everything-values.yaml": {
        "Deployment",
        "ConfigMap",
        "Service",
        "ServiceAccount",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "PodMonitor",
        "PrometheusRule",
        "ScaledObject",
    },
    "existing-configmap-values.yaml": {"Deployment", "NetworkPolicy"},
    "production-values.yaml": {
        "Deployment",
        "ConfigMap",
        "Service",
        "ServiceAccount",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "PodMonitor",
        "PrometheusRule",
    },
}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tools()["helm"], *args], capture_output=True, text=True)


def values_args(value_set: str) -> list:
    return [] if value_set == "default" else ["-f", str(CHART / "ci" / value_set)]


@lru_cache(maxsize=None)
def render(value_set: str) -> tuple:
    result = helm(
        "template", "kbq", str(CHART), "--namespace", "pipelines", "--kube-version", KUBE_VERSION,
        *values_args(value_set),
    )
    assert result.returncode == 0, f"helm template ({value_set}): {result.stderr}"
    return tuple(d for d in yaml.load_all(result.stdout, Loader=_LOADER) if d)


def rendered(value_set: str, kind: str) -> list:
    return [d for d in render(value_set) if d["kind"] == kind]


def daemon_binary() -> Path:
    if os.environ.get("KBQ_BIN"):
        return Path(os.environ["KBQ_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "kafka-bigquery-sink"


def test_every_value_set_is_known():
    assert set(VALUE_SETS) == set(EXPECTED_KINDS), "add the new ci/ value set to EXPECTED_KINDS"


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_helm_lint_strict(value_set):
    result = helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION,
                  *values_args(value_set))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_rendered_document_matches_its_schema(value_set):
    docs = render(value_set)
    kinds = sorted(d["kind"] for d in docs)
    assert set(kinds) == EXPECTED_KINDS[value_set], f"{value_set} renders {kinds}"
    failures = [
        f"{value_set}: {describe(doc)}: {problem}" for doc in docs for problem in problems(doc)
    ]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_pod_listens_where_the_config_says_and_outlives_the_shutdown_deadline(
    value_set, tmp_path
):
    [deployment] = rendered(value_set, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [port] = container["ports"]
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    for service in rendered(value_set, "Service"):
        assert service["spec"]["ports"][0]["port"] == port["containerPort"]
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    configmaps = [
        c for c in rendered(value_set, "ConfigMap") if c["metadata"]["name"] == volume["configMap"]["name"]
    ]
    if value_set == "existing-configmap-values.yaml":
        assert configmaps == [] and volume["configMap"]["name"] == "my-sink-config"
        return
    [configmap] = configmaps
    text = configmap["data"]["config.yaml"]
    config = yaml.safe_load(text)
    assert config["metrics"]["listen"] == f"0.0.0.0:{port['containerPort']}"
    deadline = int(config.get("shutdown_deadline", "25s").rstrip("s"))
    assert pod["terminationGracePeriodSeconds"] > deadline
    path = tmp_path / "config.yaml"
    path.write_text(text)
    binary = daemon_binary()
    assert binary.exists(), f"{binary}: build the daemon first (cargo build)"
    env = {"PATH": os.environ.get("PATH", ""), "KAFKA_PASSWORD": "from-the-secret"}
    result = subprocess.run(
        [str(binary), "validate", "-c", str(path)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, f"{value_set}: the daemon refuses the config:\n{result.stderr}"


def test_a_grace_period_within_the_shutdown_deadline_does_not_render():
    result = helm("template", "kbq", str(CHART), "--kube-version", KUBE_VERSION,
                  "--set", "terminationGracePeriodSeconds=45")
    assert result.returncode != 0
    assert "terminationGracePeriodSeconds (45) must exceed config.shutdown_deadline (45s)" in (
        result.stderr
    )


def test_the_prometheusrule_and_the_dashboard_are_the_shipped_files():
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "kafka-bigquery-sink.json").read_text())
    [rule] = rendered("everything-values.yaml", "PrometheusRule")
    assert rule["spec"] == {"groups": alerts["groups"]}
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    [board] = [
        c for c in rendered("everything-values.yaml", "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]
    assert json.loads(board["data"]["kafka-bigquery-sink.json"]) == dashboard
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_the_scaledobject_follows_the_configs_group_and_owns_the_replica_count():
    [scaled] = rendered("everything-values.yaml", "ScaledObject")
    [deployment] = rendered("everything-values.yaml", "Deployment")
    [configmap] = [
        c for c in rendered("everything-values.yaml", "ConfigMap") if "config.yaml" in c["data"]
    ]
    kafka = yaml.safe_load(configmap["data"]["config.yaml"])["kafka"]
    assert "replicas" not in deployment["spec"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["bootstrapServers"] == kafka["bootstrap_servers"]
    assert trigger["metadata"]["consumerGroup"] == kafka["group_id"]
    assert trigger["metadata"]["topic"] in kafka["topics"]
    assert trigger["metadata"]["allowIdleConsumers"] == "false"
    [default_deployment] = rendered("default", "Deployment")
    assert default_deployment["spec"]["replicas"] == 3
