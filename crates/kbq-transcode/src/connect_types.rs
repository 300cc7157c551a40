//! The logical types Kafka Connect and Debezium name on a value, and what each value holds: one
//! table for every input format that carries the names (the `name` of a Connect schema in
//! `JsonConverter`'s envelope, `title` in Confluent's JSON Schema, `connect.name` in Avro written
//! by Connect's `AvroData`). docs/mapping.md lists what each becomes in each column type.
//!
//! A name is never guessed from a value's shape: the producer names it, and [`ConnectType`] says
//! what the value means (its unit, its zone, its encoding). An unknown name is `None` (the value
//! is read by its physical type, as any unnamed value).

use kbq_core::table_schema::FieldType;

/// How many of a second a time integer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Millis,
    Micros,
    Nanos,
}

impl TimeUnit {
    /// `value` in this unit as µs; `Err` when digits below the µs are not zero (BigQuery holds
    /// µs; they are never dropped) or it overflows.
    pub fn to_micros(self, value: i64) -> Result<i64, String> {
        match self {
            TimeUnit::Millis => value
                .checked_mul(1000)
                .ok_or_else(|| format!("{value} ms is out of range")),
            TimeUnit::Micros => Ok(value),
            TimeUnit::Nanos if value % 1000 != 0 => Err(format!(
                "{value} ns has digits below the microsecond, which bigquery cannot hold"
            )),
            TimeUnit::Nanos => Ok(value / 1000),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Millis => "milliseconds",
            TimeUnit::Micros => "microseconds",
            TimeUnit::Nanos => "nanoseconds",
        }
    }
}

/// The Connect schema type a named value rides on (`type` in the envelope's schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Physical {
    Int32,
    Int64,
    String,
    /// Bytes: base64 text in JSON. Connect's Decimal under `decimal.format: NUMERIC` is a JSON
    /// number on the same schema type.
    Bytes,
    Struct,
}

/// A named logical type, one variant per name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectType {
    /// `org.apache.kafka.connect.data.Decimal`: the unscaled big-endian two's complement
    /// (base64 in JSON, or a JSON number under `decimal.format: NUMERIC`) at `scale`
    /// (parameter `scale`); `connect.decimal.precision` when the producer knows it.
    Decimal { scale: u32, precision: Option<u32> },
    /// `org.apache.kafka.connect.data.Date`: int32 days since 1970-01-01.
    ConnectDate,
    /// `org.apache.kafka.connect.data.Time`: int32 milliseconds since midnight.
    ConnectTime,
    /// `org.apache.kafka.connect.data.Timestamp`: int64 milliseconds since the epoch (an
    /// instant; Debezium's `connect` mode writes a `timestamp without time zone` so, its wall
    /// clock counted as UTC).
    ConnectTimestamp,
    /// `io.debezium.time.Date`: int32 days since 1970-01-01.
    Date,
    /// `io.debezium.time.Time`: int32 milliseconds since midnight.
    Time,
    /// `io.debezium.time.MicroTime`: int64 microseconds since midnight.
    MicroTime,
    /// `io.debezium.time.NanoTime`: int64 nanoseconds since midnight.
    NanoTime,
    /// `io.debezium.time.Timestamp`: int64 milliseconds since the epoch of a wall-clock time
    /// without a zone (`timestamp without time zone`), counted as if it were UTC.
    Timestamp,
    /// `io.debezium.time.MicroTimestamp`: as `Timestamp`, in microseconds.
    MicroTimestamp,
    /// `io.debezium.time.NanoTimestamp`: as `Timestamp`, in nanoseconds.
    NanoTimestamp,
    /// `io.debezium.time.ZonedTimestamp`: an ISO-8601 date-time with its offset (an instant).
    ZonedTimestamp,
    /// `io.debezium.time.ZonedTime`: an ISO-8601 time with its offset (`timetz`).
    ZonedTime,
    /// `io.debezium.time.IsoDate` (`time.precision.mode: isostring`): `YYYY-MM-DD` with a zone,
    /// `Z` (`1970-01-01Z`).
    IsoDate,
    /// `io.debezium.time.IsoTime`: `HH:MM:SS[.f]` with `Z`.
    IsoTime,
    /// `io.debezium.time.IsoTimestamp`: an ISO-8601 date-time with `Z`, the wall clock of a
    /// `timestamp without time zone`.
    IsoTimestamp,
    /// `io.debezium.time.Year`: int32 year.
    Year,
    /// `io.debezium.time.MicroDuration`: int64 microseconds (Debezium counts a month as 30
    /// days).
    MicroDuration,
    /// `io.debezium.time.Interval`: an ISO-8601 duration string (`P1Y2M3DT4H5M6.78S`).
    Interval,
    /// `io.debezium.data.VariableScaleDecimal`: a struct `{scale: int32, value: bytes}`, the
    /// value the unscaled big-endian two's complement.
    VariableScaleDecimal,
    /// `io.debezium.data.Json`: a string holding a JSON document.
    Json,
    /// `io.debezium.data.Uuid`: a string, the UUID's canonical text.
    Uuid,
    /// `io.debezium.data.Xml`: a string holding an XML document.
    Xml,
    /// `io.debezium.data.Enum`: a string, one of the parameter `allowed`.
    Enum,
    /// `io.debezium.data.EnumSet`: a string, comma-separated members of `allowed`.
    EnumSet,
    /// `io.debezium.data.Bits`: bytes, the bit string (parameter `length` bits).
    Bits,
    /// `io.debezium.data.geometry.Geometry`: a struct `{wkb: bytes, srid: optional int32}`.
    Geometry,
    /// `io.debezium.data.geometry.Geography`: as `Geometry`.
    Geography,
    /// `io.debezium.data.geometry.Point`: a struct `{x, y: float64, wkb: optional bytes,
    /// srid: optional int32}`.
    Point,
}

