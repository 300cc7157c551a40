//! Minimal local stand-in for the row codec owned by branch `emu-rows-rest`; deleted when that
//! branch is merged. It checks extra fields and unset REQUIRED top-level columns only.

use prost_types::DescriptorProto;
use prost_types::field_descriptor_proto::Label;

use crate::bigquery::table_schema::{Mode, TableSchema};

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("input schema has more fields than BigQuery schema, extra fields: '{0}'")]
    ExtraFields(String),
}

impl SchemaError {
    pub fn message(&self) -> String {
        match self {
            SchemaError::ExtraFields(f) => {
                format!("Input schema has more fields than BigQuery schema, extra fields: '{f}'")
            }
        }
    }

    pub fn storage_code(&self) -> Option<i32> {
        match self {
            SchemaError::ExtraFields(_) => Some(7),
        }
    }
}

#[derive(Debug)]
pub struct RowCodec {
    descriptor: DescriptorProto,
    /// (field number, column name) of REQUIRED columns present in the descriptor.
    required: Vec<(i32, String)>,
    /// (field number, column index) for rendering.
    columns: Vec<(i32, usize)>,
}

impl RowCodec {
    pub fn compile(
        descriptor: &DescriptorProto,
        table: &TableSchema,
    ) -> Result<RowCodec, SchemaError> {
        let mut required = Vec::new();
        let mut columns = Vec::new();
        for field in &descriptor.field {
            let name = field.name().to_ascii_lowercase();
            let Some(idx) = table
                .fields
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(&name))
            else {
                return Err(SchemaError::ExtraFields(name));
            };
            let column = &table.fields[idx];
            if column.mode() == Mode::Required && field.label() != Label::Repeated {
                required.push((field.number(), column.name.clone()));
            }
            columns.push((field.number(), idx));
        }
        Ok(RowCodec {
            descriptor: descriptor.clone(),
            required,
            columns,
        })
    }

    pub fn validate(&self, row: &[u8]) -> Result<(), String> {
        let fields =
            scan(row).ok_or_else(|| "Could not parse the row as protocol buffer".to_string())?;
        for (number, name) in &self.required {
            if !fields.iter().any(|(n, _)| n == number) {
                return Err(format!("Required field {name} is missing"));
            }
        }
        Ok(())
    }

    pub fn render(&self, row: &[u8], table: &TableSchema) -> serde_json::Value {
        let fields = scan(row).unwrap_or_default();
        let cells: Vec<serde_json::Value> = table
            .fields
            .iter()
            .enumerate()
            .map(|(idx, _)| {
                let number = self
                    .columns
                    .iter()
                    .find(|(_, i)| *i == idx)
                    .map(|(n, _)| *n);
                let value = number
                    .and_then(|n| fields.iter().find(|(f, _)| *f == n))
                    .map(|(_, v)| v.clone().into())
                    .unwrap_or(serde_json::Value::Null);
                serde_json::json!({ "v": value })
            })
            .collect();
        serde_json::json!({ "f": cells })
    }

    pub fn descriptor(&self) -> &DescriptorProto {
        &self.descriptor
    }
}

/// Top-level fields of a proto message: varints as decimal strings, length-delimited as UTF-8.
fn scan(mut buf: &[u8]) -> Option<Vec<(i32, String)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = prost::encoding::decode_varint(&mut buf).ok()?;
        let number = (key >> 3) as i32;
        match key & 7 {
            0 => out.push((
                number,
                prost::encoding::decode_varint(&mut buf).ok()?.to_string(),
            )),
            1 => {
                let b = buf.get(..8)?;
                out.push((number, f64::from_le_bytes(b.try_into().ok()?).to_string()));
                buf = &buf[8..];
            }
            2 => {
                let len = prost::encoding::decode_varint(&mut buf).ok()? as usize;
                let b = buf.get(..len)?;
                out.push((number, String::from_utf8_lossy(b).into_owned()));
                buf = &buf[len..];
            }
            5 => {
                let b = buf.get(..4)?;
                out.push((number, f32::from_le_bytes(b.try_into().ok()?).to_string()));
                buf = &buf[4..];
            }
            _ => return None,
        }
    }
    Some(out)
}
