//! Per-partition writer actors: decode, transcode, batch, AppendRows with explicit offsets.
//!
//! `admission`, `batch` and `prefix` are pure (no tokio, no I/O): the rules of the hot path,
//! unit-tested on their own. `partition_writer` is the async shell that applies them,
//! `append_session` one AppendRows session, `stream_quota` the CreateWriteStream rate limit,
//! `plan_source` the port through which `tables/` gives a writer its plans, `change_step` what a
//! CDC record becomes once its plan is found (pure, shared with `check`'s dry run).

pub mod admission;
pub mod append_session;
pub mod batch;
pub mod change_source;
pub mod change_step;
pub mod partition_writer;
pub mod plan_source;
pub mod prefix;
pub mod stream_quota;
