//! Loading: YAML with `${ENV}` substitution, and parse errors rendered with their field path and
//! line.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::Config;
use super::validate::validate;

/// One problem in a config, at a field path such as `writer.max_request_bytes` or
/// `kafka.properties."enable.auto.commit"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
    /// 1-based line of the problem in the file, when known (parse errors).
    pub line: Option<u64>,
}

impl ConfigError {
    pub(super) fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
            line: None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "<root>"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ConfigError>),
}

impl LoadError {
    /// Every problem, one per line, each naming its field.
    pub fn errors(&self) -> Vec<String> {
        match self {
            LoadError::Read { .. } => vec![self.to_string()],
            LoadError::Invalid(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }
}

impl Config {
    /// Reads, parses and validates a config file, substituting `${NAME}` from the process
    /// environment.
    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let env: HashMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let mut config = Config::from_yaml(&text, env).map_err(LoadError::Invalid)?;
        config.read_secret_files().map_err(LoadError::Invalid)?;
        validate(&config).map_err(LoadError::Invalid)?;
        config
            .check_filters_against_schema_files()
            .map_err(LoadError::Invalid)?;
        Ok(config)
    }

    /// Parses a config (no validation beyond types and unknown keys), substituting `${NAME}`
    /// and `${NAME:-default}` in unquoted values from `env`.
    pub fn from_yaml(text: &str, env: HashMap<String, String>) -> Result<Config, Vec<ConfigError>> {
        // Substitution happens on unquoted scalars only (the parser's rule); a `${` left in a
        // quoted value would silently stay literal, so it is refused instead.
        if !yaml_paths::has_content(text) {
            return Err(vec![ConfigError::at(
                "",
                "the config is empty: at least kafka, bigquery and an input (schema_registry or avro) are required",
            )]);
        }
        let quoted = yaml_paths::quoted_substitutions(text);
        if !quoted.is_empty() {
            return Err(quoted);
        }
        let parse = |text: &str| {
            let options = serde_saphyr::options! {
                strict_booleans: true,
            }
            .with_properties(env.clone());
            serde_saphyr::from_str_with_options::<Config>(text, options)
                .map_err(|e| yaml_paths::parse_error(text, &e))
        };
        let first = match parse(text) {
            Ok(config) => return Ok(config),
            Err(error) => error,
        };
        Err(every_parse_error(text, first, parse))
    }
}

/// At most this many parse errors are reported from one file.
const MAX_PARSE_ERRORS: usize = 64;

/// Every parse error of a config, not only the first: the deserializer stops at the first
/// problem, so the field it names is cut out of the text (its lines blanked, so that later
/// errors keep their line numbers) and the text parsed again, until it parses or nothing more
/// can be cut. A required field that was cut is then missing, and a mapping whose only field was
/// cut is then empty: those consequences are not reported, and the mapping is cut in turn to
/// reach the errors after it. A YAML syntax error stops at
/// the first (the structure after it is unknown).
fn every_parse_error<T>(
    text: &str,
    first: ConfigError,
    parse: impl Fn(&str) -> Result<T, ConfigError>,
) -> Vec<ConfigError> {
    let mut errors = vec![first];
    if yaml_paths::has_syntax_error(text) {
        return errors;
    }
    let mut cut: Vec<String> = Vec::new();
    let mut text = text.to_string();
    let mut next_cut = errors[0].path.clone();
    while errors.len() < MAX_PARSE_ERRORS {
        if next_cut.is_empty() {
            break;
        }
        let Some(shorter) = yaml_paths::blank_node(&text, &next_cut) else {
            break;
        };
        cut.push(next_cut.clone());
        text = shorter;
        let error = match parse(&text) {
            Ok(_) => break,
            Err(error) => error,
        };
        if error.message == "missing field" && cut.contains(&error.path) {
            // The consequence of a cut: cut the mapping that lacks the field.
            next_cut = yaml_paths::parent(&error.path).to_string();
            continue;
        }
        if cut.iter().any(|c| yaml_paths::parent(c) == error.path) {
            // A mapping left empty by a cut is null, not a mapping: also a consequence.
            next_cut = error.path.clone();
            continue;
        }
        if errors.contains(&error) {
            break;
        }
        next_cut = if error.message == "missing field" || error.line.is_none() {
            String::new()
        } else {
            error.path.clone()
        };
        errors.push(error);
    }
    errors
}

/// Field paths for YAML positions: serde-saphyr reports a line and column, the user wants to
/// know which field.
pub(super) mod yaml_paths {
    use super::ConfigError;
    use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};

