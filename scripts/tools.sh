#!/usr/bin/env bash
# Installs the non-Python tools of the manifest test (tests/python/test_deploy_manifests.py) and
# prints where they are, one `name=path` a line:
#
#   kustomize=...   kustomize, built with `go install` (renders deploy/ as `kubectl apply -k`)
#   crds=...        the Prometheus operator's CRDs (PodMonitor's OpenAPI schema), from its Go
#                   module as `go mod download` fetches it
#
# Everything is cached under ~/.cache/kbq/tools (KBQ_TOOLS_DIR), outside the clone, keyed by the
# pinned versions: a second run only checks that the files exist. The first run on a fresh
# machine builds kustomize (about 1.5 minutes on 2 cores) and fetches a 4 MB module.
set -euo pipefail

KUSTOMIZE_VERSION=v5.8.1
PROMETHEUS_OPERATOR_VERSION=v0.85.0

tools="${KBQ_TOOLS_DIR:-$HOME/.cache/kbq/tools}"
kustomize="$tools/kustomize-$KUSTOMIZE_VERSION/kustomize"
crds="$tools/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/crds"

if [[ ! -x "$kustomize" || ! -d "$crds" ]]; then
  command -v go >/dev/null || {
    echo "tools: kustomize and the Prometheus operator CRDs need the go command" >&2
    exit 1
  }
  # A private module cache, writable so that removing ~/.cache/kbq/tools just works.
  export GOMODCACHE="$tools/gomod" GOFLAGS=-modcacherw
fi

if [[ ! -x "$kustomize" ]]; then
  echo "tools: building kustomize $KUSTOMIZE_VERSION" >&2
  GOBIN="$(dirname "$kustomize")" \
    go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" >&2
fi

if [[ ! -d "$crds" ]]; then
  echo "tools: fetching the Prometheus operator $PROMETHEUS_OPERATOR_VERSION CRDs" >&2
  module_dir=$(go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -d "$module_dir/example/prometheus-operator-crd" ]] || {
    echo "tools: no example/prometheus-operator-crd in ${module_dir:-the downloaded module}" >&2
    exit 1
  }
  # Copy the few YAML files out, so the module cache can be dropped without losing them.
  rm -rf "$crds.tmp" && mkdir -p "$crds.tmp"
  cp "$module_dir"/example/prometheus-operator-crd/*.yaml "$crds.tmp/"
  mv "$crds.tmp" "$crds"
fi

echo "kustomize=$kustomize"
echo "crds=$crds"
