//! A registered Protobuf schema compiled into descriptors: the `.proto` text of the schema and of
//! every reference (by import name), plus the well-known files Confluent serializers never
//! register (`google/protobuf/*`, `google/type/*`, `confluent/*`), compiled in memory with protox.
//! A text may also be the base64 of a serialized `FileDescriptorProto` (the registry's
//! `format=serialized`, and what some clients register).

use std::collections::HashMap;

use base64::Engine;
use prost::Message;
use prost_reflect::{DescriptorPool, FileDescriptor, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use super::framing::MessagePath;
use crate::SchemaError;

/// The name the registered schema's own text is compiled under; references keep their import
/// names.
const ROOT_FILE: &str = "__kbq_registered_schema__.proto";

/// Well-known files bundled with the sink (protox serves `google/protobuf/*` itself).
const KNOWN: &[(&str, &str)] = &[
    (
        "confluent/meta.proto",
        include_str!("known/confluent/meta.proto"),
    ),
    (
        "confluent/type/decimal.proto",
        include_str!("known/confluent/type/decimal.proto"),
    ),
    (
        "confluent/type/variant.proto",
        include_str!("known/confluent/type/variant.proto"),
    ),
    (
        "google/type/calendar_period.proto",
        include_str!("known/google/type/calendar_period.proto"),
    ),
    (
        "google/type/color.proto",
        include_str!("known/google/type/color.proto"),
    ),
    (
        "google/type/date.proto",
        include_str!("known/google/type/date.proto"),
    ),
    (
        "google/type/datetime.proto",
        include_str!("known/google/type/datetime.proto"),
    ),
    (
        "google/type/dayofweek.proto",
        include_str!("known/google/type/dayofweek.proto"),
    ),
    (
        "google/type/decimal.proto",
        include_str!("known/google/type/decimal.proto"),
    ),
    (
        "google/type/expr.proto",
        include_str!("known/google/type/expr.proto"),
    ),
    (
        "google/type/fraction.proto",
        include_str!("known/google/type/fraction.proto"),
    ),
    (
        "google/type/interval.proto",
        include_str!("known/google/type/interval.proto"),
    ),
    (
        "google/type/latlng.proto",
        include_str!("known/google/type/latlng.proto"),
    ),
    (
        "google/type/money.proto",
        include_str!("known/google/type/money.proto"),
    ),
    (
        "google/type/month.proto",
        include_str!("known/google/type/month.proto"),
    ),
    (
        "google/type/phone_number.proto",
        include_str!("known/google/type/phone_number.proto"),
    ),
    (
        "google/type/postal_address.proto",
        include_str!("known/google/type/postal_address.proto"),
    ),
    (
        "google/type/quaternion.proto",
        include_str!("known/google/type/quaternion.proto"),
    ),
    (
        "google/type/timeofday.proto",
        include_str!("known/google/type/timeofday.proto"),
    ),
];

/// A compiled Protobuf writer schema.
#[derive(Debug, Clone)]
pub struct ProtoSchema {
    pool: DescriptorPool,
}

/// Serves files from texts held in memory.
struct Texts(HashMap<String, String>);

impl FileResolver for Texts {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        let Some(text) = self.0.get(name) else {
            return Err(protox::Error::file_not_found(name));
        };
        file_from_text(name, text)
    }
}

struct Known;

impl FileResolver for Known {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match KNOWN.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => File::from_source(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

fn file_from_text(name: &str, text: &str) -> Result<File, protox::Error> {
    // A serialized descriptor in base64 has no whitespace, semicolons or braces; `.proto` text
    // always has them.
    let trimmed = text.trim();
    if !trimmed.is_empty() && !trimmed.contains([';', '{', ' ', '\n']) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(trimmed)
            .map_err(|e| {
                protox::Error::new(format!("{name}: neither .proto text nor base64: {e}"))
            })?;
        let mut proto = prost_types::FileDescriptorProto::decode(bytes.as_slice())
            .map_err(|e| protox::Error::new(format!("{name}: not a serialized descriptor: {e}")))?;
        proto.name = Some(name.to_owned());
        return Ok(File::from_file_descriptor_proto(proto));
    }
    File::from_source(name, text)
}

impl ProtoSchema {
    /// Compiles the registered text with its references, `(import name, text)`.
    pub fn compile(
        text: &str,
        references: &[(String, String)],
    ) -> Result<ProtoSchema, SchemaError> {
        let mut texts: HashMap<String, String> = references.iter().cloned().collect();
        texts.insert(ROOT_FILE.to_owned(), text.to_owned());
        let mut chain = ChainFileResolver::new();
        chain.add(Texts(texts));
        chain.add(Known);
        chain.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(chain);
        compiler.include_imports(true);
        compiler
            .open_file(ROOT_FILE)
            .map_err(|e| SchemaError::InvalidProtobuf(e.to_string()))?;
        Ok(ProtoSchema {
            pool: compiler.descriptor_pool(),
        })
    }

