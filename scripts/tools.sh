#!/usr/bin/env bash
# Installs the non-Python tools of the manifest test (tests/python/test_deploy_manifests.py) and
# prints where they are, one `name=path` a line:
#
#   kustomize=...           kustomize, built with `go install` (renders deploy/ as
#                           `kubectl apply -k`)
#   podmonitor_models=...   the npm package @kubernetes-models/prometheus-operator, whose
#                           PodMonitor model validates against the Prometheus operator's CRD
#                           schema (run by tests/python/validate_podmonitor.mjs with node)
#
# Everything is cached under ~/.cache/kbq/tools (KBQ_TOOLS_DIR), outside the clone, keyed by the
# pinned versions: a second run only checks that the files exist. The first run on a fresh
# machine builds kustomize (about 1.5 minutes on 2 cores) and installs the npm package (a few
# seconds, 30 MB with its dependencies).
set -euo pipefail

KUSTOMIZE_VERSION=v5.8.1
PODMONITOR_MODELS_VERSION=6.0.0

tools="${KBQ_TOOLS_DIR:-$HOME/.cache/kbq/tools}"
kustomize="$tools/kustomize-$KUSTOMIZE_VERSION/kustomize"
models_prefix="$tools/prometheus-operator-models-$PODMONITOR_MODELS_VERSION"
models="$models_prefix/node_modules/@kubernetes-models/prometheus-operator"

if [[ ! -x "$kustomize" ]]; then
  command -v go >/dev/null || {
    echo "tools: kustomize is built with the go command, which is missing" >&2
    exit 1
  }
  echo "tools: building kustomize $KUSTOMIZE_VERSION" >&2
  # A private module cache, writable so that removing ~/.cache/kbq/tools just works.
  GOMODCACHE="$tools/gomod" GOFLAGS=-modcacherw GOBIN="$(dirname "$kustomize")" \
    go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" >&2
fi

# The validator script runs with node; check it here so that a missing node fails with this
# message rather than in the middle of the test.
for command in node npm; do
  command -v "$command" >/dev/null || {
    echo "tools: the PodMonitor validator needs $command (apt-get install nodejs npm)" >&2
    exit 1
  }
done

if [[ ! -f "$models/package.json" ]]; then
  echo "tools: installing @kubernetes-models/prometheus-operator $PODMONITOR_MODELS_VERSION" >&2
  # Into a scratch folder moved in place at the end, so an interrupted install is not taken for
  # a finished one. --loglevel=error quiets the engine warnings: the package declares node >= 22
  # but runs on this machine's node 20 (the manifest test fails if it does not).
  rm -rf "$models_prefix.tmp" && mkdir -p "$models_prefix.tmp"
  npm install --prefix "$models_prefix.tmp" --no-audit --no-fund --no-update-notifier --loglevel=error \
    "@kubernetes-models/prometheus-operator@$PODMONITOR_MODELS_VERSION" >&2
  rm -rf "$models_prefix" && mv "$models_prefix.tmp" "$models_prefix"
fi

echo "kustomize=$kustomize"
echo "podmonitor_models=$models"
