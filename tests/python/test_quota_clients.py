"""The emulator's quota mode, driven only through Google's official Python clients.

The emulator runs with `--quota multi-region` and the limits scaled down (2 connections, 3
CreateWriteStream calls an hour, 4,000 request bytes a second), so that each one can be reached
by a few calls: Google's client must see BigQuery's own answer, `RESOURCE_EXHAUSTED` with the
quota's name in the message, and the emulator must go on serving within the limits.
"""

import json
import subprocess
import time
import urllib.request

import grpc
import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
    BigQueryWriteGrpcTransport,
)

from test_google_clients import (
    DATASET,
    DESCRIPTOR,
    PROJECT,
    SCHEMA,
    append,
    emulator_binary,
    free_port,
    make_row,
    open_append_stream,
    proto_rows,
    table_path,
    wait_listening,
)

CONNECTIONS = 2
STREAMS_PER_HOUR = 3
BYTES_PER_SECOND = 4000


@pytest.fixture(scope="module")
def quota_emulator():
    binary = emulator_binary()
    if not binary.exists():
        pytest.fail(f"emulator binary not found at {binary}; build it or set KBQ_BIN")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            "emulator",
            "--listen",
            f"127.0.0.1:{port}",
            "--quota",
            "multi-region",
            "--quota-connections",
            str(CONNECTIONS),
            "--quota-create-streams-per-hour",
            str(STREAMS_PER_HOUR),
            "--quota-append-bytes-per-second",
            str(BYTES_PER_SECOND),
        ],
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
def client(quota_emulator):
    channel = grpc.insecure_channel(f"127.0.0.1:{quota_emulator}")
    yield BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=channel))
    channel.close()


@pytest.fixture(scope="module")
def table(quota_emulator):
    bq = bigquery.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": f"http://127.0.0.1:{quota_emulator}"},
    )
    bq.create_dataset(bigquery.Dataset(f"{PROJECT}.{DATASET}"))
    bq.create_table(bigquery.Table(f"{PROJECT}.{DATASET}.quota", schema=SCHEMA))
    return table_path("quota")


def first_request(stream_name):
    schema = types.ProtoSchema()
    schema.proto_descriptor.CopyFrom(DESCRIPTOR)
    return types.AppendRowsRequest(
        write_stream=stream_name,
        offset=0,
        proto_rows=types.AppendRowsRequest.ProtoData(
            writer_schema=schema, rows=proto_rows([make_row(9)])
        ),
    )


def usage(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/emulator/v1/quota") as r:
        return json.load(r)


def create(client, table):
    return client.create_write_stream(
        parent=table,
        write_stream=types.WriteStream(type_=types.WriteStream.Type.COMMITTED),
        # The client retries RESOURCE_EXHAUSTED for 20 minutes by default: once is enough here.
        retry=None,
    )


def test_quota_mode_refuses_what_exceeds_each_limit_with_bigquerys_answer(
    quota_emulator, client, table
):
    # CreateWriteStream: three an hour, the fourth is refused with BigQuery's message.
    streams = [create(client, table) for _ in range(STREAMS_PER_HOUR)]
    with pytest.raises(exceptions.ResourceExhausted) as refused:
        create(client, table)
    message = refused.value.message
    assert message.startswith("Exceeds 'CreateWriteStream requests' quota, user_id: project_us")
    assert "(status: INSUFFICIENT_TOKENS)" in message
    assert message.endswith(f"Entity: {table}")

    # Concurrent connections: two AppendRows calls open, the third ends with the quota error.
    open_calls = [open_append_stream(client, s.name) for s in streams[:CONNECTIONS]]
    for i, call in enumerate(open_calls):
        assert append(call, [make_row(i)], offset=0).append_result.offset == 0
    # (The GAPIC call itself: AppendRowsStream turns a call refused at once into a generic
    # "problem opening the stream" or the status, depending on timing.)
    routing = (("x-goog-request-params", f"write_stream={streams[2].name}"),)
    requests = iter([first_request(streams[2].name)])
    with pytest.raises(exceptions.ResourceExhausted) as refused:
        next(iter(client.append_rows(requests=requests, metadata=routing)))
    assert refused.value.message.startswith(
        "Exceeds 'Concurrent connections' quota, user_id: project_us"
    )
    assert refused.value.message.endswith(f"Entity: {streams[2].name}")

    # Throughput: 4,000 bytes a second; a burst of requests of over a third of that is refused part-way,
    # in-stream (the call stays usable), and passes again once the second has refilled.
    rows = [make_row(i) for i in range(40)]
    assert sum(len(r) for r in rows) > BYTES_PER_SECOND / 3
    call = open_calls[0]
    offset, refusals = 1, 0
    for _ in range(6):
        try:
            append(call, rows, offset=offset)
            offset += len(rows)
        except exceptions.ResourceExhausted as e:
            assert e.message.startswith("Exceeds 'AppendRows throughput' quota, user_id: project_us")
            refusals += 1
    assert refusals > 0, "a burst above the throughput quota is refused"
    time.sleep(1.1)
    assert append(call, rows, offset=offset).append_result.offset == offset

    # A closed connection frees its place.
    open_calls[1].close()
    deadline = time.monotonic() + 10
    while usage(quota_emulator)["connections_open"] >= CONNECTIONS:
        assert time.monotonic() < deadline, "the closed call is released"
        time.sleep(0.05)
    again = open_append_stream(client, streams[2].name)
    assert append(again, [make_row(20)], offset=0).append_result.offset == 0
    again.close()
    call.close()

    seen = usage(quota_emulator)
    assert seen["enforced"] is True
    assert seen["refused_create_write_stream"] == 1
    assert seen["refused_connections"] == 1
    assert seen["refused_throughput"] == refusals
    assert seen["connections_peak"] == CONNECTIONS
