"""The emulator driven only through Google's official Python clients.

REST through google-cloud-bigquery, gRPC through google-cloud-bigquery-storage's
BigQueryWriteClient and AppendRowsStream, rows as proto2 messages built with descriptor_pb2. This
proves the wire format against code Google wrote, not only against our own client.

The emulator binary comes from $KBQ_BIN, else target/debug/kafka-bigquery-sink under
$CARGO_TARGET_DIR (default: ./target). It runs on a free loopback port and is stopped by pid.
"""

import datetime
import decimal
import os
import socket
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types, writer
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
    BigQueryWriteGrpcTransport,
)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "p"
DATASET = "d"


def emulator_binary() -> Path:
    if os.environ.get("KBQ_BIN"):
        return Path(os.environ["KBQ_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "kafka-bigquery-sink"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited early with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"emulator did not listen on port {port} within {timeout}s")


@pytest.fixture(scope="module")
def emulator():
    binary = emulator_binary()
    if not binary.exists():
        pytest.fail(f"emulator binary not found at {binary}; build it or set KBQ_BIN")
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), "emulator", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, proc)
        yield port
    finally:
        # Only the process this fixture started, by its pid.
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def bq(emulator):
    return bigquery.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": f"http://127.0.0.1:{emulator}"},
    )


@pytest.fixture(scope="module")
def write_client(emulator):
    channel = grpc.insecure_channel(f"127.0.0.1:{emulator}")
    client = BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=channel))
    yield client
    channel.close()


SCHEMA = [
    bigquery.SchemaField("id", "INT64", mode="REQUIRED"),
    bigquery.SchemaField("name", "STRING"),
    bigquery.SchemaField("ts", "TIMESTAMP"),
    bigquery.SchemaField("day", "DATE"),
    bigquery.SchemaField("amount", "NUMERIC"),
    bigquery.SchemaField(
        "address",
        "RECORD",
        fields=[
            bigquery.SchemaField("city", "STRING"),
            bigquery.SchemaField("zip", "INT64"),
        ],
    ),
    bigquery.SchemaField("tags", "STRING", mode="REPEATED"),
    bigquery.SchemaField("scores", "INT64", mode="REPEATED"),
]


