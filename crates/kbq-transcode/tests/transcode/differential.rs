//! The flat executor (`src/flat/`) against the tree executor it replaced (kept as the reference,
//! `Plan::transcode_reference`): the same rows, byte for byte, and the same errors, naming the
//! same column, on the end-to-end benchmark's orders as generated and mutated, and on decimals
//! of every length spliced into records. Every Avro record the other modules transcode is
//! compared too (`support/differential.rs`, the golden rows, the vectors, the property tests),
//! and so is every input of both fuzzers (`support/case.rs`). Fixed seeds; about two seconds in
//! a debug build.

use kbq_transcode::{AvroSchema, DeriveOptions, Plan, PlanOptions, table_schema_from_avro};
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

/// The top-level fields of a Protobuf message as byte ranges, or `None` when it does not parse
/// (groups included, which the orders do not have).
fn proto_fields(b: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let x = *b.get(*i)?;
            *i += 1;
            v |= ((x & 0x7f) as u64) << shift;
            if x < 0x80 {
                return Some(v);
            }
        }
        None
    }
    let mut fields = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let key = varint(b, &mut i)?;
        match key & 7 {
            0 => drop(varint(b, &mut i)?),
            1 => i += 8,
            2 => i = i.checked_add(usize::try_from(varint(b, &mut i)?).ok()?)?,
            5 => i += 4,
            _ => return None,
        }
        if i > b.len() {
            return None;
        }
        fields.push(start..i);
    }
    Some(fields)
}

/// A field-level change protobuf allows or must refuse: a field repeated, fields in another
/// order, an unknown field added, a field of another record spliced in, a key given another
/// wire type; or, for a record that does not parse, a byte-level mutation.
fn mutate_proto(rng: &mut StdRng, input: &mut Vec<u8>, other: &[u8]) {
    let (Some(fields), Some(others)) = (proto_fields(input), proto_fields(other)) else {
        return mutate(rng, input);
    };
    if fields.is_empty() || others.is_empty() {
        return mutate(rng, input);
    }
    let mut chunks: Vec<Vec<u8>> = fields.iter().map(|r| input[r.clone()].to_vec()).collect();
    match rng.random_range(0..6) {
        0 => {
            let c = chunks[rng.random_range(0..chunks.len())].clone();
            chunks.insert(rng.random_range(0..=chunks.len()), c);
        }
        1 => {
            for i in (1..chunks.len()).rev() {
                chunks.swap(i, rng.random_range(0..=i));
            }
        }
        2 => {
            let number: u64 = rng.random_range(21..3000);
            let mut c = Vec::new();
            let key = number << 3 | [0u64, 1, 2, 5][rng.random_range(0..4)];
            let mut v = key;
            while v >= 0x80 {
                c.push(v as u8 | 0x80);
                v >>= 7;
            }
            c.push(v as u8);
            match key & 7 {
                0 => c.push(rng.random_range(0..0x80)),
                1 => c.extend([7; 8]),
                2 => c.extend([3, b'a', b'b', b'c']),
                _ => c.extend([7; 4]),
            }
            chunks.insert(rng.random_range(0..=chunks.len()), c);
        }
        3 => {
            let r = others[rng.random_range(0..others.len())].clone();
            chunks.insert(rng.random_range(0..=chunks.len()), other[r].to_vec());
        }
        4 => {
            let i = rng.random_range(0..chunks.len());
            let c = &mut chunks[i];
            c[0] = (c[0] & !7) | rng.random_range(0..8);
        }
        _ => {
            let i = rng.random_range(0..chunks.len());
            mutate(rng, &mut chunks[i]);
        }
    }
    *input = chunks.concat();
}

