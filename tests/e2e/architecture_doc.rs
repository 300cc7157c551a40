//! docs/architecture.md draws the crate graph and the module map; this test holds them to the
//! code, so a crate dependency added, a file moved or a room split without its map entry fails
//! here instead of leaving the document behind.
//!
//! - "Crates": each crate's row lists its direct normal dependencies, which must be exactly what
//!   `cargo metadata` says the crate's manifest declares.
//! - "Module map": every path a table names in its first column exists, and every source file
//!   of the five crates is named there (itself, or a folder that holds it).
//! - "Long functions kept": every function of the production code over 80 lines has its row,
//!   every row names such a function, and its figure is within 10 lines of the count.

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

/// The longest a function of production code is without a row in "Long functions kept".
const LONG_FUNCTION: usize = 80;
/// How far a row's figure may drift from the function's counted length before the row is stale:
/// room for the small edits of a day's work, not for a function that doubled.
const LONG_FUNCTION_DRIFT: usize = 10;

/// `text` with comments, string literals and char literals blanked (newlines kept), so that
/// every brace left is a brace of the code.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        let next = b.get(i + 1).copied();
        let end = match b[i] {
            b'/' if next == Some(b'/') => b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p),
            b'/' if next == Some(b'*') => {
                let (mut j, mut depth) = (i, 0);
                while j < b.len() {
                    if b[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if b[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                j
            }
            b'r' | b'b' if !ident(i) && matches!(next, Some(b'"' | b'#' | b'r')) => {
                // r"…", r#"…"#, br"…", b"…"
                let mut j = i + 1;
                if b[i] == b'b' && next == Some(b'r') {
                    j += 1;
                }
                let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
                j += hashes;
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                if hashes == 0 && !(b[i] == b'r' || next == Some(b'r')) {
                    // b"…": escapes as in a plain string.
                    string_end(b, j)
                } else {
                    let close: Vec<u8> = std::iter::once(b'"')
                        .chain(std::iter::repeat_n(b'#', hashes))
                        .collect();
                    b[j + 1..]
                        .windows(close.len())
                        .position(|w| w == close)
                        .map_or(b.len(), |p| j + 1 + p + close.len())
                }
            }
            b'"' => string_end(b, i),
            b'\'' => match char_literal_len(&text[i..]) {
                Some(n) => i + n,
                None => {
                    i += 1;
                    continue;
                }
            },
            _ => {
                i += 1;
                continue;
            }
        };
        blank(&mut out, i, end);
        i = end.max(i + 1);
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 boundaries")
}

/// The index just past the string literal whose opening quote is at `open`.
fn string_end(b: &[u8], open: usize) -> usize {
    let mut j = open + 1;
    while j < b.len() && b[j] != b'"' {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    j + 1
}

/// The length of the char literal `s` starts with (`'x'`, `'\n'`, `'\u{7f}'`), or `None` for a
/// lifetime or a label.
fn char_literal_len(s: &str) -> Option<usize> {
    let rest = &s[1..];
    if let Some(escaped) = rest.strip_prefix('\\') {
        return escaped.find('\'').map(|p| p + 3);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..]
        .starts_with('\'')
        .then(|| 2 + c.len_utf8())
}

/// The name of the function a line declares, if it does.
fn declared_fn(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for _ in 0..4 {
        for word in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
            "extern \"C\" ",
        ] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// The functions of one file longer than `over` lines, counted from the line of `fn` to the line
/// of the closing brace: `(name, lines)`. Items under `#[cfg(test)]` or `#[test]` are skipped,
/// and so is a file that opens with `#![cfg(test)]`. A nested function is counted on its own
/// and inside its parent.
fn long_functions(text: &str, over: usize) -> Vec<(String, usize)> {
    if text.lines().any(|l| l.trim() == "#![cfg(test)]") {
        return Vec::new();
    }
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let test_item = matches!(lines[i].trim(), "#[cfg(test)]" | "#[test]");
        let name = declared_fn(lines[i]);
        if test_item || name.is_some() {
            let end = item_end(&lines, i);
            if test_item {
                i = end + 1;
                continue;
            }
            let n = end - i + 1;
            if n > over {
                out.push((name.expect("a function").to_string(), n));
            }
        }
        i += 1;
    }
    out
}

/// The line of the brace that closes the item starting at line `start`; for an item without a
/// body (`mod tests;`, a trait's `fn f();`) the line of its `;`; for an attribute on a field or an
/// expression, the line where the enclosing braces close.
fn item_end(lines: &[&str], start: usize) -> usize {
    let (mut braces, mut brackets) = (0i32, 0i32);
    for (j, line) in lines.iter().enumerate().skip(start) {
        for c in line.bytes() {
            match c {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces <= 0 {
                        return j;
                    }
                }
                b'(' | b'[' => brackets += 1,
                b')' | b']' => brackets -= 1,
                b';' if braces == 0 && brackets == 0 => return j,
                _ => {}
            }
        }
    }
    lines.len()
}

/// The production code: every `.rs` file under `src/` and each crate's `src/`, except the
/// test-only crate `kbq-sim`, test files (`tests.rs`, `*_tests.rs`) and the emulator's test
/// fixture (`testsuite.rs`).
fn production_files() -> Vec<String> {
    let mut dirs = vec!["src/".to_string()];
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let name = entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        if name != "kbq-sim" {
            dirs.push(format!("crates/{name}/src/"));
        }
    }
    let mut out = Vec::new();
    for dir in dirs {
        for file in sources(&root().join(&dir)) {
            let name = file.rsplit('/').next().expect("a file name");
            if name != "tests.rs" && !name.ends_with("_tests.rs") && name != "testsuite.rs" {
                out.push(format!("{dir}{file}"));
            }
        }
    }
    out
}

