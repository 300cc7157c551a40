//! The AppendRows call with its own codec: each request is encoded straight into the buffer the
//! transport sends, reserved once at the request's exact encoded size.
//!
//! The generated client's codec lets prost grow tonic's send buffer as it writes, starting from
//! 8 KiB: a request of several MiB is then copied at every doubling, each time into fresh pages,
//! and the sink's profile showed those copies and page faults among its largest costs
//! (BENCHMARKS.md, "Where the time goes"). The bytes on the wire are the same.

use bytes::{BufMut, BytesMut};
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    AppendRowsRequest, AppendRowsResponse,
};
use prost::Message;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder, Streaming};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{GrpcMethod, IntoStreamingRequest, Response, Status};

const SERVICE: &str = "google.cloud.bigquery.storage.v1.BigQueryWrite";
const PATH: &str = "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows";

/// Opens an AppendRows call on `channel`, as the generated client does, with [`AppendCodec`].
pub(super) async fn append_rows(
    channel: Channel,
    request: impl IntoStreamingRequest<Message = AppendRowsRequest>,
    max_request_bytes: usize,
    max_response_bytes: usize,
) -> Result<Response<Streaming<AppendRowsResponse>>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_encoding_message_size(max_request_bytes)
        .max_decoding_message_size(max_response_bytes);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("service was not ready: {e}")))?;
    let mut request = request.into_streaming_request();
    (request.extensions_mut()).insert(GrpcMethod::new(SERVICE, "AppendRows"));
    grpc.streaming(request, PathAndQuery::from_static(PATH), AppendCodec)
        .await
}

/// Requests encoded by [`encode_reserved`], responses decoded by prost.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AppendCodec;

impl Codec for AppendCodec {
    type Encode = AppendRowsRequest;
    type Decode = AppendRowsResponse;
    type Encoder = AppendEncoder;
    type Decoder =
        <tonic_prost::ProstCodec<AppendRowsRequest, AppendRowsResponse> as Codec>::Decoder;

    fn encoder(&mut self) -> AppendEncoder {
        AppendEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstCodec::<AppendRowsRequest, AppendRowsResponse>::raw_decoder(
            BufferSettings::default(),
        )
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AppendEncoder;

impl Encoder for AppendEncoder {
    type Item = AppendRowsRequest;
    type Error = Status;

    fn encode(&mut self, item: AppendRowsRequest, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        encode_reserved(&item, buf)
    }
}

/// A buffer that can be grown to take `additional` more bytes at once.
pub(super) trait Reserve: BufMut {
    fn reserve_bytes(&mut self, additional: usize);
}

impl Reserve for EncodeBuf<'_> {
    fn reserve_bytes(&mut self, additional: usize) {
        self.reserve(additional);
    }
}

impl Reserve for BytesMut {
    fn reserve_bytes(&mut self, additional: usize) {
        self.reserve(additional);
    }
}

/// Encodes `request` at the end of `buf` after reserving its exact size: one allocation, no
/// copy of what was already written.
pub(super) fn encode_reserved(
    request: &AppendRowsRequest,
    buf: &mut impl Reserve,
) -> Result<(), Status> {
    buf.reserve_bytes(request.encoded_len());
    request
        .encode(buf)
        .map_err(|e| Status::internal(format!("cannot encode an append request: {e}")))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
        ProtoRows, append_rows_request::ProtoData, append_rows_request::Rows,
    };

    use super::*;

    fn request(rows: usize, row_len: usize) -> AppendRowsRequest {
        AppendRowsRequest {
            write_stream: "projects/p/datasets/d/tables/t/streams/s".into(),
            offset: Some(7),
            rows: Some(Rows::ProtoRows(ProtoData {
                writer_schema: None,
                rows: Some(ProtoRows {
                    serialized_rows: (0..rows)
                        .map(|i| Bytes::from(vec![i as u8; row_len]))
                        .collect(),
                }),
            })),
            ..Default::default()
        }
    }

    #[test]
    fn the_bytes_are_prosts_and_the_buffer_is_allocated_once() {
        let req = request(2_000, 1_000);
        // a send buffer as tonic leaves it: a small allocation holding the frame header
        let mut buf = BytesMut::with_capacity(8 << 10);
        buf.put_slice(&[0u8; 5]);
        encode_reserved(&req, &mut buf).unwrap();
        assert_eq!(&buf[5..], &req.encode_to_vec()[..]);
        // grown once, to the exact size: growing as prost writes would have doubled past it
        assert_eq!(buf.capacity(), 5 + req.encoded_len());
    }
}
