#!/usr/bin/env bash
# Google's own integration tests of the Go client's Storage Write API package
# (cloud.google.com/go/bigquery/storage/managedwriter, the version pinned below) against the
# emulator, run from the Go module cache with only the client setup changed: the emulator's
# endpoint, no credentials, gRPC without TLS (scripts/go-managedwriter/). Nothing of Google's is
# copied into the repository: the module is copied from the cache into a temporary directory at
# run time, and its integration_test.go patched there.
#
# Each test passes, or is skipped by scripts/go-managedwriter/skips.txt with a reason naming what
# the emulator does not serve (docs/emulator.md, "Google's Go client tests"). A test that skips
# itself (a t.Skip of Google's) fails the run: its reason would not be ours.
#
# Needs `go` (the version the module's go.mod names) and the debug build of kbq-emulator in
# $CARGO_TARGET_DIR. The emulator is started here on a free loopback port and stopped by its pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}"
module=cloud.google.com/go/bigquery
version=v1.86.3
package=storage/managedwriter
# The tests that talk to a service: every one that calls getTestClients or testutil's credentials.
run='^(TestIntegration_.*|TestValidation_Values)$'
fail() { echo "go-managedwriter: $*" >&2; exit 1; }

emulator="$CARGO_TARGET_DIR/debug/kbq-emulator"
[[ -x "$emulator" ]] || fail "no $emulator: build the workspace first"
command -v go >/dev/null || fail "go is required"

work=$(mktemp -d "${TMPDIR:-/tmp}/kbq-go-managedwriter.XXXXXX")
emulator_pid=
cleanup() {
  if [[ -n "$emulator_pid" ]]; then
    kill "$emulator_pid" 2>/dev/null || true
    wait "$emulator_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$(date +%s)
dir=$(go mod download -json "$module@$version" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
[[ -f "$dir/$package/integration_test.go" ]] || fail "no $package/integration_test.go in $dir"
# The module cache is read-only and go refuses overlays of its files: the module (8 MB) is copied.
copy="$work/$(basename "$dir")"
cp -r "$dir" "$copy"
chmod -R u+w "$copy"
python3 scripts/go-managedwriter/patch.py "$dir/$package/integration_test.go" \
  "$copy/$package/integration_test.go"
cp scripts/go-managedwriter/emulator_setup_test.go "$copy/$package/"

# -skip takes alternatives of slash-separated paths; each element here is an exact name.
skip=$(python3 - scripts/go-managedwriter/skips.txt <<'PY'
import re, sys
paths = []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    name, _, reason = line.partition(" ")
    if not reason.strip():
        sys.exit(f"skips.txt: {name} has no reason")
    paths.append("/".join(f"^{re.escape(part)}$" for part in name.split("/")))
print("|".join(paths))
PY
)

"$emulator" --listen 127.0.0.1:0 >"$work/emulator.out" 2>"$work/emulator.err" &
emulator_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/^emulator listening on //p' "$work/emulator.out")
  [[ -n "$addr" ]] && break
  kill -0 "$emulator_pid" 2>/dev/null || fail "the emulator exited: $(cat "$work/emulator.err")"
  sleep 0.1
done
[[ -n "$addr" ]] || fail "the emulator printed no address"

echo "go-managedwriter: $module@$version $package against the emulator at $addr"
status=0
# -trimpath: the build cache does not depend on the temporary directory's name.
(cd "$copy" && GCLOUD_TESTS_GOLANG_PROJECT_ID=kbq-go-tests KBQ_EMULATOR_ADDR="$addr" \
  go test -count=1 -trimpath -timeout 5m -v -run "$run" ${skip:+-skip "$skip"} \
  "./$package") >"$work/go-test.out" 2>&1 || status=$?
cat "$work/go-test.out"
if grep -q -- '--- SKIP' "$work/go-test.out"; then
  status=1
  echo "go-managedwriter: a test skipped itself; only skips.txt may skip, with a reason"
fi
((status == 0)) || { cat "$work/emulator.err" >&2; fail "failed (go test exit $status)"; }
passed=$(grep -c -- '--- PASS' "$work/go-test.out" || true)
skipped=$(grep -vc -e '^#' -e '^ *$' scripts/go-managedwriter/skips.txt || true)
echo "go-managedwriter: ok, $passed tests and subtests passed, $skipped skipped by skips.txt," \
  "$(($(date +%s) - started)) s"
