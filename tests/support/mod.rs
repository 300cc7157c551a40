//! Shared harness of the daemon's tests: both test binaries (`tests/e2e/`, `tests/e2e_slow/`)
//! include it with `#[path = "../support/mod.rs"] mod support;`. Not every binary uses every
//! helper, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod acls;
pub mod cdc;
pub mod daemon;
pub mod exposition;
pub mod kafka;
pub mod python;
pub mod registry;
pub mod sink;
pub mod token_server;
