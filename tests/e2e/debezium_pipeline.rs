//! The whole pipeline with software nobody here wrote (docs/cdc.md, "Debezium's PostgreSQL
//! connector end to end"): a private PostgreSQL cluster → Debezium's PostgreSQL connector in one
//! Kafka Connect worker (`scripts/debezium.sh`; `JsonConverter` with schemas, Connect's default)
//! → the real broker → the daemon (schemaless JSON routes in Kafka Connect's envelope, CDC
//! `upsert_delete`) → the emulator. One connector per Debezium setting under test, each with its
//! own slot, publication, topic and table, all reading one source table that holds every common
//! PostgreSQL type at its limits.
//!
//! A snapshot, then inserts, updates, deletes, re-inserts, primary-key updates, multi-row and
//! rolled-back transactions, a SIGKILL of the daemon while it consumes, more changes, a restart;
//! then every table must equal the source table column by column. Values are compared by their
//! meaning: PostgreSQL is queried with casts to a canonical text and the emulator's cells are
//! brought to the same text (`Kind`), and a setting is held only to what it promises (the
//! `connect` time mode keeps milliseconds, `decimal.handling.mode: double` the nearest double).
//!
//! `pipeline_soak` runs a fresh seed and more changes (docs/cdc.md says how); the test command
//! runs `pipeline` on a fixed seed.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::rows::RenderOptions;
use kbq_emulator::store::{Dataset, Table, TableRef};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::kafka::{create_topic_blocking, unique_name};
use support::registry::Registry;
use support::sink::{Daemon, Fixture, SinkOptions};

/// Partitions of every change topic: Debezium keys records by primary key, so a key stays in
/// one partition and the offsets order its changes.
const PARTITIONS: i32 = 2;

/// How a column's values are brought to one text on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Compared as written (integers, text, booleans, dates, UUIDs).
    Exact,
    /// A decimal number without insignificant zeros.
    Decimal,
    /// A `real`: its value as a 32-bit float (the text Debezium writes is its shortest form;
    /// the FLOAT64 cell holds the nearest double of that text).
    Float32,
    /// A double, bit for bit (NaN equals NaN).
    Float64,
    /// A time of day without insignificant zeros in the fraction.
    Time,
    /// Microseconds since the epoch (PostgreSQL: `extract(epoch …)`, exact since version 14;
    /// a `timestamp` without zone counted as UTC, as Debezium does).
    Timestamp,
    /// `YYYY-MM-DDTHH:MM:SS[.f]` without insignificant zeros.
    Datetime,
    /// Bytes as hex (PostgreSQL: `encode(…, 'hex')`; the cell is base64).
    Bytes,
    /// A JSON document with its objects' keys sorted.
    Json,
    /// An array's elements as texts; BigQuery has no NULL array, so NULL is the empty array.
    Array,
}

/// A Debezium setting under test: one connector, one topic, one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setting {
    /// Debezium's defaults: `time.precision.mode: adaptive`, `decimal.handling.mode: precise`.
    Defaults,
    AdaptiveTimeMicroseconds,
    /// `time.precision.mode: connect`: Kafka Connect's own Date, Time and Timestamp, which hold
    /// milliseconds; Debezium drops the digits below.
    ConnectTime,
    DecimalString,
    /// `decimal.handling.mode: double`: the nearest double of every `numeric`.
    DecimalDouble,
    /// Debezium's defaults through Apicurio Registry's `AvroConverter` (keys and values) in its
    /// Confluent-compatible mode: Confluent's framing (the id in the record, not in headers,
    /// which Kafka Connect's worker would otherwise get), Connect's types as `connect.name`
    /// annotations (its `AvroData`), registered in the test's registry.
    Avro,
    /// Debezium's defaults into a table the daemon creates from the envelope's schema block
    /// (`create_table: {}`, `primary_key` unset: the Kafka key's schema block gives it): its
    /// columns and primary key are checked too.
    Created,
}

const SETTINGS: [Setting; 7] = [
    Setting::Defaults,
    Setting::AdaptiveTimeMicroseconds,
    Setting::ConnectTime,
    Setting::DecimalString,
    Setting::DecimalDouble,
    Setting::Avro,
    Setting::Created,
];

impl Setting {
    fn name(self) -> &'static str {
        match self {
            Setting::Defaults => "defaults",
            Setting::AdaptiveTimeMicroseconds => "adaptive_time_microseconds",
            Setting::ConnectTime => "connect",
            Setting::DecimalString => "decimal_string",
            Setting::DecimalDouble => "decimal_double",
            Setting::Avro => "avro_apicurio",
            Setting::Created => "created",
        }
    }

    /// The connector's properties beyond the common ones (`registry`: the Schema Registry's
    /// URL).
    fn properties(self, registry: &str) -> String {
        let converter = |side: &str| {
            format!(
                "{side}.converter=io.apicurio.registry.utils.converter.AvroConverter
{side}.converter.apicurio.registry.url={registry}
{side}.converter.apicurio.registry.auto-register=true
{side}.converter.apicurio.registry.as-confluent=true
{side}.converter.apicurio.registry.use-id=contentId
{side}.converter.apicurio.registry.headers.enabled=false
"
            )
        };
        match self {
            Setting::Avro => converter("key") + &converter("value"),
            other => other.time_and_decimal().to_string(),
        }
    }

    fn time_and_decimal(self) -> &'static str {
        match self {
            Setting::Defaults | Setting::Avro | Setting::Created => "",
            Setting::AdaptiveTimeMicroseconds => "time.precision.mode=adaptive_time_microseconds\n",
            Setting::ConnectTime => "time.precision.mode=connect\n",
            Setting::DecimalString => "decimal.handling.mode=string\n",
            Setting::DecimalDouble => "decimal.handling.mode=double\n",
        }
    }
}

