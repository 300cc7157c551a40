//! The JSON executor (`src/json/exec.rs`) against the one it replaced (kept as the reference,
//! `src/json/reference.rs`, `Plan::transcode_reference`): the same rows, byte for byte, and the
//! same errors, naming the same column and offset, on the end-to-end benchmark's orders in JSON
//! and the benchmarks' order, as generated and mutated (bytes flipped, cut, inserted, and JSON's
//! own hazards spliced in: escapes in keys and strings, surrogates, invalid UTF-8, duplicate and
//! unknown keys, keys in another case, deep nesting, big numbers, exponents, whitespace), and
//! on decimal numbers of every length, scale and exponent into NUMERIC and BIGNUMERIC. Fixed
//! seeds; a few seconds in a debug build.

use kbq_transcode::{Plan, PlanOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fuzz::mutate;
use crate::support::differential::Both;

use crate::differential::orders;

#[path = "../../benches/common/mod.rs"]
mod common;
#[path = "../../benches/common/orders_json.rs"]
mod orders_json;

/// Pieces of JSON that each reach a different path of the scanner or the executor.
const SPLICES: &[&[u8]] = &[
    b"\\\"",
    b"\\\\",
    b"\\u00e9",
    b"\\ud83d\\ude00",
    b"\\ud83d",
    b"\\ude00",
    b"\\u12",
    b"\\x",
    "é".as_bytes(),
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\x01",
    b" ",
    b"\n\t\r ",
    b"\"",
    b",",
    b":",
    b"{",
    b"}",
    b"[",
    b"]",
    b"null",
    b"true",
    b"-0",
    b"1e400",
    b"2.5E-3",
    b"1.0e+2",
    b"123456789012345678",
    b"1234567890123456789",
    b"99999999999999999999999999999999999999999",
    b"0.0000000001",
    b"1.50000000000",
    b"\"total\":1,",
    b"\"TOTAL\":2,",
    b"\"tot\\u0061l\":3,",
    b"\"sequence\":4,",
    b"\"city\":\"x\",",
    b"\"unknown\":[1,{\"a\":null}],",
    b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
];

fn splice(rng: &mut StdRng, input: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..4) {
        let piece = SPLICES[rng.random_range(0..SPLICES.len())];
        let at = rng.random_range(0..=input.len());
        // Inserted, or over what was there (a value, part of a key).
        let end = (at + rng.random_range(0..4) * rng.random_range(0..8)).min(input.len());
        input.splice(at..end, piece.iter().copied());
    }
}

fn compare(plan: &Plan, inputs: &[Vec<u8>], seed: u64, rounds: u64) -> (u32, u32) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(1 << 16);
    for (k, input) in inputs.iter().enumerate() {
        out.clear();
        plan.transcode_both(input, Some(&orders::meta(k as u64)), &mut out)
            .expect("generated records transcode");
    }
    let (mut accepted, mut refused) = (0, 0);
    for k in 0..rounds {
        let mut input = inputs[rng.random_range(0..inputs.len())].clone();
        match rng.random_range(0..3) {
            0 => mutate(&mut rng, &mut input),
            1 => splice(&mut rng, &mut input),
            _ => {
                splice(&mut rng, &mut input);
                mutate(&mut rng, &mut input);
            }
        }
        if k % 512 == 0 {
            out.clear();
        }
        match plan.transcode_both(&input, Some(&orders::meta(k)), &mut out) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    (accepted, refused)
}

#[test]
fn the_benchmark_orders_in_json_and_their_mutations_give_the_same_rows_and_errors() {
    let orders = orders_json::JsonOrders::new();
    let (accepted, refused) = compare(&orders.plan, &orders.json[..256], 31, 12_000);
    // Both outcomes are exercised.
    assert!(accepted > 1_000 && refused > 5_000, "{accepted} {refused}");
}

#[test]
fn the_benchmarks_order_in_json_and_its_mutations_give_the_same_rows_and_errors() {
    let (plan, inputs) = common::json_setup();
    let (accepted, refused) = compare(&plan, &inputs[..256], 33, 8_000);
    assert!(accepted > 500 && refused > 3_000, "{accepted} {refused}");
}

/// A decimal number of 0 to 45 digits with a point anywhere or none, a sign, an exponent.
fn decimal(rng: &mut StdRng) -> String {
    let digits = match rng.random_range(0..3) {
        0 => rng.random_range(1..=45),
        _ => rng.random_range(1..=20),
    };
    let mut s = String::new();
    if rng.random() {
        s.push('-');
    }
    let first = if digits > 1 { 1 } else { 0 };
    s.push(char::from(b'0' + rng.random_range(first..10)));
    for _ in 1..digits {
        s.push(char::from(b'0' + rng.random_range(0..10)));
    }
    if digits > 1 && rng.random() {
        s.insert(s.len() - rng.random_range(1..digits), '.');
        // A point right after a leading zero or sign is what JSON allows; other places too.
    }
    if rng.random_range(0..4) == 0 {
        s.push_str(&format!("e{}", rng.random_range(-45..45)));
    }
    s
}

/// Decimal numbers (and decimal strings) into NUMERIC and BIGNUMERIC: the `i128` fast path, its
/// way out into `Wide` (more than 18 digits, an exponent, more fractional digits than the
/// column's scale), rounding and range errors.
#[test]
fn decimals_of_every_length_scale_and_exponent_give_the_same_rows_and_errors() {
    let table = serde_json::from_str(
        r#"{"fields":[{"name":"n","type":"NUMERIC"},{"name":"b","type":"BIGNUMERIC"},
        {"name":"r","type":"NUMERIC","mode":"REPEATED"}]}"#,
    )
    .unwrap();
    let plan = Plan::compile_json(None, false, &table, &PlanOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(34);
    let mut out = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..6_000 {
        let (n, b, r, q) = (
            decimal(&mut rng),
            decimal(&mut rng),
            decimal(&mut rng),
            decimal(&mut rng),
        );
        let record = match rng.random_range(0..3) {
            0 => format!(r#"{{"n":{n},"b":{b},"r":[{r},{q}]}}"#),
            1 => format!(r#"{{"n":"{n}","b":{b}}}"#),
            _ => format!(r#"{{"b":{b},"n":{n}}}"#),
        };
        out.clear();
        match plan.transcode_both(record.as_bytes(), None, &mut out) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(accepted > 500 && refused > 500, "{accepted} {refused}");
}
