"""A Debezium-shaped change stream in Protobuf or JSON Schema for tests/cdc_formats_e2e.rs.

Every key and value is serialized by confluent-kafka's own ProtobufSerializer or JSONSerializer
against its in-memory `mock://` registry (the key under `<topic>-key`, the envelope under
`<topic>-value`, as Debezium's converters register them), so the framing, the message indexes
and the registered schemas are Confluent's, not the sink's. The source table's state is kept
here, key by key.

  cdc_formats_producer.py OUT_FILE --format protobuf|json|schemaless|connect --topic T --partitions N --seed S

`schemaless` writes the same stream as plain JSON objects (keys `{"id": n}`), with no registry;
`connect` as Kafka Connect's JsonConverter does with `schemas.enable=true` (Debezium's default):
every key and value is `{"schema": <Connect schema>, "payload": <the object>}`.

Writes JSON lines: first {"registry": {"ids", "subjects"}, "states": [state after part 1,
state after part 2]}, then one line per Kafka record: {"part": 1|2, "partition": p, "key": hex,
"value": hex or null (a tombstone)}. A state is {"<id>": [name, version]}. Part 1: a snapshot,
updates (several per key), deletes with their tombstones, deletes without a before row (by the
Kafka key), a truncate (a bad record), re-inserts.
Part 2: more deletes, updates and re-inserts, written after the sink was killed.
"""

import argparse
import json
import random

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

PACKAGE = "dbserver1.inventory.customers"

F = descriptor_pb2.FieldDescriptorProto


def field(message, name, number, kind, type_name=None, optional=False):
    f = message.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name
    if optional:
        f.proto3_optional = True
    return f


def protobuf_classes():
    """The key file (one message) and the envelope file (Envelope first, its rows nested), as
    Debezium's ProtobufConverter lays them out."""
    key = descriptor_pb2.FileDescriptorProto(name="key.proto", package=PACKAGE, syntax="proto3")
    k = key.message_type.add(name="Key")
    field(k, "id", 1, F.TYPE_INT64)

    value = descriptor_pb2.FileDescriptorProto(
        name="envelope.proto", package=PACKAGE, syntax="proto3"
    )
    env = value.message_type.add(name="Envelope")
    row = env.nested_type.add(name="Value")
    field(row, "id", 1, F.TYPE_INT64)
    field(row, "name", 2, F.TYPE_STRING)
    field(row, "version", 3, F.TYPE_INT64)
    source = env.nested_type.add(name="Source")
    field(source, "connector", 1, F.TYPE_STRING)
    field(source, "lsn", 2, F.TYPE_INT64)
    field(env, "before", 1, F.TYPE_MESSAGE, f".{PACKAGE}.Envelope.Value")
    field(env, "after", 2, F.TYPE_MESSAGE, f".{PACKAGE}.Envelope.Value")
    field(env, "source", 3, F.TYPE_MESSAGE, f".{PACKAGE}.Envelope.Source")
    field(env, "op", 4, F.TYPE_STRING)
    field(env, "ts_ms", 5, F.TYPE_INT64)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(key)
    pool.Add(value)
    cls = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return cls(f"{PACKAGE}.Key"), cls(f"{PACKAGE}.Envelope")


JSON_VALUE = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Envelope",
    "type": "object",
    "definitions": {
        "Value": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "name": {"type": "string"},
                "version": {"type": "integer"},
            },
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


def connect_field(field, kind, optional=False, **more):
    return dict({"type": kind, "optional": optional, "field": field}, **more)


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


class Serializers:
    def __init__(self, fmt, topic):
        self.client = SchemaRegistryClient.new_client({"url": "mock://cdc-formats"})
        self.fmt = fmt
        self.key_ctx = SerializationContext(topic, MessageField.KEY)
        self.value_ctx = SerializationContext(topic, MessageField.VALUE)
        if fmt == "schemaless":
            # Plain JSON objects: no serializer, no registry.
            self.key_ser = self.value_ser = lambda value, ctx: json.dumps(value).encode()
        elif fmt == "connect":
            self.key_ser = connect_envelope(CONNECT_KEY)
            self.value_ser = connect_envelope(CONNECT_VALUE)
        elif fmt == "protobuf":
            self.key_cls, self.env_cls = protobuf_classes()
            self.key_ser = ProtobufSerializer(self.key_cls, self.client)
            self.value_ser = ProtobufSerializer(self.env_cls, self.client)
        else:
            self.key_ser = JSONSerializer(json.dumps(JSON_KEY), self.client)
            self.value_ser = JSONSerializer(json.dumps(JSON_VALUE), self.client)

    def key(self, id_):
        if self.fmt == "protobuf":
            return self.key_ser(self.key_cls(id=id_), self.key_ctx)
        return self.key_ser({"id": id_}, self.key_ctx)

    def event(self, op, before, after, lsn):
        source = {"connector": "postgresql", "lsn": lsn}
        if self.fmt == "protobuf":
            env = self.env_cls(op=op, ts_ms=1_700_000_000_000 + lsn)
            env.source.connector = source["connector"]
            env.source.lsn = lsn
            if before is not None:
                env.before.CopyFrom(self.env_cls.Value(**before))
            if after is not None:
                env.after.CopyFrom(self.env_cls.Value(**after))
            return self.value_ser(env, self.value_ctx)
        value = {"before": before, "after": after, "source": source, "op": op,
                 "ts_ms": 1_700_000_000_000 + lsn}
        return self.value_ser(value, self.value_ctx)

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


class Source:
    """The source table and the change events that make it."""

    def __init__(self, ser, partitions):
        self.ser = ser
        self.partitions = partitions
        self.rows = {}
        self.versions = {}
        self.lsn = 0
        self.part = 1
        self.out = []

    def row(self, id_, version):
        return {"id": id_, "name": f"customer-{id_}-v{version}", "version": version}

    def send(self, id_, value, partition=None):
        self.out.append({
            "part": self.part,
            "partition": id_ % self.partitions if partition is None else partition,
            "key": None if id_ is None else self.ser.key(id_).hex(),
            "value": None if value is None else value.hex(),
        })

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
        self.send(id_, self.event("d", None, None))
        self.send(id_, None)
        del self.rows[id_]

    def truncate(self):
        self.out.append({"part": self.part, "partition": 0, "key": None,
                         "value": self.event("t", None, None).hex()})

    def state(self):
        return {str(k): v for k, v in sorted(self.rows.items())}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--format", choices=["protobuf", "json", "schemaless", "connect"], required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keys", type=int, default=40)
    args = p.parse_args()
    rng = random.Random(args.seed)
    source = Source(Serializers(args.format, args.topic), args.partitions)
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
    source.part = 2
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
        f.write(json.dumps({"registry": source.ser.registry(), "states": states}) + "\n")
        for record in source.out:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
