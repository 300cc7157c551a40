#!/usr/bin/env bash
# Checks the Dockerfile as far as a machine without a container engine can (run by
# scripts/test.sh):
#
# 1. its shape: a build stage and a runtime stage, the runtime stage runs as a numeric non-root
#    user, has no shell and no package manager (a distroless base, no RUN), holds CA
#    certificates, names no base image by `latest` (or by no tag), and its ENTRYPOINT is the
#    binary the build stage produced;
# 2. the build context: only what the build stage COPYs (Cargo.toml, Cargo.lock, crates, src,
#    benches, ...) is copied into an empty folder, and the binary is built there with
#    `cargo build --locked --offline` and the feature flags of the Dockerfile's own build command
#    (debug, reusing this run's target dir: the same sources, manifest and features as the image's
#    release build, not the same optimisation);
# 2b. the production binary: the Dockerfile builds with `--no-default-features`, and the binary
#    built that way has neither dev subcommand (`quickstart`, `emulator`): its help lists neither
#    and clap refuses both;
# 3. the runtime libraries: every shared library the built binary loads comes from a Debian
#    package that the distroless runtime base holds (listed below, from its documented
#    contents). This machine runs the same Debian release as the runtime image.
#
# What it cannot check: that the base images pull, and the image itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kbq/target}"
fail() { echo "dockerfile: $*" >&2; exit 1; }

ctx=$(mktemp -d "${TMPDIR:-/tmp}/kbq-docker-ctx.XXXXXX")
bin="$CARGO_TARGET_DIR/debug/kafka-bigquery-sink"
# The build below replaces the debug binary of this target dir with the production one; the
# scripts after this one (and the tests) need the default build back.
# A hard link keeps it (cargo replaces the file, it does not write into it).
if [[ -e "$bin" ]]; then ln -f "$bin" "$ctx.default-bin" 2>/dev/null || cp -p "$bin" "$ctx.default-bin"; fi
restore() {
  if [[ -e "$ctx.default-bin" ]]; then mv -f "$ctx.default-bin" "$bin"; fi
  rm -rf "$ctx"
}
trap restore EXIT

