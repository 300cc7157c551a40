//! What several of the transcoder's test modules share.

pub mod case;
pub mod differential;
pub mod proto_case;
pub mod proto_json;
pub mod python;
