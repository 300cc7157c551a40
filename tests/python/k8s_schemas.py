"""Validation of rendered Kubernetes documents against the schemas the API server applies, shared
by test_deploy_manifests.py (kustomize) and test_helm_chart.py (helm template):

* built-in kinds against kubernetes-validate's offline copy of the Kubernetes OpenAPI schemas, in
  its strict variant (an unknown field is an error, as with `kubectl apply --validate=strict`), for
  the oldest and the newest Kubernetes release we claim (KUBERNETES_VERSIONS);
* the operators' custom resources (PodMonitor and PrometheusRule of the Prometheus operator,
  ScaledObject of KEDA) with the npm packages @kubernetes-models/prometheus-operator and
  @kubernetes-models/keda, whose validate() is generated from the operators' CRD schemas (run by
  validate_crds.mjs), and their metadata, strictly, as Kubernetes' ObjectMeta.

Those packages' validation is NOT strict about unknown fields: their generated code checks the
type, pattern, enum and required properties of every field the CRD declares and lets any other
field through. So a wrong type (`interval: 15`), a malformed duration or a misspelt *required*
field (`selectors:` for `selector:`, reported as the missing `selector`) fail, but a misspelt
optional field of a custom resource's spec (`podMetricEndpoints:`) passes here, although
`kubectl apply --validate=strict` would refuse it (and without strict validation the API server
drops it). Misspelt metadata fields are still caught by the strict ObjectMeta check.

kustomize, helm and the npm packages come from scripts/tools.sh (cached under ~/.cache/kbq/tools).
"""

import json
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
from packaging.version import Version
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[2]
# The oldest release the manifests are meant for (they use nothing newer), and the newest
# schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = (
    "1.31",
    kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version()),
)
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
CUSTOM_RESOURCES = {
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}
VALIDATE_CRDS = Path(__file__).resolve().parent / "validate_crds.mjs"


@lru_cache(maxsize=None)
def tools() -> dict:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "tools.sh")], capture_output=True, text=True
    )
    assert result.returncode == 0, f"scripts/tools.sh failed:\n{result.stderr}"
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


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


def crd_problems(doc: dict) -> list:
    """The errors validate_crds.mjs reports for one custom resource, as 'field path: message'."""
    result = subprocess.run(
        [
            "node",
            str(VALIDATE_CRDS),
            tools()["prometheus_operator_models"],
            tools()["keda_models"],
        ],
        input=json.dumps([doc]),
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 1), f"validate_crds.mjs failed:\n{result.stderr}"
    [errors] = json.loads(result.stdout)
    return errors


def problems(doc: dict) -> list:
    """Every schema violation of one rendered document, as 'field path: message'."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CUSTOM_RESOURCES:
        meta = object_meta_validator().iter_errors(doc.get("metadata", {}))
        return crd_problems(doc) + [
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
