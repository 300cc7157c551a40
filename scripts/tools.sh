#!/usr/bin/env bash
# Installs the non-Python tools of the manifest test (tests/python/test_deploy_manifests.py) and
# prints where they are, one `name=path` a line:
#
#   kustomize=...           kustomize, built with `go install` (renders deploy/ as
#                           `kubectl apply -k`)
#   helm=...                helm, built with `go install` (renders deploy/helm/ with
#                           `helm template`; tests/python/test_helm_chart.py)
#   prometheus_operator_models=...  the npm package @kubernetes-models/prometheus-operator, whose
#                           PodMonitor and PrometheusRule models validate against the Prometheus
#                           operator's CRD schemas (run by tests/python/validate_crds.mjs with node)
#   keda_models=...         the npm package @kubernetes-models/keda, whose ScaledObject model
#                           validates against KEDA's CRD schema (the same script)
#
# Everything is cached under ~/.cache/kbq/tools (KBQ_TOOLS_DIR), outside the clone, keyed by the
# pinned versions: a second run only checks that the files exist. The first run on a fresh
# machine builds kustomize (about 1.5 minutes on 2 cores) and helm (about 4 minutes) and installs the npm packages (a few
# seconds each, 30 MB with their dependencies).
set -euo pipefail

KUSTOMIZE_VERSION=v5.8.1
HELM_VERSION=v3.22.0
PROMETHEUS_OPERATOR_MODELS_VERSION=6.0.0
KEDA_MODELS_VERSION=2.0.0

tools="${KBQ_TOOLS_DIR:-$HOME/.cache/kbq/tools}"
kustomize="$tools/kustomize-$KUSTOMIZE_VERSION/kustomize"
helm="$tools/helm-$HELM_VERSION/helm"

# go_tool BINARY MODULE@VERSION: builds a Go command into BINARY's folder unless it is there.
go_tool() {
  local binary=$1 module=$2
  [[ -x "$binary" ]] && return
  command -v go >/dev/null || {
    echo "tools: $(basename "$binary") is built with the go command, which is missing" >&2
    exit 1
  }
  echo "tools: building $module" >&2
  # A private module cache, writable so that removing ~/.cache/kbq/tools just works.
  GOMODCACHE="$tools/gomod" GOFLAGS=-modcacherw GOBIN="$(dirname "$binary")" \
    go install "$module" >&2
}
go_tool "$kustomize" "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
go_tool "$helm" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

# The validator script runs with node; check it here so that a missing node fails with this
# message rather than in the middle of the test.
for command in node npm; do
  command -v "$command" >/dev/null || {
    echo "tools: the CRD validator needs $command (apt-get install nodejs npm)" >&2
    exit 1
  }
done

# npm_package NAME VERSION: installs the package once under $tools and prints its folder.
npm_package() {
  local name=$1 version=$2
  local prefix="$tools/${name#@kubernetes-models/}-models-$version"
  local package="$prefix/node_modules/$name"
  if [[ ! -f "$package/package.json" ]]; then
    echo "tools: installing $name $version" >&2
    # Into a scratch folder moved in place at the end, so an interrupted install is not taken
    # for a finished one. --loglevel=error quiets the engine warnings: the packages declare
    # node >= 22 but run on this machine's node 20 (the manifest test fails if they do not).
    rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp"
    npm install --prefix "$prefix.tmp" --no-audit --no-fund --no-update-notifier --loglevel=error \
      "$name@$version" >&2
    rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
  fi
  echo "$package"
}

prometheus_operator_models=$(npm_package @kubernetes-models/prometheus-operator "$PROMETHEUS_OPERATOR_MODELS_VERSION")
keda_models=$(npm_package @kubernetes-models/keda "$KEDA_MODELS_VERSION")

echo "kustomize=$kustomize"
echo "helm=$helm"
echo "prometheus_operator_models=$prometheus_operator_models"
echo "keda_models=$keda_models"
