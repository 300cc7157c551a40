//! A plan's filters on a field's value (docs/mapping.md, "Transforms"): the field's path resolved
//! against the writer schema when the plan is compiled, and read from each record before the
//! row is: the fields before it skipped, nothing after it read. The comparison is
//! `transforms/predicate.rs`'s; the Protobuf and JSON readers are `protobuf/field_path.rs` and
//! `json/field_path.rs`, the Avro one is here. A plan without one pays one branch per record.

use crate::error::{PlanError, RecordError};
use crate::exec;
use crate::ops::{AvroRead, Skip};
use crate::reader::AvroReader;
use crate::schema::{AvroSchema, Kind, NodeId};
use crate::transforms::{FilterRecords, Scalar, Source, Transform, ValueTest};

/// A value that is there, for a test that asks only whether it is null: it equals no literal.
pub(crate) const PRESENT: Scalar<'static> = Scalar::Bytes(&[]);

/// The field filters of a plan, in list order: a record is filtered when one drops it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldFilters(Box<[FieldFilter]>);

#[derive(Debug, Clone)]
struct FieldFilter {
    read: FieldRead,
    test: ValueTest,
}

/// Where a format finds the field in a record's bytes.
#[derive(Debug, Clone)]
pub(crate) enum FieldRead {
    Avro(AvroPath),
    Protobuf(crate::protobuf::FieldPath),
    Json(crate::json::FieldPath),
}

impl FieldFilters {
    /// The filters on a field of `list`, each resolved by `resolve` (the format's reader, the
    /// field's kind and whether it can be null, or why the path does not name a field).
    pub(crate) fn compile(
        list: &[Transform],
        mut resolve: impl FnMut(&str) -> Result<(FieldRead, Source, bool), String>,
    ) -> Result<FieldFilters, PlanError> {
        let mut filters = Vec::new();
        for t in list {
            let Transform::Filter(
                f @ FilterRecords {
                    field: Some(path), ..
                },
            ) = t
            else {
                continue;
            };
            let bad = |reason: String| PlanError::Transform {
                transform: t.describe(),
                reason,
            };
            let (read, source, nullable) = resolve(path).map_err(bad)?;
            let test = ValueTest::compile(f, source, nullable).map_err(bad)?;
            filters.push(FieldFilter { read, test });
        }
        Ok(FieldFilters(filters.into_boxed_slice()))
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether one of the filters drops the record whose value (the Avro binary, the Protobuf
    /// message or the JSON text, without framing) is `body`.
    #[inline(never)]
    pub(crate) fn drop_record(&self, body: &[u8]) -> Result<bool, RecordError> {
        for f in self.0.iter() {
            let drops = match &f.read {
                FieldRead::Avro(p) => p.drops(body, &f.test),
                FieldRead::Protobuf(p) => p.drops(body, &f.test),
                FieldRead::Json(p) => p.drops(body, &f.test),
            }?;
            if drops {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// A field of an Avro record: at each step, the fields before it skipped and, where the
/// step's value is a union of null and one type, its branch read.
#[derive(Debug, Clone)]
pub(crate) struct AvroPath {
    steps: Box<[AvroStep]>,
    /// `None` for a value only `is_null` asks about (an enum, a logical type's bytes): it is
    /// not read.
    read: Option<AvroRead>,
}

#[derive(Debug, Clone)]
struct AvroStep {
    before: Box<[Skip]>,
    /// The union's number of branches and the null branch's index.
    union: Option<(usize, usize)>,
}

/// `path` in the writer schema: each step a field of a record (names match case-blind), the
/// last a scalar; a union of null and one type is a value that may be null. `skip` builds the
/// skip of a field's schema (the compiler's, which charges its budget).
pub(crate) fn avro(
    schema: &AvroSchema,
    path: &str,
    skip: &mut dyn FnMut(NodeId) -> Result<Skip, PlanError>,
) -> Result<(FieldRead, Source, bool), String> {
    let mut record = schema.root;
    let mut steps = Vec::new();
    let mut nullable = false;
    let names: Vec<&str> = path.split('.').collect();
    for (depth, name) in names.iter().enumerate() {
        let Kind::Record(r) = &schema.node(record).kind else {
            unreachable!("each step descends into a record");
        };
        let Some(at) = (r.fields.iter()).position(|f| f.name.eq_ignore_ascii_case(name)) else {
            return Err(format!(
                "the writer schema has no field {}",
                names[..=depth].join(".")
            ));
        };
        let before = (r.fields[..at].iter())
            .map(|f| skip(f.schema).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let (union, value) = nullable_union(schema, r.fields[at].schema, path)?;
        nullable |= union.is_some();
        steps.push(AvroStep {
            before: before.into_boxed_slice(),
            union,
        });
        if depth + 1 < names.len() {
            if !matches!(schema.node(value).kind, Kind::Record(_)) {
                return Err(format!(
                    "field {} is not a record: {path} names nothing inside it",
                    names[..=depth].join(".")
                ));
            }
            record = value;
            continue;
        }
        let (read, source) = crate::compile::avro_read(schema, value);
        if matches!(schema.node(value).kind, Kind::Null) {
            return Err(format!("field {path} is always null"));
        }
        return Ok((
            FieldRead::Avro(AvroPath {
                steps: steps.into_boxed_slice(),
                read: (!matches!(source, Source::Other(_))).then_some(read),
            }),
            source,
            nullable,
        ));
    }
    unreachable!("a path has at least one name")
}

/// A union of null and one type: its branch count and null index, and the other type; any
/// other node is itself.
fn nullable_union(
    schema: &AvroSchema,
    id: NodeId,
    path: &str,
) -> Result<(Option<(usize, usize)>, NodeId), String> {
    let Kind::Union(branches) = &schema.node(id).kind else {
        return Ok((None, id));
    };
    let null = branches
        .iter()
        .position(|b| matches!(schema.node(*b).kind, Kind::Null));
    let others: Vec<NodeId> = (branches.iter())
        .copied()
        .filter(|b| !matches!(schema.node(*b).kind, Kind::Null))
        .collect();
    match (null, others.as_slice()) {
        (Some(null), [one]) => Ok((Some((branches.len(), null)), *one)),
        _ => Err(format!(
            "a union of several types is on the way to field {path}: which branch the literal is compared to would be a guess"
        )),
    }
}

impl AvroPath {
    fn drops(&self, body: &[u8], test: &ValueTest) -> Result<bool, RecordError> {
        let mut r = AvroReader::new(body);
        for step in self.steps.iter() {
            for s in step.before.iter() {
                exec::skip(s, &mut r)?;
            }
            if let Some((branches, null)) = step.union
                && r.branch(branches)? == null
            {
                return test.drops(None);
            }
        }
        match self.read {
            Some(read) => test.drops(Some(exec::read_scalar(read, &mut r)?)),
            None => test.drops(Some(PRESENT)),
        }
    }
}
