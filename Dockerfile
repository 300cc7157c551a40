# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run as a non-root user in a distroless image
# with CA certificates (TLS to Kafka and Google) and the OpenSSL runtime librdkafka links.
FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY src ./src
COPY benches ./benches
# `--no-default-features`: the production binary, without the `dev-tools` feature, so without the
# `quickstart` and `emulator` subcommands and without the emulator itself
# (scripts/test.d/dockerfile.sh checks it).
# Cache mounts (BuildKit and buildah): the downloaded crates and the target folder outlive the
# build, so a rebuild compiles only what changed. The target folder is then not part of the
# stage's filesystem: the binary is copied out of it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --bin kafka-bigquery-sink \
    && strip target/release/kafka-bigquery-sink \
    && cp target/release/kafka-bigquery-sink /usr/local/bin/kafka-bigquery-sink

# The runtime stage has no shell and no package manager: distroless `cc` (Debian 12, the build
# stage's release) holds glibc, libgcc, libssl3 and CA certificates (TLS to Kafka and Google) and
# a `nonroot` user 65532, which is all the binary loads (scripts/test.d/dockerfile.sh checks it).
# Pinned by tag, not digest: this repository is maintained without access to an image
# registry, so no digest could be read and verified here, and an unverified one is worse than
# none. Pin both stages by digest where you build: `FROM image:tag@sha256:<digest>`.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/kafka-bigquery-sink /usr/local/bin/kafka-bigquery-sink
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/kafka-bigquery-sink"]
CMD ["run", "-c", "/etc/kafka-bigquery-sink/config.yaml"]
