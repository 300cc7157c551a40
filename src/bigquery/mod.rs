//! The daemon's side of BigQuery: table schemas (REST JSON shape), and later the REST client and
//! the Storage Write API client (AppendRows connections, FlushRows, FinalizeWriteStream).

pub mod table_schema;
