//! The Python interpreter the oracle tests run (fastavro's and Confluent's code, never ours):
//! `KBQ_PYTHON`, else the repository's `.venv/bin/python` made by `scripts/venv.sh`.
//!
//! A missing interpreter fails the test: an oracle test that passes without its oracle proves
//! nothing. Only `KBQ_SKIP_PYTHON=1` (set by `scripts/test.sh --quick`, which builds no venv)
//! turns the failure into a printed skip.

use std::path::{Path, PathBuf};

/// The repository's root: the vector generators live in its `tests/python`, the venv beside it.
pub fn repository() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KBQ_PYTHON") {
        return Some(p.into());
    }
    let venv = repository().join(".venv/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    if std::env::var("KBQ_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("skipped: KBQ_SKIP_PYTHON=1 and no .venv");
        return None;
    }
    panic!(
        "the Python oracle is missing: run scripts/venv.sh (or set KBQ_PYTHON); \
         KBQ_SKIP_PYTHON=1 skips the tests that need it"
    );
}
