//! The work budget of every schema compiler. A schema names a type once and may use it many
//! times; a plan (and a derived table) is a tree, so each use is expanded again, and a few KB
//! of schema can describe more nodes than memory holds (16 levels of a record with 4 fields of
//! the next one are 4^16 nodes). Every compiler charges what it builds here and stops with
//! [`TooComplex`] when the budget is spent, so compilation is bounded in time and memory
//! whatever the schema says. The limits are documented in `docs/operations.md` (hostile input).

/// The most nodes one plan may hold: ops (one per field, union branch, array, map, skipped
/// value, JSON-text node) and descriptor fields. A schema of 20,000 fields used once needs about
/// 40,000; at this limit a plan holds well under 100 MiB.
pub const MAX_PLAN_NODES: usize = 1_000_000;

/// The most bytes of names and enum symbols one plan may copy (an enum is copied at each use).
pub const MAX_PLAN_BYTES: usize = 64 << 20;

/// The most columns a derived table may have, nested columns included: BigQuery's own limit of
/// 10,000 columns per table, so a larger derivation could never be created anyway.
pub const MAX_DERIVED_COLUMNS: usize = 10_000;

/// The most schema nodes one JSON Schema shape may merge (`allOf` branches and `$ref` hops
/// each count), per compilation: a shape is read once per property, and `allOf` of `$ref`s
/// doubles the work at each level.
pub const MAX_JSON_SCHEMA_STEPS: usize = 1_000_000;

/// A schema whose expansion exceeds a budget: refused, never compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "schema too complex: it expands to more than {limit} {what} (named types and references are expanded at each use)"
)]
pub struct TooComplex {
    pub what: &'static str,
    pub limit: usize,
}

/// What one compilation may still build.
#[derive(Debug)]
pub(crate) struct Budget {
    what: &'static str,
    limit: usize,
    left: usize,
    bytes_left: usize,
}

impl Budget {
    /// The budget of one plan.
    pub(crate) fn plan() -> Budget {
        Budget::new("plan nodes", MAX_PLAN_NODES)
    }

    /// The budget of one table derivation.
    pub(crate) fn derive() -> Budget {
        Budget::new("columns", MAX_DERIVED_COLUMNS)
    }

    /// The budget of the JSON Schema merges of one compilation.
    pub(crate) fn json_schema() -> Budget {
        Budget::new("json schema nodes", MAX_JSON_SCHEMA_STEPS)
    }

    pub(crate) fn new(what: &'static str, limit: usize) -> Budget {
        Budget {
            what,
            limit,
            left: limit,
            bytes_left: MAX_PLAN_BYTES,
        }
    }

    /// Charges `n` nodes.
    pub(crate) fn nodes(&mut self, n: usize) -> Result<(), TooComplex> {
        match self.left.checked_sub(n) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(TooComplex {
                what: self.what,
                limit: self.limit,
            }),
        }
    }

    /// Charges one node.
    pub(crate) fn node(&mut self) -> Result<(), TooComplex> {
        self.nodes(1)
    }

    /// Charges `n` bytes of names or symbols copied into the result.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<(), TooComplex> {
        match self.bytes_left.checked_sub(n) {
            Some(left) => {
                self.bytes_left = left;
                Ok(())
            }
            None => Err(TooComplex {
                what: "bytes of names and enum symbols",
                limit: MAX_PLAN_BYTES,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_refuses_the_first_charge_past_its_limit() {
        let mut b = Budget::new("things", 3);
        assert!(b.nodes(2).is_ok());
        assert!(b.node().is_ok());
        let err = b.node().unwrap_err();
        assert_eq!(err.limit, 3);
        assert!(err.to_string().contains("more than 3 things"), "{err}");
        assert!(b.bytes(MAX_PLAN_BYTES).is_ok());
        assert!(b.bytes(1).is_err());
    }
}
