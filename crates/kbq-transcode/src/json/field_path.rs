//! A filter's field in a JSON record (`field_path.rs` at the crate's root): each step a key of an
//! object (matched case-blind, as columns match keys), the values before it skipped. Typed by
//! the registered JSON Schema, whose property the path must name; schemaless, by the value's own
//! token, record by record.

use super::scan::{Scanner, Token, malformed};
use super::schema::{JsonSchema, Kind};
use crate::error::RecordError;
use crate::field_path::{FieldRead, PRESENT};
use crate::transforms::{Scalar, Source, ValueTest};

#[derive(Debug, Clone)]
pub(crate) struct FieldPath {
    keys: Box<[Box<[u8]>]>,
    /// What the schema says the value is; `Source::Any` without one.
    source: Source,
}

/// `path` in `schema` (without one, any path): the reader, the field's kind, and that it can
/// be null (a key may be absent).
pub(crate) fn resolve(
    schema: Option<&JsonSchema>,
    path: &str,
) -> Result<(FieldRead, Source, bool), String> {
    let names: Vec<&str> = path.split('.').collect();
    let source = match schema {
        None => Source::Any,
        Some(s) => {
            let mut shape = s.shape(s.root_node())?;
            for (depth, name) in names.iter().enumerate() {
                let within = names[..=depth].join(".");
                let Some((_, node)) = (shape.properties.iter())
                    .rev()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                else {
                    return Err(format!("the JSON Schema has no property {within}"));
                };
                shape = s.shape(*node)?;
                if depth + 1 < names.len() && shape.kind != Some(Kind::Object) {
                    return Err(format!(
                        "property {within} is not an object: {path} names nothing inside it"
                    ));
                }
            }
            Kind::value_source(shape.kind)
        }
    };
    let keys = (names.iter())
        .map(|n| n.as_bytes().into())
        .collect::<Vec<Box<[u8]>>>();
    Ok((
        FieldRead::Json(FieldPath {
            keys: keys.into_boxed_slice(),
            source,
        }),
        source,
        true,
    ))
}

impl FieldPath {
    pub(crate) fn drops(&self, body: &[u8], test: &ValueTest) -> Result<bool, RecordError> {
        let mut sc = Scanner::new(body);
        for (depth, key) in self.keys.iter().enumerate() {
            match sc.peek()? {
                Token::Object => {}
                Token::Null if depth > 0 => return test.drops(None),
                _ if depth == 0 => return Err(malformed(sc.pos, "an object")),
                token => {
                    return Err(RecordError::Value {
                        column: test.field().clone(),
                        reason: format!("the filter reads a key of {}", token.name()),
                    });
                }
            }
            sc.open(b'{');
            let mut first = true;
            loop {
                let Some(k) = sc.next_key(first)? else {
                    return test.drops(None);
                };
                first = false;
                if k.eq_ignore_ascii_case(key) {
                    break;
                }
                sc.skip(depth + 1)?;
            }
        }
        let token = sc.peek()?;
        let fits = matches!(
            (self.source, token),
            (_, Token::Null)
                | (Source::Any | Source::Other(_), _)
                | (Source::Str, Token::String)
                | (Source::Int64(_) | Source::Number, Token::Number)
                | (Source::Bool, Token::True | Token::False)
        );
        if !fits {
            return Err(RecordError::Value {
                column: test.field().clone(),
                reason: format!(
                    "the filter's field is {}, and its schema says {}",
                    token.name(),
                    self.source.describe()
                ),
            });
        }
        match token {
            Token::Null => test.drops(None),
            Token::String => {
                let text = sc.string()?;
                test.drops(Some(Scalar::Str(&text)))
            }
            Token::Number => {
                let n = sc.number()?;
                let text = std::str::from_utf8(n.bytes).expect("a number's text is ASCII");
                test.drops(Some(Scalar::Number(text)))
            }
            Token::True | Token::False => test.drops(Some(Scalar::Bool(sc.boolean()?))),
            Token::Object | Token::Array => test.drops(Some(PRESENT)),
        }
    }
}