/// One column of the source table.
struct Column {
    name: &'static str,
    pg: &'static str,
    /// The BigQuery column type a user would choose for it.
    bq: &'static str,
    kind: Kind,
    /// SQL literals the workload writes (NULL besides, except into the key).
    values: &'static [&'static str],
}

const TIMESTAMPS0: &[&str] = &[
    "'2024-03-01 12:34:56'",
    "'0001-01-01 00:00:00'",
    "'9999-12-31 23:59:59'",
    "'1969-12-31 23:59:59'",
    "'1970-01-01 00:00:00'",
];
const TIMESTAMPS3: &[&str] = &[
    "'2024-03-01 12:34:56.789'",
    "'0001-01-01 00:00:00'",
    "'9999-12-31 23:59:59.999'",
    "'1969-12-31 23:59:59.999'",
    "'2000-02-29 00:00:00.001'",
];
const TIMESTAMPS6: &[&str] = &[
    "'2024-03-01 12:34:56.789012'",
    "'0001-01-01 00:00:00.000001'",
    "'9999-12-31 23:59:59.999999'",
    "'1969-12-31 23:59:59.999999'",
    "'1970-01-01 00:00:00'",
];

/// The source table (`id` first, its primary key).
const ALL_COLUMNS: &[Column] = &[
    Column {
        name: "id",
        pg: "bigint PRIMARY KEY",
        bq: "INT64",
        kind: Kind::Exact,
        values: &[],
    },
    Column {
        name: "c_smallint",
        pg: "smallint",
        bq: "INT64",
        kind: Kind::Exact,
        values: &["-32768", "32767", "0", "-1", "1234"],
    },
    Column {
        name: "c_int",
        pg: "integer",
        bq: "INT64",
        kind: Kind::Exact,
        values: &["-2147483648", "2147483647", "0", "7"],
    },
    Column {
        name: "c_bigint",
        pg: "bigint",
        bq: "INT64",
        kind: Kind::Exact,
        values: &["-9223372036854775808", "9223372036854775807", "0", "42"],
    },
    Column {
        name: "c_real",
        pg: "real",
        bq: "FLOAT64",
        kind: Kind::Float32,
        values: &[
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "3.4028235e38",
            "-1.1754944e-38",
            "1e-45",
            "0.1",
            "-0",
            "1.5",
        ],
    },
    Column {
        name: "c_double",
        pg: "double precision",
        bq: "FLOAT64",
        kind: Kind::Float64,
        values: &[
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "1.7976931348623157e308",
            "5e-324",
            "0.1",
            "-2.5",
            "0",
        ],
    },
    Column {
        name: "c_numeric",
        pg: "numeric(12,3)",
        bq: "NUMERIC",
        kind: Kind::Decimal,
        values: &[
            "-999999999.999",
            "999999999.999",
            "-2658.824",
            "0.001",
            "1234.5",
            "0",
        ],
    },
    Column {
        name: "c_numeric_free",
        pg: "numeric",
        bq: "BIGNUMERIC",
        kind: Kind::Decimal,
        values: &[
            "12.5",
            "-123456789012345678901234567890.123456789",
            "0.00000000000000000000000000000000000001",
            "100000000000000000000",
            "0",
            "-7",
        ],
    },
    Column {
        name: "c_text",
        pg: "text",
        bq: "STRING",
        kind: Kind::Exact,
        values: &[
            "''",
            "'hello'",
            "'héllo ✓ 𝄞'",
            "E'two\\nlines \"quoted\" \\\\ back\\tslash'",
        ],
    },
    Column {
        name: "c_varchar",
        pg: "varchar(40)",
        bq: "STRING",
        kind: Kind::Exact,
        values: &[
            "'v'",
            "''",
            "'ünïcødé'",
            "'forty characters forty characters forty'",
        ],
    },
    Column {
        name: "c_bool",
        pg: "boolean",
        bq: "BOOL",
        kind: Kind::Exact,
        values: &["true", "false"],
    },
    Column {
        name: "c_date",
        pg: "date",
        bq: "DATE",
        kind: Kind::Exact,
        values: &[
            "'2024-02-29'",
            "'0001-01-01'",
            "'9999-12-31'",
            "'1969-12-31'",
            "'1970-01-01'",
        ],
    },
    Column {
        name: "c_time",
        pg: "time(6)",
        bq: "TIME",
        kind: Kind::Time,
        values: &[
            "'12:34:56.789012'",
            "'00:00:00'",
            "'23:59:59.999999'",
            "'00:00:00.000001'",
        ],
    },
    Column {
        name: "c_time3",
        pg: "time(3)",
        bq: "TIME",
        kind: Kind::Time,
        values: &["'01:02:03.456'", "'23:59:59.999'", "'00:00:00'"],
    },
    Column {
        name: "c_ts0",
        pg: "timestamp(0)",
        bq: "DATETIME",
        kind: Kind::Datetime,
        values: TIMESTAMPS0,
    },
    Column {
        name: "c_ts3",
        pg: "timestamp(3)",
        bq: "TIMESTAMP",
        kind: Kind::Timestamp,
        values: TIMESTAMPS3,
    },
    Column {
        name: "c_ts6",
        pg: "timestamp(6)",
        bq: "TIMESTAMP",
        kind: Kind::Timestamp,
        values: TIMESTAMPS6,
    },
    Column {
        name: "c_ts6_dt",
        pg: "timestamp(6)",
        bq: "DATETIME",
        kind: Kind::Datetime,
        values: TIMESTAMPS6,
    },
    Column {
        name: "c_tstz",
        pg: "timestamptz",
        bq: "TIMESTAMP",
        kind: Kind::Timestamp,
        values: &[
            "'2024-03-01 12:34:56.789+05:30'",
            "'2024-03-01 12:34:56.789-08:00'",
            "'2000-02-29 23:59:59.999999+14:00'",
            "'1970-01-01 00:00:00+00'",
            "'0001-01-01 00:00:00+00'",
            "'9999-12-31 23:59:59.999999+00'",
        ],
    },
    Column {
        name: "c_uuid",
        pg: "uuid",
        bq: "STRING",
        kind: Kind::Exact,
        values: &[
            "'00000000-0000-0000-0000-000000000000'",
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
        ],
    },
    Column {
        name: "c_bytea",
        pg: "bytea",
        bq: "BYTES",
        kind: Kind::Bytes,
        values: &[
            "'\\x'",
            "'\\x00'",
            "'\\x00ff'",
            "'\\xdeadbeef00'",
            "'\\x616263'",
        ],
    },
    Column {
        name: "c_json",
        pg: "json",
        bq: "JSON",
        kind: Kind::Json,
        values: &[
            "'{\"a\": 1, \"b\": [true, null, \"x\"]}'",
            "'[]'",
            "'\"s\"'",
            "'{\"z\": {\"y\": 2.5}, \"a\": \"é\"}'",
        ],
    },
    Column {
        name: "c_jsonb",
        pg: "jsonb",
        bq: "JSON",
        kind: Kind::Json,
        values: &[
            "'{\"k\": {\"n\": [1, 2.5, \"t\"]}, \"u\": \"é\"}'",
            "'{}'",
            "'[1, 2]'",
            "'0'",
        ],
    },
    Column {
        name: "c_int_arr",
        pg: "integer[]",
        bq: "INT64 REPEATED",
        kind: Kind::Array,
        values: &["'{}'", "'{1,2,3}'", "'{-2147483648,2147483647}'"],
    },
    Column {
        name: "c_text_arr",
        pg: "text[]",
        bq: "STRING REPEATED",
        kind: Kind::Array,
        values: &["'{}'", "'{\"a\",\"b c\"}'", "'{\"\",\"é\"}'"],
    },
];

