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
        "TriggerAuthentication",
        "Secret",
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


def template(*args: str) -> subprocess.CompletedProcess:
    return helm("template", "kbq", str(CHART), "--kube-version", KUBE_VERSION, *args)


def documents(result: subprocess.CompletedProcess) -> list:
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.load_all(result.stdout, Loader=_LOADER) if d]


def kafka_trigger(docs: list) -> dict:
    [scaled] = [d for d in docs if d["kind"] == "ScaledObject"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    return trigger


def test_the_scaledobject_follows_the_configs_group_and_owns_the_replica_count():
    [scaled] = rendered("everything-values.yaml", "ScaledObject")
    [deployment] = rendered("everything-values.yaml", "Deployment")
    [configmap] = [
        c for c in rendered("everything-values.yaml", "ConfigMap") if "config.yaml" in c["data"]
    ]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    kafka = config["kafka"]
    assert "replicas" not in deployment["spec"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    trigger = kafka_trigger(render("everything-values.yaml"))
    meta = trigger["metadata"]
    assert meta["bootstrapServers"] == kafka["bootstrap_servers"]
    assert meta["consumerGroup"] == kafka["group_id"]
    # Two topics: no `topic`, so KEDA sums the lag of every topic of the group, not the first.
    assert len(kafka["topics"]) == 2 and "topic" not in meta
    assert meta["allowIdleConsumers"] == "false"
    assert meta["excludePersistentLag"] == "true"
    # 20000 records/s per replica x (checkpoint.interval 10 s + 1 s).
    assert config["checkpoint"]["interval"] == "10s"
    assert meta["lagThreshold"] == str(20000 * 11)
    [default_deployment] = rendered("default", "Deployment")
    assert default_deployment["spec"]["replicas"] == 3


def test_a_sasl_ssl_config_gives_the_trigger_its_security_through_a_triggerauthentication():
    docs = render("everything-values.yaml")
    trigger = kafka_trigger(docs)
    assert trigger["metadata"]["tls"] == "enable"
    assert trigger["metadata"]["sasl"] == "scram_sha512"
    [auth] = [d for d in docs if d["kind"] == "TriggerAuthentication"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    # ${KAFKA_PASSWORD}: read by KEDA from the sink container's environment (a Secret there).
    assert auth["spec"]["env"] == [
        {"parameter": "password", "name": "KAFKA_PASSWORD", "containerName": "sink"}
    ]
    # The literal user name: from a Secret the chart writes, as KEDA takes no literal.
    [ref] = auth["spec"]["secretTargetRef"]
    [secret] = [d for d in docs if d["kind"] == "Secret"]
    assert ref == {"parameter": "username", "name": secret["metadata"]["name"], "key": "username"}
    assert secret["stringData"] == {"username": "bigquery-sink"}


def test_a_plaintext_config_gives_the_trigger_no_authentication():
    docs = documents(template("--set", "keda.enabled=true"))
    trigger = kafka_trigger(docs)
    assert "authenticationRef" not in trigger
    assert (trigger["metadata"]["sasl"], trigger["metadata"]["tls"]) == ("none", "disable")
    assert trigger["metadata"]["topic"] == "orders"
    assert not [d for d in docs if d["kind"] in ("TriggerAuthentication", "Secret")]


def test_a_topic_pattern_and_env_servers_render_a_trigger_over_every_topic(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "keda": {"enabled": True},
                "env": [{"name": "KAFKA_BOOTSTRAP", "value": "kafka:9092"}],
                "config": {
                    "kafka": {
                        "bootstrap_servers": "${KAFKA_BOOTSTRAP}",
                        "group_id": "${GROUP:-payments}",
                        "topics": None,
                        "topic_pattern": "payments\\..*",
                    }
                },
            }
        )
    )
    meta = kafka_trigger(documents(template("-f", str(values))))["metadata"]
    assert "topic" not in meta
    # KEDA reads the servers from the container's env; the group's default applies (GROUP unset).
    assert meta["bootstrapServersFromEnv"] == "KAFKA_BOOTSTRAP"
    assert "bootstrapServers" not in meta
    assert meta["consumerGroup"] == "payments"


@pytest.mark.parametrize(
    "args,expected",
    [
        # A substitution inside a value: KEDA would read it literally.
        (["--set", "config.kafka.bootstrap_servers=${HOST}:9092"],
         'kafka.bootstrap_servers: KEDA cannot substitute "${HOST}:9092"'),
        # A CA file in the pod that KEDA cannot read.
        (["--set-string", "config.kafka.properties.security\\.protocol=SSL",
          "--set-string", "config.kafka.properties.ssl\\.ca\\.location=/etc/kbq/ca.pem"],
         'kafka.properties."ssl.ca.location" names a file in the pod; KEDA needs its PEM'),
        # The chart cannot read a ConfigMap it does not write.
        (["--set", "existingConfigMap=mine"],
         "keda.enabled with existingConfigMap: the chart cannot read that ConfigMap"),
        (["--set-string", "config.kafka.properties.security\\.protocol=SASL_SSL",
          "--set-string", "config.kafka.properties.sasl\\.mechanism=OAUTHBEARER",
          "--set-string", "config.kafka.properties.sasl\\.username=u",
          "--set-string", "config.kafka.properties.sasl\\.password=p"],
         "for PLAIN and SCRAM only, not OAUTHBEARER"),
    ],
)
def test_a_trigger_that_could_not_connect_does_not_render(args, expected):
    result = template("--set", "keda.enabled=true", *args)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr


def test_a_ca_given_as_a_secret_reaches_the_triggerauthentication():
    docs = documents(template(
        "--set", "keda.enabled=true",
        "--set-string", "config.kafka.properties.security\\.protocol=SSL",
        "--set-string", "config.kafka.properties.ssl\\.ca\\.location=/etc/kbq/ca.pem",
        "--set", "keda.secretTargetRef[0].parameter=ca",
        "--set", "keda.secretTargetRef[0].name=kafka-ca",
        "--set", "keda.secretTargetRef[0].key=ca.pem",
    ))
    [auth] = [d for d in docs if d["kind"] == "TriggerAuthentication"]
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "ca", "name": "kafka-ca", "key": "ca.pem"}
    ]
    assert kafka_trigger(docs)["metadata"]["tls"] == "enable"
    failures = [f"{describe(d)}: {p}" for d in docs for p in problems(d)]
    assert not failures, failures


