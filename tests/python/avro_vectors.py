"""Transcoder test vectors written by an independent Avro implementation (fastavro).

Usage: python avro_vectors.py OUT_FILE

Writes one JSON object per line: the writer schema, the BigQuery table columns, the Avro binary
datum (hex) as fastavro encodes it, and the values BigQuery must receive, computed here with
Python's datetime and decimal modules. `crates/kbq-transcode/tests/transcode/vectors.rs` runs this script and checks
the Rust transcoder against every line.

Expected values use one JSON shape: integers and floats as numbers, strings as strings, bytes as
{"hex": ...}, REPEATED columns as lists, RECORD columns as objects, NULL as an absent key. A vector
with "error": true must be refused as a per-record error.
"""

import datetime as dt
import decimal
import io
import json
import sys
import uuid

from fastavro import parse_schema, schemaless_writer

UTC = dt.timezone.utc


def packed_time(t):
    return (((t.hour << 12) | (t.minute << 6) | t.second) << 20) | t.microsecond


def packed_datetime(d):
    date = (d.year << 14) | (d.month << 10) | (d.day << 5)
    return (date << 32) | packed_time(d)


def numeric_bytes(value, scale):
    """BigQuery NUMERIC/BIGNUMERIC: unscaled at `scale`, little-endian two's complement."""
    unscaled = int((value * (decimal.Decimal(10) ** scale)).to_integral_exact())
    size = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return {"hex": unscaled.to_bytes(size, "little", signed=True).hex()}


def micros(d):
    return (d - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def col(name, ty, mode="NULLABLE", fields=None):
    c = {"name": name, "type": ty, "mode": mode}
    if fields:
        c["fields"] = fields
    return c


def vector(name, fields, columns, record, expected=None, error=False):
    schema = {"type": "record", "name": "v", "namespace": "vectors", "fields": fields}
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(schema), record)
    out = {
        "name": name,
        "schema": schema,
        "table": columns,
        "avro_hex": buf.getvalue().hex(),
    }
    if error:
        out["error"] = True
    else:
        out["expected"] = expected
    return out