/// `KBQ_DEBEZIUM_COLUMNS`: unset, empty or `all` (every column), or a list (`c_int,c_text`:
/// those and the key).
fn columns_asked() -> &'static [&'static str] {
    static ASKED: OnceLock<Vec<&'static str>> = OnceLock::new();
    ASKED.get_or_init(|| {
        let text: &'static str = std::env::var("KBQ_DEBEZIUM_COLUMNS")
            .unwrap_or_default()
            .leak();
        text.split(',').filter(|c| !c.is_empty()).collect()
    })
}

/// The source table's columns: every one, or those `KBQ_DEBEZIUM_COLUMNS` names.
fn columns() -> Vec<&'static Column> {
    ALL_COLUMNS
        .iter()
        .filter(|c| match columns_asked() {
            _ if c.name == "id" => true,
            [] | ["all"] => true,
            only => only.contains(&c.name),
        })
        .collect()
}

impl Column {
    /// The column's BigQuery type and mode under `setting`.
    fn bigquery(&self, setting: Setting) -> (&'static str, &'static str) {
        let bq = match (setting, self.kind) {
            (Setting::DecimalDouble, Kind::Decimal) => "FLOAT64",
            // what `create_table` derives (docs/mapping.md): Debezium's timestamps without a
            // zone become DATETIME
            (Setting::Created, Kind::Timestamp) if self.pg != "timestamptz" => "DATETIME",
            _ => self.bq,
        };
        match bq.split_once(' ') {
            Some((t, "REPEATED")) => (t, "REPEATED"),
            _ if self.name == "id" => (bq, "REQUIRED"),
            _ => (bq, "NULLABLE"),
        }
    }

