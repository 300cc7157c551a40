//! BigQuery table schemas in the JSON shape of the BigQuery REST API (`TableSchema`,
//! `TableFieldSchema`). Shared by the transcoder (the table is authoritative), the emulator (which
//! validates rows against it) and the daemon's REST client. These are Google's wire types, written
//! with serde because no maintained crate publishes the REST v2 JSON types alone.

use serde::{Deserialize, Serialize};

/// `TableSchema` of the REST API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TableSchema {
    #[serde(default)]
    pub fields: Vec<TableFieldSchema>,
}

/// `TableFieldSchema` of the REST API. Unknown JSON keys are ignored, as Google's own clients do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableFieldSchema {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: FieldType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<TableFieldSchema>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// REST encodes int64 as a JSON string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value_expression: Option<String>,
    /// RANGE columns: the type of the range's bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_element_type: Option<RangeElementType>,
}

/// `TableFieldSchema.rangeElementType` of the REST API: `{"type": "DATE"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeElementType {
    #[serde(rename = "type")]
    pub element_type: FieldType,
}

impl TableFieldSchema {
    pub fn new(name: impl Into<String>, field_type: FieldType, mode: Mode) -> Self {
        TableFieldSchema {
            name: name.into(),
            field_type,
            mode: Some(mode),
            fields: Vec::new(),
            description: None,
            max_length: None,
            precision: None,
            scale: None,
            default_value_expression: None,
            range_element_type: None,
        }
    }

    /// The effective mode: absent means NULLABLE in the REST API.
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or(Mode::Nullable)
    }
}

/// Column mode. REST spells it in upper case; lower case is accepted on input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    #[serde(rename = "NULLABLE", alias = "nullable", alias = "Nullable")]
    Nullable,
    #[serde(rename = "REQUIRED", alias = "required", alias = "Required")]
    Required,
    #[serde(rename = "REPEATED", alias = "repeated", alias = "Repeated")]
    Repeated,
}

/// Column type, with the legacy and standard-SQL spellings BigQuery accepts on input. It is
/// serialised with the legacy names the REST API returns (`INTEGER`, `FLOAT`, `BOOLEAN`, `RECORD`).
/// Types this project does not write (RANGE, INTERVAL, future ones) are kept as `Other` so that a
/// table carrying them can still be read: such columns are ignored, never a crash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FieldType {
    String,
    Bytes,
    Int64,
    Float64,
    Bool,
    Numeric,
    BigNumeric,
    Timestamp,
    Date,
    Time,
    DateTime,
    Geography,
    Json,
    Record,
    Other(String),
}

impl FieldType {
    pub fn parse(s: &str) -> FieldType {
        match s.to_ascii_uppercase().as_str() {
            "STRING" => FieldType::String,
            "BYTES" => FieldType::Bytes,
            "INTEGER" | "INT64" => FieldType::Int64,
            "FLOAT" | "FLOAT64" => FieldType::Float64,
            "BOOLEAN" | "BOOL" => FieldType::Bool,
            "NUMERIC" | "DECIMAL" => FieldType::Numeric,
            "BIGNUMERIC" | "BIGDECIMAL" => FieldType::BigNumeric,
            "TIMESTAMP" => FieldType::Timestamp,
            "DATE" => FieldType::Date,
            "TIME" => FieldType::Time,
            "DATETIME" => FieldType::DateTime,
            "GEOGRAPHY" => FieldType::Geography,
            "JSON" => FieldType::Json,
            "RECORD" | "STRUCT" => FieldType::Record,
            other => FieldType::Other(other.to_string()),
        }
    }

    /// The name the REST API returns.
    pub fn as_str(&self) -> &str {
        match self {
            FieldType::String => "STRING",
            FieldType::Bytes => "BYTES",
            FieldType::Int64 => "INTEGER",
            FieldType::Float64 => "FLOAT",
            FieldType::Bool => "BOOLEAN",
            FieldType::Numeric => "NUMERIC",
            FieldType::BigNumeric => "BIGNUMERIC",
            FieldType::Timestamp => "TIMESTAMP",
            FieldType::Date => "DATE",
            FieldType::Time => "TIME",
            FieldType::DateTime => "DATETIME",
            FieldType::Geography => "GEOGRAPHY",
            FieldType::Json => "JSON",
            FieldType::Record => "RECORD",
            FieldType::Other(s) => s,
        }
    }
}

impl Serialize for FieldType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FieldType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(FieldType::parse(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_json_round_trips_with_legacy_type_names() {
        let json = r#"{"fields":[{"name":"id","type":"INT64","mode":"REQUIRED"},
            {"name":"s","type":"STRUCT","fields":[{"name":"x","type":"bool"}]},
            {"name":"r","type":"RANGE"}]}"#;
        let schema: TableSchema = serde_json::from_str(json).unwrap();
        assert_eq!(schema.fields[0].field_type, FieldType::Int64);
        assert_eq!(schema.fields[1].fields[0].mode(), Mode::Nullable);
        assert_eq!(
            schema.fields[2].field_type,
            FieldType::Other("RANGE".into())
        );
        let out = serde_json::to_value(&schema).unwrap();
        assert_eq!(out["fields"][0]["type"], "INTEGER");
        assert_eq!(out["fields"][1]["type"], "RECORD");
    }
}