# Parse the Dockerfile: print the build stage's context COPY sources, then key=value facts.
facts=$(python3 - "$root/Dockerfile" <<'EOF'
import shlex, sys
lines, cont = [], ""
for raw in open(sys.argv[1]):
    line = raw.rstrip("\n")
    if line.lstrip().startswith("#") and not cont:
        continue
    if line.endswith("\\"):
        cont += line[:-1] + " "
        continue
    line, cont = cont + line, ""
    if line.strip():
        lines.append(line.strip())
stages = []
for line in lines:
    word, _, rest = line.partition(" ")
    word = word.upper()
    if word == "FROM":
        parts = rest.split()
        stages.append({"from": parts[0], "name": parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None, "ops": []})
    elif stages:
        stages[-1]["ops"].append((word, rest))
if len(stages) < 2:
    sys.exit("fewer than two stages: not a multi-stage build")
build, runtime = stages[0], stages[-1]
for stage in stages:
    image = stage["from"].split("@")[0]
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else None
    if "@sha256:" not in stage["from"] and tag in (None, "latest"):
        sys.exit(f"FROM {stage['from']}: name a version or a digest, not latest")
# The Debian packages each distroless base holds (its documented contents).
DISTROLESS = {
    "gcr.io/distroless/cc-debian12": ["libc6", "libgcc-s1", "libssl3", "libstdc++6", "libgomp1", "ca-certificates"],
}
base = runtime["from"].split("@")[0].rsplit(":", 1)[0]
if base not in DISTROLESS:
    sys.exit(f"the runtime base {runtime['from']} is not a distroless image this check knows: it may hold a shell and a package manager")
if any(word == "RUN" for word, _ in runtime["ops"]):
    sys.exit("the runtime stage RUNs a command: a distroless image has no shell to run it")
for word, rest in build["ops"]:
    if word == "COPY" and "--from" not in rest:
        for src in shlex.split(rest)[:-1]:
            print("context=" + src)
# The build command's feature flags, applied to the check's own build below.
builds = [shlex.split(rest) for word, rest in build["ops"] if word == "RUN" and "cargo build" in rest]
if len(builds) != 1:
    sys.exit("the build stage has not exactly one `cargo build`")
words = builds[0]
cargo = words.index("build")
flags = []
for i, w in enumerate(words[cargo + 1:], cargo + 1):
    if w == "&&":
        break
    if w in ("--no-default-features", "--all-features"):
        flags.append(w)
    elif w in ("--features", "-F"):
        flags += [w, words[i + 1]]
    elif w.startswith("--features="):
        flags.append(w)
if "--no-default-features" not in flags:
    sys.exit("the build stage builds with the default features: the image would carry the dev tools (quickstart, emulator); build with --no-default-features")
if "--all-features" in flags or any("dev-tools" in f for f in flags):
    sys.exit("the build stage enables the dev-tools feature: the image would carry quickstart and emulator")
for f in flags:
    print("flag=" + f)
user = [rest for word, rest in runtime["ops"] if word == "USER"]
if not user:
    sys.exit("the runtime stage sets no USER: it would run as root")
uid = user[-1].split(":")[0]
if not uid.isdigit() or int(uid) == 0:
    sys.exit(f"the runtime USER {user[-1]!r} is not a numeric non-root uid (Kubernetes runAsNonRoot needs one)")
packages = DISTROLESS[base]
if "ca-certificates" not in packages:
    sys.exit("the runtime base holds no ca-certificates (TLS to Kafka and Google)")
for p in packages:
    print("package=" + p)
copied = [shlex.split(rest) for word, rest in runtime["ops"] if word == "COPY" and "--from" in rest]
entry = [rest for word, rest in runtime["ops"] if word == "ENTRYPOINT"]
if not entry:
    sys.exit("the runtime stage has no ENTRYPOINT")
import json
binary = json.loads(entry[-1])[0]
if not any(c[-1] == binary for c in copied):
    sys.exit(f"the ENTRYPOINT {binary} is not copied from the build stage")
print("binary=" + binary)
EOF
) || fail "the Dockerfile fails the check above"

mapfile -t sources < <(sed -n 's/^context=//p' <<<"$facts")
mapfile -t packages < <(sed -n 's/^package=//p' <<<"$facts")
mapfile -t flags < <(sed -n 's/^flag=//p' <<<"$facts")
((${#sources[@]})) || fail "the build stage copies nothing from the context"
for src in "${sources[@]}"; do
  [[ -e "$src" ]] || fail "the build stage copies $src, which the repository does not have"
  cp -a "$src" "$ctx/"
done
echo "dockerfile: build context ${sources[*]}; features ${flags[*]}; runtime packages ${packages[*]}"

(cd "$ctx" && cargo build --locked --offline --quiet "${flags[@]}" --bin kafka-bigquery-sink) \
  || fail "the binary does not build from the build stage's context alone"
help=$("$bin" --help) || fail "the binary built from the context does not run"
for tool in quickstart emulator; do
  grep -qE "^  $tool( |$)" <<<"$help" && fail "the image's binary lists the dev subcommand $tool"
  if out=$("$bin" "$tool" --help 2>&1); then
    fail "the image's binary runs the dev subcommand $tool"
  fi
  grep -q "unrecognized subcommand '$tool'" <<<"$out" \
    || fail "the image's binary does not refuse $tool as an unknown subcommand: $out"
done
echo "dockerfile: the image's binary has neither dev subcommand (quickstart, emulator)"

allowed=("${packages[@]}")
while read -r lib; do
  [[ -n "$lib" ]] || continue
  # dpkg records a file under the path its package ships it at: /lib or /usr/lib (merged /usr).
  path=$(realpath "$lib")
  owner=""
  for candidate in "$lib" "$path" "${path#/usr}" "/usr${lib}"; do
    owner=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) && [[ -n "$owner" ]] && break
  done
  [[ -n "$owner" ]] || fail "no Debian package owns $lib"
  [[ " ${allowed[*]} " == *" $owner "* ]] \
    || fail "the binary loads $lib from package $owner, which the runtime stage does not install"
  echo "dockerfile: $lib <- $owner"
done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
echo "dockerfile: ok"