    /// How values are compared under `setting`.
    fn kind(&self, setting: Setting) -> Kind {
        match (self.kind, self.bigquery(setting).0) {
            (Kind::Decimal, "FLOAT64") => Kind::Float64,
            (Kind::Timestamp, "DATETIME") => Kind::Datetime,
            (kind, _) => kind,
        }
    }

    /// The SQL expression of the canonical text of the value `setting` promises.
    fn expected_sql(&self, setting: Setting) -> String {
        let c = self.name;
        // Kafka Connect's time types hold milliseconds: Debezium drops the digits below.
        let connect = setting == Setting::ConnectTime && self.pg != "timestamptz";
        match self.kind(setting) {
            Kind::Float64 if self.kind == Kind::Decimal => format!("{c}::float8::text"),
            Kind::Time if connect => {
                format!("date_trunc('milliseconds', '2000-01-01'::timestamp + {c})::time::text")
            }
            Kind::Timestamp if connect => format!(
                "(extract(epoch from date_trunc('milliseconds', {c})) * 1000000)::bigint::text"
            ),
            Kind::Timestamp => format!("(extract(epoch from {c}) * 1000000)::bigint::text"),
            Kind::Datetime if connect => {
                format!("to_char(date_trunc('milliseconds', {c}), 'YYYY-MM-DD\"T\"HH24:MI:SS.US')")
            }
            Kind::Datetime => format!("to_char({c}, 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"),
            Kind::Bytes => format!("encode({c}, 'hex')"),
            Kind::Array => format!("array_to_json({c})::text"),
            _ => format!("{c}::text"),
        }
    }
}

/// The canonical text of a value (`None`: SQL NULL).
fn canonical(kind: Kind, value: Option<&str>) -> Option<String> {
    if kind == Kind::Array {
        let items: Vec<String> = match value {
            None => Vec::new(),
            Some(text) => serde_json::from_str::<Vec<serde_json::Value>>(text)
                .unwrap_or_else(|e| panic!("an array {text}: {e}"))
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect(),
        };
        return Some(serde_json::to_string(&items).expect("texts"));
    }
    let v = value?;
    Some(match kind {
        Kind::Exact | Kind::Array => v.to_string(),
        Kind::Decimal => decimal(v),
        Kind::Float32 => format!("{:?}", float(v) as f32),
        Kind::Float64 => format!("{:?}", float(v)),
        Kind::Time | Kind::Datetime => fraction(v),
        Kind::Timestamp => v.to_string(),
        Kind::Bytes => v.to_string(),
        Kind::Json => {
            sorted(serde_json::from_str(v).unwrap_or_else(|e| panic!("json {v}: {e}"))).to_string()
        }
    })
}

/// The emulator's cell of a column of `kind`, as [`canonical`] takes it.
fn cell_text(kind: Kind, cell: &serde_json::Value) -> Option<String> {
    let v = &cell["v"];
    match kind {
        Kind::Array => {
            let items: Vec<serde_json::Value> = v
                .as_array()
                .expect("a repeated cell")
                .iter()
                .map(|item| item["v"].clone())
                .collect();
            Some(serde_json::to_string(&items).expect("items"))
        }
        Kind::Bytes => v.as_str().map(|b64| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64 cell");
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }),
        _ => v.as_str().map(str::to_string),
    }
}

fn float(text: &str) -> f64 {
    match text {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        "-Infinity" => f64::NEG_INFINITY,
        _ => text
            .parse()
            .unwrap_or_else(|e| panic!("a float {text}: {e}")),
    }
}