def row_descriptor() -> descriptor_pb2.DescriptorProto:
    """A self-contained proto2 writer schema: the nested type lives inside the root message."""
    F = descriptor_pb2.FieldDescriptorProto
    root = descriptor_pb2.DescriptorProto(name="Row")
    address = root.nested_type.add(name="Address")
    address.field.add(name="city", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    address.field.add(name="zip", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    root.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_REQUIRED)
    root.field.add(name="name", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    root.field.add(name="ts", number=3, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    root.field.add(name="day", number=4, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    root.field.add(name="amount", number=5, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    root.field.add(
        name="address",
        number=6,
        type=F.TYPE_MESSAGE,
        type_name=".Row.Address",
        label=F.LABEL_OPTIONAL,
    )
    root.field.add(name="tags", number=7, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    scores = root.field.add(name="scores", number=8, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    scores.options.packed = True
    return root


def row_class(descriptor: descriptor_pb2.DescriptorProto):
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name="row.proto", syntax="proto2")
    file.message_type.add().CopyFrom(descriptor)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("Row"))


DESCRIPTOR = row_descriptor()
Row = row_class(DESCRIPTOR)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def numeric_bytes(value: str) -> bytes:
    """NUMERIC as BigQuery's wire form: the unscaled integer (scale 9), little-endian."""
    unscaled = int(decimal.Decimal(value).scaleb(9))
    return unscaled.to_bytes(16, "little", signed=True)


def make_row(i: int) -> bytes:
    ts = datetime.datetime(2026, 1, 2, 3, 4, 5, 600000 + i, tzinfo=datetime.timezone.utc)
    row = Row(
        id=i,
        name=f"row-{i}",
        ts=(ts - EPOCH) // datetime.timedelta(microseconds=1),
        day=(datetime.date(2026, 1, 2) - datetime.date(1970, 1, 1)).days + i,
        amount=numeric_bytes(f"{i}.125"),
    )
    row.address.city = "Zürich"
    row.address.zip = 8000 + i
    row.tags.extend([f"t{i}", "x"])
    row.scores.extend([i, -i])
    return row.SerializeToString()


def proto_rows(rows):
    data = types.ProtoRows()
    data.serialized_rows.extend(rows)
    return data


def open_append_stream(client, stream_name):
    template = types.AppendRowsRequest(write_stream=stream_name)
    schema = types.ProtoSchema()
    schema.proto_descriptor.CopyFrom(DESCRIPTOR)
    template.proto_rows = types.AppendRowsRequest.ProtoData(writer_schema=schema)
    return writer.AppendRowsStream(client, template)


def append(stream, rows, offset=None):
    request = types.AppendRowsRequest()
    if offset is not None:
        request.offset = offset
    request.proto_rows = types.AppendRowsRequest.ProtoData(rows=proto_rows(rows))
    return stream.send(request).result(timeout=30)


def flush(client, stream_name, offset):
    return client.flush_rows(
        request=types.FlushRowsRequest(write_stream=stream_name, offset=offset)
    )


def table_path(table_id: str) -> str:
    return f"projects/{PROJECT}/datasets/{DATASET}/tables/{table_id}"


@pytest.fixture(scope="module")
def dataset(bq):
    bq.create_dataset(bigquery.Dataset(f"{PROJECT}.{DATASET}"))
    return DATASET


def create_table(bq, table_id):
    table = bigquery.Table(f"{PROJECT}.{DATASET}.{table_id}", schema=SCHEMA)
    table.time_partitioning = bigquery.TimePartitioning(field="ts")
    table.clustering_fields = ["name"]
    table.description = "written by google's clients"
    return bq.create_table(table)


def test_rest_resources_round_trip(bq, dataset):
    created = create_table(bq, "resources")
    got = bq.get_table(f"{PROJECT}.{DATASET}.resources")
    assert got.table_id == "resources"
    assert [f.name for f in got.schema] == [f.name for f in SCHEMA]
    assert got.schema[5].fields[1].field_type == "INTEGER"
    assert got.time_partitioning.field == "ts"
    assert got.clustering_fields == ["name"]
    assert got.description == "written by google's clients"
    assert got.num_rows == 0

    with pytest.raises(exceptions.Conflict, match="Already Exists: Table p:d.resources"):
        create_table(bq, "resources")

    got.schema = list(got.schema) + [bigquery.SchemaField("note", "STRING")]
    got.labels = {"team": "sink"}
    updated = bq.update_table(got, ["schema", "labels"])
    assert updated.schema[-1].name == "note"
    assert updated.labels == {"team": "sink"}
    assert updated.etag != created.etag

    required = list(updated.schema) + [bigquery.SchemaField("must", "INT64", mode="REQUIRED")]
    updated.schema = required
    with pytest.raises(exceptions.BadRequest, match="Cannot add required fields"):
        bq.update_table(updated, ["schema"])

    bq.delete_table(f"{PROJECT}.{DATASET}.resources")
    with pytest.raises(exceptions.NotFound):
        bq.get_table(f"{PROJECT}.{DATASET}.resources")


def check_row(row, i):
    assert row["id"] == i
    assert row["name"] == f"row-{i}"
    assert row["ts"] == datetime.datetime(
        2026, 1, 2, 3, 4, 5, 600000 + i, tzinfo=datetime.timezone.utc
    )
    assert row["day"] == datetime.date(2026, 1, 2) + datetime.timedelta(days=i)
    assert row["amount"] == decimal.Decimal(f"{i}.125")
    assert row["address"] == {"city": "Zürich", "zip": 8000 + i}
    assert row["tags"] == [f"t{i}", "x"]
    assert row["scores"] == [i, -i]


def test_pending_stream_commits_atomically(bq, dataset, write_client):
    create_table(bq, "pending")
    parent = table_path("pending")
    stream = write_client.create_write_stream(
        parent=parent,
        write_stream=types.WriteStream(type_=types.WriteStream.Type.PENDING),
    )
    assert stream.type_ == types.WriteStream.Type.PENDING
    appender = open_append_stream(write_client, stream.name)
    try:
        assert append(appender, [make_row(0), make_row(1)], offset=0).append_result.offset == 0
        assert append(appender, [make_row(2)], offset=2).append_result.offset == 2
        # The same offset again: ALREADY_EXISTS with the OFFSET_ALREADY_EXISTS storage error.
        with pytest.raises(exceptions.AlreadyExists) as err:
            append(appender, [make_row(0)], offset=0)
        details = err.value.response.error.details
        storage_error = types.StorageError.deserialize(details[0].value)
        assert storage_error.code == types.StorageError.StorageErrorCode.OFFSET_ALREADY_EXISTS
        # The connection survives the in-stream error.
        assert append(appender, [make_row(3)], offset=3).append_result.offset == 3
    finally:
        appender.close()

    table = f"{PROJECT}.{DATASET}.pending"
    assert list(bq.list_rows(table)) == []
    assert write_client.finalize_write_stream(name=stream.name).row_count == 4
    commit = write_client.batch_commit_write_streams(
        types.BatchCommitWriteStreamsRequest(parent=parent, write_streams=[stream.name])
    )
    assert not commit.stream_errors
    assert commit.commit_time is not None

    rows = sorted(bq.list_rows(table), key=lambda r: r["id"])
    assert len(rows) == 4
    for i, row in enumerate(rows):
        check_row(row, i)


def test_buffered_stream_shows_flushed_rows_only(bq, dataset, write_client):
    create_table(bq, "buffered")
    stream = write_client.create_write_stream(
        parent=table_path("buffered"),
        write_stream=types.WriteStream(type_=types.WriteStream.Type.BUFFERED),
    )
    appender = open_append_stream(write_client, stream.name)
    try:
        append(appender, [make_row(0), make_row(1)], offset=0)
        append(appender, [make_row(2)], offset=2)
    finally:
        appender.close()
    table = f"{PROJECT}.{DATASET}.buffered"
    assert list(bq.list_rows(table)) == []
    assert flush(write_client, stream.name, 1).offset == 1
    # Re-flushing the same offset on an open stream succeeds.
    assert flush(write_client, stream.name, 1).offset == 1
    assert [r["id"] for r in bq.list_rows(table)] == [0, 1]

    assert write_client.finalize_write_stream(name=stream.name).row_count == 3
    with pytest.raises(exceptions.InvalidArgument, match="Stream has been finalized"):
        flush(write_client, stream.name, 2)

    full = write_client.get_write_stream(
        request=types.GetWriteStreamRequest(name=stream.name, view=types.WriteStreamView.FULL)
    )
    assert full.type_ == types.WriteStream.Type.BUFFERED
    assert [f.name for f in full.table_schema.fields] == [f.name for f in SCHEMA]
    # The unflushed tail of a finalized BUFFERED stream never becomes visible.
    rows = list(bq.list_rows(table))
    assert [r["id"] for r in rows] == [0, 1]
    check_row(rows[1], 1)


def test_default_stream_rows_are_visible_at_once(bq, dataset, write_client):
    create_table(bq, "default")
    appender = open_append_stream(write_client, f"{table_path('default')}/streams/_default")
    try:
        append(appender, [make_row(7)])
        append(appender, [make_row(8), make_row(9)])
    finally:
        appender.close()
    rows = list(bq.list_rows(f"{PROJECT}.{DATASET}.default"))
    assert [r["id"] for r in rows] == [7, 8, 9]
    for row in rows:
        check_row(row, row["id"])
    page = bq.list_rows(f"{PROJECT}.{DATASET}.default", max_results=1, start_index=1)
    assert [r["id"] for r in page] == [8]
    # Page by page through pageToken, and only the selected columns.
    table = bq.get_table(f"{PROJECT}.{DATASET}.default")
    paged = bq.list_rows(table, page_size=1, selected_fields=[table.schema[1], table.schema[0]])
    assert [(r["id"], r["name"]) for r in paged] == [(i, f"row-{i}") for i in (7, 8, 9)]
    assert paged.total_rows == 3


def test_writer_schema_with_an_extra_field_is_refused(bq, dataset, write_client):
    create_table(bq, "extra")
    descriptor = row_descriptor()
    F = descriptor_pb2.FieldDescriptorProto
    descriptor.field.add(name="Surprise", number=99, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    request = types.AppendRowsRequest(write_stream=f"{table_path('extra')}/_default")
    schema = types.ProtoSchema()
    schema.proto_descriptor.CopyFrom(descriptor)
    request.proto_rows = types.AppendRowsRequest.ProtoData(
        writer_schema=schema, rows=proto_rows([make_row(1)])
    )
    # The raw bidi call: AppendRowsStream races its own open against an immediate call error.
    with pytest.raises(exceptions.InvalidArgument) as err:
        list(write_client.append_rows(iter([request])))
    assert "Input schema has more fields than BigQuery schema, extra fields: 'surprise'" in str(
        err.value
    )
    assert list(bq.list_rows(f"{PROJECT}.{DATASET}.extra")) == []