    /// Every file compiled for this schema (references and well-known files too).
    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    fn root(&self) -> FileDescriptor {
        self.pool
            .get_file_by_name(ROOT_FILE)
            .expect("the root file was compiled")
    }

    /// The message a record's message-index path names: at each level the k-th message
    /// declaration (enums and services do not count), in file order.
    pub fn message(&self, path: &MessagePath) -> Option<MessageDescriptor> {
        let mut indexes = path.indexes().iter();
        let first = *indexes.next()? as usize;
        let mut message = self.root().messages().nth(first)?;
        for &i in indexes {
            let child = message.child_messages().nth(i as usize)?;
            message = child;
        }
        Some(message)
    }

    /// The message a table is derived from: the one named (its full name, top-level or nested,
    /// declared in the root file), or the file's only top-level message. A file of several
    /// top-level messages and no name is refused: its records may carry any of them, and the
    /// first is not more likely than the others (docs/mapping.md, "Which message a table holds").
    pub fn table_message(&self, name: Option<&str>) -> Result<MessageDescriptor, String> {
        let names = self.message_names();
        match name {
            Some(name) => {
                let mut pending: Vec<MessageDescriptor> = self.root().messages().collect();
                while let Some(m) = pending.pop() {
                    if m.full_name() == name {
                        return Ok(m);
                    }
                    pending.extend(m.child_messages());
                }
                Err(format!(
                    "the schema declares no message {name} (top-level messages: {names:?})"
                ))
            }
            None if names.len() == 1 => self
                .message(&MessagePath::FIRST)
                .ok_or_else(|| "the schema declares no message".to_owned()),
            None if names.is_empty() => Err("the schema declares no message".to_owned()),
            None => Err(format!(
                "the schema declares {} top-level messages {names:?}; name the one the records carry with create_table.protobuf_message",
                names.len()
            )),
        }
    }

    /// The full names of the root file's top-level messages, for error messages.
    pub fn message_names(&self) -> Vec<String> {
        self.root()
            .messages()
            .map(|m| m.full_name().to_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_paths_count_only_messages_in_file_order() {
        let schema = ProtoSchema::compile(
            r#"syntax = "proto3";
               package shop;
               enum Kind { A = 0; }
               message Order { message Line { int32 q = 1; } enum E { X = 0; } message Note { string s = 1; } Line l = 1; }
               message Refund { int64 id = 1; }"#,
            &[],
        )
        .unwrap();
        let name = |p: &[u32]| {
            schema
                .message(&MessagePath::new(p).unwrap())
                .map(|m| m.full_name().to_owned())
        };
        assert_eq!(name(&[0]).as_deref(), Some("shop.Order"));
        assert_eq!(name(&[1]).as_deref(), Some("shop.Refund"));
        assert_eq!(name(&[0, 0]).as_deref(), Some("shop.Order.Line"));
        assert_eq!(name(&[0, 1]).as_deref(), Some("shop.Order.Note"));
        assert_eq!(name(&[2]), None);
        assert_eq!(name(&[1, 0]), None);
    }

    #[test]
    fn references_and_bundled_well_known_files_resolve() {
        let reference = r#"syntax = "proto3"; package common; message Money { int64 cents = 1; }"#;
        let schema = ProtoSchema::compile(
            r#"syntax = "proto3";
               import "common/money.proto";
               import "google/protobuf/timestamp.proto";
               import "google/type/date.proto";
               import "confluent/type/decimal.proto";
               import "confluent/meta.proto";
               message Payment {
                 common.Money amount = 1;
                 google.protobuf.Timestamp at = 2;
                 google.type.Date day = 3;
                 confluent.type.Decimal fee = 4 [(confluent.field_meta).params = { key: "precision" value: "9" }];
               }"#,
            &[("common/money.proto".into(), reference.into())],
        )
        .unwrap();
        let m = schema.message(&MessagePath::FIRST).unwrap();
        assert_eq!(m.full_name(), "Payment");
        assert_eq!(
            m.get_field_by_name("amount")
                .unwrap()
                .kind()
                .as_message()
                .unwrap()
                .full_name(),
            "common.Money"
        );
        let missing = ProtoSchema::compile(
            r#"syntax = "proto3"; import "common/money.proto"; message P { common.Money m = 1; }"#,
            &[],
        )
        .unwrap_err();
        assert!(
            missing.to_string().contains("common/money.proto"),
            "{missing}"
        );
    }

    #[test]
    fn a_serialized_descriptor_in_base64_is_accepted() {
        let text = r#"syntax = "proto3"; package p; message M { string s = 1; }"#;
        let compiled = ProtoSchema::compile(text, &[]).unwrap();
        let mut proto = compiled.root().file_descriptor_proto().clone();
        proto.name = Some("m.proto".into());
        let b64 = base64::engine::general_purpose::STANDARD.encode(proto.encode_to_vec());
        let schema = ProtoSchema::compile(&b64, &[]).unwrap();
        assert_eq!(
            schema.message(&MessagePath::FIRST).unwrap().full_name(),
            "p.M"
        );
    }
}