/// The Protobuf executor (`src/protobuf/flat.rs`) against the reference (`src/protobuf/exec.rs`)
/// on the benchmark's orders in Protobuf (`orders::ProtoOrders`), as generated and mutated: bit
/// flips, truncation, splices, duplicate and reordered fields, unknown fields, wrong wire types.
#[test]
fn the_benchmark_orders_in_protobuf_and_their_mutations_give_the_same_rows_and_errors() {
    let orders = orders::ProtoOrders::new();
    let mut rng = StdRng::seed_from_u64(34);
    let mut out = Vec::with_capacity(1 << 16);
    for (k, proto) in orders.proto.iter().enumerate() {
        out.clear();
        orders
            .plan
            .transcode_both(proto, Some(&meta(k as u64)), &mut out)
            .expect("generated orders transcode");
    }
    let (mut accepted, mut refused) = (0, 0);
    for k in 0..20_000u64 {
        let n = orders.proto.len();
        let mut input = orders.proto[rng.random_range(0..n)].clone();
        let other = &orders.proto[rng.random_range(0..n)];
        for _ in 0..rng.random_range(1..3) {
            if rng.random_range(0..3) == 0 {
                mutate(&mut rng, &mut input);
            } else {
                mutate_proto(&mut rng, &mut input, other);
            }
        }
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

/// The well-known messages the Protobuf executor reads in place (`Timestamp`, `google.type.Date`,
/// `confluent.type.Decimal`) and the enum it writes from a table, with their fields in any
/// order, repeated, missing, of other wire types, and values at and past every limit: the same
/// rows and errors as the reference's general path.
#[test]
fn protobuf_timestamps_dates_decimals_and_enums_give_the_same_rows_and_errors() {
    use kbq_transcode::protobuf::{MessagePath, ProtoSchema};
    let schema = ProtoSchema::compile(
        r#"syntax = "proto3";
        import "google/protobuf/timestamp.proto";
        import "google/type/date.proto";
        import "confluent/type/decimal.proto";
        enum E { A = 0; B = 1; C = 7; D = 300; N = -1; }
        message M {
          google.protobuf.Timestamp ts = 1; google.type.Date d = 2;
          confluent.type.Decimal n = 3; confluent.type.Decimal b = 4; E e = 5;
          repeated confluent.type.Decimal ns = 6; repeated E es = 7;
        }"#,
        &[],
    )
    .unwrap();
    let table = serde_json::from_str(
        r#"{"fields":[{"name":"ts","type":"TIMESTAMP"},{"name":"d","type":"DATE"},
        {"name":"n","type":"NUMERIC"},{"name":"b","type":"BIGNUMERIC"},
        {"name":"e","type":"STRING"},{"name":"ns","type":"NUMERIC","mode":"REPEATED"},
        {"name":"es","type":"STRING","mode":"REPEATED"}]}"#,
    )
    .unwrap();
    let writer = schema.message(&MessagePath::FIRST).unwrap();
    let plan = Plan::compile_protobuf(&writer, &table, &PlanOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(35);
    let varint = |out: &mut Vec<u8>, mut v: u64| {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    };
    // A value near a limit: small, around the ranges' edges, or anything.
    let value = |rng: &mut StdRng| -> u64 {
        match rng.random_range(0..6) {
            0 => rng.random_range(0..40),
            1 => rng.random_range(0..40u64).wrapping_neg(),
            2 => [
                253_402_300_799u64,
                253_402_300_800,
                62_135_596_800u64.wrapping_neg(),
            ][rng.random_range(0..3)]
            .wrapping_add(rng.random_range(0..3)),
            3 => [9999u64, 10_000, 0, 12, 13, 28, 29, 30, 31, 32][rng.random_range(0..10)],
            4 => 999_999_999 + rng.random_range(0..3),
            _ => rng.random::<u64>() >> rng.random_range(0..64),
        }
    };
    let (mut accepted, mut refused) = (0, 0);
    let mut out = Vec::new();
    for _ in 0..30_000 {
        let mut record = Vec::new();
        for _ in 0..rng.random_range(1..6) {
            let field = rng.random_range(1..8u64);
            let mut body = Vec::new();
            for _ in 0..rng.random_range(0..5) {
                // Mostly the message's own fields with their wire types, sometimes not.
                let number = rng.random_range(1..5u64);
                let wire = if rng.random_range(0..12) == 0 {
                    rng.random_range(0..6)
                } else if field >= 3 && field != 5 && field != 7 && number == 1 {
                    2
                } else {
                    0
                };
                varint(&mut body, number << 3 | wire);
                match wire {
                    2 => {
                        let n = match rng.random_range(0..4) {
                            0 => rng.random_range(0..=8),
                            1 => rng.random_range(8..=20),
                            _ => rng.random_range(0..=3),
                        };
                        body.push(n as u8);
                        body.extend((0..n).map(|_| rng.random::<u8>()));
                    }
                    1 => body.extend(rng.random::<u64>().to_le_bytes()),
                    5 => body.extend(rng.random::<u32>().to_le_bytes()),
                    // A decimal's scale stays small: the general path rescales a zero by
                    // 10^19 per step, 10^8 steps for a scale of -2^31.
                    _ if number == 3 && matches!(field, 3 | 4 | 6) => {
                        varint(&mut body, rng.random_range(-3i64..45) as u64)
                    }
                    _ => varint(&mut body, value(&mut rng)),
                }
            }
            if rng.random_range(0..20) == 0 {
                body.truncate(rng.random_range(0..=body.len()));
            }
            if field == 5 || (field == 7 && rng.random()) {
                varint(&mut record, field << 3);
                varint(&mut record, value(&mut rng));
            } else {
                varint(&mut record, field << 3 | 2);
                varint(&mut record, body.len() as u64);
                record.extend(body);
            }
        }
        out.clear();
        match plan.transcode_both(&record, None, &mut out) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(accepted > 3_000 && refused > 3_000, "{accepted} {refused}");
}

/// The ops the flat plan fuses (`src/flat/mod.rs`): a union of null and a string in either
/// order (one op), and an array or map item that is one message (its close and the array's next
/// in one op), nested, beside a union of null and a long that stays a branch op; generated records and
/// their mutations give the tree executor's rows and errors.
#[test]
fn fused_unions_and_item_messages_give_the_same_rows_and_errors() {
    let schema = r#"{"type":"record","name":"f","fields":[
      {"name":"a","type":["null","string"]},
      {"name":"b","type":["string","null"]},
      {"name":"c","type":["null","long"]},
      {"name":"items","type":{"type":"array","items":{"type":"record","name":"i","fields":[
        {"name":"s","type":["string","null"]},
        {"name":"n","type":"long"},
        {"name":"inner","type":{"type":"array","items":{"type":"record","name":"t",
          "fields":[{"name":"t","type":"string"}]}}}]}}},
      {"name":"m","type":{"type":"map","values":{"type":"record","name":"v",
        "fields":[{"name":"x","type":["null","string"]}]}}}]}"#;
    let schema = AvroSchema::parse(schema).unwrap();
    let table = table_schema_from_avro(&schema, &DeriveOptions::default()).unwrap();
    let plan = Plan::compile(&schema, &table, &PlanOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(34);
    fn string(rng: &mut StdRng, avro: &mut Vec<u8>) {
        let n = rng.random_range(0..64u8);
        avro.push(n << 1);
        avro.extend((0..n).map(|i| b'a' + i % 26));
    }
    fn nullable(rng: &mut StdRng, avro: &mut Vec<u8>, string_branch: u8) {
        if rng.random() {
            avro.push(string_branch << 1);
            string(rng, avro);
        } else {
            avro.push((1 - string_branch) << 1);
        }
    }
    let mut out = Vec::with_capacity(1 << 16);
    let (mut accepted, mut refused) = (0, 0);
    for k in 0..6_000 {
        let mut avro = Vec::new();
        nullable(&mut rng, &mut avro, 1);
        nullable(&mut rng, &mut avro, 0);
        if rng.random() {
            avro.push(0);
        } else {
            avro.extend([2, 0x7f]);
        }
        // Arrays in one or two blocks.
        let items = rng.random_range(0..5u8);
        if items > 0 {
            avro.push(items << 1);
            for _ in 0..items {
                nullable(&mut rng, &mut avro, 0);
                avro.push(rng.random_range(0..0x80u8));
                let inner = rng.random_range(0..3u8);
                if inner > 0 {
                    avro.push(inner << 1);
                    for _ in 0..inner {
                        string(&mut rng, &mut avro);
                    }
                }
                avro.push(0);
            }
        }
        avro.push(0);
        let entries = rng.random_range(0..4u8);
        if entries > 0 {
            avro.push(entries << 1);
            for _ in 0..entries {
                string(&mut rng, &mut avro);
                nullable(&mut rng, &mut avro, 1);
            }
        }
        avro.push(0);
        if k % 2 == 1 {
            mutate(&mut rng, &mut avro);
        }
        if k % 64 == 0 {
            out = Vec::with_capacity(rng.random_range(0..4_000));
        }
        match plan.transcode_both(&avro, None, &mut out) {
            Ok(_) => accepted += 1,
            Err(e) => {
                assert!(k % 2 == 1, "a generated record is refused: {e}");
                refused += 1;
            }
        }
    }
    assert!(accepted > 3_000 && refused > 1_000, "{accepted} {refused}");
}

/// Timestamps in milliseconds and nanoseconds, flat ops of their own (`src/flat/`): values at
/// and past TIMESTAMP's range after the scaling, products that overflow an `i64`, negative
/// nanoseconds rounded down, and their mutations give the tree executor's rows and errors.
#[test]
fn timestamps_in_milliseconds_and_nanoseconds_give_the_same_rows_and_errors() {
    use kbq_transcode::{MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS};
    let schema = r#"{"type":"record","name":"t","fields":[
      {"name":"ms","type":{"type":"long","logicalType":"timestamp-millis"}},
      {"name":"ns","type":{"type":"long","logicalType":"timestamp-nanos"}},
      {"name":"opt","type":["null",{"type":"long","logicalType":"timestamp-millis"}]}]}"#;
    let schema = AvroSchema::parse(schema).unwrap();
    let table = table_schema_from_avro(&schema, &DeriveOptions::default()).unwrap();
    let plan = Plan::compile(&schema, &table, &PlanOptions::default()).unwrap();
    let edges = |unit: i64| {
        let (lo, hi) = (MIN_TIMESTAMP_MICROS, MAX_TIMESTAMP_MICROS);
        let mut v = vec![
            0,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            i64::MIN / 1000,
            i64::MAX / 1000,
        ];
        for base in [lo, hi] {
            // `unit` 1000: milliseconds (the micros divided), else nanoseconds (multiplied).
            let b = if unit == 1000 {
                base / 1000
            } else {
                base.saturating_mul(1000)
            };
            // (Every `i64` of nanoseconds is inside the range: these saturate at the ends.)
            v.extend([-1001, -1, 0, 1, 999, 1000, 1001].map(|d| b.saturating_add(d)));
        }
        v
    };
    let (millis, nanos) = (edges(1000), edges(1));
    let mut rng = StdRng::seed_from_u64(35);
    let pick = |rng: &mut StdRng, edges: &[i64]| match rng.random_range(0..3) {
        0 => edges[rng.random_range(0..edges.len())],
        1 => rng.random(),
        _ => rng.random_range(-1i64 << 40..1 << 40),
    };
    let mut out = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for k in 0..6_000 {
        let mut avro = zigzag(pick(&mut rng, &millis));
        avro.extend(zigzag(pick(&mut rng, &nanos)));
        if rng.random() {
            avro.push(2);
            avro.extend(zigzag(pick(&mut rng, &millis)));
        } else {
            avro.push(0);
        }
        if k % 2 == 1 {
            mutate(&mut rng, &mut avro);
        }
        out.clear();
        match plan.transcode_both(&avro, None, &mut out) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(accepted > 1_000 && refused > 1_000, "{accepted} {refused}");
}
