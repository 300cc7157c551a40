//! Shared harness of the integration tests: each test binary includes it with `mod support;`.
//! Not every binary uses every helper, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod acls;
pub mod cdc;
pub mod daemon;
pub mod kafka;
pub mod python;
pub mod registry;
pub mod sink;
pub mod token_server;
