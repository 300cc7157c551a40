//! Transforms that rewrite a field's value into the field's own column: `mask` with a keyed
//! hash, `cast` (`cast.rs`) and `convert` (`timestamps.rs`). Each format's compiler says what kind of scalar the writer
//! schema declares ([`Source`]); [`ValueOp::compile`] checks it and the column once, and each
//! format's executor hands the value it read ([`Scalar`]) to [`ValueOp::write`].

use std::sync::Arc;

use base64::Engine;
use hmac::{KeyInit, Mac};
use prost_types::field_descriptor_proto::Type;

use super::cast::Cast;
use super::timestamps::Convert;
use super::{HashEncoding, Transform};
use crate::compile::column_type;
use crate::error::{PlanError, RecordError};
use crate::proto::{Tag, WIRE_LEN, put_len_delimited};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The scalar kind a writer schema declares for a field, as far as a value transform cares;
/// the `&'static str`s are the format's own names of the type (`long`, `int64`, `integer`), for
/// the refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Text (Avro `string`, Protobuf `string`, a JSON string).
    Str,
    /// Bytes (Avro `bytes` and `fixed`, Protobuf `bytes`).
    Bytes,
    /// A signed integer of 32 bits or fewer (Avro `int`, Protobuf `int32`, `sint32`, `sfixed32`).
    Int32(&'static str),
    /// A signed integer of 64 bits (Avro `long`, Protobuf `int64`..., JSON Schema `integer`).
    Int64(&'static str),
    /// Protobuf `uint32` and `fixed32`.
    UInt32(&'static str),
    /// Protobuf `uint64` and `fixed64`.
    UInt64(&'static str),
    Float32(&'static str),
    Float64(&'static str),
    Bool,
    /// An Avro `decimal` of this scale: big-endian two's complement bytes.
    Decimal {
        scale: u32,
    },
    /// A JSON Schema `number`: its text, a decimal that may have a fraction.
    Number,
    /// Schemaless JSON: the value's own token says what it is, record by record.
    Any,
    /// Anything else, named for the error message (`a message`, `bytes of a logical type`).
    Other(&'static str),
}

impl Source {
    /// How a refusal names the field's type: `long`, `decimal with scale 2`.
    pub(crate) fn describe(self) -> String {
        match self {
            Source::Str => "string".into(),
            Source::Bytes => "bytes".into(),
            Source::Bool => "boolean".into(),
            Source::Decimal { scale } => format!("a decimal with scale {scale}"),
            Source::Number => "number (a JSON number that may have a fraction)".into(),
            Source::Any => "of any JSON type".into(),
            Source::Int32(n)
            | Source::Int64(n)
            | Source::UInt32(n)
            | Source::UInt64(n)
            | Source::Float32(n)
            | Source::Float64(n)
            | Source::Other(n) => n.into(),
        }
    }
}

/// One value read by an executor, before the transform writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar<'a> {
    /// Text: its bytes, UTF-8 checked by the reader (or the value is refused).
    Str(&'a [u8]),
    Bytes(&'a [u8]),
    /// Any signed integer, and a Protobuf `bool` (0 or 1).
    Int(i64),
    UInt(u64),
    F32(f32),
    F64(f64),
    Bool(bool),
    /// An Avro decimal's big-endian two's complement bytes (its scale is the schema's).
    Decimal(&'a [u8]),
    /// A JSON number's text, as written.
    Number(&'a str),
}

/// What a JSON value is, for a column-driven executor to ask whether the transform takes it
/// ([`ValueOp::takes`]) before reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonKind {
    String,
    Number,
    Bool,
}

/// A compiled value transform of one field.
#[derive(Clone)]
pub(crate) struct ValueOp {
    kind: Kind,
    /// The proto type of the column's field, and its wire type.
    ty: (Type, u32),
}

#[derive(Clone)]
enum Kind {
    /// The keyed hash state, the key already absorbed: each value clones it (no key schedule
    /// per record).
    Hmac {
        keyed: HmacSha256,
        encoding: HashEncoding,
    },
    Cast(Cast),
    Convert(Convert),
}

impl std::fmt::Debug for ValueOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Hmac { encoding, .. } => write!(f, "Hmac({encoding:?})"),
            Kind::Cast(c) => write!(f, "{c:?}"),
            Kind::Convert(c) => write!(f, "{c:?}"),
        }
    }
}

impl ValueOp {
    /// The op of transform `t` for a field of kind `source` written into `column`.
    pub(crate) fn compile(
        t: &Transform,
        source: Source,
        column: &TableFieldSchema,
    ) -> Result<Arc<ValueOp>, PlanError> {
        let bad = |reason: String| PlanError::Transform {
            transform: t.describe(),
            reason,
        };
        if column.mode() == Mode::Repeated {
            return Err(bad(format!(
                "its column is {}: the transform writes one value into a column of one value",
                column_type(column)
            )));
        }
        let m = match t {
            Transform::Mask(m) => m,
            Transform::Cast(c) => {
                let (cast, ty) = Cast::compile(c, source, column).map_err(bad)?;
                return Ok(Arc::new(ValueOp {
                    kind: Kind::Cast(cast),
                    ty,
                }));
            }
            Transform::Convert(c) => {
                let (convert, ty) = Convert::compile(c, source, column).map_err(bad)?;
                return Ok(Arc::new(ValueOp {
                    kind: Kind::Convert(convert),
                    ty,
                }));
            }
            _ => unreachable!("only a hashing mask, a cast and a convert rewrite a value"),
        };
        let (Some(key), Some(encoding)) = (&m.key, m.encoding) else {
            unreachable!("check: a hash has its key and encoding");
        };
        if !matches!(source, Source::Str | Source::Bytes | Source::Any) {
            return Err(bad(format!(
                "a hash is taken of text or bytes, and the field is {}: the bytes of another type would be a guess",
                source.describe()
            )));
        }
        let ty = match (encoding, &column.field_type) {
            (HashEncoding::Hex | HashEncoding::Base64, FieldType::String) => {
                (Type::String, WIRE_LEN)
            }
            (HashEncoding::Bytes, FieldType::Bytes) => (Type::Bytes, WIRE_LEN),
            (e, _) => {
                let fits = match e {
                    HashEncoding::Bytes => "BYTES",
                    _ => "STRING",
                };
                return Err(bad(format!(
                    "a digest written as {} fills a {fits} column, and the column is {}",
                    encoding_name(e),
                    column_type(column)
                )));
            }
        };
        let bytes = key.bytes().ok_or_else(|| {
            bad("its key was not read (the config reads it when it is loaded)".into())
        })?;
        let keyed = HmacSha256::new_from_slice(bytes)
            .map_err(|e| bad(format!("the key is not a key for HMAC-SHA256: {e}")))?;
        Ok(Arc::new(ValueOp {
            kind: Kind::Hmac { keyed, encoding },
            ty,
        }))
    }

    /// The proto type of the column's field, and its wire type.
    pub(crate) fn proto_type(&self) -> (Type, u32) {
        self.ty
    }

    /// How a JSON type error names what the column takes: `hashed text`, `cast to INT64`.
    pub(crate) fn label(&self) -> &'static str {
        match &self.kind {
            Kind::Hmac { .. } => "hashed text",
            Kind::Cast(c) => c.label(),
            Kind::Convert(c) => c.label(),
        }
    }

    /// Whether the transform takes a JSON value of this kind (schemaless JSON, or a value its
    /// schema did not declare): another is its record's error, as a value of the wrong type is.
    pub(crate) fn takes(&self, kind: JsonKind) -> bool {
        match &self.kind {
            Kind::Hmac { .. } => kind == JsonKind::String,
            Kind::Cast(c) => c.takes(kind),
            Kind::Convert(c) => c.takes(kind),
        }
    }

    /// Writes `v` as the transform says into the field `tag`; `column` names the column in a
    /// per-record error.
    #[inline(never)]
    pub(crate) fn write(
        &self,
        v: Scalar<'_>,
        tag: Tag,
        column: &Arc<str>,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        match &self.kind {
            Kind::Cast(c) => c.write(v, tag, out).map_err(|reason| RecordError::Value {
                column: column.clone(),
                reason,
            })?,
            Kind::Convert(c) => c.write(v, tag, out).map_err(|reason| RecordError::Value {
                column: column.clone(),
                reason,
            })?,
            Kind::Hmac { keyed, encoding } => {
                let b = match v {
                    Scalar::Str(b) | Scalar::Bytes(b) => b,
                    _ => unreachable!("compile: a hash is taken of text or bytes"),
                };
                let mut mac = keyed.clone();
                mac.update(b);
                let digest: [u8; 32] = mac.finalize().into_bytes().into();
                match encoding {
                    HashEncoding::Bytes => put_len_delimited(out, tag, &digest),
                    HashEncoding::Hex => {
                        const HEX: &[u8; 16] = b"0123456789abcdef";
                        let mut text = [0u8; 64];
                        for (i, b) in digest.iter().enumerate() {
                            text[2 * i] = HEX[(b >> 4) as usize];
                            text[2 * i + 1] = HEX[(b & 0xf) as usize];
                        }
                        put_len_delimited(out, tag, &text);
                    }
                    HashEncoding::Base64 => {
                        let mut text = [0u8; 44];
                        let n = base64::engine::general_purpose::STANDARD
                            .encode_slice(digest, &mut text)
                            .expect("44 bytes hold the base64 of 32");
                        put_len_delimited(out, tag, &text[..n]);
                    }
                }
            }
        }
        Ok(())
    }
}

fn encoding_name(e: HashEncoding) -> &'static str {
    match e {
        HashEncoding::Hex => "hex",
        HashEncoding::Base64 => "base64",
        HashEncoding::Bytes => "bytes",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_gives_rfc_4231s_answer() {
        // RFC 4231, test case 2.
        let mut t: Vec<Transform> = serde_json::from_str(
            r#"[{"mask": {"field": "a", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}}]"#,
        )
        .unwrap();
        let Transform::Mask(m) = &mut t[0] else {
            unreachable!()
        };
        m.key.as_mut().unwrap().set(b"Jefe".to_vec());
        let column: TableFieldSchema =
            serde_json::from_str(r#"{"name": "a", "type": "STRING"}"#).unwrap();
        let op = ValueOp::compile(&t[0], Source::Str, &column).unwrap();
        let mut out = Vec::new();
        let tag = Tag::new(1, WIRE_LEN);
        op.write(
            Scalar::Str(b"what do ya want for nothing?"),
            tag,
            &Arc::from("a"),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            &out[2..],
            b"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
