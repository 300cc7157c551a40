"""The Kubernetes manifests of deploy/ against the schemas the API server applies.

The base and every overlay are rendered by kustomize, as `kubectl apply -k` renders them, and each
rendered document is validated:

* built-in kinds against kubernetes-validate's offline copy of the Kubernetes OpenAPI schemas, in
  its strict variant (an unknown field is an error, as with `kubectl apply --validate=strict`), for
  the oldest and the newest Kubernetes release we claim (KUBERNETES_VERSIONS);
* the PodMonitor with the npm package @kubernetes-models/prometheus-operator, whose validate() is
  generated from the Prometheus operator's CRD schema (run by validate_podmonitor.mjs), and its
  metadata, strictly, as Kubernetes' ObjectMeta.

That package's validation is NOT strict about unknown fields: its generated code checks the type,
pattern, enum and required properties of every field the CRD declares and lets any other field
through. So a wrong type (`interval: 15`), a malformed duration or a misspelt *required* field
(`selectors:` for `selector:`, reported as the missing `selector`) fail, but a misspelt optional
field of the PodMonitor's spec (`podMetricEndpoints:`) passes here, although
`kubectl apply --validate=strict` would refuse it (and without strict validation the API server
drops it). Misspelt metadata fields are still caught by the strict ObjectMeta check.

A failure names the rendering, the document and the field path. tests/deploy_manifests.rs checks
the settings an operator relies on; this checks that the API server would accept them.

kustomize and the npm package come from scripts/tools.sh (cached under ~/.cache/kbq/tools).
"""

import copy
import json
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.version import Version
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RENDERINGS = ["base"] + sorted(
    f"overlays/{p.name}" for p in (DEPLOY / "overlays").iterdir() if p.is_dir()
)
# The oldest release the manifests are meant for (they use nothing newer), and the newest
# schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = (
    "1.31",
    kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version()),
)
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
PODMONITOR = ("monitoring.coreos.com/v1", "PodMonitor")
VALIDATE_PODMONITOR = Path(__file__).resolve().parent / "validate_podmonitor.mjs"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def tools() -> dict:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "tools.sh")], capture_output=True, text=True
    )
    assert result.returncode == 0, f"scripts/tools.sh failed:\n{result.stderr}"
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


@lru_cache(maxsize=None)
def render(rendering: str) -> tuple:
    result = subprocess.run(
        [tools()["kustomize"], "build", str(DEPLOY / rendering)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"kustomize build {rendering}: {result.stderr}"
    return tuple(d for d in yaml.load_all(result.stdout, Loader=_LOADER) if d)


def field_path(error: jsonschema.ValidationError) -> str:
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path.lstrip(".") or "(the document)"


def describe(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


@lru_cache(maxsize=None)
def kubernetes_validator(version: str, api_version: str, kind: str):
    """kubernetes-validate's strict schema for one kind, or None. Its own validate() stops at the
    first error; this reports them all."""
    release = [
        v for v in kubernetes_validate.utils.all_versions() if Version(v) <= Version(version)
    ][-1]
    folder = SCHEMAS / f"v{release}-local-strict"
    # Its file names: rbac.authorization.k8s.io/v1 Role -> role-rbac-v1.json, v1 -> kind-v1.json
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = folder / f"{kind.lower()}-{group_version}.json"
    if not path.exists():
        return None
    schema = json.loads(path.read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


@lru_cache(maxsize=None)
def object_meta_validator():
    latest = kubernetes_validate.utils.latest_version()
    with open(SCHEMAS / f"v{latest}-local-strict" / "_definitions.json") as f:
        defs = json.load(f)["$defs"]
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{OBJECT_META}", "$defs": defs})


def podmonitor_problems(doc: dict) -> list:
    """The errors validate_podmonitor.mjs reports for one PodMonitor, as 'field path: message'."""
    result = subprocess.run(
        ["node", str(VALIDATE_PODMONITOR), tools()["podmonitor_models"]],
        input=json.dumps([doc]),
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 1), f"validate_podmonitor.mjs failed:\n{result.stderr}"
    [errors] = json.loads(result.stdout)
    return errors


def problems(doc: dict) -> list:
    """Every schema violation of one rendered document, as 'field path: message'."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key == PODMONITOR:
        meta = object_meta_validator().iter_errors(doc.get("metadata", {}))
        return podmonitor_problems(doc) + [
            f"{field_path(_under('metadata', e))}: {e.message}" for e in meta
        ]
    found = []
    for version in KUBERNETES_VERSIONS:
        validator = kubernetes_validator(version, *key)
        if validator is None:
            # A kind without a schema would pass unchecked: that must be a failure, not a skip.
            found.append(f"(the document): no schema for {key[0]} {key[1]} in Kubernetes {version}")
            continue
        found += [
            f"{field_path(e)}: {e.message} (Kubernetes {version})"
            for e in validator.iter_errors(doc)
        ]
    return found


def _under(prefix: str, error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    error.path.appendleft(prefix)
    return error


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_every_rendered_document_matches_its_schema(rendering):
    docs = render(rendering)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "ConfigMap",
        "Service",
        "PodMonitor",
        "PodDisruptionBudget",
        "ServiceAccount",
    } <= kinds, f"{rendering} renders only {sorted(kinds)}"
    failures = [
        f"{rendering}: {describe(doc)}: {problem}" for doc in docs for problem in problems(doc)
    ]
    assert not failures, "\n".join(failures)


def _rendered(kind: str) -> dict:
    return copy.deepcopy(next(d for d in render("base") if d["kind"] == kind))


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
    ],
)
def test_a_broken_document_is_reported_with_its_field_path(kind, change, expected):
    doc = _rendered(kind)
    change(doc)
    found = problems(doc)
    assert any(p.startswith(expected) for p in found), found