    enum Frame {
        Map {
            key: Option<String>,
            awaiting_key: bool,
        },
        Seq {
            current: Option<usize>,
            next: usize,
        },
    }

    fn render(stack: &[Frame]) -> String {
        let mut out = String::new();
        for frame in stack {
            match frame {
                Frame::Map { key: Some(k), .. } => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    let bare = !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if bare {
                        out.push_str(k);
                    } else {
                        out.push('"');
                        out.push_str(k);
                        out.push('"');
                    }
                }
                Frame::Seq {
                    current: Some(i), ..
                } => out.push_str(&format!("[{i}]")),
                _ => {}
            }
        }
        out
    }

    /// A node as [`walk`] sees it.
    struct Node<'a> {
        /// The field path; for a mapping key, the path of the field it names.
        path: String,
        /// For a mapping key, the path of its mapping.
        container: Option<String>,
        line: u64,
        column: u64,
        scalar: Option<(&'a str, ScalarStyle)>,
    }

    /// Visits every node in document order with its field path and 1-based line and column.
    /// Stops at the first parse error: the deserializer reports that one.
    fn walk(text: &str, mut visit: impl FnMut(&Node<'_>) -> bool) {
        let mut stack: Vec<Frame> = Vec::new();
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { return };
            let is_node = matches!(
                event,
                Event::Scalar(..)
                    | Event::MappingStart(..)
                    | Event::SequenceStart(..)
                    | Event::Alias(..)
            );
            if is_node {
                let mut is_key = false;
                match stack.last_mut() {
                    Some(Frame::Map { key, awaiting_key }) => {
                        is_key = *awaiting_key;
                        if is_key {
                            *key = Some(match &event {
                                Event::Scalar(s, ..) => s.to_string(),
                                _ => "?".to_string(),
                            });
                        }
                        *awaiting_key = !is_key;
                    }
                    Some(Frame::Seq { current, next }) => {
                        *current = Some(*next);
                        *next += 1;
                    }
                    None => {}
                }
                let node = Node {
                    path: render(&stack),
                    container: is_key.then(|| render(&stack[..stack.len() - 1])),
                    line: span.start.line() as u64,
                    column: span.start.col() as u64 + 1,
                    scalar: match &event {
                        Event::Scalar(s, style, ..) => Some((s.as_ref(), *style)),
                        _ => None,
                    },
                };
                if !visit(&node) {
                    return;
                }
            }
            match event {
                Event::MappingStart(..) => stack.push(Frame::Map {
                    key: None,
                    awaiting_key: true,
                }),
                Event::SequenceStart(..) => stack.push(Frame::Seq {
                    current: None,
                    next: 0,
                }),
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                _ => {}
            }
        }
    }

    /// The path of the last node that starts at or before (line, column), and the path of the
    /// mapping that holds it when that node is a key.
    pub(crate) fn path_at(text: &str, line: u64, column: u64) -> (String, Option<String>) {
        let mut found = (String::new(), None);
        walk(text, |node| {
            if (node.line, node.column) <= (line, column) {
                found = (node.path.clone(), node.container.clone());
                true
            } else {
                false
            }
        });
        found
    }

    /// Whether the text is not well-formed YAML.
    pub(super) fn has_syntax_error(text: &str) -> bool {
        Parser::new_from_str(text).any(|e| e.is_err())
    }

    /// The path of the mapping or sequence that holds the field at `path`.
    pub(super) fn parent(path: &str) -> &str {
        match path.rfind(['.', '[']) {
            Some(i) => &path[..i],
            None => "",
        }
    }

    /// The text with the node at `path` (a mapping entry, key and value, or a sequence item)
    /// replaced by blank lines; None when it is not found or shares a line with a node outside
    /// it (flow style), which cannot be cut by lines.
    pub(super) fn blank_node(text: &str, path: &str) -> Option<String> {
        let inside = |p: &str| {
            p == path
                || p.strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        };
        let mut start: Option<u64> = None;
        let mut end: Option<u64> = None;
        walk(text, |node| {
            match start {
                None if node.path == path => start = Some(node.line),
                Some(_) if !inside(&node.path) => {
                    end = Some(node.line);
                    return false;
                }
                _ => {}
            }
            true
        });
        let start = start?;
        if end == Some(start) {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        for (i, line) in text.split_inclusive('\n').enumerate() {
            let number = i as u64 + 1;
            let blank = number >= start && end.is_none_or(|end| number < end);
            if blank {
                if line.ends_with('\n') {
                    out.push('\n');
                }
            } else {
                out.push_str(line);
            }
        }
        Some(out)
    }

    /// Whether the document has any node (not only comments and blank lines). A YAML syntax
    /// error counts as content: the deserializer reports it.
    pub(super) fn has_content(text: &str) -> bool {
        let mut nodes = 0;
        walk(text, |_| {
            nodes += 1;
            false
        });
        nodes > 0 || has_syntax_error(text)
    }

    pub(super) fn quoted_substitutions(text: &str) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        walk(text, |node| {
            if let Some((value, style)) = node.scalar
                && style != ScalarStyle::Plain
                && value.contains("${")
            {
                errors.push(ConfigError {
                    path: node.path.clone(),
                    message: "`${...}` is substituted only in unquoted values: remove the quotes"
                        .into(),
                    line: Some(node.line),
                });
            }
            true
        });
        errors
    }

    /// A serde-saphyr error as a `ConfigError` with the field path of its position.
    /// What a tripped limit of the YAML parser means, in words (its own message is the
    /// limit's name and counters: `budget breached: ScalarBytes { .. }`).
    fn budget_message(breach: &serde_saphyr::budget::BudgetBreach) -> String {
        use serde_saphyr::budget::BudgetBreach as B;
        let why = match breach {
            B::ScalarBytes { total_scalar_bytes } => format!(
                "its values add up to more than the parser's limit ({total_scalar_bytes} bytes read)"
            ),
            B::InputBytes { input_bytes } => {
                format!("it is larger than the parser's limit ({input_bytes} bytes read)")
            }
            B::Depth { depth } => format!("it nests {depth} levels deep"),
            B::Nodes { nodes } => format!("it holds more than {nodes} values"),
            B::Events { events } => format!("it holds more than {events} YAML events"),
            B::Aliases { .. } | B::Anchors { .. } | B::AliasAnchorRatio { .. } => {
                "it uses too many YAML anchors or aliases (an alias bomb?)".to_string()
            }
            B::Documents { documents } => format!("it holds {documents} YAML documents"),
            _ => "it exceeds a limit of the YAML parser".to_string(),
        };
        format!(
            "the config is too large to be a config: {why}; was a file pasted or substituted into it?"
        )
    }

    pub(super) fn parse_error(text: &str, e: &serde_saphyr::Error) -> ConfigError {
        let mut message = match e.without_snippet() {
            serde_saphyr::Error::Budget { breach, .. } => budget_message(breach),
            _ => e
                .without_snippet()
                .render_with_options(serde_saphyr::render_options! {
                    snippets: serde_saphyr::SnippetMode::Off,
                }),
        };
        let Some(loc) = e.location().filter(|l| l.line() > 0) else {
            return ConfigError::at("", message);
        };
        let (line, column) = (loc.line(), loc.column());
        for suffix in [
            format!(" at line {line}, column {column}"),
            format!(" at line {line} column {column}"),
        ] {
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_string();
            }
        }
        if let Some(name) = message
            .strip_prefix("missing property `")
            .and_then(|r| r.strip_suffix('`'))
        {
            message = format!(
                "environment variable `{name}` is not set (write ${{{name}:-default}} for a default)"
            );
        }
        let (mut path, container) = path_at(text, line, column);
        // "missing field `x`" points at the last key of the mapping that lacks `x` (or at the
        // mapping itself when it is empty): name the missing field.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            let mapping = container.unwrap_or(path);
            path = if mapping.is_empty() {
                field.to_string()
            } else {
                format!("{mapping}.{field}")
            };
            message = "missing field".into();
        }
        ConfigError {
            path,
            message,
            line: Some(line),
        }
    }
}
