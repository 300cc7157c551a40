"""Protobuf transcoder test vectors written by Confluent's own ProtobufSerializer.

Usage: python protobuf_vectors.py OUT_FILE

The `.proto` files below are compiled by protoc (shipped in grpcio-tools) with the google/type
files of googleapis-common-protos; the messages are built with Google's protobuf runtime and
serialized by confluent-kafka's ProtobufSerializer against its in-memory `mock://` registry, which
registers the schema and its references as the serializer does against a real one. Expected
BigQuery values are computed here with Python's datetime and decimal modules.

Writes one JSON object per line. The first line holds the registry as the serializer left it
(`ids`: schema text, type and references per id; `subjects`: the versions references point at)
and the `.proto` sources; every other line is a vector: the framed payload (hex), the BigQuery
columns, and the expected row in the shape of avro_vectors.py (integers and floats as numbers,
strings, bytes as {"hex": ...}, REPEATED as lists, RECORD as objects, NULL as an absent key), or
"error": true for a per-record error.

Also dumps the descriptors of Confluent's and googleapis' well-known files, so the test can check
the copies the sink bundles field by field.
"""

import base64
import datetime as dt
import decimal
import json
import os
import sys
import tempfile

import grpc_tools
from grpc_tools import protoc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.type import date_pb2, timeofday_pb2, decimal_pb2 as gdecimal_pb2, money_pb2, latlng_pb2
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.confluent import meta_pb2
from confluent_kafka.schema_registry.confluent.type import decimal_pb2, variant_pb2
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

UTC = dt.timezone.utc

PROTOS = {
    "common/money.proto": """
syntax = "proto3";
package common;
message Money {
  string currency = 1;
  int64 units = 2;
  int32 nanos = 3;
}
""",
    "shop/order.proto": """
syntax = "proto3";
package shop;
import "common/money.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/type/date.proto";
import "google/type/timeofday.proto";
import "google/type/decimal.proto";
import "confluent/type/decimal.proto";

enum Status {
  STATUS_UNKNOWN = 0;
  PLACED = 1;
  SHIPPED = 2;
}

message Order {
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  int64 id = 1;
  string customer = 2;
  Status status = 3;
  repeated int32 quantities = 4;
  repeated string tags = 5;
  map<string, int64> counters = 6;
  Line first_line = 7;
  repeated Line lines = 8;
  google.protobuf.Timestamp placed_at = 9;
  google.protobuf.Int64Value maybe_count = 10;
  google.protobuf.StringValue note = 11;
  google.type.Date ship_date = 12;
  google.type.TimeOfDay ship_time = 13;
  confluent.type.Decimal amount = 14;
  common.Money total = 15;
  optional int32 priority = 16;
  oneof contact {
    string email = 17;
    string phone = 18;
  }
  sint32 delta32 = 19;
  sint64 delta64 = 20;
  fixed32 fx32 = 21;
  fixed64 fx64 = 22;
  sfixed32 sfx32 = 23;
  sfixed64 sfx64 = 24;
  uint32 u32 = 25;
  uint64 u64 = 26;
  float ratio = 27;
  double score = 28;
  bool flag = 29;
  bytes blob = 30;
  google.protobuf.Duration elapsed = 31;
  google.protobuf.BoolValue maybe_flag = 32;
  google.type.Decimal price = 33;
  string attributes = 34;
  int64 far_field = 5000;
}

message Refund {
  int64 order_id = 1;
  string reason = 2;
}
""",
}

# The google/type files come from googleapis-common-protos; Confluent's decimal is written from its
# own compiled descriptor below (Confluent ships no .proto text for it in Python).
CONFLUENT_DECIMAL = """
syntax = "proto3";
package confluent.type;
message Decimal {
  bytes value = 1;
  uint32 precision = 2;
  int32 scale = 3;
}
"""


