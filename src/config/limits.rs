//! Hard limits the validation checks against.

use super::ByteSize;

/// No AppendRows request may be larger than this (BigQuery's own limit is 10 MB on many
/// projects and never above this).
pub const MAX_REQUEST_BYTES: ByteSize = ByteSize(20 * 1024 * 1024);
pub const MIN_REQUEST_BYTES: ByteSize = ByteSize(64 * 1024);
/// The bounds of `schema_registry.max_response_bytes`: room for a small schema at least, and no
/// more than a replica's memory could hold for one answer.
pub const MIN_REGISTRY_RESPONSE_BYTES: ByteSize = ByteSize(64 * 1024);
pub const MAX_REGISTRY_RESPONSE_BYTES: ByteSize = ByteSize(1024 * 1024 * 1024);
/// BigQuery allows at most four clustering columns.
pub const MAX_CLUSTERING_FIELDS: usize = 4;
/// The longest table id BigQuery accepts.
pub const MAX_TABLE_ID_BYTES: usize = 1024;
/// The longest dataset id BigQuery accepts.
pub const MAX_DATASET_ID_BYTES: usize = 1024;
/// The longest project id Google Cloud accepts (without its `domain:` prefix).
pub const MAX_PROJECT_ID_CHARS: usize = 30;
