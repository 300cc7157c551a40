//! The Python interpreter the oracle tests run (Google's, Confluent's and fastavro's code, never
//! ours): `KBQ_PYTHON`, else the repository's `.venv/bin/python` made by `scripts/venv.sh`.
//!
//! A missing interpreter fails the test: an oracle test that passes without its oracle proves
//! nothing. Only `KBQ_SKIP_PYTHON=1` (set by `scripts/test.sh --quick`, which builds no venv)
//! turns the failure into a printed skip.

use std::path::PathBuf;

pub fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KBQ_PYTHON") {
        return Some(p.into());
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
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
