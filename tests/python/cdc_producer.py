"""Independent change streams of a generated source table, for tests/e2e/sink_cdc.rs and
tests/e2e/cdc_formats_e2e.rs (through tests/support/cdc.rs).

One source table (id -> name, version) and the change events that make it, serialized by other
people's code: fastavro with Confluent framing (Debezium's Avro converter), or confluent-kafka's
own ProtobufSerializer / JSONSerializer against its in-memory `mock://` registry (the key under
`<topic>-key`, the value under `<topic>-value`, as Debezium's converters register them), or
plain `json.dumps` objects (schemaless JSON), or Kafka Connect's JsonConverter envelope with
`schemas.enable=true` (`{"schema": <Connect schema>, "payload": <the object>}`). Every key goes to
partition `id % partitions`, as a hashing partitioner keeps a key in one partition.

  cdc_producer.py --print-schemas
      the Avro envelope and key schemas, as JSON {"value", "key"}

  cdc_producer.py live --bootstrap HOST:PORT --topic T --partitions N --value-id V --key-id K \
      --seed S --changes C --keys K --state state.json
      Avro to the broker while the test kills the sink: a snapshot of half the keys, then bursts
      of inserts, updates (hot keys change many times per burst), deletes with their tombstones
      and re-inserts. The state file is written at the end:
      {"state": {"<id>": [name, version]}, "records": n}.

  cdc_producer.py parts OUT_FILE --format protobuf|json|schemaless|connect \
      [--shape debezium|unwrapped|plain] --topic T --partitions N --seed S
      Writes JSON lines: first {"registry": {"ids", "subjects"}, "states": [state after part 1,
      state after part 2]}, then one line per Kafka record: {"part": 1|2, "partition": p,
      "key": hex or null, "value": hex or null (a tombstone)}. Part 1: a snapshot, updates
      (several per key), deletes with their tombstones, deletes without a before row (by the
      Kafka key), a truncate (a bad record), re-inserts. Part 2: more deletes, updates and
      re-inserts, written after the sink was killed.

Shapes (docs/cdc.md): `debezium` is the envelope; `unwrapped` is ExtractNewRecordState's output
with `delete.handling.mode: rewrite` (the row with `__op` and `__deleted`; a delete is the
before row with `__deleted: "true"`, a delete without a before row only its tombstone);
`plain` is the row with a change-type field `kind` (INSERT, UPDATE, DELETE, TRUNCATE).
"""

import argparse
import io
import json
import random
import struct
import sys
import time

import fastavro
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "dbserver1.inventory.customers"

# ---- Avro (fastavro, Confluent framing) ----