def vectors():
    minute = dt.datetime(2026, 8, 31, 12, 30)
    ts = dt.datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC)
    dec_bytes = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 3}
    dec_fixed = {"type": "fixed", "name": "F", "size": 12, "logicalType": "decimal",
                 "precision": 28, "scale": 4}
    yield vector(
        "primitives",
        [{"name": "i", "type": "int"}, {"name": "l", "type": "long"},
         {"name": "f", "type": "float"}, {"name": "d", "type": "double"},
         {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
         {"name": "y", "type": "bytes"},
         {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
         {"name": "x", "type": {"type": "fixed", "name": "X", "size": 2}}],
        [col("i", "INTEGER"), col("l", "INT64"), col("f", "FLOAT"), col("d", "FLOAT64"),
         col("b", "BOOLEAN"), col("s", "STRING"), col("y", "BYTES"), col("e", "STRING"),
         col("x", "BYTES")],
        {"i": -2147483648, "l": 9223372036854775807, "f": 0.5, "d": -1e300, "b": True,
         "s": "grüße ✓", "y": b"\x00\xff", "e": "B", "x": b"\x01\x02"},
        {"i": -2147483648, "l": 9223372036854775807, "f": 0.5, "d": -1e300, "b": True,
         "s": "grüße ✓", "y": {"hex": "00ff"}, "e": "B", "x": {"hex": "0102"}},
    )
    yield vector(
        "unions_null_first_and_last",
        [{"name": "a", "type": ["null", "long"]}, {"name": "b", "type": ["string", "null"]},
         {"name": "c", "type": ["null", "long"]}, {"name": "d", "type": ["string", "null"]}],
        [col("a", "INT64"), col("b", "STRING"), col("c", "INT64"), col("d", "STRING")],
        {"a": 0, "b": "", "c": None, "d": None},
        {"a": 0, "b": ""},
    )
    yield vector(
        "timestamps_millis_and_micros",
        [{"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
         {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}}],
        [col("ms", "TIMESTAMP"), col("us", "TIMESTAMP")],
        {"ms": ts, "us": ts + dt.timedelta(microseconds=1)},
        {"ms": micros(ts), "us": micros(ts) + 1},
    )
    yield vector(
        "local_timestamps_on_a_minute_boundary_keep_seconds",
        [{"name": "ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
         {"name": "us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}],
        [col("ms", "DATETIME"), col("us", "DATETIME")],
        {"ms": minute, "us": minute.replace(microsecond=7)},
        {"ms": packed_datetime(minute), "us": packed_datetime(minute.replace(microsecond=7))},
    )
    yield vector(
        "dates_at_the_limits_and_times",
        [{"name": "lo", "type": {"type": "int", "logicalType": "date"}},
         {"name": "hi", "type": {"type": "int", "logicalType": "date"}},
         {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
         {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}}],
        [col("lo", "DATE"), col("hi", "DATE"), col("tm", "TIME"), col("tu", "TIME")],
        {"lo": dt.date(1, 1, 1), "hi": dt.date(9999, 12, 31), "tm": dt.time(13, 5),
         "tu": dt.time(23, 59, 59, 999999)},
        {"lo": (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days,
         "hi": (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days,
         "tm": packed_time(dt.time(13, 5)), "tu": packed_time(dt.time(23, 59, 59, 999999))},
    )
    yield vector(
        "a_date_before_year_one_is_refused",
        [{"name": "d", "type": {"type": "int", "logicalType": "date"}}],
        [col("d", "DATE")],
        {"d": (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days - 1},
        error=True,
    )
    for value in ["-12345678901234567.891", "0.001", "99999999999999999.999"]:
        d = decimal.Decimal(value)
        yield vector(
            f"decimal_{value}",
            [{"name": "b", "type": dec_bytes}, {"name": "f", "type": dec_fixed},
             {"name": "g", "type": dec_bytes}],
            [col("b", "NUMERIC"), col("f", "NUMERIC"), col("g", "BIGNUMERIC")],
            {"b": d, "f": d, "g": d},
            {"b": numeric_bytes(d, 9), "f": numeric_bytes(d, 9), "g": numeric_bytes(d, 38)},
        )
    u = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    yield vector(
        "uuid_json_geography",
        [{"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
         {"name": "j", "type": {"type": "string", "sqlType": "JSON"}},
         {"name": "k", "type": {"type": "string", "logicalType": "Json"}},
         {"name": "g", "type": {"type": "string", "sqlType": "GEOGRAPHY"}}],
        [col("u", "STRING"), col("j", "JSON"), col("k", "JSON"), col("g", "GEOGRAPHY")],
        {"u": u, "j": "[1, {\"a\": null}]", "k": "42", "g": "POINT(-122.35 47.62)"},
        {"u": str(u), "j": "[1, {\"a\": null}]", "k": "42", "g": "POINT(-122.35 47.62)"},
    )
    yield vector(
        "nested_records_arrays_and_maps",
        [{"name": "r", "type": {"type": "record", "name": "R", "fields": [
            {"name": "x", "type": "long"},
            {"name": "items", "type": {"type": "array", "items": {
                "type": "record", "name": "I", "fields": [{"name": "n", "type": "string"}]}}}]}},
         {"name": "a", "type": ["null", {"type": "array", "items": "int"}]},
         {"name": "m", "type": {"type": "map", "values": "double"}},
         {"name": "mj", "type": {"type": "map", "values": "long"}}],
        [col("r", "RECORD", fields=[col("x", "INT64"), col("items", "RECORD", "REPEATED",
                                                          [col("n", "STRING")])]),
         col("a", "INT64", "REPEATED"),
         col("m", "RECORD", "REPEATED", [col("key", "STRING"), col("value", "FLOAT64")]),
         col("mj", "JSON")],
        {"r": {"x": 1, "items": [{"n": "p"}, {"n": "q"}]}, "a": [3, -4], "m": {"k": 1.5},
         "mj": {"z": 1}},
        {"r": {"x": 1, "items": [{"n": "p"}, {"n": "q"}]}, "a": [3, -4],
         "m": [{"key": "k", "value": 1.5}], "mj": "{\"z\":1}"},
    )


def main():
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for v in vectors():
            out.write(json.dumps(v) + "\n")


if __name__ == "__main__":
    main()
