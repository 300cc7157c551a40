"""The Kubernetes manifests of deploy/ against the schemas the API server applies.

The base and every overlay are rendered by kustomize, as `kubectl apply -k` renders them, and each
rendered document is validated:

* built-in kinds against kubernetes-validate's offline copy of the Kubernetes OpenAPI schemas, in
  its strict variant (an unknown field is an error, as with `kubectl apply --validate=strict`), for
  the oldest and the newest Kubernetes release we claim (KUBERNETES_VERSIONS);
* the PodMonitor against the Prometheus operator's CRD schema (openAPIV3Schema), made strict the
  same way, with its metadata checked as ObjectMeta.

A failure names the rendering, the document and the field path. tests/deploy_manifests.rs checks
the settings an operator relies on; this checks that the API server would accept them.

kustomize and the CRDs come from scripts/tools.sh (cached under ~/.cache/kbq/tools).
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


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML 1.1's `=` value tag (an enum value in the CRDs) read as the string it is."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)


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
    return tuple(d for d in yaml.load_all(result.stdout, Loader=_Loader) if d)


def field_path(error: jsonschema.ValidationError) -> str:
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path.lstrip(".") or "(the document)"


def describe(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def strict(schema):
    """OpenAPI structural schemas prune unknown fields; the API server's strict field validation
    rejects them instead, and so does this copy."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


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


@lru_cache(maxsize=None)
def crd_validators() -> dict:
    """(apiVersion, kind) -> validator, for every CRD version the Prometheus operator ships."""
    validators = {}
    for path in sorted(Path(tools()["crds"]).glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=_Loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                # OpenAPI 3.0 schemas are JSON Schema draft 4 with extensions it ignores.
                validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft4Validator(
                    schema
                )
    assert validators, f"no CustomResourceDefinition under {tools()['crds']}"
    return validators


def problems(doc: dict) -> list:
    """Every schema violation of one rendered document, as 'field path: message'."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    crd = crd_validators().get(key)
    if crd is not None:
        errors = list(crd.iter_errors(doc))
        errors += [
            _under("metadata", e)
            for e in object_meta_validator().iter_errors(doc.get("metadata", {}))
        ]
        return [f"{field_path(e)}: {e.message}" for e in errors]
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
            "spec.podMetricsEndpoints[0].interval: 15 is not of type 'string'",
        ),
        (
            "PodMonitor",
            lambda d: d["spec"].update(podMetricEndpoints=[]),
            "spec: Additional properties",
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