AVRO_VALUE = {
    "type": "record",
    "name": "Envelope",
    "namespace": PACKAGE,
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {"name": "name", "type": "string"},
                        {"name": "version", "type": "long"},
                        {"name": "email", "type": ["null", "string"], "default": None},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "fields": [
                    {"name": "version", "type": "string"},
                    {"name": "connector", "type": "string"},
                    {"name": "name", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {"name": "db", "type": "string"},
                    {"name": "lsn", "type": ["null", "long"], "default": None},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}

AVRO_KEY = {
    "type": "record",
    "name": "Key",
    "namespace": PACKAGE,
    "fields": [{"name": "id", "type": "long"}],
}


def framed(schema_id: int, parsed, record) -> bytes:
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


class AvroSerializers:
    """Debezium's Avro converter: the envelope and the key record, framed with fixed ids."""

    def __init__(self, value_id, key_id):
        self.value_id, self.key_id = value_id, key_id
        self.value = fastavro.parse_schema(AVRO_VALUE)
        self.key_schema = fastavro.parse_schema(AVRO_KEY)

    def key(self, id_):
        return framed(self.key_id, self.key_schema, {"id": id_})

    def event(self, op, before, after, lsn):
        row = lambda r: None if r is None else dict(r, email=None)
        return framed(self.value_id, self.value, {
            "before": row(before),
            "after": row(after),
            "source": {
                "version": "2.7.0.Final",
                "connector": "postgresql",
                "name": "dbserver1",
                "ts_ms": 1_700_000_000_000 + lsn,
                "db": "inventory",
                "lsn": lsn,
            },
            "op": op,
            "ts_ms": 1_700_000_000_000 + lsn,
        })


# ---- Protobuf and JSON Schema (Confluent's serializers), schemaless JSON, Connect's envelope ----

F = descriptor_pb2.FieldDescriptorProto


def field(message, name, number, kind, type_name=None, optional=False):
    f = message.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name
    if optional:
        f.proto3_optional = True
    return f


def row_fields(message):
    field(message, "id", 1, F.TYPE_INT64)
    field(message, "name", 2, F.TYPE_STRING)
    field(message, "version", 3, F.TYPE_INT64)


def protobuf_classes(shape):
    """The key file (one message) and the value file, as Debezium's ProtobufConverter lays them
    out: for the envelope, Envelope first with its rows nested; else the row message."""
    key = descriptor_pb2.FileDescriptorProto(name="key.proto", package=PACKAGE, syntax="proto3")
    field(key.message_type.add(name="Key"), "id", 1, F.TYPE_INT64)

    value = descriptor_pb2.FileDescriptorProto(
        name="envelope.proto" if shape == "debezium" else "value.proto", package=PACKAGE,
        syntax="proto3"
    )
    if shape == "debezium":
        env = value.message_type.add(name="Envelope")
        row_fields(env.nested_type.add(name="Value"))
        source = env.nested_type.add(name="Source")
        field(source, "connector", 1, F.TYPE_STRING)
        field(source, "lsn", 2, F.TYPE_INT64)
        field(env, "before", 1, F.TYPE_MESSAGE, f".{PACKAGE}.Envelope.Value")
        field(env, "after", 2, F.TYPE_MESSAGE, f".{PACKAGE}.Envelope.Value")
        field(env, "source", 3, F.TYPE_MESSAGE, f".{PACKAGE}.Envelope.Source")
        field(env, "op", 4, F.TYPE_STRING)
        field(env, "ts_ms", 5, F.TYPE_INT64)
        name = "Envelope"
    elif shape == "unwrapped":
        row = value.message_type.add(name="Value")
        row_fields(row)
        field(row, "__op", 4, F.TYPE_STRING)
        field(row, "__deleted", 5, F.TYPE_STRING)
        name = "Value"
    else:
        row = value.message_type.add(name="Value")
        row_fields(row)
        kind = row.enum_type.add(name="Kind")
        for number, label in enumerate(PLAIN_KINDS):
            kind.value.add(name=label, number=number)
        field(row, "kind", 4, F.TYPE_ENUM, f".{PACKAGE}.Value.Kind")
        name = "Value"

    pool = descriptor_pool.DescriptorPool()
    pool.Add(key)
    pool.Add(value)
    cls = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return cls(f"{PACKAGE}.Key"), cls(f"{PACKAGE}.{name}")


# The change types of the plain shape, by Debezium op.
PLAIN_KINDS = ["INSERT", "UPDATE", "DELETE", "TRUNCATE"]
PLAIN_KIND = {"r": "INSERT", "c": "INSERT", "u": "UPDATE", "d": "DELETE", "t": "TRUNCATE"}

JSON_ROW = {
    "id": {"type": "integer"},
    "name": {"type": "string"},
    "version": {"type": "integer"},
}


def json_value_schema(shape):
    if shape == "unwrapped":
        return {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Value",
            "type": "object",
            "properties": dict(JSON_ROW, __op={"type": "string"}, __deleted={"type": "string"}),
            "required": ["id", "name", "version"],
        }
    if shape == "plain":
        return {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Value",
            "type": "object",
            "properties": dict(JSON_ROW, kind={"type": "string", "enum": PLAIN_KINDS}),
            "required": ["id", "name", "version", "kind"],
        }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Envelope",
        "type": "object",
        "definitions": {
            "Value": {
                "type": "object",
                "properties": JSON_ROW,
                "required": ["id", "name", "version"],
            }
        },
        "properties": {
            "before": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
            "after": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
            "source": {
                "type": "object",
                "properties": {"connector": {"type": "string"}, "lsn": {"type": "integer"}},
            },
            "op": {"type": "string"},
            "ts_ms": {"type": "integer"},
        },
        "required": ["op"],
    }


JSON_KEY = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Key",
    "type": "object",
    "properties": {"id": {"type": "integer"}},
    "required": ["id"],
}


def connect_field(field_name, kind, optional=False, **more):
    return dict({"type": kind, "optional": optional, "field": field_name}, **more)


CONNECT_ROW = [connect_field("id", "int64"), connect_field("name", "string"),
               connect_field("version", "int64")]

CONNECT_KEY = {"type": "struct", "fields": [connect_field("id", "int64")], "optional": False,
               "name": f"{PACKAGE}.Key"}

CONNECT_VALUE = {
    "type": "struct",
    "optional": False,
    "name": f"{PACKAGE}.Envelope",
    "fields": [
        connect_field("before", "struct", True, fields=CONNECT_ROW, name=f"{PACKAGE}.Value"),
        connect_field("after", "struct", True, fields=CONNECT_ROW, name=f"{PACKAGE}.Value"),
        connect_field("source", "struct", fields=[connect_field("connector", "string"),
                                                  connect_field("lsn", "int64")],
                      name="io.debezium.connector.postgresql.Source"),
        connect_field("op", "string"),
        connect_field("ts_ms", "int64", True),
    ],
}


