//! Generates the BigQueryWrite gRPC *server* stubs for the emulator over the message types of
//! `googleapis-tonic-google-cloud-bigquery-storage-v1` (no hand-copied protos, no protoc).

const BQ: &str =
    "googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1";

fn method(
    name: &str,
    route: &str,
    input: &str,
    output: &str,
) -> tonic_build::manual::MethodBuilder {
    tonic_build::manual::Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("{BQ}::{input}"))
        .output_type(format!("{BQ}::{output}"))
        .codec_path("tonic_prost::ProstCodec")
}

fn main() {
    let service = tonic_build::manual::Service::builder()
        .name("BigQueryWrite")
        .package("google.cloud.bigquery.storage.v1")
        .method(
            method(
                "create_write_stream",
                "CreateWriteStream",
                "CreateWriteStreamRequest",
                "WriteStream",
            )
            .build(),
        )
        .method(
            method(
                "append_rows",
                "AppendRows",
                "AppendRowsRequest",
                "AppendRowsResponse",
            )
            .client_streaming()
            .server_streaming()
            .build(),
        )
        .method(
            method(
                "get_write_stream",
                "GetWriteStream",
                "GetWriteStreamRequest",
                "WriteStream",
            )
            .build(),
        )
        .method(
            method(
                "finalize_write_stream",
                "FinalizeWriteStream",
                "FinalizeWriteStreamRequest",
                "FinalizeWriteStreamResponse",
            )
            .build(),
        )
        .method(
            method(
                "batch_commit_write_streams",
                "BatchCommitWriteStreams",
                "BatchCommitWriteStreamsRequest",
                "BatchCommitWriteStreamsResponse",
            )
            .build(),
        )
        .method(
            method(
                "flush_rows",
                "FlushRows",
                "FlushRowsRequest",
                "FlushRowsResponse",
            )
            .build(),
        )
        .build();
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[service]);
    println!("cargo:rerun-if-changed=build.rs");
}
