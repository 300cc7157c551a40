//! The names of BigQuery resources as the API spells them: table paths and write stream names
//! (both `_default` spellings), parsed and rendered canonically.

use serde::{Deserialize, Serialize};

/// `projects/{project}/datasets/{dataset}/tables/{table}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableRef {
    pub project: String,
    pub dataset: String,
    pub table: String,
}

impl TableRef {
    pub fn new(
        project: impl Into<String>,
        dataset: impl Into<String>,
        table: impl Into<String>,
    ) -> Self {
        TableRef {
            project: project.into(),
            dataset: dataset.into(),
            table: table.into(),
        }
    }

    /// Parses the resource path; `None` when it is not exactly a table path.
    pub fn parse(path: &str) -> Option<TableRef> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["projects", p, "datasets", d, "tables", t]
                if valid_segment(p) && valid_segment(d) && valid_segment(t) =>
            {
                Some(TableRef::new(*p, *d, *t))
            }
            _ => None,
        }
    }

    pub fn path(&self) -> String {
        format!(
            "projects/{}/datasets/{}/tables/{}",
            self.project, self.dataset, self.table
        )
    }

    /// `project:dataset.table`, the spelling of REST error messages.
    pub fn legacy(&self) -> String {
        format!("{}:{}.{}", self.project, self.dataset, self.table)
    }
}

fn valid_segment(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_control() || c == '/')
}

fn valid_stream_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 512
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Which stream of a table a name designates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamId {
    Default,
    Explicit(String),
}

/// A parsed stream name; both `_default` spellings are accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamName {
    pub table: TableRef,
    pub id: StreamId,
}

impl StreamName {
    pub fn parse(name: &str) -> Option<StreamName> {
        let parts: Vec<&str> = name.split('/').collect();
        let (table, rest) = match parts.as_slice() {
            ["projects", p, "datasets", d, "tables", t, rest @ ..] => {
                if !(valid_segment(p) && valid_segment(d) && valid_segment(t)) {
                    return None;
                }
                (TableRef::new(*p, *d, *t), rest)
            }
            _ => return None,
        };
        let id = match rest {
            ["_default"] | ["streams", "_default"] => StreamId::Default,
            ["streams", id] if valid_stream_id(id) => StreamId::Explicit((*id).to_string()),
            _ => return None,
        };
        Some(StreamName { table, id })
    }

    /// The canonical spelling (`…/streams/<id>`).
    pub fn canonical(&self) -> String {
        match &self.id {
            StreamId::Default => format!("{}/streams/_default", self.table.path()),
            StreamId::Explicit(id) => format!("{}/streams/{id}", self.table.path()),
        }
    }
}
