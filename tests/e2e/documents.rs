//! The user documents held to the code and to each other.
//!
//! - docs/configuration.md documents every field of the config file, and nothing else: the
//!   fields are read from the structs themselves (their source parsed with `syn`, walked from
//!   `Config` with serde's names), not from a list kept by hand. A field added without its row,
//!   or a row left behind by a field removed or renamed, fails here.
//! - Every relative link of README.md, BENCHMARKS.md and docs/*.md names a file that exists and,
//!   into a Markdown file, a heading it has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One field of a config struct: its name in the YAML file and its Rust type.
struct Field {
    name: String,
    ty: syn::Type,
}

/// The `#[serde(...)]` settings this walk honours. Anything that would change the file's shape
/// in a way the walk does not model (`flatten`, `rename_all` to another case, `alias`) fails the
/// test, so that the walk is taught it rather than silently wrong.
fn serde_name(field: &syn::Field, file: &Path) -> Option<String> {
    let mut name = field.ident.as_ref()?.to_string();
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            match key.as_str() {
                "rename" => name = meta.value()?.parse::<syn::LitStr>()?.value(),
                "default" | "deserialize_with" | "with" => {
                    if meta.input.peek(syn::Token![=]) {
                        meta.value()?.parse::<syn::LitStr>()?;
                    }
                }
                "skip" | "skip_deserializing" => name.clear(),
                other => panic!(
                    "{}: field `{name}` has #[serde({other})], which this test does not model",
                    file.display()
                ),
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    (!name.is_empty()).then_some(name)
}

/// Every struct of the crates the config reads types from that derives `Deserialize`, by name
/// (a name may be defined more than once: `fields_of` picks the config module's).
fn deserialize_structs() -> BTreeMap<String, Vec<(PathBuf, syn::ItemStruct)>> {
    let mut files = Vec::new();
    for dir in ["src", "crates/kbq-core/src", "crates/kbq-transcode/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut structs: BTreeMap<String, Vec<(PathBuf, syn::ItemStruct)>> = BTreeMap::new();
    for file in files {
        let ast =
            syn::parse_file(&read(&file)).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut items: Vec<syn::Item> = ast.items;
        while let Some(item) = items.pop() {
            match item {
                syn::Item::Mod(m) => items.extend(m.content.into_iter().flat_map(|(_, i)| i)),
                syn::Item::Struct(s) if derives_deserialize(&s.attrs) => structs
                    .entry(s.ident.to_string())
                    .or_default()
                    .push((file.clone(), s)),
                _ => {}
            }
        }
    }
    structs
}

/// The fields of the struct `name` as the YAML file names them, or `None` when no struct of
/// that name derives `Deserialize` (the type is a value: an enum, a string, a map).
fn fields_of(
    structs: &BTreeMap<String, Vec<(PathBuf, syn::ItemStruct)>>,
    name: &str,
) -> Option<Vec<Field>> {
    let all = structs.get(name)?;
    // A name the config module defines is its own type; another crate's only when unique.
    let config_dir = root().join("src/config");
    let in_config: Vec<_> = all
        .iter()
        .filter(|(f, _)| f.starts_with(&config_dir))
        .collect();
    let defined = if in_config.is_empty() {
        all.iter().collect()
    } else {
        in_config
    };
    assert!(
        defined.len() == 1,
        "several structs named {name} derive Deserialize ({:?}); the walk names types by their \
         last segment",
        defined.iter().map(|(f, _)| f).collect::<Vec<_>>()
    );
    let (file, s) = &defined[0];
    for attr in s.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let text = list_tokens(attr);
        assert!(
            !text.contains("rename_all") && !text.contains("flatten"),
            "{}: struct {name} has #[serde({text})], which this test does not model",
            file.display()
        );
    }
    Some(
        s.fields
            .iter()
            .filter_map(|f| {
                serde_name(f, file).map(|name| Field {
                    name,
                    ty: f.ty.clone(),
                })
            })
            .collect(),
    )
}

/// The tokens inside `#[name(...)]`, as text.
fn list_tokens(attr: &syn::Attribute) -> String {
    match &attr.meta {
        syn::Meta::List(list) => list.tokens.to_string(),
        syn::Meta::Path(_) | syn::Meta::NameValue(_) => String::new(),
    }
}

fn derives_deserialize(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("derive")
            && list_tokens(a)
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|t| t == "Deserialize")
    })
}

/// The last path segment of a type and its first generic argument, if any.
fn segment(ty: &syn::Type) -> Option<(String, Option<&syn::Type>)> {
    let syn::Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    let arg = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    };
    Some((last.ident.to_string(), arg))
}

