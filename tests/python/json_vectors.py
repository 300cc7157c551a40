"""JSON Schema test vectors written by Confluent's own JSONSerializer.

Usage: python json_vectors.py OUT_FILE

Registers a JSON Schema (with a `$ref` into its own definitions and one to another registered
schema, as a reference) through confluent-kafka's JSONSerializer against its in-memory `mock://`
registry, and serializes records with it. Expected BigQuery values are computed here, with
Python's datetime and decimal modules, in the shape `tabledata.list` renders them with
`useInt64Timestamp` (every value a string; REPEATED a list of {"v": ...}; RECORD {"f": [...]};
NULL as null).

Writes one JSON object per line: first {"registry": ...} (ids and subjects as the serializer left
them), then one vector per line: name, payload_hex, expected (a map column → rendered value) or
"error": the dead-letter class the sink must give it.
"""

import base64
import datetime as dt
import decimal
import json
import sys

from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

MONEY = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Money",
    "type": "object",
    "properties": {"currency": {"type": "string"}, "units": {"type": "integer"}},
    "required": ["currency", "units"],
}

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "definitions": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        },
        "Line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku"],
        },
    },
    "properties": {
        "id": {"type": "integer"},
        "price": {"type": "number"},
        "amount": {"type": "number"},
        "amount_text": {"type": "string"},
        "flag": {"type": "boolean"},
        "name": {"type": "string", "maxLength": 40},
        "blob": {"type": "string", "contentEncoding": "base64"},
        "placed_at": {"type": "string", "format": "date-time"},
        "created_ms": {"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp"},
        "ship_date": {"type": "string", "format": "date"},
        "day_num": {"type": "integer", "title": "org.apache.kafka.connect.data.Date"},
        "at_time": {"type": "string", "format": "time"},
        "local": {"type": "string"},
        "attrs": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
        "address": {"$ref": "#/definitions/Address"},
        "total": {"$ref": "money.json"},
        "note": {"type": ["null", "string"]},
        "maybe": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        "ignored": {"type": "string"},
    },
    "required": ["id"],
}

COLUMNS = [
    {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
    {"name": "price", "type": "FLOAT"},
    {"name": "amount", "type": "NUMERIC"},
    {"name": "amount_text", "type": "BIGNUMERIC"},
    {"name": "flag", "type": "BOOLEAN"},
    {"name": "name", "type": "STRING"},
    {"name": "blob", "type": "BYTES"},
    {"name": "placed_at", "type": "TIMESTAMP"},
    {"name": "created_ms", "type": "TIMESTAMP"},
    {"name": "ship_date", "type": "DATE"},
    {"name": "day_num", "type": "DATE"},
    {"name": "at_time", "type": "TIME"},
    {"name": "local", "type": "DATETIME"},
    {"name": "attrs", "type": "JSON"},
    {"name": "tags", "type": "STRING", "mode": "REPEATED"},
    {"name": "lines", "type": "RECORD", "mode": "REPEATED", "fields": [
        {"name": "sku", "type": "STRING"}, {"name": "qty", "type": "INTEGER"}]},
    {"name": "address", "type": "RECORD", "fields": [
        {"name": "city", "type": "STRING"}, {"name": "zip", "type": "STRING"}]},
    {"name": "total", "type": "RECORD", "fields": [
        {"name": "currency", "type": "STRING"}, {"name": "units", "type": "INTEGER"}]},
    {"name": "note", "type": "STRING"},
    {"name": "maybe", "type": "INTEGER"},
]


def micros(t):
    d = t - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def main():
    client = SchemaRegistryClient.new_client({"url": "mock://json-vectors"})
    client.register_schema("money", Schema(json.dumps(MONEY), "JSON"))
    order = Schema(json.dumps(ORDER), "JSON",
                   references=[SchemaReference("money.json", "money", 1)])
    ctx = SerializationContext("orders", MessageField.VALUE)
    ser = JSONSerializer(order, client)
    # Records that break the schema, as a producer with validation off writes them.
    loose = JSONSerializer(order, client, conf={"validate": False, "auto.register.schemas": False,
                                                "use.latest.version": True})

    placed = dt.datetime(2024, 2, 29, 23, 30, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    created = dt.datetime(1969, 7, 20, 20, 17, 40, 500000, tzinfo=UTC)
    every = {
        "id": -9007199254740993,
        "price": 0.1,
        "amount": 12.345,
        "amount_text": "-0.00000000000000000000000000000000000001",
        "flag": False,
        "name": "Zoë \"Q\" \u2028 😀",
        "blob": base64.b64encode(b"\x00\xff\x10").decode(),
        "placed_at": placed.isoformat(),
        "created_ms": micros(created) // 1000,
        "ship_date": "2024-02-29",
        "day_num": -719162,
        "at_time": "23:59:59.999999",
        "local": "0001-01-01T00:00:00",
        "attrs": {"k": [1, 2.5, None, True], "s": "x"},
        "tags": ["a", "", "ß"],
        "lines": [{"sku": "x", "qty": 3}, {"sku": "y"}],
        "address": {"city": "Zürich", "zip": "8001"},
        "total": {"currency": "EUR", "units": 12},
        "note": None,
        "maybe": 7,
        "ignored": "not a column",
    }
    expected = {
        "id": "-9007199254740993",
        "price": "0.1",
        "amount": "12.345",
        "amount_text": format(decimal.Decimal("-1E-38"), "f"),
        "flag": "false",
        "name": every["name"],
        "blob": "AP8Q",
        "placed_at": str(micros(placed)),
        "created_ms": str(micros(created)),
        "ship_date": "2024-02-29",
        "day_num": "0001-01-01",
        "at_time": "23:59:59.999999",
        "local": "0001-01-01T00:00:00",
        "attrs": json.dumps(every["attrs"], separators=(",", ":")),
        "tags": [{"v": "a"}, {"v": ""}, {"v": "ß"}],
        "lines": [{"v": {"f": [{"v": "x"}, {"v": "3"}]}}, {"v": {"f": [{"v": "y"}, {"v": None}]}}],
        "address": {"f": [{"v": "Zürich"}, {"v": "8001"}]},
        "total": {"f": [{"v": "EUR"}, {"v": "12"}]},
        "note": None,
        "maybe": "7",
    }
    minimal = {"id": 0}
    minimal_expected = {c["name"]: ([] if c.get("mode") == "REPEATED" else None) for c in COLUMNS}
    minimal_expected["id"] = "0"

    vectors = [
        {"name": "every_type", "payload_hex": ser(every, ctx).hex(), "expected": expected},
        {"name": "only_the_required_id", "payload_hex": ser(minimal, ctx).hex(),
         "expected": minimal_expected},
        {"name": "an_impossible_date", "error": "out_of_range",
         "payload_hex": ser({"id": 1, "ship_date": "2023-02-29"}, ctx).hex()},
        {"name": "an_integer_beyond_int64", "error": "out_of_range",
         "payload_hex": ser({"id": 2**63}, ctx).hex()},
        {"name": "a_name_longer_than_the_schema_allows", "error": "schema_violation",
         "payload_hex": loose({"id": 3, "name": "x" * 41}, ctx).hex()},
        {"name": "an_id_that_is_a_string", "error": "schema_violation",
         "payload_hex": loose({"id": "3"}, ctx).hex()},
    ]
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
    with open(sys.argv[1], "w") as f:
        f.write(json.dumps({"registry": {"ids": ids, "subjects": subjects},
                            "columns": COLUMNS}) + "\n")
        for v in vectors:
            f.write(json.dumps(v) + "\n")


if __name__ == "__main__":
    main()