/// `-0012.500` → `-12.5`, `0.000` → `0`.
fn decimal(text: &str) -> String {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let whole = whole.trim_start_matches('0');
    let fraction = fraction.trim_end_matches('0');
    let mut out = String::new();
    if whole.is_empty() && fraction.is_empty() {
        return "0".into();
    }
    if negative {
        out.push('-');
    }
    out.push_str(if whole.is_empty() { "0" } else { whole });
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// `12:00:00.500000` → `12:00:00.5`, `12:00:00.000000` → `12:00:00`.
fn fraction(text: &str) -> String {
    match text.split_once('.') {
        Some((head, f)) => {
            let f = f.trim_end_matches('0');
            if f.is_empty() {
                head.to_string()
            } else {
                format!("{head}.{f}")
            }
        }
        None => text.to_string(),
    }
}

fn sorted(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<String, serde_json::Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            serde_json::Value::Object(sorted.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

/// A table's rows by key: each column's canonical text.
type Rows = BTreeMap<i64, Vec<Option<String>>>;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/debezium.sh")
}

fn run_script(args: &[&str]) -> String {
    let out = Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/debezium.sh");
    assert!(
        out.status.success(),
        "scripts/debezium.sh {args:?} failed ({})",
        out.status
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// PostgreSQL and the Connect worker, stopped by their pids when dropped (and by the script's
/// watchdog once this process exits, whatever the exit).
struct SourceSide {
    dir: tempfile::TempDir,
    port: String,
}

impl SourceSide {
    fn start() -> SourceSide {
        let dir = tempfile::Builder::new()
            .prefix("kbq-debezium-")
            .tempdir()
            .expect("temp dir");
        let parent = std::process::id().to_string();
        let port = run_script(&["postgres", path(dir.path()), "--parent", &parent]);
        SourceSide { dir, port }
    }

    /// Runs `sql` in one psql session, stopping at the first error.
    fn psql(&self, sql: &str) -> String {
        let mut child = Command::new(script())
            .args(["psql", path(self.dir.path()), "-A", "-t"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(sql.as_bytes())
            .expect("write sql");
        let out = child.wait_with_output().expect("psql output");
        assert!(
            out.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// The source table as `setting` promises to carry it.
    fn rows(&self, setting: Setting) -> Rows {
        let columns = columns();
        let exprs: Vec<String> = columns.iter().map(|c| c.expected_sql(setting)).collect();
        let sql = format!(
            "SELECT coalesce(json_agg(json_build_array({}) ORDER BY id), '[]') FROM src;",
            exprs.join(", ")
        );
        let text = self.psql(&sql);
        let rows: Vec<Vec<Option<String>>> = serde_json::from_str(text.trim()).expect("rows");
        rows.into_iter()
            .map(|row| {
                let cells: Vec<Option<String>> = row
                    .iter()
                    .zip(&columns)
                    .map(|(v, c)| canonical(c.kind(setting), v.as_deref()))
                    .collect();
                let id = cells[0].as_deref().expect("id").parse().expect("id");
                (id, cells)
            })
            .collect()
    }

    fn connect(&self, bootstrap: &str, connectors: &[PathBuf]) {
        let mut args = vec!["connect", path(self.dir.path()), bootstrap];
        args.extend(connectors.iter().map(|p| path(p)));
        run_script(&args);
    }

    fn connector(&self, setting: Setting, prefix: &str, registry: &str) -> PathBuf {
        let name = setting.name();
        let file = self.dir.path().join(format!("{name}.properties"));
        let text = format!(
            "name={name}
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=127.0.0.1
database.port={port}
database.user=postgres
database.password=unused
database.dbname=postgres
topic.prefix={prefix}
plugin.name=pgoutput
slot.name={name}
publication.name={name}
publication.autocreate.mode=filtered
table.include.list=public.src
{extra}",
            port = self.port,
            extra = setting.properties(registry)
        );
        std::fs::write(&file, text).expect("connector properties");
        file
    }
}

impl Drop for SourceSide {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["stop", path(self.dir.path())])
            .status();
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// The change workload: SQL text on a seeded generator, keeping which keys exist.
struct Workload {
    rng: StdRng,
    live: Vec<i64>,
    deleted: Vec<i64>,
    next_id: i64,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        Workload {
            rng: StdRng::seed_from_u64(seed),
            live: Vec::new(),
            deleted: Vec::new(),
            next_id: 1,
        }
    }

    fn value(&mut self, column: &Column) -> &'static str {
        if self.rng.random_ratio(1, 10) {
            "NULL"
        } else {
            column.values[self.rng.random_range(0..column.values.len())]
        }
    }

    fn insert_row(&mut self, id: i64, values: &[&str]) -> String {
        let names: Vec<&str> = columns().iter().map(|c| c.name).collect();
        format!(
            "INSERT INTO src ({}) VALUES ({id}, {});\n",
            names.join(", "),
            values.join(", ")
        )
    }

    fn insert(&mut self, id: i64) -> String {
        let values: Vec<&str> = columns()[1..].iter().map(|c| self.value(c)).collect();
        self.insert_row(id, &values)
    }

    /// The snapshot: a row of NULLs, one row per palette position (every value appears), then
    /// `random` random rows.
    fn snapshot(&mut self, random: usize) -> String {
        let mut sql = String::new();
        let nulls = vec!["NULL"; columns().len() - 1];
        sql += &self.insert_row(self.next_id, &nulls);
        self.live.push(self.next_id);
        self.next_id += 1;
        let widest = columns().iter().map(|c| c.values.len()).max().unwrap_or(0);
        for i in 0..widest {
            let values: Vec<&str> = columns()[1..]
                .iter()
                .map(|c| c.values[i % c.values.len()])
                .collect();
            sql += &self.insert_row(self.next_id, &values);
            self.live.push(self.next_id);
            self.next_id += 1;
        }
        for _ in 0..random {
            sql += &self.insert(self.next_id);
            self.live.push(self.next_id);
            self.next_id += 1;
        }
        sql
    }

    /// One change; `live` and `deleted` follow it unless `rolled_back`.
    fn change(&mut self, rolled_back: bool) -> String {
        let pick = self.rng.random_range(0..100);
        let existing = (!self.live.is_empty()).then(|| self.rng.random_range(0..self.live.len()));
        match (pick, existing) {
            (0..35, Some(i)) => {
                let id = self.live[i];
                let mut picked: Vec<usize> = (0..self.rng.random_range(1..4))
                    .map(|_| self.rng.random_range(1..columns().len()))
                    .collect();
                picked.sort_unstable();
                picked.dedup();
                let sets: Vec<String> = picked
                    .into_iter()
                    .map(|i| format!("{} = {}", columns()[i].name, self.value(columns()[i])))
                    .collect();
                format!("UPDATE src SET {} WHERE id = {id};\n", sets.join(", "))
            }
            (35..50, Some(i)) => {
                let id = self.live[i];
                if !rolled_back {
                    self.live.swap_remove(i);
                    self.deleted.push(id);
                }
                format!("DELETE FROM src WHERE id = {id};\n")
            }
            (50..60, Some(i)) => {
                // a primary-key update: Debezium writes a delete of the old key and a create
                let (old, new) = (self.live[i], self.next_id);
                self.next_id += 1;
                if !rolled_back {
                    self.live[i] = new;
                    self.deleted.push(old);
                }
                format!("UPDATE src SET id = {new} WHERE id = {old};\n")
            }
            (60..72, _) if !self.deleted.is_empty() => {
                let j = self.rng.random_range(0..self.deleted.len());
                let id = self.deleted[j];
                if !rolled_back {
                    self.deleted.swap_remove(j);
                    self.live.push(id);
                }
                self.insert(id)
            }
            _ => {
                let id = self.next_id;
                self.next_id += 1;
                if !rolled_back {
                    self.live.push(id);
                }
                self.insert(id)
            }
        }
    }

    /// About `n` changes: single statements, multi-row transactions and rolled-back ones.
    fn changes(&mut self, n: usize) -> String {
        let mut sql = String::new();
        let mut done = 0;
        while done < n {
            match self.rng.random_range(0..10) {
                0..6 => {
                    sql += &self.change(false);
                    done += 1;
                }
                6..9 => {
                    let k = self.rng.random_range(2..6);
                    sql += "BEGIN;\n";
                    for _ in 0..k {
                        sql += &self.change(false);
                    }
                    sql += "COMMIT;\n";
                    done += k;
                }
                _ => {
                    // rolled back: nothing of it may reach a table. Keys it touches are read
                    // from the model, which it does not change.
                    let k = self.rng.random_range(1..4);
                    sql += "BEGIN;\n";
                    for _ in 0..k {
                        sql += &self.change(true);
                    }
                    sql += "ROLLBACK;\n";
                }
            }
        }
        sql
    }
}

fn create_table_sql() -> String {
    let columns: Vec<String> = columns()
        .iter()
        .map(|c| format!("{} {}", c.name, c.pg))
        .collect();
    format!("CREATE TABLE src ({});\n", columns.join(", "))
}

/// The BigQuery table of `setting`: every column, nullable but the key, with its primary key.
fn create_bigquery_table(f: &Fixture, table: &str, setting: Setting) {
    let reference = table_ref(table);
    let mut t = Table::new(reference, bigquery_schema(setting));
    t.table_constraints = Some(serde_json::json!({"primaryKey": {"columns": ["id"]}}));
    f.emulator.store.insert_table(t).expect("table");
}

/// The BigQuery columns of `setting`'s table: the type a user would choose for each, or what
/// `create_table` derives.
fn bigquery_schema(setting: Setting) -> TableSchema {
    let fields: Vec<serde_json::Value> = columns()
        .iter()
        .map(|c| {
            let (t, mode) = c.bigquery(setting);
            serde_json::json!({"name": c.name, "type": t, "mode": mode})
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "fields": fields })).expect("schema")
}

/// The table `create_table` made from the envelope's schema block: the derived columns and the
/// primary key.
fn assert_created(f: &Fixture, table: &str) {
    let t = f
        .emulator
        .store
        .get_table(&table_ref(table))
        .expect("the daemon created the table");
    assert_eq!(t.primary_key(), ["id"], "{table}: its primary key");
    // compared as sets: the derived table lists its columns by name, not in the source's order
    let columns = |schema: &TableSchema| -> BTreeSet<String> {
        schema
            .fields
            .iter()
            .map(|c| format!("{} {:?} {:?}", c.name, c.field_type, c.mode()))
            .collect()
    };
    assert_eq!(
        columns(&t.schema),
        columns(&bigquery_schema(Setting::Created)),
        "{table}: the columns create_table derived"
    );
}

fn table_ref(table: &str) -> TableRef {
    TableRef::parse(&format!("projects/p/datasets/d/tables/{table}")).expect("table ref")
}

/// A BigQuery table's visible rows, in [`Rows`]' form.
fn table_rows(f: &Fixture, table: &str, setting: Setting) -> Rows {
    let reference = table_ref(table);
    // a table `create_table` makes exists once the daemon has started its route
    let Some(t) = f.emulator.store.get_table(&reference) else {
        return Rows::new();
    };
    let page = f
        .emulator
        .store
        .read_visible_rows(&reference, 0, usize::MAX)
        .expect("rows");
    let columns = columns();
    let at: Vec<usize> = columns
        .iter()
        .map(|c| {
            t.schema
                .fields
                .iter()
                .position(|field| field.name == c.name)
                .unwrap_or_else(|| panic!("{table} has no column {}", c.name))
        })
        .collect();
    page.rows
        .iter()
        .map(|row| {
            let r = row.codec.render_with(
                &row.data,
                &t.schema,
                RenderOptions {
                    int64_timestamp: true,
                },
            );
            let cells: Vec<Option<String>> = columns
                .iter()
                .zip(&at)
                .map(|(c, &i)| {
                    let kind = c.kind(setting);
                    canonical(kind, cell_text(kind, &r["f"][i]).as_deref())
                })
                .collect();
            let id = cells[0].as_deref().expect("id").parse().expect("id");
            (id, cells)
        })
        .collect()
}

/// What differs between the source and a table: missing and extra keys, and per column how
/// many cells differ with the first examples.
fn differences(columns: &[&Column], want: &Rows, got: &Rows) -> Vec<String> {
    let mut out = Vec::new();
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(k)).collect();
    if !missing.is_empty() {
        out.push(format!(
            "{} keys missing, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    if !extra.is_empty() {
        out.push(format!(
            "{} keys extra, e.g. {:?}",
            extra.len(),
            &extra[..extra.len().min(5)]
        ));
    }
    for (i, column) in columns.iter().enumerate() {
        let wrong: Vec<String> = want
            .iter()
            .filter_map(|(k, row)| {
                let g = got.get(k)?;
                (g[i] != row[i]).then(|| format!("id {k}: source {:?}, table {:?}", row[i], g[i]))
            })
            .collect();
        if !wrong.is_empty() {
            out.push(format!(
                "column {} ({}): {} cells differ, e.g. {}",
                column.name,
                column.pg,
                wrong.len(),
                wrong[..wrong.len().min(3)].join("; ")
            ));
        }
    }
    out
}

/// The dead letters by class and column, with one reason of each.
fn dead_letter_summary(f: &Fixture) -> String {
    let count = f.dead_letter_count();
    if count == 0 {
        return "no dead letters".into();
    }
    let mut by: BTreeMap<(String, String), (usize, String)> = BTreeMap::new();
    for (_, _, class, reason) in f.dead_letters(count as usize) {
        let column = reason
            .strip_prefix("column ")
            .and_then(|r| r.split_once(':'))
            .map_or("-", |(c, _)| c)
            .to_string();
        let entry = by.entry((class, column)).or_insert((0, reason.clone()));
        entry.0 += 1;
    }
    let lines: Vec<String> = by
        .iter()
        .map(|((class, column), (n, reason))| format!("  {n} × {class} on {column}, e.g. {reason}"))
        .collect();
    format!("{count} dead letters:\n{}", lines.join("\n"))
}

/// The daemon's config: one CDC route per setting, schemaless JSON in Kafka Connect's envelope,
/// or Avro through `registry`.
fn config(
    f: &Fixture,
    group: &str,
    registry: &str,
    routes: &[(Setting, String, String)],
) -> PathBuf {
    let topics: Vec<String> = routes.iter().map(|(_, t, _)| format!("\"{t}\"")).collect();
    let routes: String = routes
        .iter()
        .map(|(setting, topic, table)| {
            let (format, envelope) = match setting {
                Setting::Avro => ("avro", ""),
                _ => ("json", "\n      schemas_enable: true"),
            };
            // the created table takes its primary key from the Kafka key's schema block
            let (create, key) = match setting {
                Setting::Created => ("\n    create_table: {}", ""),
                _ => ("", "\n      primary_key: [id]"),
            };
            format!(
                "  - topics: [\"{topic}\"]
    table: \"{table}\"
    format: {format}{create}
    cdc:
      mode: upsert_delete
      format: debezium{envelope}{key}
      sequence: {{source_field: source.lsn}}
"
            )
        })
        .collect();
    let path = f.dir.path().join(format!("{group}.yaml"));
    let text = format!(
        r#"
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{group}"
  topics: [{topics}]
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
schema_registry:
  url: "{registry}"
bigquery:
  project: p
  dataset: d
  table: unused
  endpoint: "http://{emulator}"
  credentials: none
routes:
{routes}dead_letter:
  topic: "{dlq}"
delivery: at_least_once
checkpoint:
  interval: 200ms
writer:
  linger: 20ms
metrics:
  listen: "127.0.0.1:0"
log:
  format: json
shutdown_deadline: 20s
"#,
        bootstrap = f.bootstrap,
        topics = topics.join(", "),
        emulator = f.emulator.addr,
        dlq = f.dlq,
    );
    std::fs::write(&path, text).expect("config");
    path
}

/// Waits until every table equals the source as its setting carries it; panics naming what
/// differs.
fn wait_equal(f: &Fixture, source: &SourceSide, tables: &[(Setting, String)], timeout: Duration) {
    let want: Vec<Rows> = tables.iter().map(|(s, _)| source.rows(*s)).collect();
    let started = Instant::now();
    loop {
        let diffs: Vec<(Setting, Vec<String>)> = tables
            .iter()
            .zip(&want)
            .map(|((setting, table), want)| {
                let got = table_rows(f, table, *setting);
                (*setting, differences(&columns(), want, &got))
            })
            .filter(|(_, d)| !d.is_empty())
            .collect();
        if diffs.is_empty() {
            return;
        }
        // a dead letter never leaves: no need to wait out the timeout
        let dead = started.elapsed() > Duration::from_secs(15) && f.dead_letter_count() > 0;
        if dead || started.elapsed() > timeout {
            let text: Vec<String> = diffs
                .iter()
                .map(|(s, d)| format!("{}:\n  {}", s.name(), d.join("\n  ")))
                .collect();
            let waited = started.elapsed();
            panic!(
                "after {waited:?} the tables differ from the source table ({} rows):\n{}\n{}",
                want[0].len(),
                text.join("\n"),
                dead_letter_summary(f)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until `topic` holds at least `n` records.
fn wait_for_records(bootstrap: &str, topic: &str, n: i64) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = support::kafka::consumer_config(bootstrap, &unique_name("count"))
        .create()
        .expect("consumer");
    let started = Instant::now();
    loop {
        let held: i64 = (0..PARTITIONS)
            .map(|p| {
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .map_or(0, |(low, high)| high - low)
            })
            .sum();
        if held >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{topic} holds {held} records, not the snapshot's {n}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_pipeline(seed: u64, snapshot_rows: usize, changes: usize) {
    let started = Instant::now();
    eprintln!(
        "debezium pipeline: seed {seed}, {snapshot_rows} random snapshot rows, {changes} changes"
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let first = unique_name("dbz");
    let f = runtime.block_on(Fixture::with(SinkOptions {
        topic: Some(format!("{first}.defaults")),
        ..SinkOptions::partitions(PARTITIONS)
    }));
    f.emulator
        .store
        .insert_dataset(Dataset::new("p", "d"))
        .expect("dataset");

    let source = SourceSide::start();
    let mut workload = Workload::new(seed);
    source.psql(&(create_table_sql() + &workload.snapshot(snapshot_rows)));
    let (registry, _registry) = runtime.block_on(Registry::serve(Default::default(), None));
    let registry = format!("http://{registry}");

    // One topic prefix, topic and table per setting; the topics exist before Connect writes.
    let mut routes = Vec::new();
    let mut tables = Vec::new();
    let mut connectors = Vec::new();
    for setting in SETTINGS {
        let prefix = format!("{first}_{}", setting.name());
        let topic = format!("{prefix}.public.src");
        create_topic_blocking(&f.bootstrap, &topic, PARTITIONS);
        let table = format!("src_{}", setting.name());
        if setting != Setting::Created {
            create_bigquery_table(&f, &table, setting);
        }
        routes.push((setting, topic, table.clone()));
        tables.push((setting, table));
        connectors.push(source.connector(setting, &prefix, &registry));
    }
    source.connect(&f.bootstrap, &connectors);
    eprintln!(
        "source side up after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // `create_table` derives the table from a record of the topic: the snapshot's records are
    // in Kafka before the daemon starts (the worker's producer may still hold them when its
    // connectors report streaming)
    let snapshot = source.rows(Setting::Defaults).len() as i64;
    for (_, topic, _) in &routes {
        wait_for_records(&f.bootstrap, topic, snapshot);
    }
    let config = config(&f, &unique_name("dbz-sink"), &registry, &routes);
    let mut daemon = Daemon::start_named(&config, "sink-1");
    // the daemon takes in the snapshot (a row written or a record dead-lettered), then the
    // first changes come
    let writing = Instant::now();
    let taken = || {
        f.dead_letter_count() > 0
            || tables.iter().any(|(_, t)| {
                let rows = f.emulator.store.visible_row_count(&table_ref(t));
                rows.unwrap_or(0) > 0
            })
    };
    while !taken() {
        assert!(
            writing.elapsed() < Duration::from_secs(60) && daemon.is_running(),
            "the daemon took in no record of the snapshot"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    source.psql(&workload.changes(changes / 2));
    // killed while Connect still writes and the daemon still consumes
    std::thread::sleep(Duration::from_millis(300));
    daemon.kill();
    source.psql(&workload.changes(changes - changes / 2));
    let mut daemon = Daemon::start_named(&config, "sink-2");
    wait_equal(&f, &source, &tables, Duration::from_secs(90));
    assert_eq!(f.dead_letter_count(), 0, "{}", dead_letter_summary(&f));
    for (setting, table) in &tables {
        if *setting == Setting::Created {
            assert_created(&f, table);
        }
    }
    assert!(daemon.errors().is_empty(), "{:?}", daemon.errors());
    assert!(daemon.terminate().success());
    eprintln!(
        "debezium pipeline: {} rows × {} columns equal in {} tables after {:.1}s",
        source.rows(Setting::Defaults).len(),
        columns().len(),
        tables.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn pipeline() {
    run_pipeline(26_0001, 10, 120);
}

/// A fresh seed and more changes: `cargo test --test e2e debezium_pipeline:: -- --ignored`
/// (docs/cdc.md).
#[test]
#[ignore = "a soak: run by hand with a fresh seed"]
fn pipeline_soak() {
    let seed = std::env::var("KBQ_DEBEZIUM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let changes = std::env::var("KBQ_DEBEZIUM_CHANGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    eprintln!(
        "replay: KBQ_DEBEZIUM_SEED={seed} KBQ_DEBEZIUM_CHANGES={changes} cargo test --test e2e debezium_pipeline::pipeline_soak -- --ignored"
    );
    run_pipeline(seed, 200, changes);
}
