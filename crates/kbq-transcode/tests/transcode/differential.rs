//! The flat executor (`src/flat/`) against the tree executor it replaced (kept as the reference,
//! `Plan::transcode_reference`): the same rows, byte for byte, and the same errors, naming the
//! same column, on the end-to-end benchmark's orders as generated and mutated, and on decimals
//! of every length spliced into records. Every Avro record the other modules transcode is
//! compared too (`support/differential.rs`, the golden rows, the vectors, the property tests),
//! and so is every input of both fuzzers (`support/case.rs`). Fixed seeds; about two seconds in
//! a debug build.

use kbq_transcode::{AvroSchema, Plan, PlanOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fuzz::mutate;
use crate::support::differential::Both;
use orders::meta;

#[path = "../../benches/common/orders.rs"]
pub(crate) mod orders;

#[test]
fn the_benchmark_orders_and_their_mutations_give_the_same_rows_and_errors() {
    let orders = orders::Orders::new();
    let mut rng = StdRng::seed_from_u64(31);
    let mut out = Vec::with_capacity(1 << 16);
    let (mut accepted, mut refused) = (0, 0);
    for (k, avro) in orders.avro.iter().enumerate() {
        out.clear();
        orders
            .plan
            .transcode_both(avro, Some(&meta(k as u64)), &mut out)
            .expect("generated orders transcode");
    }
    for k in 0..20_000u64 {
        let mut input = orders.avro[rng.random_range(0..orders.avro.len())].clone();
        mutate(&mut rng, &mut input);
        // A batch that already holds rows, with no room left or room for many records: the
        // executor checks the room per write, or once per record against the plan's bound
        // (which debug builds check at every write).
        if k % 64 == 0 {
            out = Vec::with_capacity(rng.random_range(0..64_000));
        }
        match orders.plan.transcode_both(&input, Some(&meta(k)), &mut out) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    // Both outcomes are exercised.
    assert!(accepted > 300 && refused > 10_000, "{accepted} {refused}");
}

/// `bytes` decimals at scales around NUMERIC's 9 and into BIGNUMERIC, of 0 to 40 bytes: the
/// eight-byte fast path, its overflow into the general path, rounding and range errors.
#[test]
fn decimals_of_every_length_and_scale_give_the_same_rows_and_errors() {
    let schema = r#"{"type":"record","name":"d","fields":[
      {"name":"n0","type":{"type":"bytes","logicalType":"decimal","precision":38,"scale":0}},
      {"name":"n9","type":{"type":"bytes","logicalType":"decimal","precision":38,"scale":9}},
      {"name":"n12","type":{"type":"bytes","logicalType":"decimal","precision":40,"scale":12}},
      {"name":"b2","type":{"type":"bytes","logicalType":"decimal","precision":60,"scale":2}},
      {"name":"b38","type":{"type":"bytes","logicalType":"decimal","precision":76,"scale":38}}]}"#;
    let table = serde_json::from_str(
        r#"{"fields":[{"name":"n0","type":"NUMERIC"},{"name":"n9","type":"NUMERIC"},
        {"name":"n12","type":"NUMERIC"},{"name":"b2","type":"BIGNUMERIC"},
        {"name":"b38","type":"BIGNUMERIC"}]}"#,
    )
    .unwrap();
    let plan = Plan::compile(
        &AvroSchema::parse(schema).unwrap(),
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(32);
    let mut out = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..24_000 / 5 {
        let mut avro = Vec::new();
        for _ in 0..5 {
            let len = match rng.random_range(0..4) {
                0 => rng.random_range(0..=40usize),
                _ => rng.random_range(0..=9usize),
            };
            let mut b: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            // Sign extension and values near the boundaries.
            if len > 0 && rng.random() {
                b[0] = if rng.random() { 0xff } else { 0x00 };
            }
            avro.push((len as u8) << 1);
            avro.extend(b);
        }
        out.clear();
        match plan.transcode_both(&avro, None, &mut out) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(accepted > 100 && refused > 100, "{accepted} {refused}");
}

/// Records whose values grow the most from Avro to proto (a one-byte long into a ten-byte
/// varint, a one-byte decimal into sixteen bytes, a one-byte enum into its longest symbol, items
/// of the fewest bytes, each a nested message): written once per record against the plan's
/// bound on a record's output, which debug builds check at every write.
#[test]
fn values_that_grow_the_most_stay_within_the_plans_bound() {
    let schema = r#"{"type":"record","name":"g","fields":[
      {"name":"e","type":{"type":"enum","name":"E","symbols":["A","a_symbol_much_longer_than_one_byte"]}},
      {"name":"items","type":{"type":"array","items":{"type":"record","name":"i","fields":[
        {"name":"l","type":"long"},{"name":"f","type":"float"},
        {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":76,"scale":0}},
        {"name":"n","type":["null","long"]}]}}}]}"#;
    let table = serde_json::from_str(
        r#"{"fields":[{"name":"e","type":"STRING"},{"name":"items","type":"RECORD",
        "mode":"REPEATED","fields":[{"name":"l","type":"INT64"},{"name":"f","type":"FLOAT64"},
        {"name":"d","type":"BIGNUMERIC"},{"name":"n","type":"INT64"}]}]}"#,
    )
    .unwrap();
    let plan = Plan::compile(
        &AvroSchema::parse(schema).unwrap(),
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(33);
    let mut out = Vec::with_capacity(1 << 20);
    for _ in 0..2_000 {
        let items = rng.random_range(0..60u8);
        let mut avro = vec![0x02, items << 1];
        for _ in 0..items {
            // -1, a float, a one-byte decimal -1, a null or a -1.
            avro.extend([0x01, 0, 0, 0x80, 0x3f, 0x02, 0xff]);
            avro.extend(if rng.random() {
                &[0x00][..]
            } else {
                &[0x02, 0x01]
            });
        }
        if items > 0 {
            avro.push(0);
        }
        out.clear();
        plan.transcode_both(&avro, None, &mut out).unwrap();
    }
}