def connect_envelope(schema):
    """JsonConverter's serializer with schemas.enable=true (compact, as Jackson writes it)."""
    return lambda value, ctx: json.dumps(
        {"schema": schema, "payload": value}, separators=(",", ":")).encode()


class RegistrySerializers:
    """Confluent's serializers (Protobuf, JSON Schema), schemaless JSON or Connect's envelope,
    in one of the three shapes."""

    def __init__(self, fmt, shape, topic):
        self.client = SchemaRegistryClient.new_client({"url": "mock://cdc-formats"})
        self.fmt, self.shape = fmt, shape
        self.key_ctx = SerializationContext(topic, MessageField.KEY)
        self.value_ctx = SerializationContext(topic, MessageField.VALUE)
        if fmt == "schemaless":
            # Plain JSON objects: no serializer, no registry.
            self.key_ser = self.value_ser = lambda value, ctx: json.dumps(value).encode()
        elif fmt == "connect":
            self.key_ser = connect_envelope(CONNECT_KEY)
            self.value_ser = connect_envelope(CONNECT_VALUE)
        elif fmt == "protobuf":
            self.key_cls, self.value_cls = protobuf_classes(shape)
            self.key_ser = ProtobufSerializer(self.key_cls, self.client)
            self.value_ser = ProtobufSerializer(self.value_cls, self.client)
        else:
            self.key_ser = JSONSerializer(json.dumps(JSON_KEY), self.client)
            self.value_ser = JSONSerializer(json.dumps(json_value_schema(shape)), self.client)

    def key(self, id_):
        if self.fmt == "protobuf":
            return self.key_ser(self.key_cls(id=id_), self.key_ctx)
        return self.key_ser({"id": id_}, self.key_ctx)

    def event(self, op, before, after, lsn):
        """The value of a change event, or None when the shape has none (an unwrapped delete
        without a before row is only its tombstone)."""
        if self.shape == "unwrapped":
            row = after if op != "d" else before
            if row is None and op == "d":
                return None
            # A truncate has no row: ExtractNewRecordState passes it on with empty fields.
            row = dict(row or {"id": 0, "name": "", "version": 0}, __op=op,
                       __deleted="true" if op == "d" else "false")
            return self.value(row)
        if self.shape == "plain":
            row = after if op != "d" else before
            if row is None and op == "d":
                return None
            row = dict(row or {"id": 0, "name": "", "version": 0}, kind=PLAIN_KIND[op])
            return self.value(row)
        source = {"connector": "postgresql", "lsn": lsn}
        if self.fmt == "protobuf":
            env = self.value_cls(op=op, ts_ms=1_700_000_000_000 + lsn)
            env.source.connector = source["connector"]
            env.source.lsn = lsn
            if before is not None:
                env.before.CopyFrom(self.value_cls.Value(**before))
            if after is not None:
                env.after.CopyFrom(self.value_cls.Value(**after))
            return self.value_ser(env, self.value_ctx)
        value = {"before": before, "after": after, "source": source, "op": op,
                 "ts_ms": 1_700_000_000_000 + lsn}
        return self.value_ser(value, self.value_ctx)

    def value(self, row):
        if self.fmt == "protobuf":
            return self.value_ser(self.value_cls(**row), self.value_ctx)
        return self.value_ser(row, self.value_ctx)

    def registry(self):
        ids, subjects = {}, {}
        for subject in self.client.get_subjects():
            for version in self.client.get_versions(subject):
                reg = self.client.get_version(subject, version)
                refs = [{"name": r.name, "subject": r.subject, "version": r.version}
                        for r in (reg.schema.references or [])]
                entry = {"schema": reg.schema.schema_str, "schemaType": reg.schema.schema_type,
                         "references": refs}
                ids[str(reg.schema_id)] = entry
                subjects.setdefault(subject, {})[str(version)] = dict(entry, id=reg.schema_id)
        return {"ids": ids, "subjects": subjects}


# ---- The source table ----


class Source:
    """The source table and the change events that make it, handed to `out(partition, key,
    value)` (bytes, or None for no key / a tombstone)."""

    def __init__(self, ser, partitions, out):
        self.ser = ser
        self.partitions = partitions
        self.out = out
        self.rows = {}
        self.versions = {}
        self.lsn = 0

    def row(self, id_, version):
        return {"id": id_, "name": f"customer-{id_}-v{version}", "version": version}

    def send(self, id_, value):
        self.out(id_ % self.partitions, self.ser.key(id_), value)

    def event(self, op, before, after):
        self.lsn += 1
        return self.ser.event(op, before, after, self.lsn)

    def upsert(self, id_, op):
        before = self.row(id_, self.versions[id_]) if id_ in self.rows else None
        self.versions[id_] = self.versions.get(id_, 0) + 1
        after = self.row(id_, self.versions[id_])
        self.send(id_, self.event(op, before, after))
        self.rows[id_] = [after["name"], after["version"]]

    def delete(self, id_):
        self.send(id_, self.event("d", self.row(id_, self.versions[id_]), None))
        self.send(id_, None)  # the tombstone
        del self.rows[id_]

    def delete_by_key(self, id_):
        """A delete event without a before row (a table without a replica identity): the row
        goes by the Kafka key."""
        value = self.event("d", None, None)
        if value is not None:
            self.send(id_, value)
        self.send(id_, None)
        del self.rows[id_]

    def truncate(self):
        self.out(0, None, self.event("t", None, None))

    def state(self):
        return {str(k): v for k, v in sorted(self.rows.items())}


