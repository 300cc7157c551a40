//! A bounded mutation fuzzer for the transcoder on stable Rust: valid Avro records of the fuzz
//! case's schema, which exercises every op (`tests/support/transcode_case.rs`, the schema the
//! coverage-guided target in `fuzz/` explores too), are mutated (bit flips, truncation, splices,
//! random varints) and transcoded. No input may panic; an error must leave the batch buffer as it
//! was; a success must be a row that decodes with the plan's descriptor. Schema texts are mutated
//! too, for the schema parser and the plan compiler.
//!
//! The test command runs committed seeds, each for a fixed number of inputs, so it passes or
//! fails the same way on every machine and every run. Fresh random seeds run only through
//! `scripts/fuzz-soak.sh` (`KBQ_FUZZ_FRESH_SECONDS`); `FUZZ_SEED` replays the seed a failure
//! printed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// The seeds the test command runs; every counterexample ever found joins them.
const COMMITTED_SEEDS: std::ops::Range<u64> = 0..32;
/// Mutated records per seed in the test command.
const RECORDS_PER_SEED: u64 = 16_384;
/// Mutated schema texts per seed in the test command.
const SCHEMAS_PER_SEED: u64 = 1_000;

/// Which seeds to run, and for how long each: `FUZZ_SEED` alone when set (a replay); fresh
/// random seeds until `KBQ_FUZZ_FRESH_SECONDS` have passed when that is set (the soak);
/// otherwise the committed ones. `per_seed` is the work of one seed in the committed run.
fn each_seed(per_seed: u64, mut run: impl FnMut(u64, u64)) {
    let env = |name| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(seed) = env("FUZZ_SEED") {
        eprintln!("fuzz: replaying seed {seed}");
        return run(seed, per_seed);
    }
    if let Some(seconds) = env("KBQ_FUZZ_FRESH_SECONDS") {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut seeds = 0u64;
        while Instant::now() < deadline {
            let seed: u64 = rand::random();
            eprintln!("fuzz: fresh seed {seed} (FUZZ_SEED={seed} replays it)");
            run(seed, per_seed);
            seeds += 1;
        }
        eprintln!("fuzz: {seeds} fresh seeds passed");
        return;
    }
    for seed in COMMITTED_SEEDS {
        run(seed, per_seed);
    }
}

use apache_avro::Schema;
use apache_avro::types::Value;
use kbq_transcode::{Plan, file_for};
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use prost_types::FileDescriptorSet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::case::{self, SCHEMA};

fn seed_record(rng: &mut StdRng) -> Value {
    let s = |v: &str| Value::String(v.to_owned());
    let fields = vec![
        ("id", Value::Long(rng.random())),
        (
            "name",
            if rng.random() {
                Value::Union(1, Box::new(s("ünïcode")))
            } else {
                Value::Union(0, Box::new(Value::Null))
            },
        ),
        ("flag", Value::Boolean(rng.random())),
        (
            "ratio",
            Value::Union(0, Box::new(Value::Double(rng.random()))),
        ),
        ("f", Value::Float(rng.random())),
        ("ts", Value::TimestampNanos(rng.random())),
        (
            "dt",
            Value::LocalTimestampMillis(rng.random_range(-1 << 40..1 << 40)),
        ),
        ("day", Value::Date(rng.random_range(-719_162..=2_932_896))),
        ("tod", Value::TimeMillis(rng.random_range(0..86_400_000))),
        (
            "amount",
            Value::Decimal(apache_avro::Decimal::from(
                rng.random::<i64>().to_be_bytes().to_vec(),
            )),
        ),
        (
            "big",
            Value::Decimal(apache_avro::Decimal::from(
                rng.random::<i128>().to_be_bytes().to_vec(),
            )),
        ),
        (
            "uid",
            Value::Uuid(apache_avro::Uuid::from_u128(rng.random())),
        ),
        ("color", Value::Enum(2, "B".into())),
        ("doc", s(r#"[{"a":null},2,"x"]"#)),
        ("tags", Value::Array(vec![s("a"), s(""), s("ccc")])),
        (
            "attrs",
            Value::Map(
                [
                    ("k".to_string(), Value::Union(1, Box::new(Value::Long(-1)))),
                    ("n".to_string(), Value::Union(0, Box::new(Value::Null))),
                ]
                .into_iter()
                .collect(),
            ),
        ),
        (
            "blob",
            Value::Map(
                [(
                    "z".to_string(),
                    Value::Array(vec![
                        Value::Union(1, Box::new(Value::Double(rng.random()))),
                        Value::Union(0, Box::new(Value::Null)),
                        Value::Union(2, Box::new(Value::Enum(1, "G".into()))),
                    ]),
                )]
                .into_iter()
                .collect(),
            ),
        ),
        (
            "nested",
            Value::Record(vec![
                ("x".into(), Value::Int(3)),
                (
                    "items".into(),
                    Value::Union(
                        1,
                        Box::new(Value::Array(vec![Value::Record(vec![(
                            "k".into(),
                            s(&"k".repeat(rng.random_range(0..300))),
                        )])])),
                    ),
                ),
            ]),
        ),
        (
            "ignored",
            Value::Record(vec![
                (
                    "a".into(),
                    Value::Array(vec![Value::Union(1, Box::new(Value::Bytes(vec![1, 2])))]),
                ),
                (
                    "m".into(),
                    Value::Map(
                        [("q".to_string(), Value::Enum(0, "R".into()))]
                            .into_iter()
                            .collect(),
                    ),
                ),
            ]),
        ),
    ];
    Value::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

pub(crate) fn mutate(rng: &mut StdRng, input: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..6) {
        let len = input.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => input.truncate(rng.random_range(0..len)),
            2 => {
                let i = rng.random_range(0..=len);
                input.insert(i, rng.random());
            }
            3 if len > 0 => {
                input.remove(rng.random_range(0..len));
            }
            4 => {
                // A random zigzag varint, often a huge or negative length or count.
                let mut v = rng.random::<u64>() >> rng.random_range(0..64);
                let i = rng.random_range(0..=len);
                let mut bytes = Vec::new();
                while v >= 0x80 {
                    bytes.push(v as u8 | 0x80);
                    v >>= 7;
                }
                bytes.push(v as u8);
                input.splice(i..i, bytes);
            }
            5 if len > 1 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..len);
                let chunk = input[a..b].to_vec();
                let i = rng.random_range(0..=input.len());
                input.splice(i..i, chunk);
            }
            _ => {
                let i = rng.random_range(0..=len);
                input.splice(i..i, std::iter::repeat_n(0xff, rng.random_range(1..12)));
            }
        }
    }
}

