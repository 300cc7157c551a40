//! Drop, rename and mask as the plan compilers see them: which column a field of a record
//! fills, or none, and which value transform (`values.rs`) rewrites it on the way. Each compiler asks once per field of each record it compiles, so the plan
//! holds the answer and a record pays nothing; a transform no compiled field asked for refuses
//! the plan, since it would not apply (a field the writer schema lacks, or one inside a record
//! written whole into a JSON column, whose value would reach the table unmasked).

use std::cell::Cell;
use std::collections::HashMap;

use super::Transform;
use crate::error::PlanError;

/// Where one field of a record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target<'s> {
    /// The column of this name (its own, or the name a rename gives it).
    Column(&'s str),
    /// Nowhere: the field is read and skipped (dropped, or masked).
    Dropped,
    /// Its fields, each into the top-level column `{field}{separator}{name}` (`flatten`).
    Flatten(&'s str),
}

/// The field transforms of a list, by lowercased path, with whether a compiled field asked
/// for each.
#[derive(Debug)]
pub(crate) struct FieldRules<'a> {
    list: &'a [Transform],
    by_path: HashMap<String, usize>,
    used: Vec<Cell<bool>>,
    /// Top-level columns a transform fills (`set` from a value or a header, `mask` with a
    /// value), lowercased, with the transform's index: no field may fill them as well.
    set_columns: Vec<(String, usize)>,
}