def live(args):
    """Avro to the broker, in bursts, while the test kills and restarts the sink."""
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    records = 0

    def out(partition, key, value):
        nonlocal records
        producer.produce(args.topic, key=key, value=value, partition=partition)
        records += 1

    rng = random.Random(args.seed)
    source = Source(AvroSerializers(args.value_id, args.key_id), args.partitions, out)
    # A snapshot of the first half of the keys.
    for id_ in range(args.keys // 2):
        source.upsert(id_, "r")
    hot = list(range(10))
    changes = 0
    while changes < args.changes:
        for _ in range(args.burst):
            id_ = rng.choice(hot) if rng.random() < 0.3 else rng.randrange(args.keys)
            if id_ not in source.rows:
                source.upsert(id_, "c")  # an insert, or the re-insert of a deleted key
            elif rng.random() < 0.2:
                source.delete(id_)
            else:
                source.upsert(id_, "u")
            changes += 1
        producer.flush(30)
        time.sleep(args.pause_ms / 1000)
    if producer.flush(60) != 0:
        sys.exit("records left unacknowledged")
    with open(args.state, "w") as f:
        json.dump({"state": source.state(), "records": records}, f)


def parts(args):
    """The scripted two-part stream, written to a file for the test to produce."""
    written = []
    part = 1

    def out(partition, key, value):
        written.append({
            "part": part,
            "partition": partition,
            "key": None if key is None else key.hex(),
            "value": None if value is None else value.hex(),
        })

    rng = random.Random(args.seed)
    ser = RegistrySerializers(args.format, args.shape, args.topic)
    source = Source(ser, args.partitions, out)
    for id_ in range(args.keys):
        source.upsert(id_, "r")
    for _ in range(5 * args.keys):
        source.upsert(rng.randrange(args.keys // 4), "u")  # hot keys, many changes per batch
    for id_ in range(0, args.keys, 5):
        source.delete(id_)
    for id_ in range(1, args.keys, 5):
        source.delete_by_key(id_)
    source.truncate()
    for id_ in range(0, args.keys, 10):
        source.upsert(id_, "c")  # re-inserts of deleted keys
    states = [source.state()]
    part = 2
    for _ in range(3 * args.keys):
        id_ = rng.randrange(args.keys)
        if id_ not in source.rows:
            source.upsert(id_, "c")
        elif rng.random() < 0.05:
            source.delete_by_key(id_)
        elif rng.random() < 0.25:
            source.delete(id_)
        else:
            source.upsert(id_, "u")
    states.append(source.state())
    with open(args.out, "w") as f:
        f.write(json.dumps({"registry": ser.registry(), "states": states}) + "\n")
        for record in written:
            f.write(json.dumps(record) + "\n")


def main():
    if sys.argv[1:] == ["--print-schemas"]:
        json.dump({"value": json.dumps(AVRO_VALUE), "key": json.dumps(AVRO_KEY)}, sys.stdout)
        return
    p = argparse.ArgumentParser()
    modes = p.add_subparsers(dest="mode", required=True)
    lv = modes.add_parser("live")
    lv.add_argument("--bootstrap", required=True)
    lv.add_argument("--value-id", type=int, required=True)
    lv.add_argument("--key-id", type=int, required=True)
    lv.add_argument("--changes", type=int, default=4000)
    lv.add_argument("--keys", type=int, default=300)
    lv.add_argument("--burst", type=int, default=200)
    lv.add_argument("--pause-ms", type=int, default=100)
    lv.add_argument("--state", required=True)
    pt = modes.add_parser("parts")
    pt.add_argument("out")
    pt.add_argument("--format", choices=["protobuf", "json", "schemaless", "connect"],
                    required=True)
    pt.add_argument("--shape", choices=["debezium", "unwrapped", "plain"], default="debezium")
    pt.add_argument("--keys", type=int, default=40)
    for mode in (lv, pt):
        mode.add_argument("--topic", required=True)
        mode.add_argument("--partitions", type=int, default=3)
        mode.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    live(args) if args.mode == "live" else parts(args)


if __name__ == "__main__":
    main()
