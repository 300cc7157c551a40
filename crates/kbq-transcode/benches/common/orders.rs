//! The end-to-end benchmark's records for the transcoder benchmark: the quickstart's generated
//! orders (`src/quickstart/records.rs`, included by path: this crate does not depend on the
//! daemon) with the seed of the bench driver (`examples/kbq-bench/generator.rs`), written into
//! the table the sink creates from their schema (`create_table: {}`) with the three Kafka
//! metadata columns `bench/run.sh` configures.

// The bench, the differential test and `examples/plan_loop.rs` each use a part of this module.
#![allow(dead_code)]

use kbq_transcode::{
    AvroSchema, DeriveOptions, KafkaMetadata, MetadataColumns, Plan, PlanOptions,
    table_schema_from_avro,
};

// The daemon's module, whole: its unit tests compile here too when a bench is built as a test.
#[allow(dead_code, unused_imports)]
#[path = "../../../../src/quickstart/records.rs"]
mod records;

/// The orders' Avro schema.
pub const SCHEMA: &str = records::SCHEMA;

/// `examples/kbq-bench/generator.rs`'s `SEED`.
const DRIVER_SEED: u64 = 0x6b62_715f_6265_6e63;
/// The inputs cycle over this many records.
const RECORDS: u64 = 1024;

pub struct Orders {
    pub plan: Plan,
    pub avro: Vec<Vec<u8>>,
}

pub fn metadata() -> MetadataColumns {
    MetadataColumns {
        partition: Some("_kafka_partition".into()),
        offset: Some("_kafka_offset".into()),
        timestamp: Some("_kafka_timestamp".into()),
        ..Default::default()
    }
}

impl Orders {
    pub fn new() -> Orders {
        let schema = AvroSchema::parse(records::SCHEMA).unwrap();
        let derive = DeriveOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let table = table_schema_from_avro(&schema, &derive).unwrap();
        let options = PlanOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let plan = Plan::compile(&schema, &table, &options).unwrap();
        let generator = records::OrderGenerator::new(DRIVER_SEED);
        let avro = (0..RECORDS)
            .map(|n| {
                let mut out = Vec::new();
                generator.encode(n, &mut out);
                out
            })
            .collect();
        Orders { plan, avro }
    }

    /// Record `k` of a run with the metadata the sink gives it (partition, offset, timestamp).
    pub fn transcode(&self, avro: &[u8], k: u64, out: &mut Vec<u8>) -> std::ops::Range<usize> {
        self.plan.transcode(avro, Some(&meta(k)), out).unwrap()
    }

    /// Every record transcodes.
    pub fn check(&self) {
        let mut out = Vec::new();
        for (k, avro) in self.avro.iter().enumerate() {
            out.clear();
            self.transcode(avro, k as u64, &mut out);
        }
    }
}

/// The Kafka metadata of record `k` of a run: 16 partitions, as `bench/run.sh` makes them.
pub fn meta(k: u64) -> KafkaMetadata<'static> {
    KafkaMetadata {
        topic: "orders",
        partition: (k % 16) as i32,
        offset: kbq_core::offsets::KafkaOffset(k as i64),
        timestamp_millis: Some(1_765_000_000_000 + k as i64),
        ..Default::default()
    }
}

/// The same orders as a Protobuf writer message, field for field as Confluent's converters map
/// the Avro schema: the enum as an enum, the timestamp as `google.protobuf.Timestamp`, the date
/// as `google.type.Date`, the decimals as `confluent.type.Decimal`, the nullable string as a
/// proto3 `optional`.
pub const PROTO: &str = r#"
syntax = "proto3";
package com.example.shop;
import "google/protobuf/timestamp.proto";
import "google/type/date.proto";
import "confluent/type/decimal.proto";
enum Status { PENDING = 0; PAID = 1; SHIPPED = 2; DELIVERED = 3; CANCELLED = 4; }
message Order {
  string order_id = 1;
  int64 sequence = 2;
  int64 customer_id = 3;
  string customer_name = 4;
  string email = 5;
  Status status = 6;
  google.protobuf.Timestamp created_at = 7;
  google.type.Date order_date = 8;
  confluent.type.Decimal total = 9;
  string currency = 10;
  int32 item_count = 11;
  double discount_rate = 12;
  bool is_gift = 13;
  optional string coupon = 14;
  Address shipping_address = 15;
  repeated Item items = 16;
  repeated string tags = 17;
  string user_agent = 18;
  string session_id = 19;
  string comment = 20;
}
message Address { string street = 1; string city = 2; string postal_code = 3; string country = 4; }
message Item { string sku = 1; int32 quantity = 2; confluent.type.Decimal unit_price = 3; }
"#;

/// The orders in Protobuf ([`PROTO`]), written into the same table as [`Orders`].
pub struct ProtoOrders {
    pub plan: Plan,
    pub proto: Vec<Vec<u8>>,
}

