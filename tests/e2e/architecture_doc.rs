//! docs/architecture.md draws the crate graph and the module map; this test holds them to the
//! code, so a crate dependency added, a file moved or a room split without its map entry fails
//! here instead of leaving the document behind.
//!
//! - "Crates": each crate's row lists its direct normal dependencies, which must be exactly what
//!   `cargo metadata` says the crate's manifest declares.
//! - "Module map": every path a table names in its first column exists, and every source file
//!   of the five crates is named there (itself, or a folder that holds it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md")
}

/// The lines of the section that starts with `heading`, up to the next heading of any level.
fn section<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = doc.lines().skip_while(|l| *l != heading);
    assert!(
        lines.next().is_some(),
        "docs/architecture.md has no `{heading}`"
    );
    lines.take_while(|l| !l.starts_with('#')).collect()
}

/// The cells of a table row, or `None` for a line that is not a body row.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.strip_prefix('|')?.strip_suffix('|')?;
    let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
    if cells
        .iter()
        .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
    {
        return None;
    }
    Some(cells)
}

/// Every `code span` of a cell.
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one brace group at most, as the map writes them).
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|part| format!("{}{}{}", &path[..open], part, &path[close + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

#[test]
fn the_crate_table_lists_each_crates_direct_dependencies() {
    let doc = architecture();
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let mut documented = BTreeSet::new();
    for line in section(&doc, "## Crates") {
        let Some(cells) = cells(line) else { continue };
        if cells.len() != 3 || cells[0] == "crate" {
            continue;
        }
        let name = *spans(cells[0]).first().expect("a crate named in code");
        let listed: BTreeSet<&str> = spans(cells[2]).into_iter().collect();
        let package = packages
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| {
                panic!("the crate table names `{name}`, which is not in the workspace")
            });
        let declared: BTreeSet<&str> = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().expect("a name"))
            .collect();
        assert_eq!(
            listed, declared,
            "docs/architecture.md \"Crates\", row `{name}`: the direct dependencies listed \
             (left) are not the manifest's (right)"
        );
        documented.insert(name.to_string());
    }
    let members: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("a name").to_string())
        .collect();
    assert_eq!(documented, members, "every workspace crate has its row");
}

/// The source files below `dir`, relative to it, with `/` separators.
fn sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a readable source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(dir).expect("below dir");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_module_map_names_every_source_file_and_nothing_that_is_gone() {
    let doc = architecture();
    let map = section(&doc, "## Module map");
    // Each table of the map follows a paragraph that names its folder first, in code.
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_table = false;
    let mut base = None::<String>;
    for line in &map {
        if line.starts_with('|') {
            if !in_table {
                let dir = base
                    .take()
                    .expect("a folder named before each table of the map");
                tables.push((dir, Vec::new()));
                in_table = true;
            }
            let Some(cells) = cells(line) else { continue };
            if cells[0] == "path" {
                continue;
            }
            let entry = tables.last_mut().expect("opened above");
            entry.1.extend(spans(cells[0]).into_iter().flat_map(expand));
        } else {
            in_table = false;
            if let Some(dir) = spans(line)
                .into_iter()
                .find(|s| s.ends_with("src/") && !s.starts_with(".."))
                .filter(|_| base.is_none())
            {
                base = Some(dir.to_string());
            }
        }
    }
    let dirs: Vec<&str> = tables.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(
        dirs,
        [
            "crates/kbq-core/src/",
            "crates/kbq-transcode/src/",
            "crates/kbq-emulator/src/",
            "crates/kbq-sim/src/",
            "src/"
        ],
        "the map has one table per crate"
    );
    let mut problems = Vec::new();
    for (dir, paths) in &tables {
        let base = root().join(dir);
        let named: Vec<&String> = paths.iter().filter(|p| !p.starts_with("../")).collect();
        for path in &named {
            if !base.join(path.as_str()).exists() {
                problems.push(format!("{dir}{path}: named in the map, not in the code"));
            }
        }
        for file in sources(&base) {
            let covered = named
                .iter()
                .any(|p| **p == file || (p.ends_with('/') && file.starts_with(p.as_str())));
            if !covered {
                problems.push(format!("{dir}{file}: in the code, not in the map"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md \"Module map\" and the code disagree:\n{}",
        problems.join("\n")
    );
}

/// The crates the daemon depends on, as Rust names: `[dependencies]` of the root manifest.
fn dependency_crates() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim()))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(|name| name.replace('-', "_"))
        .collect()
}

/// A type is named where it lives (docs/architecture.md, "Module map"): no file of the daemon
/// re-exports another crate or one of its items, so `kbq_core::model::TopicPartition` is never
/// also `crate::checkpoint::protocol::TopicPartition`.
#[test]
fn no_source_file_of_the_daemon_re_exports_a_crate() {
    let crates = dependency_crates();
    assert!(crates.iter().any(|c| c == "kbq_core"), "{crates:?}");
    let mut found = Vec::new();
    for file in sources(&root().join("src")) {
        let text = std::fs::read_to_string(root().join("src").join(&file)).expect("a source file");
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_start();
            let Some(path) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|p| line.strip_prefix(p))
            else {
                continue;
            };
            let first = path
                .trim_start_matches("::")
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            if crates.iter().any(|c| c == first) {
                found.push(format!("src/{file}:{}: {line}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "import these from their crate instead of re-exporting them:\n{}",
        found.join("\n")
    );
}