fn check_one(plan: &Plan, desc: &MessageDescriptor, input: &[u8], rng: &mut StdRng) {
    let mut out: Vec<u8> = (0..rng.random_range(0..4)).map(|_| rng.random()).collect();
    if let Some(range) = case::transcode_checked(plan, input, &mut out) {
        DynamicMessage::decode(desc.clone(), &out[range])
            .expect("a transcoded row decodes with its descriptor");
    }
}

#[test]
fn mutated_records_never_panic_and_never_corrupt_the_batch() {
    let plan = case::plan(&case::table());
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let desc = pool.get_message_by_name("Row").unwrap();
    let apache = Schema::parse_str(SCHEMA).unwrap();
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&apache)
        .build()
        .unwrap();
    each_seed(RECORDS_PER_SEED, |seed, records| {
        let mut rng = StdRng::seed_from_u64(seed);
        let seeds: Vec<Vec<u8>> = (0..32)
            .map(|_| writer.write_value_to_vec(seed_record(&mut rng)).unwrap())
            .collect();
        for s in &seeds {
            let mut out = Vec::new();
            plan.transcode(s, None, &mut out)
                .expect("unmutated seeds transcode");
        }
        for _ in 0..records {
            let mut input = seeds[rng.random_range(0..seeds.len())].clone();
            mutate(&mut rng, &mut input);
            let result = catch_unwind(AssertUnwindSafe(|| {
                check_one(&plan, &desc, &input, &mut rng)
            }));
            if result.is_err() {
                panic!(
                    "seed {seed} (FUZZ_SEED={seed} replays it), input that failed (hex): {}",
                    hex(&input)
                );
            }
        }
    });
}

#[test]
fn mutated_schemas_never_panic_the_parser_or_the_compiler() {
    let table = case::table();
    let tokens: [&[u8]; 8] = [b"{", b"}", b"[", b"]", b"\"r\"", b",", b"\"null\"", b":"];
    each_seed(SCHEMAS_PER_SEED, |seed, schemas| {
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..schemas {
            let mut text = SCHEMA.as_bytes().to_vec();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..text.len());
                let j = (i + rng.random_range(0..20)).min(text.len());
                let token = tokens[rng.random_range(0..tokens.len())];
                text.splice(i..j, token.iter().copied());
            }
            let Ok(text) = String::from_utf8(text) else {
                continue;
            };
            if catch_unwind(AssertUnwindSafe(|| case::compile_any(&text, &table))).is_err() {
                panic!("seed {seed} (FUZZ_SEED={seed} replays it), schema that failed: {text}");
            }
        }
    });
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
