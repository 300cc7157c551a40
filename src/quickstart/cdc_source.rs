//! The source database of `quickstart --cdc`: a table `inventory.customers` whose rows are
//! created, updated and deleted by a seeded schedule, written as Debezium would write its change
//! log (the envelope `before`/`after`/`source`/`op`, a delete followed by its tombstone, the key
//! record `{id}` as the Kafka key, both in Confluent framing), and the table's state after every
//! change, which is what the BigQuery table must end equal to.

use std::collections::BTreeMap;

use apache_avro::Schema;
use apache_avro::types::Value;

use super::records::confluent_frame;

/// The value schema: Debezium's envelope around a row of `inventory.customers`.
pub(super) const ENVELOPE: &str = r#"{
  "type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers",
  "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
      {"name": "id", "type": "long"},
      {"name": "name", "type": "string"},
      {"name": "email", "type": "string"},
      {"name": "version", "type": "long", "doc": "how many changes the row has seen"}
    ]}], "default": null},
    {"name": "after", "type": ["null", "Value"], "default": null},
    {"name": "source", "type": {"type": "record", "name": "Source",
      "namespace": "io.debezium.connector.postgresql", "fields": [
      {"name": "connector", "type": "string"},
      {"name": "name", "type": "string"},
      {"name": "table", "type": "string"},
      {"name": "lsn", "type": ["null", "long"], "default": null}
    ]}},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": null}
  ]
}"#;

/// The key schema: the primary key of `inventory.customers`.
pub(super) const KEY: &str = r#"{"type": "record", "name": "Key",
  "namespace": "dbserver1.inventory.customers",
  "fields": [{"name": "id", "type": "long"}]}"#;

pub(super) const VALUE_ID: u32 = 1;
pub(super) const KEY_ID: u32 = 2;

/// A row of the source table (the key is `id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Row {
    pub(super) name: String,
    pub(super) email: String,
    pub(super) version: i64,
}

/// The source table: id → row.
pub(super) type State = BTreeMap<i64, Row>;

/// One Kafka record of the change log.
pub(super) struct Change {
    pub(super) partition: i32,
    pub(super) key: Vec<u8>,
    /// `None`: a tombstone.
    pub(super) value: Option<Vec<u8>>,
}

/// Events written so far, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) reads: u64,
    pub(super) creates: u64,
    pub(super) updates: u64,
    pub(super) deletes: u64,
    pub(super) tombstones: u64,
    /// Creates of a key that had been deleted before.
    pub(super) reinserts: u64,
}

impl Counts {
    /// Change events (tombstones are not events of their own).
    pub(super) fn events(&self) -> u64 {
        self.reads + self.creates + self.updates + self.deletes
    }
}

/// The seeded source: its table, its change log and its position (`source.lsn`).
pub(super) struct Source {
    envelope: Schema,
    key: Schema,
    partitions: i32,
    keys: u64,
    rng: u64,
    lsn: i64,
    pub(super) state: State,
    /// Every key's last version, deleted keys included (a re-insert continues the count, so
    /// that a stale row in BigQuery can never look current).
    versions: BTreeMap<i64, i64>,
    pub(super) counts: Counts,
}

impl Source {
    pub(super) fn new(seed: u64, keys: u64, partitions: i32) -> anyhow::Result<Source> {
        let parse = |text: &str| Schema::parse_str(text).map_err(anyhow::Error::from);
        Ok(Source {
            envelope: parse(ENVELOPE)?,
            key: parse(KEY)?,
            partitions,
            keys,
            rng: seed,
            lsn: 0,
            state: State::new(),
            versions: BTreeMap::new(),
            counts: Counts::default(),
        })
    }

    /// SplitMix64: the same schedule for a seed on every machine and every build.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The records of the next change event (a delete brings its tombstone). The first events
    /// are the snapshot (`r` of three keys in four); then a key is picked — half of the time one
    /// of the hottest 5 %, so many changes of one key fall into one request — and updated (3 in
    /// 4) or deleted if it exists, created again if it was deleted.
    pub(super) fn next_change(&mut self) -> anyhow::Result<Vec<Change>> {
        let snapshot = self.counts.reads < (self.keys * 3 / 4).max(1);
        let id = if snapshot {
            self.counts.reads as i64
        } else {
            let hot = (self.keys / 20).max(1);
            let r = self.next();
            let range = if r & 1 == 0 { hot } else { self.keys };
            ((r >> 1) % range) as i64
        };
        let exists = self.state.contains_key(&id);
        if snapshot {
            self.counts.reads += 1;
            self.upsert(id, "r")
        } else if !exists {
            self.counts.creates += 1;
            if self.versions.contains_key(&id) {
                self.counts.reinserts += 1;
            }
            self.upsert(id, "c")
        } else if self.next().is_multiple_of(4) {
            self.counts.deletes += 1;
            self.counts.tombstones += 1;
            self.delete(id)
        } else {
            self.counts.updates += 1;
            self.upsert(id, "u")
        }
    }

    fn row(id: i64, version: i64) -> Row {
        Row {
            name: format!("customer {id} v{version}"),
            email: format!("c{id}.v{version}@example.com"),
            version,
        }
    }

