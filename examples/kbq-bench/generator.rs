//! The benchmark's records: a web-shop clickstream event of about 1 KB of raw Avro, with the shapes
//! a real topic carries (a nested record, nullable unions, an array of records, decimals, an enum,
//! a map, timestamps, a UUID). Deterministic in the sequence number, so runs are comparable.
//!
//! This is the one place to swap when the quickstart's generator (`src/quickstart/`) lands: the
//! bench needs only `SCHEMA`, `key` and `encode`.

/// The writer schema (raw Avro, given to the sink as a fixed `.avsc`).
pub const SCHEMA: &str = r#"{
  "type": "record", "name": "ShopEvent", "namespace": "bench",
  "fields": [
    {"name": "event_id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "event_type", "type": {"type": "enum", "name": "EventType",
      "symbols": ["PAGE_VIEW", "SEARCH", "ADD_TO_CART", "CHECKOUT", "PURCHASE"]}},
    {"name": "user_id", "type": "long"},
    {"name": "session_id", "type": "string"},
    {"name": "country", "type": "string"},
    {"name": "ip_address", "type": "string"},
    {"name": "device", "type": {"type": "record", "name": "Device", "fields": [
      {"name": "platform", "type": "string"},
      {"name": "os_version", "type": "string"},
      {"name": "app_version", "type": ["null", "string"], "default": null},
      {"name": "user_agent", "type": "string"},
      {"name": "screen_width", "type": "int"},
      {"name": "screen_height", "type": "int"}
    ]}},
    {"name": "page_url", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": null},
    {"name": "search_query", "type": ["null", "string"], "default": null},
    {"name": "cart", "type": {"type": "array", "items": {"type": "record", "name": "LineItem",
      "fields": [
        {"name": "sku", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "unit_price", "type": {"type": "bytes", "logicalType": "decimal",
          "precision": 12, "scale": 2}}
      ]}}},
    {"name": "order_total", "type": ["null", {"type": "bytes", "logicalType": "decimal",
      "precision": 12, "scale": 2}], "default": null},
    {"name": "currency", "type": ["null", "string"], "default": null},
    {"name": "latitude", "type": ["null", "double"], "default": null},
    {"name": "longitude", "type": ["null", "double"], "default": null},
    {"name": "consent", "type": "boolean"},
    {"name": "experiments", "type": {"type": "array", "items": "int"}},
    {"name": "attributes", "type": {"type": "map", "values": "string"}}
  ]
}"#;

const COUNTRIES: [&str; 12] = [
    "US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "AU", "NL", "ES", "IT",
];
const PLATFORMS: [(&str, &str); 4] = [
    ("android", "14.0.2"),
    ("ios", "17.4.1"),
    ("web", "n/a"),
    ("windows", "11.23H2"),
];
const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (Linux; Android 14; Pixel 8 Pro Build/UQ1A.240205.004) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.6261.119 Mobile Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/123.0.0.0 Safari/537.36 Edg/123.0.2420.65",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:124.0) Gecko/20100101 Firefox/124.0 (compatible; ShopApp/5.12.0; +checkout)",
];
const PRODUCTS: [&str; 8] = [
    "Stainless steel insulated water bottle, 750 ml, matte black",
    "Wireless noise-cancelling over-ear headphones with carry case",
    "Organic cotton crew-neck T-shirt, regular fit, heather grey",
    "Cast iron skillet 28 cm, pre-seasoned, oven safe to 260 C",
    "Trail running shoes, waterproof membrane, size EU 43",
    "Mechanical keyboard, hot-swappable switches, ISO-DE layout",
    "Ceramic pour-over coffee dripper with 100 paper filters",
    "Children's picture book: The Lighthouse Keeper's Cat (hardcover)",
];
const SEARCHES: [&str; 5] = [
    "waterproof hiking boots women",
    "usb-c charger 65w gan",
    "espresso machine under 300",
    "linen duvet cover king size",
    "gift ideas for dad who has everything",
];
const PAGES: [&str; 5] = [
    "home",
    "category/outdoor",
    "product",
    "cart",
    "checkout/payment",
];
const EVENT_TYPES: u64 = 5;
const ATTRIBUTE_NAMES: [&str; 5] = ["ab", "ff", "ui", "geo", "ad"];

/// A small deterministic generator (splitmix64): the same sequence number gives the same record.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

