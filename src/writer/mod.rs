//! Per-partition writer actors: decode, transcode, batch, AppendRows with explicit offsets.

pub mod append_session;
pub mod partition_writer;
pub mod stream_quota;
