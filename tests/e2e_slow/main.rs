//! The daemon's slow tests, one binary beside `e2e`: replicas joining, leaving and killed while
//! a producer produces (`sink_chaos`, `sink_random_kills`), and many partitions on the
//! emulator's quotas (`sink_scale`). Each module is a former test file under its old name
//! (`cargo test --test e2e_slow sink_chaos::`); they share `tests/support/` with `e2e`.

#[path = "../support/mod.rs"]
mod support;

mod sink_chaos;
mod sink_random_kills;
mod sink_scale;
