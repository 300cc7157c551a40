#!/usr/bin/env bash
# Builds the Dockerfile's image and runs it: `scripts/image.sh`. A command of its own, not part of
# the test command: the release build inside the image compiles every dependency from scratch
# (tens of minutes on two cores), which the test command's time budget cannot hold. The test
# command keeps the offline checks of the Dockerfile (scripts/test.d/dockerfile.sh).
#
# 1. stand-ins of the base images from Debian's packages under the Dockerfile's names
#    (scripts/image/stand-ins.sh: no container registry is reachable here);
# 2. the image, built by buildah (daemonless) from the Dockerfile as it is, with no pull;
# 3. tests/e2e/image.rs against it with podman: the binary has no quickstart and no emulator
#    subcommand; /healthz and /readyz, the records of a topic on the
#    real broker visible in the emulator, a clean exit on SIGTERM, a plain-text log.
#
# buildah, podman and debootstrap are Debian's (installed here when missing). A sandbox that
# refuses containers fails with the tool's own error. buildah runs the build steps with
# `--isolation chroot`: the default OCI runtime cannot create cgroups in this sandbox (crun:
# "cannot set up cgroups hybrid"), and chroot isolation needs none.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}"
fail() { echo "image: $*" >&2; exit 1; }
image=localhost/kafka-bigquery-sink:test
started=$(date +%s)

missing=()
for tool in buildah podman debootstrap runc; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "image: installing ${missing[*]}"
  if [[ $(id -u) == 0 ]]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq "${missing[@]}"
fi
# A broker of its own unless one is handed over (KBQ_KAFKA_BOOTSTRAP, as scripts/test.sh does).
if [[ -z "${KBQ_KAFKA_BOOTSTRAP:-}" ]]; then
  scripts/kafka.sh fetch
  kafka_dir=$(mktemp -d "${TMPDIR:-/tmp}/kbq-kafka.XXXXXX")
  trap 'scripts/kafka.sh stop "$kafka_dir" >/dev/null 2>&1 || true; rm -rf "$kafka_dir"' EXIT
  scripts/kafka.sh start "$kafka_dir"
  export KBQ_KAFKA_BOOTSTRAP KBQ_KAFKA_DIR="$kafka_dir"
  KBQ_KAFKA_BOOTSTRAP=$(cat "$kafka_dir/bootstrap")
fi

bash scripts/image/stand-ins.sh
echo "image: stand-ins ready after $(($(date +%s) - started)) s"

# --layers keeps the steps' layers and the cache mounts keep cargo's output, so a rebuild with the
# same sources is quick; --network host for the build stage's downloads (crates, Debian packages).
buildah bud --isolation chroot --pull-never --layers --network host --tag "$image" --file Dockerfile . \
  >"${TMPDIR:-/tmp}/kbq-image-build.log" 2>&1 || {
  tail -40 "${TMPDIR:-/tmp}/kbq-image-build.log" >&2
  fail "buildah bud failed (full log: ${TMPDIR:-/tmp}/kbq-image-build.log)"
}
echo "image: built $image after $(($(date +%s) - started)) s ($(podman image inspect --format '{{.Size}}' "$image") bytes)"

# How containers run here. Podman's defaults first (crun); in a sandbox like this one crun fails
# twice: it cannot raise the container's RLIMIT_NOFILE/NPROC to its defaults without
# CAP_SYS_RESOURCE, and it refuses cgroup v1 controllers beside a cgroup2 entry ("cgroups in
# hybrid mode not supported"). runc (Debian's) handles cgroup v1, and explicit limits at or below
# this process's own need no capability. The choice is handed to tests/e2e/image.rs.
export KBQ_PODMAN_ARGS="" KBQ_PODMAN_RUN_ARGS=""
if ! podman run --rm --network none "$image" --help >/dev/null 2>"${TMPDIR:-/tmp}/kbq-image-run.err"; then
  echo "image: podman's default runtime refused: $(tail -1 "${TMPDIR:-/tmp}/kbq-image-run.err")"
  KBQ_PODMAN_ARGS="--runtime runc"
  KBQ_PODMAN_RUN_ARGS="--ulimit nofile=4096:4096 --ulimit nproc=4096:4096"
  # shellcheck disable=SC2086 # the arguments are words
  podman $KBQ_PODMAN_ARGS run --rm --network none $KBQ_PODMAN_RUN_ARGS "$image" --help >/dev/null \
    || fail "the image's entrypoint does not run with runc either"
  echo "image: running containers with: podman $KBQ_PODMAN_ARGS run $KBQ_PODMAN_RUN_ARGS"
fi

KBQ_IMAGE="$image" cargo test --locked --test e2e image:: -- --ignored --nocapture
echo "image: ok after $(($(date +%s) - started)) s"
