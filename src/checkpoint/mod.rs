//! The two-phase checkpoint: the pure protocol state machine and the coordinator that drives it.
