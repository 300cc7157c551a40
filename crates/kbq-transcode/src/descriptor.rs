//! The proto2 `DescriptorProto` sent as AppendRows' `writer_schema`. It is self-contained: every
//! record type is a nested message of the root, referenced by a name relative to it, so the
//! descriptor stands alone in whatever synthetic file the server wraps it in.

use std::collections::HashSet;

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};

/// The proto type of one column as the plan writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoType {
    pub ty: Type,
    /// Name of the nested message for `Type::Message`.
    pub message: Option<String>,
}

impl ProtoType {
    pub fn scalar(ty: Type) -> ProtoType {
        ProtoType { ty, message: None }
    }
}

/// Collects the nested message types while a plan is compiled.
pub struct DescriptorBuilder {
    nested: Vec<DescriptorProto>,
    /// Every field and type name used anywhere, lower-cased, so that a nested type name can never
    /// shadow or be shadowed by a field name in any scope.
    taken: HashSet<String>,
}

impl DescriptorBuilder {
    pub fn new(all_column_names: impl IntoIterator<Item = String>) -> Self {
        DescriptorBuilder {
            nested: Vec::new(),
            taken: all_column_names
                .into_iter()
                .map(|n| n.to_ascii_lowercase())
                .collect(),
        }
    }

    /// Reserves a unique nested type name derived from a column path.
    pub fn reserve_name(&mut self, column_path: &str) -> String {
        let base: String = column_path
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let mut name = format!("{base}_Struct");
        let mut n = 1;
        while !self.taken.insert(name.to_ascii_lowercase()) {
            n += 1;
            name = format!("{base}_Struct{n}");
        }
        name
    }

    pub fn add(&mut self, message: DescriptorProto) {
        self.nested.push(message);
    }

    pub fn finish(self, mut root: DescriptorProto) -> DescriptorProto {
        root.nested_type = self.nested;
        root
    }
}

pub fn field(name: &str, number: i32, label: Label, ty: &ProtoType) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.to_owned()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(ty.ty as i32),
        type_name: ty.message.clone(),
        ..Default::default()
    }
}

pub fn message(name: &str, fields: Vec<FieldDescriptorProto>) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.to_owned()),
        field: fields,
        ..Default::default()
    }
}

/// Wraps a root message in a proto2 file, the shape `prost-reflect` and protoc tools expect.
pub fn file_for(root: &DescriptorProto) -> FileDescriptorProto {
    FileDescriptorProto {
        name: Some("row.proto".into()),
        syntax: Some("proto2".into()),
        message_type: vec![root.clone()],
        ..Default::default()
    }
}

/// BigQuery column names become proto field names; flexible column names (dashes, unicode)
/// would need the `column_name` field option, which this plan does not emit.
pub fn is_proto_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