/// "Long functions kept" lists every function of the production code over 80 lines
/// ([`long_functions`] counts them), one row each (`path` `name`, lines, why); a row's figure may
/// be off by up to 10 lines, so the table need not follow every small edit.
#[test]
fn the_long_functions_table_lists_every_function_over_80_lines() {
    let doc = architecture();
    let mut listed: Vec<(String, String, usize)> = Vec::new();
    for line in section(&doc, "### Long functions kept") {
        let Some(cells) = cells(line) else { continue };
        if cells.len() != 3 || cells[0] == "function" {
            continue;
        }
        let named = spans(cells[0]);
        let [path, name] = named[..] else {
            panic!("a row names `path` `function`: {line}");
        };
        let lines = cells[1]
            .parse()
            .unwrap_or_else(|_| panic!("a line count: {line}"));
        listed.push((path.to_string(), name.to_string(), lines));
    }
    let mut counted = Vec::new();
    for file in production_files() {
        let text = std::fs::read_to_string(root().join(&file)).expect("a source file");
        for (name, lines) in long_functions(&text, LONG_FUNCTION) {
            counted.push((file.clone(), name, lines));
        }
    }
    let mut problems = Vec::new();
    for (file, name, lines) in &counted {
        match listed.iter().find(|(p, n, _)| p == file && n == name) {
            None => problems.push(format!(
                "not listed: | `{file}` `{name}` | {lines} | (why it stays long) |"
            )),
            Some((_, _, figure)) if figure.abs_diff(*lines) > LONG_FUNCTION_DRIFT => problems.push(
                format!("`{file}` `{name}`: listed at {figure} lines, now {lines}"),
            ),
            Some(_) => {}
        }
    }
    for (path, name, figure) in &listed {
        if !counted.iter().any(|(p, n, _)| p == path && n == name) {
            problems.push(format!(
                "`{path}` `{name}` (listed at {figure}): no such function over {LONG_FUNCTION} lines"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md \"Long functions kept\" and the code disagree (shorten the function, \
         or list it with why):\n{}",
        problems.join("\n")
    );
}