impl ProtoOrders {
    pub fn new() -> ProtoOrders {
        use kbq_transcode::protobuf::{MessagePath, ProtoSchema};
        let avro = Orders::new();
        let schema = AvroSchema::parse(records::SCHEMA).unwrap();
        let derive = DeriveOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let table = table_schema_from_avro(&schema, &derive).unwrap();
        let options = PlanOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let proto_schema = ProtoSchema::compile(PROTO, &[]).unwrap();
        let writer = proto_schema.message(&MessagePath::FIRST).unwrap();
        let plan = Plan::compile_protobuf(&writer, &table, &options).unwrap();
        let avro_schema = apache_avro::Schema::parse_str(records::SCHEMA).unwrap();
        let proto = avro
            .avro
            .iter()
            .map(|bytes| to_proto(proto_schema.pool(), &avro_schema, bytes))
            .collect();
        ProtoOrders { plan, proto }
    }

    /// Record `k` of a run with the metadata the sink gives it (partition, offset, timestamp).
    pub fn transcode(&self, proto: &[u8], k: u64, out: &mut Vec<u8>) -> std::ops::Range<usize> {
        self.plan.transcode(proto, Some(&meta(k)), out).unwrap()
    }
}

/// One Avro order as the Protobuf message of [`PROTO`].
fn to_proto(
    pool: &prost_reflect::DescriptorPool,
    schema: &apache_avro::Schema,
    avro: &[u8],
) -> Vec<u8> {
    use apache_avro::types::Value as A;
    use prost::Message;
    use prost_reflect::{DynamicMessage, ReflectMessage, Value as P};
    let new = |name: &str| DynamicMessage::new(pool.get_message_by_name(name).unwrap());
    let decimal = |d: &apache_avro::Decimal| {
        let mut m = new("confluent.type.Decimal");
        let bytes: Vec<u8> = d.try_into().unwrap();
        m.set_field_by_name("value", P::Bytes(bytes.into()));
        m.set_field_by_name("scale", P::I32(2));
        P::Message(m)
    };
    let string = |v: &A| match v {
        A::String(s) => P::String(s.clone()),
        A::Uuid(u) => P::String(u.to_string()),
        other => panic!("not a string: {other:?}"),
    };
    fn convert(
        v: &A,
        name: &str,
        m: &mut DynamicMessage,
        new: &dyn Fn(&str) -> DynamicMessage,
        decimal: &dyn Fn(&apache_avro::Decimal) -> P,
        string: &dyn Fn(&A) -> P,
    ) {
        let value = match v {
            A::String(_) | A::Uuid(_) => string(v),
            A::Long(l) => P::I64(*l),
            A::Int(i) => P::I32(*i),
            A::Double(d) => P::F64(*d),
            A::Boolean(b) => P::Bool(*b),
            A::Enum(i, _) => P::EnumNumber(*i as i32),
            A::TimestampMicros(us) => {
                let mut t = new("google.protobuf.Timestamp");
                t.set_field_by_name("seconds", P::I64(us.div_euclid(1_000_000)));
                t.set_field_by_name("nanos", P::I32((us.rem_euclid(1_000_000) * 1000) as i32));
                P::Message(t)
            }
            A::Date(days) => {
                let date = chrono::NaiveDate::from_num_days_from_ce_opt(719_163 + days).unwrap();
                let mut d = new("google.type.Date");
                use chrono::Datelike;
                d.set_field_by_name("year", P::I32(date.year()));
                d.set_field_by_name("month", P::I32(date.month() as i32));
                d.set_field_by_name("day", P::I32(date.day() as i32));
                P::Message(d)
            }
            A::Decimal(d) => decimal(d),
            A::Union(_, inner) if **inner == A::Null => return,
            A::Union(_, inner) => return convert(inner, name, m, new, decimal, string),
            A::Record(fields) => {
                let field = m.descriptor().get_field_by_name(name).unwrap();
                let prost_reflect::Kind::Message(d) = field.kind() else {
                    panic!("{name} is not a message")
                };
                let mut inner = DynamicMessage::new(d);
                for (k, v) in fields {
                    convert(v, k, &mut inner, new, decimal, string);
                }
                P::Message(inner)
            }
            A::Array(items) => {
                let field = m.descriptor().get_field_by_name(name).unwrap();
                let list = items
                    .iter()
                    .map(|item| match (item, field.kind()) {
                        (A::Record(fields), prost_reflect::Kind::Message(d)) => {
                            let mut inner = DynamicMessage::new(d);
                            for (k, v) in fields.iter() {
                                convert(v, k.as_str(), &mut inner, new, decimal, string);
                            }
                            P::Message(inner)
                        }
                        (other, _) => string(other),
                    })
                    .collect();
                P::List(list)
            }
            other => panic!("not in the orders schema: {other:?}"),
        };
        m.set_field_by_name(name, value);
    }
    #[allow(deprecated)]
    let A::Record(fields) = apache_avro::from_avro_datum(schema, &mut &avro[..], None).unwrap()
    else {
        panic!("an order is a record")
    };
    let mut order = new("com.example.shop.Order");
    for (name, v) in &fields {
        convert(v, name, &mut order, &new, &decimal, &string);
    }
    order.encode_to_vec()
}