impl ConnectType {
    /// The type a name denotes, with its parameters looked up by `parameter` (Connect's
    /// parameters are strings). `Ok(None)`: a name this table does not know. `Err`: a known
    /// name with a parameter it needs missing or malformed.
    pub fn from_name<'p>(
        name: &str,
        parameter: impl Fn(&str) -> Option<&'p str>,
    ) -> Result<Option<ConnectType>, String> {
        use ConnectType as C;
        let number = |key: &str| -> Result<Option<u32>, String> {
            match parameter(key) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .map(Some)
                    .map_err(|_| format!("{name}: parameter {key} {v:?} is not a number")),
            }
        };
        Ok(Some(match name {
            "org.apache.kafka.connect.data.Decimal" => C::Decimal {
                scale: number("scale")?.ok_or_else(|| format!("{name} has no parameter scale"))?,
                precision: number("connect.decimal.precision")?,
            },
            "org.apache.kafka.connect.data.Date" => C::ConnectDate,
            "org.apache.kafka.connect.data.Time" => C::ConnectTime,
            "org.apache.kafka.connect.data.Timestamp" => C::ConnectTimestamp,
            "io.debezium.time.Date" => C::Date,
            "io.debezium.time.Time" => C::Time,
            "io.debezium.time.MicroTime" => C::MicroTime,
            "io.debezium.time.NanoTime" => C::NanoTime,
            "io.debezium.time.Timestamp" => C::Timestamp,
            "io.debezium.time.MicroTimestamp" => C::MicroTimestamp,
            "io.debezium.time.NanoTimestamp" => C::NanoTimestamp,
            "io.debezium.time.ZonedTimestamp" => C::ZonedTimestamp,
            "io.debezium.time.ZonedTime" => C::ZonedTime,
            "io.debezium.time.IsoDate" => C::IsoDate,
            "io.debezium.time.IsoTime" => C::IsoTime,
            "io.debezium.time.IsoTimestamp" => C::IsoTimestamp,
            "io.debezium.time.Year" => C::Year,
            "io.debezium.time.MicroDuration" => C::MicroDuration,
            "io.debezium.time.Interval" => C::Interval,
            "io.debezium.data.VariableScaleDecimal" => C::VariableScaleDecimal,
            "io.debezium.data.Json" => C::Json,
            "io.debezium.data.Uuid" => C::Uuid,
            "io.debezium.data.Xml" => C::Xml,
            "io.debezium.data.Enum" => C::Enum,
            "io.debezium.data.EnumSet" => C::EnumSet,
            "io.debezium.data.Bits" => C::Bits,
            "io.debezium.data.geometry.Geometry" => C::Geometry,
            "io.debezium.data.geometry.Geography" => C::Geography,
            "io.debezium.data.geometry.Point" => C::Point,
            _ => return Ok(None),
        }))
    }

    /// The name, as the producer writes it.
    pub fn name(self) -> &'static str {
        use ConnectType as C;
        match self {
            C::Decimal { .. } => "org.apache.kafka.connect.data.Decimal",
            C::ConnectDate => "org.apache.kafka.connect.data.Date",
            C::ConnectTime => "org.apache.kafka.connect.data.Time",
            C::ConnectTimestamp => "org.apache.kafka.connect.data.Timestamp",
            C::Date => "io.debezium.time.Date",
            C::Time => "io.debezium.time.Time",
            C::MicroTime => "io.debezium.time.MicroTime",
            C::NanoTime => "io.debezium.time.NanoTime",
            C::Timestamp => "io.debezium.time.Timestamp",
            C::MicroTimestamp => "io.debezium.time.MicroTimestamp",
            C::NanoTimestamp => "io.debezium.time.NanoTimestamp",
            C::ZonedTimestamp => "io.debezium.time.ZonedTimestamp",
            C::ZonedTime => "io.debezium.time.ZonedTime",
            C::IsoDate => "io.debezium.time.IsoDate",
            C::IsoTime => "io.debezium.time.IsoTime",
            C::IsoTimestamp => "io.debezium.time.IsoTimestamp",
            C::Year => "io.debezium.time.Year",
            C::MicroDuration => "io.debezium.time.MicroDuration",
            C::Interval => "io.debezium.time.Interval",
            C::VariableScaleDecimal => "io.debezium.data.VariableScaleDecimal",
            C::Json => "io.debezium.data.Json",
            C::Uuid => "io.debezium.data.Uuid",
            C::Xml => "io.debezium.data.Xml",
            C::Enum => "io.debezium.data.Enum",
            C::EnumSet => "io.debezium.data.EnumSet",
            C::Bits => "io.debezium.data.Bits",
            C::Geometry => "io.debezium.data.geometry.Geometry",
            C::Geography => "io.debezium.data.geometry.Geography",
            C::Point => "io.debezium.data.geometry.Point",
        }
    }

    /// The Connect schema type the value rides on.
    pub fn physical(self) -> Physical {
        use ConnectType as C;
        match self {
            C::ConnectDate | C::ConnectTime | C::Date | C::Time | C::Year => Physical::Int32,
            C::ConnectTimestamp
            | C::MicroTime
            | C::NanoTime
            | C::Timestamp
            | C::MicroTimestamp
            | C::NanoTimestamp
            | C::MicroDuration => Physical::Int64,
            C::ZonedTimestamp
            | C::ZonedTime
            | C::IsoDate
            | C::IsoTime
            | C::IsoTimestamp
            | C::Interval
            | C::Json
            | C::Uuid
            | C::Xml
            | C::Enum
            | C::EnumSet => Physical::String,
            C::Decimal { .. } | C::Bits => Physical::Bytes,
            C::VariableScaleDecimal | C::Geometry | C::Geography | C::Point => Physical::Struct,
        }
    }

    /// What an integer-encoded temporal value counts, if it is one.
    pub fn temporal(self) -> Option<Temporal> {
        use ConnectType as C;
        use TimeUnit as U;
        Some(match self {
            C::ConnectDate | C::Date => Temporal::Days,
            C::ConnectTime | C::Time => Temporal::TimeOfDay(U::Millis),
            C::MicroTime => Temporal::TimeOfDay(U::Micros),
            C::NanoTime => Temporal::TimeOfDay(U::Nanos),
            C::ConnectTimestamp => Temporal::Instant(U::Millis),
            C::Timestamp => Temporal::LocalDateTime(U::Millis),
            C::MicroTimestamp => Temporal::LocalDateTime(U::Micros),
            C::NanoTimestamp => Temporal::LocalDateTime(U::Nanos),
            _ => return None,
        })
    }
}

