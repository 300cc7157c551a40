//! Tables: which table each topic is written to, the plans that turn its records into rows of
//! that table, and the table's schema as it evolves. A topic's route is resolved once (the table
//! read or created) and kept; plans are compiled once per writer schema; new writer schemas may
//! add columns. The writer only sees the [`PlanSource`](crate::writer::partition_writer::PlanSource)
//! port this module implements.

mod absent_fields;
pub mod cdc;
pub mod cdc_plans;
mod connect_schemas;
mod ensure;
mod envelope_table;
pub mod evolution;
pub mod key_plans;
pub mod plans;
pub mod router;
mod settings;

pub use router::{ResolveColumns, Route, Router};
