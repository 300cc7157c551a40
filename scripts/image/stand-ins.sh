#!/usr/bin/env bash
# Builds local stand-ins of the Dockerfile's base images from Debian's packages, under the names
# the Dockerfile uses, in the local container storage (buildah and podman share it). This machine
# reaches no container registry, so `FROM rust:…` and `FROM debian:…-slim` cannot be pulled; the
# stand-ins are made of what it does reach:
#
#   debian:SUITE-slim       `debootstrap --variant=minbase SUITE` from the apt mirror this machine
#                           is configured with (the packages of the official slim image's base).
#   rust:VERSION-SUITE      the same minbase system plus the toolchain packages the official image
#                           inherits from buildpack-deps (compilers, make, git, curl, headers),
#                           and the Rust toolchain of this machine (rustup's, which must be
#                           VERSION), under /usr/local/rustup and /usr/local/cargo with the
#                           official image's RUSTUP_HOME, CARGO_HOME and PATH. It also trusts
#                           this machine's local certificate authorities
#                           (/usr/local/share/ca-certificates): the build stage downloads crates
#                           over TLS through whatever this machine's egress is. The runtime base
#                           (debian:…-slim) does not get them.
#
# They are labelled kbq.stand-in=true. An image already in the storage is kept (remove it with
# `podman rmi NAME` to rebuild). Any other base image name fails: there is no recipe for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "stand-ins: $*" >&2; exit 1; }

dockerfile=${1:-Dockerfile}
work=$(mktemp -d "${TMPDIR:-/tmp}/kbq-stand-ins.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The apt mirror of this machine for SUITE (its sources list, not a name written here).
mirror() {
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Identifier: Packages' |
    awk -v suite="$1" '$2 == suite { print $1; exit }'
}

# rootfs SUITE DIR [PACKAGE,...]: a minbase Debian system in DIR.
rootfs() {
  local suite=$1 dir=$2 include=${3:-}
  local uri
  uri=$(mirror "$suite")
  [[ -n "$uri" ]] || fail "no apt source for $suite on this machine (apt-get indextargets)"
  echo "stand-ins: debootstrap $suite${include:+ with $include}" >&2
  debootstrap --variant=minbase ${include:+--include="$include"} "$suite" "$dir" "$uri" \
    >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    fail "debootstrap $suite failed"
  }
  # As in the official images: no package caches, apt lists fetched by `apt-get update`.
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
}

# import DIR NAME CHANGE...: the folder as image NAME (a full reference) with Dockerfile changes.
import() {
  local dir=$1 name=$2
  shift 2
  local changes=(--change "LABEL kbq.stand-in=true")
  for c in "$@"; do changes+=(--change "$c"); done
  tar -C "$dir" -c . | podman import --quiet "${changes[@]}" - "$name" >/dev/null
  echo "stand-ins: built $name" >&2
}

have() { podman image exists "$1"; }

while read -r base; do
  # FROM rust:1.95-bookworm means docker.io/library/rust:1.95-bookworm.
  full="docker.io/library/$base"
  if have "$full"; then
    echo "stand-ins: $full present" >&2
    continue
  fi
  case "$base" in
    debian:*-slim)
      suite=${base#debian:}
      suite=${suite%-slim}
      rootfs "$suite" "$work/slim"
      import "$work/slim" "$full" 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' 'CMD ["bash"]'
      rm -rf "$work/slim"
      ;;
    rust:*-*)
      tag=${base#rust:}
      version=${tag%-*}
      suite=${tag##*-}
      host=$(rustc --version | awk '{print $2}')
      [[ "$host" == "$version" || "$host" == "$version".* ]] \
        || fail "$base needs Rust $version; this machine's rustc is $host"
      sysroot=$(rustc --print sysroot)
      rootfs "$suite" "$work/rust" \
        ca-certificates,curl,git,gcc,g++,libc6-dev,make,patch,xz-utils,zlib1g-dev,file,netbase
      if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$work/rust/usr/local/share/ca-certificates/"
        chroot "$work/rust" update-ca-certificates >/dev/null
      fi
      toolchain="$work/rust/usr/local/rustup/toolchains/$host-x86_64-unknown-linux-gnu"
      mkdir -p "$toolchain" "$work/rust/usr/local/cargo/bin"
      # The toolchain without its documentation (share/): bin, lib, libexec, etc.
      for part in bin lib libexec etc; do
        [[ -e "$sysroot/$part" ]] && cp -a "$sysroot/$part" "$toolchain/"
      done
      for command in cargo rustc rustdoc; do
        ln -s "../../rustup/toolchains/$host-x86_64-unknown-linux-gnu/bin/$command" \
          "$work/rust/usr/local/cargo/bin/$command"
      done
      import "$work/rust" "$full" \
        'ENV RUSTUP_HOME=/usr/local/rustup' 'ENV CARGO_HOME=/usr/local/cargo' \
        "ENV RUST_VERSION=$host" \
        'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        'CMD ["bash"]'
      rm -rf "$work/rust"
      ;;
    *) fail "no stand-in recipe for the base image $base" ;;
  esac
done < <(awk 'toupper($1) == "FROM" { print $2 }' "$dockerfile" | grep -v '^--' | sort -u)