def check_confluent_decimal_text():
    fd = descriptor_pb2.FileDescriptorProto.FromString(decimal_pb2.DESCRIPTOR.serialized_pb)
    fields = [(f.name, f.number, f.type) for f in fd.message_type[0].field]
    assert fields == [("value", 1, 12), ("precision", 2, 13), ("scale", 3, 5)], fields


def compile_protos(tmp):
    for name, text in list(PROTOS.items()) + [("confluent/type/decimal.proto", CONFLUENT_DECIMAL)]:
        path = os.path.join(tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    site = os.path.dirname(os.path.dirname(date_pb2.__file__))  # .../site-packages/google
    site = os.path.dirname(site)
    out = os.path.join(tmp, "set.pb")
    args = [
        "protoc",
        f"-I{tmp}",
        f"-I{os.path.join(os.path.dirname(grpc_tools.__file__), '_proto')}",
        f"-I{site}",
        "--include_imports",
        f"--descriptor_set_out={out}",
        "shop/order.proto",
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    with open(out, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    return pool


def micros(d):
    return (d - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def packed_time(t):
    return (((t.hour << 12) | (t.minute << 6) | t.second) << 20) | t.microsecond


def numeric_bytes(value, scale=9):
    unscaled = int((value * (decimal.Decimal(10) ** scale)).to_integral_exact())
    size = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return {"hex": unscaled.to_bytes(size, "little", signed=True).hex()}


def confluent_decimal(msg, value, scale):
    unscaled = int(value.scaleb(scale))
    size = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    msg.value = unscaled.to_bytes(size, "big", signed=True)
    msg.precision = 20
    msg.scale = scale


def col(name, ty, mode="NULLABLE", fields=None):
    c = {"name": name, "type": ty, "mode": mode}
    if fields:
        c["fields"] = fields
    return c


ORDER_COLUMNS = [
    col("id", "INTEGER"),
    col("customer", "STRING"),
    col("status", "STRING"),
    col("quantities", "INTEGER", "REPEATED"),
    col("tags", "STRING", "REPEATED"),
    col("counters", "RECORD", "REPEATED", [col("key", "STRING"), col("value", "INTEGER")]),
    col("first_line", "RECORD", fields=[col("sku", "STRING"), col("qty", "INTEGER")]),
    col("lines", "RECORD", "REPEATED", [col("sku", "STRING"), col("qty", "INTEGER")]),
    col("placed_at", "TIMESTAMP"),
    col("maybe_count", "INTEGER"),
    col("note", "STRING"),
    col("ship_date", "DATE"),
    col("ship_time", "TIME"),
    col("amount", "NUMERIC"),
    col("total", "RECORD", fields=[col("currency", "STRING"), col("units", "INTEGER"), col("nanos", "INTEGER")]),
    col("priority", "INTEGER"),
    col("email", "STRING"),
    col("phone", "STRING"),
    col("delta32", "INTEGER"),
    col("delta64", "INTEGER"),
    col("fx32", "INTEGER"),
    col("fx64", "INTEGER"),
    col("sfx32", "INTEGER"),
    col("sfx64", "INTEGER"),
    col("u32", "INTEGER"),
    col("u64", "NUMERIC"),
    col("ratio", "FLOAT"),
    col("score", "FLOAT"),
    col("flag", "BOOLEAN"),
    col("blob", "BYTES"),
    col("elapsed", "INTEGER"),
    col("maybe_flag", "BOOLEAN"),
    col("price", "BIGNUMERIC"),
    col("attributes", "JSON"),
    col("far_field", "INTEGER"),
]

# What an Order with nothing set becomes: proto3 implicit presence means every plain scalar
# column receives its default, while messages, wrappers, `optional` and oneof members stay NULL.
DEFAULTS = {
    "id": 0, "customer": "", "status": "STATUS_UNKNOWN", "delta32": 0, "delta64": 0, "fx32": 0,
    "fx64": 0, "sfx32": 0, "sfx64": 0, "u32": 0, "u64": numeric_bytes(decimal.Decimal(0)),
    "ratio": 0.0, "score": 0.0, "flag": False, "blob": {"hex": ""}, "far_field": 0,
}


def vectors(pool, serializer, refund_serializer, line_serializer):
    Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    Refund = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Refund"))
    Line = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Line"))
    ctx = SerializationContext("orders", MessageField.VALUE)

    def vector(name, ser, msg, columns, expected=None, error=False, message="shop.Order"):
        out = {"name": name, "message": message, "table": columns, "payload_hex": ser(msg, ctx).hex()}
        if error:
            out["error"] = True
        else:
            out["expected"] = expected
        return out

    placed = dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC)
    o = Order()
    o.id = -9007199254740993
    o.customer = "Zoë \"Q\""
    o.status = 2
    o.quantities.extend([1, -2, 300000])
    o.tags.extend(["a", "", "ß"])
    o.counters["only"] = 42
    o.first_line.sku = "SKU-1"
    o.first_line.qty = 3
    line = o.lines.add()
    line.sku = "x"
    o.lines.add()  # an empty line: its columns get the defaults
    o.placed_at.seconds = int(placed.timestamp())
    o.placed_at.nanos = placed.microsecond * 1000 + 789  # sub-µs digits are truncated
    o.maybe_count.value = 0  # a wrapper set to zero is 0, not NULL
    o.note.value = "wrapped"
    o.ship_date.year, o.ship_date.month, o.ship_date.day = 2024, 2, 29
    o.ship_time.hours, o.ship_time.minutes, o.ship_time.seconds = 23, 5, 7
    o.ship_time.nanos = 250_000_000
    confluent_decimal(o.amount, decimal.Decimal("-12.345"), 3)
    o.total.currency = "EUR"
    o.total.units = 12
    o.priority = 0  # proto3 optional: present and zero
    o.phone = "+41 00"
    o.delta32 = -5
    o.delta64 = -(2**62)
    o.fx32 = 2**32 - 1
    o.fx64 = 2**63 - 1
    o.sfx32 = -(2**31)
    o.sfx64 = -(2**63)
    o.u32 = 2**32 - 1
    o.u64 = 2**64 - 1
    o.ratio = 0.1
    o.score = -1.5e300
    o.flag = True
    o.blob = b"\x00\xff"
    o.elapsed.seconds = -3
    o.elapsed.nanos = -500_000
    o.maybe_flag.value = False
    o.price.value = "-1.5e-3"
    o.attributes = '{"k": [1, 2]}'
    o.far_field = 7
    full = {
        "id": -9007199254740993, "customer": "Zoë \"Q\"", "status": "SHIPPED",
        "quantities": [1, -2, 300000], "tags": ["a", "", "ß"],
        "counters": [{"key": "only", "value": 42}],
        "first_line": {"sku": "SKU-1", "qty": 3},
        "lines": [{"sku": "x", "qty": 0}, {"sku": "", "qty": 0}],
        "placed_at": micros(placed),
        "maybe_count": 0, "note": "wrapped",
        "ship_date": (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days,
        "ship_time": packed_time(dt.time(23, 5, 7, 250000)),
        "amount": numeric_bytes(decimal.Decimal("-12.345")),
        "total": {"currency": "EUR", "units": 12, "nanos": 0},
        "priority": 0, "phone": "+41 00",
        "delta32": -5, "delta64": -(2**62), "fx32": 2**32 - 1, "fx64": 2**63 - 1,
        "sfx32": -(2**31), "sfx64": -(2**63), "u32": 2**32 - 1,
        "u64": numeric_bytes(decimal.Decimal(2**64 - 1)),
        "ratio": 0.10000000149011612, "score": -1.5e300, "flag": True, "blob": {"hex": "00ff"},
        "elapsed": -3_000_500, "maybe_flag": False,
        "price": numeric_bytes(decimal.Decimal("-0.0015"), 38),
        "attributes": '{"k": [1, 2]}', "far_field": 7,
    }
    yield vector("every_type", serializer, o, ORDER_COLUMNS, full)
    yield vector("nothing_set_gives_proto3_defaults", serializer, Order(), ORDER_COLUMNS, DEFAULTS)

    o = Order()
    o.placed_at.seconds = -1
    o.placed_at.nanos = 500_000_000
    o.email = "a@b"
    o.counters["zero"] = 0
    expected = dict(DEFAULTS, placed_at=-500_000, email="a@b", counters=[{"key": "zero", "value": 0}])
    yield vector("timestamp_before_the_epoch_and_a_zero_map_value", serializer, o, ORDER_COLUMNS, expected)

    o = Order()
    o.status = 7  # proto3 enums are open: a number without a name
    yield vector("an_unnamed_enum_number_is_a_record_error", serializer, o, ORDER_COLUMNS, error=True)

    o = Order()
    o.fx64 = 2**63
    columns = [col("fx64", "INTEGER")]
    yield vector("a_fixed64_above_int64_is_a_record_error", serializer, o, columns, error=True)

    o = Order()
    o.ship_date.year = 2023
    o.ship_date.month = 2
    o.ship_date.day = 29
    yield vector("an_impossible_date_is_a_record_error", serializer, o, [col("ship_date", "DATE")], error=True)

    r = Refund()
    r.order_id = 5
    r.reason = "late"
    yield vector("the_second_message_of_the_file", refund_serializer, r,
                 [col("order_id", "INTEGER"), col("reason", "STRING")],
                 {"order_id": 5, "reason": "late"}, message="shop.Refund")

    ln = Line()
    ln.sku = "nested"
    ln.qty = -1
    yield vector("a_nested_message", line_serializer, ln,
                 [col("sku", "STRING"), col("qty", "INTEGER")],
                 {"sku": "nested", "qty": -1}, message="shop.Order.Line")


def registry_dump(client):
    """Every schema id and referenced subject version the serializer registered."""
    ids, subjects = {}, {}
    for subject in client.get_subjects():
        for version in client.get_versions(subject):
            reg = client.get_version(subject, version)
            refs = [{"name": r.name, "subject": r.subject, "version": r.version}
                    for r in (reg.schema.references or [])]
            entry = {"schema": reg.schema.schema_str, "schemaType": reg.schema.schema_type,
                     "references": refs}
            ids[str(reg.schema_id)] = entry
            subjects.setdefault(subject, {})[str(version)] = dict(entry, id=reg.schema_id)
    return {"ids": ids, "subjects": subjects}


def known_files():
    """Descriptors of the well-known files Confluent's serializers never register."""
    out = {}
    for module in (decimal_pb2, variant_pb2, meta_pb2, date_pb2, timeofday_pb2, gdecimal_pb2,
                   money_pb2, latlng_pb2):
        fd = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        out[fd.name] = {
            m.name: [[f.name, f.number, f.type, f.label] for f in m.field] for m in fd.message_type
        }
    return out


def main():
    check_confluent_decimal_text()
    with tempfile.TemporaryDirectory() as tmp:
        pool = compile_protos(tmp)
    client = SchemaRegistryClient.new_client({"url": "mock://vectors"})

    def ser(name):
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        return ProtobufSerializer(cls, client)

    # One serializer per message: each registers under the topic's subject (references once).
    lines = list(vectors(pool, ser("shop.Order"), ser("shop.Refund"), ser("shop.Order.Line")))
    header = {"registry": registry_dump(client), "protos": PROTOS, "known": known_files()}
    with open(sys.argv[1], "w") as f:
        f.write(json.dumps(header) + "\n")
        for v in lines:
            f.write(json.dumps(v) + "\n")


if __name__ == "__main__":
    main()
