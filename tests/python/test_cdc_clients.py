"""The emulator's change data capture, driven only through Google's official Python clients.

google-cloud-bigquery creates the table with a primary key and max_staleness and reads the
applied state back; google-cloud-bigquery-storage's AppendRowsStream writes UPSERT and DELETE
rows with the `_CHANGE_TYPE` and `_CHANGE_SEQUENCE_NUMBER` pseudo-columns in the writer schema.
"""

import pytest
from google.api_core import exceptions
from google.cloud import bigquery
from google.cloud.bigquery.table import PrimaryKey, TableConstraints
from google.cloud.bigquery_storage_v1 import types, writer
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# The emulator, clients and dataset of the main client suite (module-scoped: one emulator here).
from test_google_clients import (  # noqa: F401
    DATASET,
    PROJECT,
    bq,
    dataset,
    emulator,
    proto_rows,
    table_path,
    write_client,
)

SCHEMA = [
    bigquery.SchemaField("id", "INT64", mode="REQUIRED"),
    bigquery.SchemaField("name", "STRING", mode="REQUIRED"),
    bigquery.SchemaField("score", "INT64"),
]


def cdc_descriptor(pseudo=True) -> descriptor_pb2.DescriptorProto:
    F = descriptor_pb2.FieldDescriptorProto
    root = descriptor_pb2.DescriptorProto(name="Change")
    root.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    root.field.add(name="name", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    root.field.add(name="score", number=3, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    if pseudo:
        root.field.add(name="_CHANGE_TYPE", number=4, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        root.field.add(
            name="_CHANGE_SEQUENCE_NUMBER", number=5, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL
        )
    return root


def message_class(descriptor):
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name="change.proto", syntax="proto2")
    file.message_type.add().CopyFrom(descriptor)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.name))


DESCRIPTOR = cdc_descriptor()
Change = message_class(DESCRIPTOR)


def upsert(i, name, score, seq):
    return Change(
        id=i, name=name, score=score, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER=seq
    ).SerializeToString()


def delete(i, seq):
    # A DELETE carries only the key, although `name` is REQUIRED.
    return Change(id=i, _CHANGE_TYPE="DELETE", _CHANGE_SEQUENCE_NUMBER=seq).SerializeToString()


def plain(i, name):
    return Change(id=i, name=name).SerializeToString()


def create_cdc_table(bq, table_id, primary_key=("id",)):
    table = bigquery.Table(f"{PROJECT}.{DATASET}.{table_id}", schema=SCHEMA)
    if primary_key:
        table.table_constraints = TableConstraints(
            primary_key=PrimaryKey(columns=list(primary_key)), foreign_keys=None
        )
        table.max_staleness = "0-0 0 0:10:0"
    return bq.create_table(table)


def open_stream(client, name, descriptor=DESCRIPTOR):
    template = types.AppendRowsRequest(write_stream=name)
    schema = types.ProtoSchema()
    schema.proto_descriptor.CopyFrom(descriptor)
    template.proto_rows = types.AppendRowsRequest.ProtoData(writer_schema=schema)
    return writer.AppendRowsStream(client, template)


def send(stream, rows):
    request = types.AppendRowsRequest()
    request.proto_rows = types.AppendRowsRequest.ProtoData(rows=proto_rows(rows))
    return stream.send(request).result(timeout=30)


def state(bq, table_id):
    return sorted(
        (r["id"], r["name"], r["score"]) for r in bq.list_rows(f"{PROJECT}.{DATASET}.{table_id}")
    )


def test_primary_key_and_max_staleness_round_trip(bq, dataset):
    create_cdc_table(bq, "cdc_meta", primary_key=("id", "name"))
    got = bq.get_table(f"{PROJECT}.{DATASET}.cdc_meta")
    assert got.table_constraints.primary_key.columns == ["id", "name"]
    assert got.max_staleness == "0-0 0 0:10:0"

    bad = bigquery.Table(f"{PROJECT}.{DATASET}.cdc_bad_key", schema=SCHEMA)
    bad.table_constraints = TableConstraints(
        primary_key=PrimaryKey(columns=["nope"]), foreign_keys=None
    )
    with pytest.raises(exceptions.BadRequest, match="primary key column nope is not in the schema"):
        bq.create_table(bad)