    fn upsert(&mut self, id: i64, op: &str) -> anyhow::Result<Vec<Change>> {
        let version = {
            let v = self.versions.entry(id).or_insert(0);
            *v += 1;
            *v
        };
        let before = self.state.get(&id).cloned();
        let after = Source::row(id, version);
        let value = self.event(op, id, before, Some(after.clone()))?;
        self.state.insert(id, after);
        Ok(vec![self.record(id, Some(value))?])
    }

    /// A delete event and its tombstone, as Debezium writes them.
    fn delete(&mut self, id: i64) -> anyhow::Result<Vec<Change>> {
        let before = self.state.remove(&id);
        let value = self.event("d", id, before, None)?;
        Ok(vec![self.record(id, Some(value))?, self.record(id, None)?])
    }

    fn record(&self, id: i64, value: Option<Vec<u8>>) -> anyhow::Result<Change> {
        let key = Value::Record(vec![("id".into(), Value::Long(id))]);
        Ok(Change {
            // Debezium's producer keeps a key in one partition; the modulo stands in for its
            // partitioner's hash.
            partition: (id % i64::from(self.partitions)) as i32,
            key: framed(&self.key, KEY_ID, key)?,
            value,
        })
    }

    fn event(
        &mut self,
        op: &str,
        id: i64,
        before: Option<Row>,
        after: Option<Row>,
    ) -> anyhow::Result<Vec<u8>> {
        self.lsn += 1;
        let row = |r: Option<Row>| match r {
            Some(r) => Value::Union(
                1,
                Box::new(Value::Record(vec![
                    ("id".into(), Value::Long(id)),
                    ("name".into(), Value::String(r.name)),
                    ("email".into(), Value::String(r.email)),
                    ("version".into(), Value::Long(r.version)),
                ])),
            ),
            None => Value::Union(0, Box::new(Value::Null)),
        };
        let value = Value::Record(vec![
            ("before".into(), row(before)),
            ("after".into(), row(after)),
            (
                "source".into(),
                Value::Record(vec![
                    ("connector".into(), Value::String("postgresql".into())),
                    ("name".into(), Value::String("dbserver1".into())),
                    ("table".into(), Value::String("customers".into())),
                    (
                        "lsn".into(),
                        Value::Union(1, Box::new(Value::Long(self.lsn))),
                    ),
                ]),
            ),
            ("op".into(), Value::String(op.into())),
            (
                "ts_ms".into(),
                Value::Union(1, Box::new(Value::Long(1_767_225_600_000 + self.lsn))),
            ),
        ]);
        framed(&self.envelope, VALUE_ID, value)
    }
}

/// `value` in Avro binary behind the Confluent header of `schema_id`.
fn framed(schema: &Schema, schema_id: u32, value: Value) -> anyhow::Result<Vec<u8>> {
    let body = apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()
        .and_then(|w| w.write_value_to_vec(value))
        .map_err(anyhow::Error::from)?;
    let mut out = Vec::with_capacity(body.len() + 5);
    confluent_frame(schema_id, &body, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_snapshots_then_updates_deletes_and_reinserts() {
        let mut source = Source::new(7, 50, 4).unwrap();
        let mut records = 0;
        for _ in 0..2_000 {
            records += source.next_change().unwrap().len() as u64;
        }
        let c = source.counts.clone();
        assert_eq!(c.reads, 37);
        assert!(
            c.creates > c.reinserts,
            "keys outside the snapshot are created: {c:?}"
        );
        assert_eq!(c.events(), 2_000);
        assert_eq!(records, c.events() + c.tombstones);
        assert!(c.updates > 0 && c.deletes > 0 && c.reinserts > 0, "{c:?}");
        // Every live row is at its key's last version.
        for (id, row) in &source.state {
            assert_eq!(row.version, source.versions[id]);
        }
        // The same seed writes the same log.
        let mut again = Source::new(7, 50, 4).unwrap();
        for _ in 0..2_000 {
            again.next_change().unwrap();
        }
        assert_eq!(again.state, source.state);
    }

    #[test]
    #[allow(deprecated)] // the reader replacement needs more ceremony than a test oracle deserves
    fn events_decode_as_the_envelope_with_the_key_in_the_kafka_key() {
        let mut source = Source::new(1, 3, 2).unwrap();
        let first = source.next_change().unwrap();
        assert_eq!(first.len(), 1);
        let value = first[0].value.as_ref().unwrap();
        assert_eq!(&value[..5], &[0, 0, 0, 0, VALUE_ID as u8]);
        let schema = Schema::parse_str(ENVELOPE).unwrap();
        let decoded = apache_avro::from_avro_datum(&schema, &mut &value[5..], None).unwrap();
        let Value::Record(fields) = decoded else {
            panic!("not a record")
        };
        assert_eq!(fields[3], ("op".to_string(), Value::String("r".into())));
        assert_eq!(&first[0].key[..5], &[0, 0, 0, 0, KEY_ID as u8]);
        assert_eq!(first[0].partition, 0);
    }
}
