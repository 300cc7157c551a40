//! Realistic generated orders (about 1 KB of Avro each, 20 fields of mixed types) for the
//! quickstart and the end-to-end benchmark.
//!
//! Records are written straight into Avro binary (no `Value` tree): producing a few hundred
//! thousand of them must cost little next to the sink itself. Record `n` of a seed is always the
//! same bytes, so runs can be compared; the unit tests decode them with `apache-avro` to prove
//! the encoding matches [`SCHEMA`].

/// The writer schema: strings, longs, an enum, a timestamp, a date, decimals, a nullable field,
/// a nested record, an array of records and an array of strings.
pub const SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "com.example.shop",
  "doc": "An order placed in the web shop",
  "fields": [
    {"name": "order_id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "sequence", "type": "long", "doc": "the generator's record number"},
    {"name": "customer_id", "type": "long"},
    {"name": "customer_name", "type": "string"},
    {"name": "email", "type": "string"},
    {"name": "status", "type": {"type": "enum", "name": "Status",
      "symbols": ["PENDING", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"]}},
    {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "order_date", "type": {"type": "int", "logicalType": "date"}},
    {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "currency", "type": "string"},
    {"name": "item_count", "type": "int"},
    {"name": "discount_rate", "type": "double"},
    {"name": "is_gift", "type": "boolean"},
    {"name": "coupon", "type": ["null", "string"], "default": null},
    {"name": "shipping_address", "type": {"type": "record", "name": "Address", "fields": [
      {"name": "street", "type": "string"},
      {"name": "city", "type": "string"},
      {"name": "postal_code", "type": "string"},
      {"name": "country", "type": "string"}
    ]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
      {"name": "sku", "type": "string"},
      {"name": "quantity", "type": "int"},
      {"name": "unit_price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}
    ]}}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "user_agent", "type": "string"},
    {"name": "session_id", "type": "string"},
    {"name": "comment", "type": "string"}
  ]
}"#;

const FIRST_NAMES: [&str; 16] = [
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Dennis",
    "Radia", "John", "Leslie", "Hedy", "Niklaus", "Sophie",
];
const LAST_NAMES: [&str; 16] = [
    "Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Hamilton",
    "Ritchie", "Perlman", "Backus", "Lamport", "Lamarr", "Wirth", "Wilson",
];
const CITIES: [(&str, &str); 8] = [
    ("Berlin", "DE"),
    ("Lyon", "FR"),
    ("Porto", "PT"),
    ("Leeds", "GB"),
    ("Austin", "US"),
    ("Osaka", "JP"),
    ("Utrecht", "NL"),
    ("Gdansk", "PL"),
];
const STREETS: [&str; 8] = [
    "Main Street",
    "Station Road",
    "Church Lane",
    "Mill Road",
    "Park Avenue",
    "High Street",
    "Harbour Way",
    "Elm Row",
];
const CURRENCIES: [&str; 4] = ["EUR", "USD", "GBP", "JPY"];
const TAGS: [&str; 10] = [
    "express",
    "new-customer",
    "mobile",
    "newsletter",
    "returning",
    "bulk",
    "fragile",
    "gift-wrap",
    "priority",
    "eco",
];
const USER_AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
];
const WORDS: [&str; 24] = [
    "please",
    "leave",
    "the",
    "parcel",
    "at",
    "front",
    "door",
    "ring",
    "twice",
    "neighbour",
    "number",
    "seven",
    "can",
    "accept",
    "delivery",
    "after",
    "six",
    "in",
    "evening",
    "thanks",
    "call",
    "before",
    "arrival",
    "gate",
];

/// 2024-01-01T00:00:00Z in microseconds: generated orders are placed after it.
const EPOCH_2024_MICROS: i64 = 1_704_067_200_000_000;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Deterministic generator of order records.
#[derive(Debug, Clone, Copy)]
pub struct OrderGenerator {
    seed: u64,
}

impl OrderGenerator {
    pub fn new(seed: u64) -> OrderGenerator {
        OrderGenerator { seed }
    }

    /// Appends the Avro binary encoding of record `n` (no framing) to `out`.
    pub fn encode(&self, n: u64, out: &mut Vec<u8>) {
        let mut rng = SplitMix(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let customer_id = (rng.next() % 50_000) as i64 + 1;
        let first = FIRST_NAMES[rng.below(FIRST_NAMES.len())];
        let last = LAST_NAMES[rng.below(LAST_NAMES.len())];
        let (city, country) = CITIES[rng.below(CITIES.len())];

        let uuid = uuid_text(rng.next(), rng.next());
        put_str(out, &uuid);
        put_long(out, n as i64);
        put_long(out, customer_id);
        put_str(out, &format!("{first} {last}"));
        put_str(
            out,
            &format!(
                "{}.{}{}@example.com",
                first.to_ascii_lowercase(),
                last.to_ascii_lowercase(),
                customer_id
            ),
        );
        put_long(out, rng.below(5) as i64); // status
        let created = EPOCH_2024_MICROS + (rng.next() % (700 * MICROS_PER_DAY as u64)) as i64;
        put_long(out, created);
        put_long(out, created.div_euclid(MICROS_PER_DAY)); // order_date, days since epoch

        let item_count = 1 + rng.below(6);
        let items: Vec<(u64, i64, i64)> = (0..item_count)
            .map(|_| {
                (
                    rng.next() % 1_000_000,
                    1 + rng.below(4) as i64,
                    99 + (rng.next() % 49_900) as i64,
                )
            })
            .collect();
        let total_cents: i64 = items.iter().map(|(_, q, p)| q * p).sum();
        put_decimal(out, total_cents);
        put_str(out, CURRENCIES[rng.below(CURRENCIES.len())]);
        put_long(out, item_count as i64);
        put_double(out, (rng.below(31) as f64) / 100.0);
        out.push(u8::from(rng.below(10) == 0)); // is_gift
        if rng.below(4) == 0 {
            put_long(out, 1);
            put_str(out, &format!("SAVE{}", 5 + rng.below(20)));
        } else {
            put_long(out, 0);
        }

        put_address(out, &mut rng, city, country);
        put_items(out, &items);
        put_tags(out, &mut rng);
        put_str(out, USER_AGENTS[rng.below(USER_AGENTS.len())]);
        put_str(out, &format!("{:016x}{:016x}", rng.next(), rng.next()));
        put_comment(out, &mut rng);
    }
}

/// The `items` array: one block of (sku, quantity, unit price), then the end of the array.
fn put_items(out: &mut Vec<u8>, items: &[(u64, i64, i64)]) {
    put_long(out, items.len() as i64);
    for (sku, quantity, unit_price) in items {
        put_str(out, &format!("SKU-{sku:06}"));
        put_long(out, *quantity);
        put_decimal(out, *unit_price);
    }
    put_long(out, 0);
}

/// The `tags` array: up to three tags (an empty array is just its end).
fn put_tags(out: &mut Vec<u8>, rng: &mut SplitMix) {
    let tag_count = rng.below(4);
    if tag_count > 0 {
        put_long(out, tag_count as i64);
        for _ in 0..tag_count {
            put_str(out, TAGS[rng.below(TAGS.len())]);
        }
    }
    put_long(out, 0);
}

/// The shipping address: street, city, postal code, country.
fn put_address(out: &mut Vec<u8>, rng: &mut SplitMix, city: &str, country: &str) {
    put_str(
        out,
        &format!(
            "{} {}",
            1 + rng.below(200),
            STREETS[rng.below(STREETS.len())]
        ),
    );
    put_str(out, city);
    put_str(out, &format!("{:05}", rng.below(100_000)));
    put_str(out, country);
}

/// A free-text comment brings the record to about 1 KB, like real order payloads.
fn put_comment(out: &mut Vec<u8>, rng: &mut SplitMix) {
    let target = 450 + rng.below(350);
    let mut comment = String::with_capacity(target + 16);
    while comment.len() < target {
        if !comment.is_empty() {
            comment.push(' ');
        }
        comment.push_str(WORDS[rng.below(WORDS.len())]);
    }
    put_str(out, &comment);
}

/// Prefixes `body` with the Confluent wire-format header (magic byte 0, big-endian schema id).
pub fn confluent_frame(schema_id: u32, body: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
}

/// splitmix64: tiny, fast and good enough for test data.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn uuid_text(a: u64, b: u64) -> String {
    // Version 4, variant 1, as a random UUID would be.
    let a = (a & !0xF000) | 0x4000;
    let b = (b & !(0xC << 60)) | (0x8 << 60);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_long(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

fn put_double(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// An Avro decimal on `bytes`: the unscaled value as minimal big-endian two's complement.
fn put_decimal(out: &mut Vec<u8>, unscaled: i64) {
    let bytes = unscaled.to_be_bytes();
    let mut start = 0;
    while start < 7 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        let redundant = (b == 0 && next & 0x80 == 0) || (b == 0xFF && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    put_long(out, (8 - start) as i64);
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::Schema;
    use apache_avro::types::Value;

    // The reader replacement needs more ceremony than an independent test oracle deserves.
    #[allow(deprecated)]
    fn decode(schema: &Schema, bytes: &[u8]) -> Vec<(String, Value)> {
        let mut reader = bytes;
        let value = apache_avro::from_avro_datum(schema, &mut reader, None).expect("decodes");
        assert!(reader.is_empty(), "trailing bytes after the record");
        match value {
            Value::Record(fields) => fields,
            other => panic!("not a record: {other:?}"),
        }
    }

    fn unscaled(d: &apache_avro::Decimal) -> i64 {
        let bytes = Vec::<u8>::try_from(d).expect("decimal bytes");
        let sign = if bytes[0] & 0x80 != 0 { -1i64 } else { 0 };
        bytes.iter().fold(sign, |v, b| (v << 8) | *b as i64)
    }

    #[test]
    fn generated_records_decode_with_the_schema_and_weigh_about_a_kilobyte() {
        let schema = Schema::parse_str(SCHEMA).expect("schema parses");
        let generator = OrderGenerator::new(7);
        let mut total = 0usize;
        let mut buf = Vec::new();
        for n in 0..2_000u64 {
            buf.clear();
            generator.encode(n, &mut buf);
            total += buf.len();
            let fields = decode(&schema, &buf);
            assert_eq!(fields.len(), 20);
            assert_eq!(fields[1], ("sequence".to_string(), Value::Long(n as i64)));
            let Value::Decimal(total_dec) = &fields[8].1 else {
                panic!("total is not a decimal: {:?}", fields[8].1);
            };
            let cents = unscaled(total_dec);
            let Value::Array(items) = &fields[15].1 else {
                panic!("items is not an array");
            };
            assert_eq!(fields[10].1, Value::Int(items.len() as i32));
            let mut sum = 0i64;
            for item in items {
                let Value::Record(item) = item else {
                    panic!("item is not a record")
                };
                let (Value::Int(q), Value::Decimal(p)) = (&item[1].1, &item[2].1) else {
                    panic!("bad item {item:?}")
                };
                sum += *q as i64 * unscaled(p);
            }
            assert_eq!(cents, sum, "record {n}: total is the sum of the items");
        }
        let mean = total / 2_000;
        assert!((800..=1300).contains(&mean), "mean record size {mean}");
    }

    #[test]
    fn the_same_seed_and_number_give_the_same_bytes() {
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        OrderGenerator::new(1).encode(42, &mut a);
        OrderGenerator::new(1).encode(42, &mut b);
        OrderGenerator::new(2).encode(42, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn decimals_use_minimal_twos_complement() {
        for (v, expect) in [
            (0i64, vec![0u8]),
            (127, vec![0x7F]),
            (128, vec![0x00, 0x80]),
            (-1, vec![0xFF]),
            (-128, vec![0x80]),
            (-129, vec![0xFF, 0x7F]),
        ] {
            let mut out = Vec::new();
            put_decimal(&mut out, v);
            assert_eq!(&out[1..], expect.as_slice(), "{v}");
            assert_eq!(out[0] as usize, expect.len() * 2, "zigzag length of {v}");
        }
    }

    #[test]
    fn the_confluent_frame_is_magic_then_big_endian_id() {
        let mut out = Vec::new();
        confluent_frame(0x0102_0304, b"xy", &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, b'x', b'y']);
    }
}