def test_upserts_and_deletes_converge_by_sequence_number(bq, dataset, write_client):
    create_cdc_table(bq, "cdc_apply")
    stream = open_stream(write_client, f"{table_path('cdc_apply')}/_default")
    try:
        # Many changes per key in one request, each with its own sequence number.
        send(stream, [upsert(1, "a", 1, "1"), upsert(1, "b", 2, "2"), upsert(2, "x", 1, "3")])
        # A replay of older changes loses to what is there.
        send(stream, [upsert(1, "a", 1, "1"), upsert(2, "old", 0, "0")])
        # Sections compare left to right as numbers: 2/0 > 1/FFFFFFFFFFFFFFFF.
        send(stream, [upsert(3, "low", 0, "1/FFFFFFFFFFFFFFFF"), upsert(3, "high", 9, "2/0")])
        send(stream, [upsert(3, "lower", 8, "1/FFFFFFFFFFFFFFFF")])
        # A delete, an older upsert that must not resurrect the key, then a re-insert.
        send(stream, [delete(2, "10")])
        send(stream, [upsert(2, "late", 5, "9")])
        send(stream, [delete(4, "1"), upsert(4, "back", 4, "2")])
        # Equal numbers: the later request wins.
        send(stream, [upsert(5, "first", 0, "7")])
        send(stream, [upsert(5, "second", 0, "7")])
    finally:
        stream.close()
    assert state(bq, "cdc_apply") == [
        (1, "b", 2),
        (3, "high", 9),
        (4, "back", 4),
        (5, "second", 0),
    ]
    assert bq.get_table(f"{PROJECT}.{DATASET}.cdc_apply").num_rows == 4
    # The query shape the emulator supports reads the applied state too.
    sql = f"SELECT MAX(score) AS m FROM `{PROJECT}.{DATASET}.cdc_apply` WHERE name = 'back'"
    assert [row["m"] for row in bq.query(sql).result()] == [4]


def test_a_connection_does_not_mix_upserts_and_plain_rows(bq, dataset, write_client):
    create_cdc_table(bq, "cdc_mix")
    name = f"{table_path('cdc_mix')}/_default"
    stream = open_stream(write_client, name)
    try:
        send(stream, [upsert(1, "a", 1, "1")])
        with pytest.raises(
            exceptions.InvalidArgument, match="The given value is not a valid CHANGE_TYPE"
        ):
            send(stream, [plain(2, "plain")])
        # The connection goes on in upsert mode.
        send(stream, [upsert(3, "c", 3, "2")])
    finally:
        stream.close()
    stream = open_stream(write_client, name)
    try:
        send(stream, [plain(4, "plain")])
        with pytest.raises(
            exceptions.InvalidArgument,
            match="The given value is not a valid CHANGE_TYPE in insert mode: UPSERT",
        ):
            send(stream, [upsert(5, "e", 5, "3")])
    finally:
        stream.close()
    assert state(bq, "cdc_mix") == [(1, "a", 1), (3, "c", 3), (4, "plain", None)]


def test_upserts_need_the_default_stream_of_a_table_with_a_primary_key(
    bq, dataset, write_client
):
    create_cdc_table(bq, "cdc_no_key", primary_key=())
    request = types.AppendRowsRequest(write_stream=f"{table_path('cdc_no_key')}/_default")
    schema = types.ProtoSchema()
    schema.proto_descriptor.CopyFrom(DESCRIPTOR)
    request.proto_rows = types.AppendRowsRequest.ProtoData(
        writer_schema=schema, rows=proto_rows([upsert(1, "a", 1, "1")])
    )
    with pytest.raises(exceptions.InvalidArgument) as err:
        list(write_client.append_rows(iter([request])))
    assert "Input schema has more fields than BigQuery schema, extra fields: '_change_type'" in str(
        err.value
    )

    create_cdc_table(bq, "cdc_explicit")
    committed = write_client.create_write_stream(
        parent=table_path("cdc_explicit"),
        write_stream=types.WriteStream(type_=types.WriteStream.Type.COMMITTED),
    )
    stream = open_stream(write_client, committed.name)
    try:
        with pytest.raises(
            exceptions.InvalidArgument,
            match="The given value is not a valid CHANGE_TYPE in insert mode: UPSERT",
        ):
            send(stream, [upsert(1, "a", 1, "1")])
        insert = Change(id=2, name="b", _CHANGE_TYPE="INSERT").SerializeToString()
        send(stream, [insert])
    finally:
        stream.close()
    assert state(bq, "cdc_explicit") == [(2, "b", None)]


def test_malformed_change_values_are_refused_with_the_whole_request(bq, dataset, write_client):
    create_cdc_table(bq, "cdc_values")
    stream = open_stream(write_client, f"{table_path('cdc_values')}/_default")
    try:
        for bad in ["", "G", "1/2/3/4/5", "11111111111111111"]:
            with pytest.raises(exceptions.InvalidArgument):
                send(stream, [upsert(1, "ok", 1, "1"), upsert(2, "bad", 2, bad)])
        bad_type = Change(id=3, name="c", _CHANGE_TYPE="UPDATE").SerializeToString()
        with pytest.raises(exceptions.InvalidArgument):
            send(stream, [bad_type])
        send(stream, [upsert(9, "ok", 9, "FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/0/ab")])
    finally:
        stream.close()
    assert state(bq, "cdc_values") == [(9, "ok", 9)]
