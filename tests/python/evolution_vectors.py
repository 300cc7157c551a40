"""Schema evolution vectors written by Confluent's own ProtobufSerializer and JSONSerializer.

Usage: python evolution_vectors.py OUT_FILE

For each format, three versions of one value schema are registered under the subject
`users-value` of a `mock://` registry, as the serializers register them when a producer moves
to a new schema:

* v1: `id`, `name`, `created` (a timestamp);
* v2: v1 plus `email`, an `address` object whose own fields are required in JSON Schema (they
  must still become NULLABLE columns: BigQuery adds no REQUIRED field to a table) and a
  repeated `tags`;
* v3: a change the table cannot take: Protobuf `id` becomes a string, JSON Schema adds a
  required `tier` (a REQUIRED column cannot be added).

Writes one JSON object per line, one per format: {"format", "registry" (as the serializer left
it), "records": [{"version", "payload_hex", "expected"}]}. `expected` maps a column to its value
as `tabledata.list` renders it (every value a string, RECORD {"f": [...]} in column order,
REPEATED [{"v": ...}], NULL null); the columns of a version the row does not have are NULL.
"""

import datetime as dt
import json
import os
import sys
import tempfile

import grpc_tools
from grpc_tools import protoc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

UTC = dt.timezone.utc
TOPIC = "users"

PROTO_V1 = """
syntax = "proto3";
package evo;
import "google/protobuf/timestamp.proto";
message User {
  int64 id = 1;
  string name = 2;
  google.protobuf.Timestamp created = 3;
}
"""

PROTO_V2 = """
syntax = "proto3";
package evo;
import "google/protobuf/timestamp.proto";
message User {
  int64 id = 1;
  string name = 2;
  google.protobuf.Timestamp created = 3;
  string email = 4;
  Address address = 5;
  repeated string tags = 6;
}
message Address {
  string city = 1;
  int32 zip = 2;
}
"""

PROTO_V3 = """
syntax = "proto3";
package evo;
message User {
  string id = 1;
  string name = 2;
}
"""

JSON_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "User",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "created": {"type": "string", "format": "date-time"},
    },
    "required": ["id"],
}

JSON_V2 = json.loads(json.dumps(JSON_V1))
JSON_V2["properties"].update({
    "email": {"type": "string"},
    "address": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
        "required": ["city", "zip"],
    },
    "tags": {"type": "array", "items": {"type": "string"}},
})

JSON_V3 = json.loads(json.dumps(JSON_V1))
JSON_V3["properties"]["tier"] = {"type": "integer"}
JSON_V3["required"] = ["id", "tier"]


def micros(t):
    return (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def registry_dump(client):
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


def compile_proto(text):
    """The pool of one version of `evo/user.proto`, compiled by protoc."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "evo", "user.proto")
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as f:
            f.write(text)
        out = os.path.join(tmp, "set.pb")
        args = ["protoc", f"-I{tmp}",
                f"-I{os.path.join(os.path.dirname(grpc_tools.__file__), '_proto')}",
                "--include_imports", f"--descriptor_set_out={out}", "evo/user.proto"]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        with open(out, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    return pool


def user(i):
    created = dt.datetime(2024, 2, 29, 12, 0, i, 250000, tzinfo=UTC)
    return {"id": i, "name": f"user-{i}", "created": created}


def v1_expected(i):
    u = user(i)
    return {"id": str(i), "name": u["name"], "created": str(micros(u["created"])),
            "email": None, "address": None, "tags": []}


def v2_expected(i):
    out = v1_expected(i)
    out.update({"email": f"u{i}@example.test",
                "address": {"f": [{"v": f"city-{i}"}, {"v": str(8000 + i)}]},
                "tags": [{"v": "a"}, {"v": str(i)}]})
    return out


def protobuf():
    client = SchemaRegistryClient.new_client({"url": "mock://evolution-protobuf"})
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    records = []
    for version, text in ((1, PROTO_V1), (2, PROTO_V2), (3, PROTO_V3)):
        pool = compile_proto(text)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("evo.User"))
        ser = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        for i in range(version * 10, version * 10 + 3):
            u = user(i)
            if version == 3:
                m = cls(id=str(i), name=u["name"])
                records.append({"version": 3, "payload_hex": ser(m, ctx).hex()})
                continue
            m = cls(id=i, name=u["name"])
            m.created.FromDatetime(u["created"])
            expected = v1_expected(i)
            if version == 2:
                m.email = f"u{i}@example.test"
                m.address.city = f"city-{i}"
                m.address.zip = 8000 + i
                m.tags.extend(["a", str(i)])
                expected = v2_expected(i)
            records.append({"version": version, "payload_hex": ser(m, ctx).hex(),
                            "expected": expected})
    return {"format": "protobuf", "registry": registry_dump(client), "records": records}


def json_schema():
    client = SchemaRegistryClient.new_client({"url": "mock://evolution-json"})
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    records = []
    for version, schema in ((1, JSON_V1), (2, JSON_V2), (3, JSON_V3)):
        ser = JSONSerializer(Schema(json.dumps(schema), "JSON"), client)
        for i in range(version * 10, version * 10 + 3):
            u = user(i)
            value = {"id": i, "name": u["name"], "created": u["created"].isoformat()}
            expected = v1_expected(i)
            if version == 2:
                value.update({"email": f"u{i}@example.test",
                              "address": {"city": f"city-{i}", "zip": 8000 + i},
                              "tags": ["a", str(i)]})
                expected = v2_expected(i)
            if version == 3:
                value["tier"] = 1
                records.append({"version": 3, "payload_hex": ser(value, ctx).hex()})
                continue
            records.append({"version": version, "payload_hex": ser(value, ctx).hex(),
                            "expected": expected})
    return {"format": "json_schema", "registry": registry_dump(client), "records": records}


def main():
    with open(sys.argv[1], "w") as f:
        for line in (protobuf(), json_schema()):
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
