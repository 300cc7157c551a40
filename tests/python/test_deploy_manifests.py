"""The Kubernetes manifests of deploy/ against the schemas the API server applies.

The base and every overlay are rendered by kustomize, as `kubectl apply -k` renders them, and each
rendered document is validated:

built-in kinds strictly against the Kubernetes OpenAPI schemas, the operators' custom resources
(PodMonitor, PrometheusRule, KEDA's ScaledObject) against their CRD schemas; see k8s_schemas.py
for how, and for what the custom resources' validation does not catch (unknown optional fields).

A failure names the rendering, the document and the field path. tests/e2e/deploy_manifests.rs checks
the settings an operator relies on; this checks that the API server would accept them.

kustomize and the npm packages come from scripts/tools.sh (cached under ~/.cache/kbq/tools).
"""

import copy
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from k8s_schemas import ROOT, describe, problems, tools

DEPLOY = ROOT / "deploy"
RENDERINGS = ["base"] + sorted(
    f"overlays/{p.name}" for p in (DEPLOY / "overlays").iterdir() if p.is_dir()
)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def render(rendering: str) -> tuple:
    result = subprocess.run(
        [tools()["kustomize"], "build", str(DEPLOY / rendering)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"kustomize build {rendering}: {result.stderr}"
    return tuple(d for d in yaml.load_all(result.stdout, Loader=_LOADER) if d)


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_every_rendered_document_matches_its_schema(rendering):
    docs = render(rendering)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "ConfigMap",
        "Service",
        "PodDisruptionBudget",
        "ServiceAccount",
    } <= kinds, f"{rendering} renders only {sorted(kinds)}"
    failures = [
        f"{rendering}: {describe(doc)}: {problem}" for doc in docs for problem in problems(doc)
    ]
    assert not failures, "\n".join(failures)


def _rendered(kind: str) -> dict:
    """The first rendered document of this kind, in the base or else in an overlay."""
    return copy.deepcopy(next(d for r in RENDERINGS for d in render(r) if d["kind"] == kind))


def test_the_autoscaling_overlay_adds_a_scaledobject_and_leaves_the_replicas_to_it():
    docs = render("overlays/autoscaling")
    [scaled] = [d for d in docs if d["kind"] == "ScaledObject"]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert "replicas" not in deployment["spec"]


@pytest.mark.parametrize(
    "kind,change,expected",
    [
        # A misspelt field that Kubernetes would drop or refuse.
        (
            "Deployment",
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
                readOnlyRootFilesytem=True
            ),
            "spec.template.spec.containers[0].securityContext: Additional properties",
        ),
        # A wrong type.
        (
            "Deployment",
            lambda d: d["spec"].update(replicas="three"),
            "spec.replicas: 'three' is not of type",
        ),
        (
            "PodDisruptionBudget",
            lambda d: d["spec"].pop("selector") and d["spec"].update(selectors={}),
            "spec: Additional properties",
        ),
        (
            "PodMonitor",
            lambda d: d["spec"]["podMetricsEndpoints"][0].update(interval=15),
            "spec.podMetricsEndpoints[0].interval: must be string",
        ),
        (
            "PodMonitor",
            lambda d: d["spec"]["podMetricsEndpoints"][0].update(interval="15 seconds"),
            "spec.podMetricsEndpoints[0].interval: must match pattern",
        ),
        # Only a misspelt required field: the package lets unknown fields through (see above).
        (
            "PodMonitor",
            lambda d: d["spec"].update(selectors=d["spec"].pop("selector")),
            "spec: must have required property selector",
        ),
        (
            "PodMonitor",
            lambda d: d["metadata"].update(label={}),
            "metadata: Additional properties",
        ),
        (
            "PrometheusRule",
            lambda d: d["spec"]["groups"][0]["rules"][0].update(expr=["not", "a string"]),
            "spec.groups[0].rules[0].expr: must be",
        ),
        (
            "ScaledObject",
            lambda d: d["spec"].update(maxReplicaCount="six"),
            "spec.maxReplicaCount: must be integer",
        ),
        (
            "ScaledObject",
            lambda d: d["spec"].pop("scaleTargetRef"),
            "spec: must have required property scaleTargetRef",
        ),
        (
            "ScaledObject",
            lambda d: d["spec"]["triggers"][0]["metadata"].update(lagThreshold=50000),
            "spec.triggers[0].metadata.lagThreshold: must be string",
        ),
        (
            "PrometheusRule",
            lambda d: d["spec"]["groups"][0].pop("name"),
            "spec.groups[0]: must have required property name",
        ),
    ],
)
def test_a_broken_document_is_reported_with_its_field_path(kind, change, expected):
    doc = _rendered(kind)
    change(doc)
    found = problems(doc)
    assert any(p.startswith(expected) for p in found), found


def test_the_base_needs_no_custom_resource_definitions():
    kinds = {d["kind"] for d in render("base")}
    assert not kinds & {"PodMonitor", "PrometheusRule", "ScaledObject"}, sorted(kinds)
    production = {d["kind"] for d in render("overlays/production")}
    assert {"PodMonitor", "PrometheusRule"} <= production, sorted(production)


def test_a_config_edit_renames_the_configmap_the_pods_mount(tmp_path):
    """configMapGenerator: the ConfigMap's name carries a hash of config.yaml, so an edit changes
    the Deployment's pod template and rolls the pods."""
    def configmap_of(base: Path) -> tuple:
        result = subprocess.run(
            [tools()["kustomize"], "build", str(base)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        docs = [d for d in yaml.load_all(result.stdout, Loader=_LOADER) if d]
        [deployment] = [d for d in docs if d["kind"] == "Deployment"]
        [configmap] = [d for d in docs if d["kind"] == "ConfigMap"]
        mounted = next(
            v["configMap"]["name"]
            for v in deployment["spec"]["template"]["spec"]["volumes"]
            if v["name"] == "config"
        )
        assert mounted == configmap["metadata"]["name"]
        return mounted

    import shutil

    copy_of_base = tmp_path / "base"
    shutil.copytree(DEPLOY / "base", copy_of_base)
    before = configmap_of(copy_of_base)
    config = copy_of_base / "config.yaml"
    config.write_text(config.read_text().replace("shutdown_deadline: 45s", "shutdown_deadline: 40s"))
    after = configmap_of(copy_of_base)
    assert before.startswith("kafka-bigquery-sink-") and before != after