/// Every path of the config file: `kafka.topics`, `routes[].cdc.mode`. Each maps to the struct
/// it holds (for a section) or `None` (a value).
fn walk(
    structs: &BTreeMap<String, Vec<(PathBuf, syn::ItemStruct)>>,
    name: &str,
    prefix: &str,
    out: &mut BTreeMap<String, Option<String>>,
) {
    let is_section = |ty: &syn::Type| {
        segment(ty).is_some_and(|(n, _)| fields_of(structs, &n).is_some_and(|f| !f.is_empty()))
    };
    for field in fields_of(structs, name).expect("a struct") {
        let mut path = format!("{prefix}{}", field.name);
        let mut ty = &field.ty;
        while let Some((outer, Some(inner))) = segment(ty) {
            match outer.as_str() {
                "Option" | "Box" => ty = inner,
                "Vec" if is_section(inner) => {
                    path.push_str("[]");
                    ty = inner;
                }
                _ => break,
            }
        }
        if is_section(ty) {
            let n = segment(ty).expect("a path type").0;
            out.insert(path.clone(), Some(n.clone()));
            walk(structs, &n, &format!("{path}."), out);
        } else {
            out.insert(path, None);
        }
    }
}

/// Every `code span` of the first column of the tables headed `| field |`.
fn documented_fields(doc: &str) -> BTreeSet<String> {
    let mut fields = BTreeSet::new();
    let mut in_field_table = false;
    for line in doc.lines() {
        let Some(row) = line.strip_prefix('|') else {
            in_field_table = false;
            continue;
        };
        let first = row.split('|').next().unwrap_or_default().trim();
        if first == "field" {
            in_field_table = true;
        } else if in_field_table && !first.starts_with("---") {
            let spans: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
            assert!(
                !spans.is_empty(),
                "a row of a field table names no field: {line}"
            );
            fields.extend(spans.into_iter().map(String::from));
        }
    }
    fields
}

#[test]
fn the_configuration_reference_documents_every_field_and_only_fields_that_exist() {
    let structs = deserialize_structs();
    let mut paths = BTreeMap::new();
    walk(&structs, "Config", "", &mut paths);
    assert!(
        paths.len() > 50,
        "the walk found only {} paths from Config: {paths:?}",
        paths.len()
    );
    let documented = documented_fields(&read(&root().join("docs/configuration.md")));

    let unknown: Vec<&String> = documented
        .iter()
        .filter(|d| !paths.contains_key(*d))
        .collect();

    // A value is documented by its own row. A section that repeats a type documented in full
    // at another path (a route's `create_table`, `metadata_columns`) may be documented by one
    // row for the whole section, which says what it replaces.
    let fully_documented = |section: &str| {
        paths
            .iter()
            .filter(|(p, t)| t.is_none() && p.starts_with(&format!("{section}.")))
            .all(|(p, _)| documented.contains(p))
    };
    let undocumented: Vec<&String> = paths
        .iter()
        .filter(|(path, kind)| kind.is_none() && !documented.contains(*path))
        .filter(|(path, _)| {
            let covered_by = paths.iter().find(|(section, ty)| {
                path.starts_with(&format!("{section}."))
                    && documented.contains(*section)
                    && paths.iter().any(|(other, other_ty)| {
                        other != *section && other_ty == *ty && fully_documented(other)
                    })
            });
            covered_by.is_none()
        })
        .map(|(path, _)| path)
        .collect();

    assert!(
        unknown.is_empty() && undocumented.is_empty(),
        "docs/configuration.md and the config structs disagree\n  documented, but no such \
         field: {unknown:?}\n  fields without a row: {undocumented:?}"
    );
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The text outside fenced code blocks.
fn prose(doc: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn anchors(doc: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose(doc).lines() {
        let Some(heading) = line.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        if !line.starts_with('#') {
            continue;
        }
        let base = anchor(heading);
        let mut a = base.clone();
        let mut n = 1;
        while seen.contains(&a) {
            a = format!("{base}-{n}");
            n += 1;
        }
        seen.insert(a);
    }
    seen
}

/// The targets of `[text](target)` links, code spans removed first.
fn links(doc: &str) -> Vec<String> {
    let text: String = prose(doc)
        .split('`')
        .step_by(2)
        .collect::<Vec<_>>()
        .join("");
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            let end = rest.find(')')?;
            Some(rest[..end].to_string())
        })
        .collect()
}

#[test]
fn every_relative_link_of_the_readme_and_the_documents_resolves() {
    let mut docs = vec![root().join("README.md"), root().join("BENCHMARKS.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        for link in links(&read(doc)) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            let name = doc.strip_prefix(root()).unwrap().display();
            if !target.exists() {
                broken.push(format!("{name}: {link} (no such file)"));
            } else if !fragment.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&target)).contains(fragment)
            {
                broken.push(format!("{name}: {link} (no such heading)"));
            }
        }
    }
    assert!(checked > 50, "only {checked} links found");
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}