// Avro binary encoding, written by hand because the bench preloads millions of records and the
// generic `Value` path allocates per field; `main` checks the result against apache-avro's reader.
fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// A decimal's unscaled value as minimal big-endian two's complement.
fn put_decimal(out: &mut Vec<u8>, unscaled: i64) {
    let be = unscaled.to_be_bytes();
    let mut start = 0;
    while start < 7 {
        let (b, next) = (be[start], be[start + 1]);
        let redundant = (b == 0 && next & 0x80 == 0) || (b == 0xFF && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    put_bytes(out, &be[start..]);
}

/// A `["null", T]` union: branch 1 with the value, or branch 0.
fn put_optional<F: FnOnce(&mut Vec<u8>)>(out: &mut Vec<u8>, present: bool, f: F) {
    if present {
        put_long(out, 1);
        f(out);
    } else {
        put_long(out, 0);
    }
}

/// The record key: the user id, as a real producer would key a clickstream.
pub fn key(seq: u64) -> Vec<u8> {
    let user = Rng(seq).next() % 2_000_000;
    format!("user-{user}").into_bytes()
}

/// Appends record `seq` (event time `event_time_micros`) to `out`.
pub fn encode(seq: u64, event_time_micros: i64, out: &mut Vec<u8>) {
    use std::fmt::Write;
    let mut r = Rng(seq);
    let user = r.next() % 2_000_000;
    let event_type = r.below(EVENT_TYPES);
    let mut s = String::with_capacity(160);

    let (hi, lo) = (r.next(), r.next());
    let _ = write!(
        s,
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xFFFF,
        hi & 0xFFF,
        0x8000 | ((lo >> 48) & 0x3FFF),
        lo & 0xFFFF_FFFF_FFFF
    );
    put_str(out, &s);
    put_long(out, event_time_micros);
    put_long(out, event_type as i64);
    put_long(out, user as i64);
    s.clear();
    let _ = write!(s, "{:016x}{:016x}", r.next(), user);
    put_str(out, &s);
    put_str(out, r.pick(&COUNTRIES));
    s.clear();
    let _ = write!(
        s,
        "{}.{}.{}.{}",
        r.below(223) + 1,
        r.below(256),
        r.below(256),
        r.below(254) + 1
    );
    put_str(out, &s);

    // device
    let (platform, os) = r.pick(&PLATFORMS);
    put_str(out, platform);
    put_str(out, os);
    let app = format!("5.{}.{}", r.below(20), r.below(10));
    put_optional(out, platform != "web", |o| put_str(o, &app));
    put_str(out, r.pick(&AGENTS));
    put_long(out, [390, 412, 1280, 1920][r.below(4) as usize]);
    put_long(out, [844, 915, 800, 1080][r.below(4) as usize]);

    let product = r.below(90_000) + 10_000;
    s.clear();
    let _ = write!(
        s,
        "https://shop.example.com/{}/{}?utm_source=newsletter&utm_medium=email&utm_campaign=spring-sale-{}",
        r.pick(&PAGES),
        product,
        r.below(40)
    );
    put_str(out, &s);
    let referrer = format!(
        "https://www.example.org/search?q=shop+{}&source=web&page={}",
        product,
        r.below(5) + 1
    );
    put_optional(out, r.below(3) != 0, |o| put_str(o, &referrer));
    let query = r.pick(&SEARCHES);
    put_optional(out, event_type == 1, |o| put_str(o, query));

    // cart: 0 to 5 line items
    let items = r.below(6);
    let mut total = 0i64;
    if items > 0 {
        put_long(out, items as i64);
        for _ in 0..items {
            s.clear();
            let _ = write!(s, "SKU-{:06}-{:02}", r.below(1_000_000), r.below(100));
            put_str(out, &s);
            put_str(out, r.pick(&PRODUCTS));
            let qty = r.below(4) as i64 + 1;
            put_long(out, qty);
            let cents = (r.below(50_000) + 99) as i64;
            put_decimal(out, cents);
            total += qty * cents;
        }
    }
    put_long(out, 0);
    let purchase = event_type >= 3 && total > 0;
    put_optional(out, purchase, |o| put_decimal(o, total));
    put_optional(out, purchase, |o| put_str(o, "EUR"));
    let located = r.below(2) == 0;
    let lat = (r.below(180_000) as f64) / 1000.0 - 90.0;
    let lon = (r.below(360_000) as f64) / 1000.0 - 180.0;
    put_optional(out, located, |o| o.extend_from_slice(&lat.to_le_bytes()));
    put_optional(out, located, |o| o.extend_from_slice(&lon.to_le_bytes()));
    out.push(u8::from(r.below(4) != 0));

    let experiments = r.below(5) + 1;
    put_long(out, experiments as i64);
    for _ in 0..experiments {
        put_long(out, r.below(5_000) as i64);
    }
    put_long(out, 0);

    let attributes = 9 + r.below(6);
    put_long(out, attributes as i64);
    for i in 0..attributes {
        s.clear();
        let _ = write!(s, "attr_{}_{}", ATTRIBUTE_NAMES[i as usize % 5], i);
        put_str(out, &s);
        s.clear();
        let _ = write!(s, "value-{:x}-{}", r.next() & 0xFFFF_FFFF, r.below(1000));
        put_str(out, &s);
    }
    put_long(out, 0);
}