/// What an integer-encoded temporal value counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temporal {
    /// Days since 1970-01-01.
    Days,
    /// Time since midnight.
    TimeOfDay(TimeUnit),
    /// Time since the epoch of an instant (UTC).
    Instant(TimeUnit),
    /// Time since the epoch of a wall-clock date and time without a zone, counted as if it
    /// were UTC: the same instant in a TIMESTAMP column, the same wall clock in DATETIME.
    LocalDateTime(TimeUnit),
}

impl ConnectType {
    /// The column `create_table` and `add_columns` give a value of this type, the same in every
    /// format (`None`: as its shape, a struct becoming a RECORD; a Decimal's is by its precision
    /// and scale, `derive::named_column`). Debezium's timestamps without a zone (`Timestamp`,
    /// `MicroTimestamp`, `NanoTimestamp`, `IsoTimestamp`) become DATETIME, the wall clock they
    /// are; Connect's `Timestamp` and a zoned timestamp, TIMESTAMP. `ZonedTime` keeps its offset
    /// in a STRING (TIME has no zone). `VariableScaleDecimal` declares no scale: BIGNUMERIC, whose
    /// 38 integer and 38 fractional digits hold what NUMERIC's 29 and 9 do not (a value beyond
    /// them is a per-record error).
    pub fn derived_column(self) -> Option<FieldType> {
        use ConnectType as C;
        use FieldType as F;
        Some(match (self, self.temporal()) {
            (C::Decimal { .. }, _) => F::Numeric, // by precision and scale: the caller
            (C::VariableScaleDecimal, _) => F::BigNumeric,
            (_, Some(Temporal::Days)) | (C::IsoDate, _) => F::Date,
            (_, Some(Temporal::TimeOfDay(_))) | (C::IsoTime, _) => F::Time,
            (_, Some(Temporal::Instant(_))) | (C::ZonedTimestamp, _) => F::Timestamp,
            (_, Some(Temporal::LocalDateTime(_))) | (C::IsoTimestamp, _) => F::DateTime,
            (C::Year | C::MicroDuration, _) => F::Int64,
            (C::Json, _) => F::Json,
            (C::Bits, _) => F::Bytes,
            (C::Geometry | C::Geography | C::Point, _) => return None,
            _ => F::String,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_itself() {
        let names = [
            "org.apache.kafka.connect.data.Date",
            "org.apache.kafka.connect.data.Time",
            "org.apache.kafka.connect.data.Timestamp",
            "io.debezium.time.Date",
            "io.debezium.time.Time",
            "io.debezium.time.MicroTime",
            "io.debezium.time.NanoTime",
            "io.debezium.time.Timestamp",
            "io.debezium.time.MicroTimestamp",
            "io.debezium.time.NanoTimestamp",
            "io.debezium.time.ZonedTimestamp",
            "io.debezium.time.ZonedTime",
            "io.debezium.time.IsoDate",
            "io.debezium.time.IsoTime",
            "io.debezium.time.IsoTimestamp",
            "io.debezium.time.Year",
            "io.debezium.time.MicroDuration",
            "io.debezium.time.Interval",
            "io.debezium.data.VariableScaleDecimal",
            "io.debezium.data.Json",
            "io.debezium.data.Uuid",
            "io.debezium.data.Xml",
            "io.debezium.data.Enum",
            "io.debezium.data.EnumSet",
            "io.debezium.data.Bits",
            "io.debezium.data.geometry.Geometry",
            "io.debezium.data.geometry.Geography",
            "io.debezium.data.geometry.Point",
        ];
        for name in names {
            let t = ConnectType::from_name(name, |_| None).unwrap().unwrap();
            assert_eq!(t.name(), name);
        }
        assert_eq!(
            ConnectType::from_name("com.example.Money", |_| None),
            Ok(None)
        );
    }

    #[test]
    fn a_decimal_needs_its_scale() {
        let params = |k: &str| match k {
            "scale" => Some("3"),
            "connect.decimal.precision" => Some("12"),
            _ => None,
        };
        assert_eq!(
            ConnectType::from_name("org.apache.kafka.connect.data.Decimal", params),
            Ok(Some(ConnectType::Decimal {
                scale: 3,
                precision: Some(12)
            }))
        );
        let e = ConnectType::from_name("org.apache.kafka.connect.data.Decimal", |_| None);
        assert!(e.unwrap_err().contains("no parameter scale"));
        let e = ConnectType::from_name("org.apache.kafka.connect.data.Decimal", |_| Some("x"));
        assert!(e.unwrap_err().contains("is not a number"));
    }

    #[test]
    fn units_convert_to_microseconds_exactly_or_not_at_all() {
        assert_eq!(
            TimeUnit::Millis.to_micros(1_709_296_496_789),
            Ok(1_709_296_496_789_000)
        );
        assert_eq!(TimeUnit::Nanos.to_micros(-1_000), Ok(-1));
        assert!(TimeUnit::Nanos.to_micros(1_001).is_err());
        assert!(TimeUnit::Millis.to_micros(i64::MAX).is_err());
        assert_eq!(
            ConnectType::Timestamp.temporal(),
            Some(Temporal::LocalDateTime(TimeUnit::Millis))
        );
        assert_eq!(
            ConnectType::ConnectTimestamp.temporal(),
            Some(Temporal::Instant(TimeUnit::Millis))
        );
    }
}