def test_the_existing_configmap_value_set_scales_on_the_kafka_settings_it_repeats():
    docs = documents(template(
        "-f", str(CHART / "ci" / "existing-configmap-values.yaml"),
        "--set", "keda.enabled=true",
        "--set", "keda.kafka.bootstrap_servers=kafka:9092",
        "--set", "keda.kafka.group_id=mine",
        "--set", "keda.kafka.topics={a}",
    ))
    meta = kafka_trigger(docs)["metadata"]
    assert (meta["bootstrapServers"], meta["consumerGroup"], meta["topic"]) == ("kafka:9092", "mine", "a")


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--set", "replicaCoutn=9"], "additional properties 'replicaCoutn' not allowed"),
        (["--set", "keda.lagTreshold=5"], "additional properties 'lagTreshold' not allowed"),
        (["--set", "metricsPort=http"], "metricsPort"),
    ],
)
def test_the_values_schema_refuses_unknown_keys_and_wrong_types(args, expected):
    result = template(*args)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr


def test_names_volumes_security_contexts_and_probes_are_values():
    docs = documents(template(
        "--set", "fullnameOverride=orders-sink",
        "--set", "nameOverride=sink",
        "--set", "extraVolumes[0].name=kafka-ca",
        "--set", "extraVolumes[0].secret.secretName=kafka-ca",
        "--set", "extraVolumeMounts[0].name=kafka-ca",
        "--set", "extraVolumeMounts[0].mountPath=/etc/kbq",
        "--set", "securityContext.runAsUser=1000",
        "--set", "readinessProbe.periodSeconds=5",
        "--set", "startupProbe=null",
    ))
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["metadata"]["name"] == "orders-sink"
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "sink"
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "kafka-ca", "secret": {"secretName": "kafka-ca"}} in pod["volumes"]
    assert {"name": "kafka-ca", "mountPath": "/etc/kbq"} in container["volumeMounts"]
    assert container["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["periodSeconds"] == 5
    assert "startupProbe" not in container
    assert "RUST_LOG" not in {e["name"] for e in container.get("env", [])}
    failures = [f"{describe(d)}: {p}" for d in docs for p in problems(d)]
    assert not failures, failures


def test_the_chart_has_notes_and_a_readme():
    notes = documents(template("--set", "keda.enabled=true"))  # renders with NOTES.txt present
    assert notes
    assert (CHART / "templates" / "NOTES.txt").is_file()
    readme = (CHART / "README.md").read_text()
    assert "values.schema.json" in readme and "kustomize" in readme