impl<'a> FieldRules<'a> {
    pub(crate) fn new(list: &'a [Transform]) -> FieldRules<'a> {
        let by_path = (list.iter().enumerate())
            .filter_map(|(i, t)| t.field().map(|f| (f.to_ascii_lowercase(), i)))
            .collect();
        let set_columns = (list.iter().enumerate())
            .filter_map(|(i, t)| match t {
                Transform::Set(s) if s.fills_column() => Some((s.column.to_ascii_lowercase(), i)),
                Transform::Mask(m) if m.value.is_some() => Some((m.field.to_ascii_lowercase(), i)),
                _ => None,
            })
            .collect();
        FieldRules {
            list,
            by_path,
            used: list.iter().map(|_| Cell::new(false)).collect(),
            set_columns,
        }
    }

    /// Whether a top-level column is filled by a transform rather than by the record's fields.
    pub(crate) fn is_set_column(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        self.set_columns.iter().any(|(c, _)| *c == lower)
    }

    fn rule(&self, prefix: &str, name: &str) -> Option<usize> {
        if self.by_path.is_empty() {
            return None;
        }
        let mut path = String::with_capacity(prefix.len() + name.len());
        path.push_str(prefix);
        path.push_str(name);
        path.make_ascii_lowercase();
        self.by_path.get(&path).copied()
    }

    /// The column the field `name` of the record at `prefix` (`""` for the row, else the
    /// record's column path and a `.`) fills, marking its transform as applied.
    pub(crate) fn target<'s>(
        &'s self,
        prefix: &str,
        name: &'s str,
    ) -> Result<Target<'s>, PlanError> {
        let target = match self.rule(prefix, name) {
            Some(i) => {
                self.used[i].set(true);
                match &self.list[i] {
                    Transform::Rename(r) => Target::Column(&r.to),
                    Transform::Flatten(f) => Target::Flatten(&f.separator),
                    t if t.converts() => Target::Column(name),
                    _ => Target::Dropped,
                }
            }
            None => Target::Column(name),
        };
        if let Target::Column(column) = target
            && prefix.is_empty()
            && let Some((_, j)) =
                (self.set_columns.iter()).find(|(c, _)| c.eq_ignore_ascii_case(column))
        {
            return Err(PlanError::Transform {
                transform: self.list[*j].describe(),
                reason: format!(
                    "field {name} fills column {column} as well: drop or rename the field"
                ),
            });
        }
        Ok(target)
    }

    /// The transform that rewrites the value of field `name` of the record at `prefix` into its
    /// column, if one does (asked after [`FieldRules::target`], or by a column-driven compiler
    /// with the column's source key).
    pub(crate) fn conversion(&self, prefix: &str, name: &str) -> Option<&'a Transform> {
        let list = self.list;
        self.rule(prefix, name)
            .map(|i| &list[i])
            .filter(|t| t.converts())
    }

    /// Refuses a rename onto a field the record keeps: two fields would fill one column.
    /// `names`: the record's field names as the writer schema spells them.
    pub(crate) fn check_record<'n>(
        &self,
        prefix: &str,
        names: impl Iterator<Item = &'n str> + Clone,
    ) -> Result<(), PlanError> {
        if self.by_path.is_empty() {
            return Ok(());
        }
        for name in names.clone() {
            let Some(i) = self.rule(prefix, name) else {
                continue;
            };
            let Transform::Rename(r) = &self.list[i] else {
                continue;
            };
            let clash = names.clone().find(|other| {
                other.eq_ignore_ascii_case(&r.to)
                    && !other.eq_ignore_ascii_case(name)
                    && self.rule(prefix, other).is_none()
            });
            if let Some(other) = clash {
                return Err(PlanError::Transform {
                    transform: self.list[i].describe(),
                    reason: format!(
                        "the record already has a field {prefix}{other}, which fills that column"
                    ),
                });
            }
        }
        Ok(())
    }

    /// For a compiler that works column by column (JSON): the key the column `column` of the
    /// object at `prefix` takes, `None` when its own key is dropped, masked or renamed away and
    /// no rename leads to it.
    pub(crate) fn source_key<'s>(&'s self, prefix: &str, column: &'s str) -> Option<&'s str> {
        if self.by_path.is_empty() {
            return Some(column);
        }
        let renamed_here = self.list.iter().enumerate().find_map(|(i, t)| match t {
            Transform::Rename(r)
                if r.to.eq_ignore_ascii_case(column) && in_record(&r.field, prefix) =>
            {
                Some((i, last(&r.field)))
            }
            _ => None,
        });
        if let Some((_, key)) = renamed_here {
            return Some(key);
        }
        match self.rule(prefix, column) {
            Some(i) if !self.list[i].converts() => None,
            _ => Some(column),
        }
    }

    /// For a column-driven compiler: the keys of the object at `prefix` that fill no column
    /// because a transform removed them (dropped or masked). Each transform of a key in
    /// `exists` (the object's properties; every key for schemaless JSON) counts as applied,
    /// renames too: a renamed key fills its new column (`source_key`), so it is not returned.
    pub(crate) fn removed_keys(&self, prefix: &str, exists: impl Fn(&str) -> bool) -> Vec<&'a str> {
        (self.list.iter().enumerate())
            .filter_map(|(i, t)| {
                let field = t.field().filter(|f| in_record(f, prefix))?;
                if exists(last(field)) {
                    self.used[i].set(true);
                }
                (!matches!(t, Transform::Rename(_) | Transform::Flatten(_)) && !t.converts())
                    .then(|| last(field))
            })
            .collect()
    }

    /// The top-level column the field `child` of the flattened record `parent` fills, refused
    /// when a column of that name takes something else: another field of the row (`siblings`:
    /// the row's field names as the writer schema spells them, after their own transforms), a
    /// column a transform sets, or a Kafka metadata column (`reserved`, lowercased).
    pub(crate) fn flat_column(
        &self,
        parent: &str,
        separator: &str,
        child: &str,
        siblings: &[&str],
        reserved: &[String],
    ) -> Result<String, PlanError> {
        let column = format!("{parent}{separator}{child}");
        let refuse = |what: String| {
            let i = self
                .rule("", parent)
                .expect("a flattened field has its rule");
            Err(PlanError::Transform {
                transform: self.list[i].describe(),
                reason: format!("its field {parent}.{child} would fill column {column}, {what}"),
            })
        };
        for s in siblings.iter().filter(|s| !s.eq_ignore_ascii_case(parent)) {
            let fills = match self.rule("", s).map(|i| &self.list[i]) {
                Some(Transform::Rename(r)) => Some(r.to.as_str()),
                Some(t) if t.converts() => Some(*s),
                Some(_) => None,
                None => Some(*s),
            };
            if fills.is_some_and(|f| f.eq_ignore_ascii_case(&column)) {
                return refuse(format!(
                    "which the field {s} fills as well: drop or rename one"
                ));
            }
        }
        let lower = column.to_ascii_lowercase();
        if let Some((_, j)) = self.set_columns.iter().find(|(c, _)| *c == lower) {
            return refuse(format!("which transforms[{j}] sets as well"));
        }
        if reserved.contains(&lower) {
            return refuse("which is a Kafka metadata column".into());
        }
        Ok(column)
    }

    /// The `flatten` transforms: each record's name and separator.
    pub(crate) fn flattens(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        self.list.iter().filter_map(|t| match t {
            Transform::Flatten(f) => Some((f.field.as_str(), f.separator.as_str())),
            _ => None,
        })
    }

    /// The first field transform no compiled field asked for: it would not apply, so the plan
    /// is refused rather than written without it.
    pub(crate) fn unapplied(&self) -> Result<(), PlanError> {
        for (i, t) in self.list.iter().enumerate() {
            if let Some(field) = t.field()
                && !self.used[i].get()
            {
                return Err(PlanError::Transform {
                    transform: t.describe(),
                    reason: format!(
                        "no field {field} reaches a column of its own: the writer schema lacks it, or a record around it has no column or is written whole into a JSON or STRING column"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Whether `path` names a field of the record at `prefix` (`a.b` is in the record `a.`).
fn in_record(path: &str, prefix: &str) -> bool {
    let parent = match path.rfind('.') {
        Some(dot) => &path[..=dot],
        None => "",
    };
    parent.eq_ignore_ascii_case(prefix)
}

fn last(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}
