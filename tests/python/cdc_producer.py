"""An independent Debezium-shaped change stream for tests/sink_cdc.rs.

Writes the change events of a generated source table to Kafka the way Debezium's Avro converter
does (Confluent framing: magic byte, schema id, Avro binary; the key is the primary-key record),
with fastavro and confluent-kafka, and keeps the source table's state. Inserts, updates, deletes
with their tombstones, re-inserts of deleted keys; a few hot keys change many times within each
burst. Every key goes to partition `id % partitions`, as a hashing partitioner keeps a key in one
partition.

  cdc_producer.py --print-schemas
  cdc_producer.py --bootstrap HOST:PORT --topic T --partitions N --value-id V --key-id K \
      --seed S --changes C --state state.json

The state file is written at the end: {"state": {"<id>": [name, version]}, "records": n}.
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

VALUE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver1.inventory.customers",
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

KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "dbserver1.inventory.customers",
    "fields": [{"name": "id", "type": "long"}],
}


def framed(schema_id: int, parsed, record) -> bytes:
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


class Source:
    """The source table and the events that change it."""

    def __init__(self, args):
        self.args = args
        self.value = fastavro.parse_schema(VALUE)
        self.key = fastavro.parse_schema(KEY)
        self.rows = {}
        self.versions = {}
        self.lsn = 0
        self.records = 0
        self.producer = Producer(
            {"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )

    def row(self, id_, version):
        return {"id": id_, "name": f"customer-{id_}-v{version}", "version": version, "email": None}

    def send(self, id_, value):
        self.producer.produce(
            self.args.topic,
            key=framed(self.args.key_id, self.key, {"id": id_}),
            value=value,
            partition=id_ % self.args.partitions,
        )
        self.records += 1

    def event(self, op, before, after):
        self.lsn += 1
        return framed(
            self.args.value_id,
            self.value,
            {
                "before": before,
                "after": after,
                "source": {
                    "version": "2.7.0.Final",
                    "connector": "postgresql",
                    "name": "dbserver1",
                    "ts_ms": 1_700_000_000_000 + self.lsn,
                    "db": "inventory",
                    "lsn": self.lsn,
                },
                "op": op,
                "ts_ms": 1_700_000_000_000 + self.lsn,
            },
        )

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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--print-schemas", action="store_true")
    p.add_argument("--bootstrap")
    p.add_argument("--topic")
    p.add_argument("--partitions", type=int)
    p.add_argument("--value-id", type=int)
    p.add_argument("--key-id", type=int)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--changes", type=int, default=4000)
    p.add_argument("--keys", type=int, default=300)
    p.add_argument("--burst", type=int, default=200)
    p.add_argument("--pause-ms", type=int, default=100)
    p.add_argument("--state")
    args = p.parse_args()
    if args.print_schemas:
        json.dump({"value": json.dumps(VALUE), "key": json.dumps(KEY)}, sys.stdout)
        return
    rng = random.Random(args.seed)
    source = Source(args)
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
        source.producer.flush(30)
        time.sleep(args.pause_ms / 1000)
    if source.producer.flush(60) != 0:
        sys.exit("records left unacknowledged")
    with open(args.state, "w") as f:
        json.dump(
            {"state": {str(k): v for k, v in source.rows.items()}, "records": source.records}, f
        )


if __name__ == "__main__":
    main()