/// Skipped arrays, maps, records and unions (fields the table does not have), a map column and a
/// union whose first branch is a record holding a union: ops the flat executor once handed to
/// the tree executor, and a branch table a nested union once overwrote. Generated records and
/// their mutations.
#[test]
fn skipped_values_maps_and_unions_of_records_give_the_same_rows_and_errors() {
    let inner = r#"{"type":"record","name":"In","fields":[
        {"name":"a","type":["null","string"]},{"name":"b","type":"long"}]}"#;
    let kept = format!(
        r#"{{"name":"u","type":[{inner},"null"]}},
        {{"name":"m","type":{{"type":"map","values":"long"}}}},
        {{"name":"z","type":"int"}}"#
    );
    let skipped = r#"
        {"name":"sa","type":{"type":"array","items":{"type":"record","name":"SA","fields":[
          {"name":"x","type":["null","long"]},
          {"name":"sm","type":{"type":"map","values":"string"}}]}}},
        {"name":"sm2","type":{"type":"map","values":["null",{"type":"array","items":"int"}]}},
        {"name":"sr","type":{"type":"record","name":"SR","fields":[
          {"name":"e","type":{"type":"enum","name":"E","symbols":["P","Q","R"]}},
          {"name":"f","type":{"type":"fixed","name":"F","size":3}},
          {"name":"n","type":["null","boolean","double"]}]}},
        {"name":"su","type":["null","string"]},
        {"name":"sn","type":{"type":"array","items":"null"}}"#;
    let record = |fields: &str| format!(r#"{{"type":"record","name":"r","fields":[{fields}]}}"#);
    let writer = AvroSchema::parse(&record(&format!("{kept},{skipped}"))).unwrap();
    let table = kbq_transcode::table_schema_from_avro(
        &AvroSchema::parse(&record(&kept)).unwrap(),
        &kbq_transcode::DeriveOptions::default(),
    )
    .unwrap();
    let plan = Plan::compile(&writer, &table, &PlanOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(34);
    let mut out = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for k in 0..20_000 {
        let mut e = Enc(Vec::new(), &mut rng);
        // u: the record (with a null or a string) or null
        if e.pick(2) == 0 {
            e.long(0);
            match e.pick(2) {
                0 => e.long(0),
                _ => {
                    e.long(1);
                    e.text();
                }
            }
            e.any_long();
        } else {
            e.long(1);
        }
        e.blocks(|e| {
            e.text();
            e.any_long();
        });
        e.int();
        e.blocks(|e| {
            match e.pick(2) {
                0 => e.long(0),
                _ => {
                    e.long(1);
                    e.any_long();
                }
            }
            e.blocks(|e| {
                e.text();
                e.text();
            });
        });
        e.blocks(|e| {
            e.text();
            match e.pick(2) {
                0 => e.long(0),
                _ => {
                    e.long(1);
                    e.blocks(|e| e.int());
                }
            }
        });
        let sym = e.pick(3) as i64;
        e.long(sym);
        e.0.extend([1, 2, 3]);
        match e.pick(3) {
            0 => e.long(0),
            1 => {
                e.long(1);
                e.0.push(1);
            }
            _ => {
                e.long(2);
                e.0.extend(1.5f64.to_le_bytes());
            }
        }
        match e.pick(2) {
            0 => e.long(0),
            _ => {
                e.long(1);
                e.text();
            }
        }
        e.blocks(|_| {});
        let mut avro = e.0;
        if k % 2 == 1 {
            mutate(&mut rng, &mut avro);
        }
        out.clear();
        match plan.transcode_both(&avro, None, &mut out) {
            Ok(_) => accepted += 1,
            Err(e) => {
                assert!(k % 2 == 1, "a generated record is refused: {e}");
                refused += 1
            }
        }
    }
    assert!(accepted > 10_000 && refused > 3_000, "{accepted} {refused}");
}

/// A record's Avro bytes, written value by value from a seeded generator.
struct Enc<'r>(Vec<u8>, &'r mut StdRng);

impl Enc<'_> {
    fn pick(&mut self, n: u32) -> u32 {
        self.1.random_range(0..n)
    }

    fn long(&mut self, v: i64) {
        self.0.extend(zigzag(v));
    }

    fn any_long(&mut self) {
        let v = self.1.random::<i64>() >> self.1.random_range(0..64);
        self.long(v);
    }

    fn int(&mut self) {
        let v = self.1.random::<i32>() >> self.1.random_range(0..32);
        self.long(v as i64);
    }

    fn text(&mut self) {
        let n = self.1.random_range(0..40);
        let s: String = (0..n)
            .map(|_| ['a', 'Z', '0', 'ß', '€', ' '][self.1.random_range(0..6)])
            .collect();
        self.long(s.len() as i64);
        self.0.extend(s.as_bytes());
    }

    /// Zero to three blocks of zero to four items (a negative count with its byte size now and
    /// then), then the end.
    fn blocks(&mut self, mut item: impl FnMut(&mut Self)) {
        for _ in 0..self.1.random_range(0..4) {
            let n = self.1.random_range(1..5);
            let at = self.0.len();
            for _ in 0..n {
                item(self);
            }
            let mut count = zigzag(n);
            if self.pick(4) == 0 {
                count = zigzag(-n);
                count.extend(zigzag((self.0.len() - at) as i64));
            }
            self.0.splice(at..at, count);
        }
        self.long(0);
    }
}

fn zigzag(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
    out
}
