"""Client input never kills the broker: bad frames close only their own connection."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import API_VERSIONS, CREATE_PARTITIONS, CREATE_TOPICS, FETCH, METADATA, PRODUCE
from tieredlog.protocol.codec import decode_response, encode_request

pytestmark = pytest.mark.integration


def _closed_by_broker(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _assert_healthy(broker, client: KafkaClient) -> None:
    md = client.request(METADATA, {"topics": None})
    assert md.brokers[0].port == broker.port
    assert broker.alive()


@pytest.fixture
def healthy_client(broker):
    with KafkaClient(broker.bootstrap) as c:
        yield c


def _raw(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=10)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(random.Random(64).randbytes(64), id="random-bytes"),  # seeded: a failure replays
        pytest.param(struct.pack(">i", 0x7FFFFFF0), id="huge-size-prefix"),
        pytest.param(struct.pack(">i", -5) + b"abcd", id="negative-size"),
        pytest.param(struct.pack(">i", 3) + b"abc", id="shorter-than-header"),
        pytest.param(struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\xff\xff", id="garbled-body"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1), id="unknown-metadata-version"),
    ],
)
def test_bad_frame_closes_only_its_connection(broker, healthy_client, payload):
    s = _raw(broker)
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)  # a frame cut short by the end of the stream is malformed too
    assert _closed_by_broker(s)
    s.close()
    _assert_healthy(broker, healthy_client)


def test_truncated_frame_then_disconnect(broker, healthy_client):
    frame = encode_request(METADATA, 9, 1, "t", {"topics": None})
    s = _raw(broker)
    s.sendall(frame[: len(frame) // 2])
    s.close()
    _assert_healthy(broker, healthy_client)


def test_size_prefix_larger_than_body_of_next_request(broker, healthy_client):
    """A size that swallows the next frame misaligns the stream; the broker must not answer garbage."""
    frame = encode_request(METADATA, 9, 1, "t", {"topics": None})
    bad = struct.pack(">i", len(frame) + 3) + frame[4:]
    s = _raw(broker)
    s.sendall(bad + frame)
    s.settimeout(10)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    # the first request (with 3 trailing bytes, tolerated) is answered, then the misaligned stream is dropped
    size = struct.unpack(">i", data[:4])[0]
    cid, _ = decode_response(METADATA, 9, data[4 : 4 + size])
    assert cid == 1
    assert len(data) == 4 + size
    _assert_healthy(broker, healthy_client)


def test_unsupported_api_versions_version_gets_table_in_v0_format(broker):
    s = _raw(broker)
    req = struct.pack(">hhih", API_VERSIONS, 77, 42, 3) + b"cli" + b"\x00\x00\x00"
    s.sendall(struct.pack(">i", len(req)) + req)
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    cid, resp = decode_response(API_VERSIONS, 0, body)
    assert cid == 42
    assert resp.error_code.value == 35
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[PRODUCE][0] == 0 and keys[API_VERSIONS] == (0, 4)
    s.close()


def test_produce_v2_is_advertised_but_rejected_per_partition(broker):
    # hand-built Produce v2: acks=1, timeout, one topic with one partition carrying junk records
    body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">ii", 0, 4) + b"junk"
    hdr = struct.pack(">hhih", PRODUCE, 2, 9, 1) + b"c"
    s = _raw(broker)
    s.sendall(struct.pack(">i", len(hdr) + len(body)) + hdr + body)
    size = struct.unpack(">i", s.recv(4))[0]
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    cid, ntopics, nlen = struct.unpack_from(">iih", data, 0)
    assert (cid, ntopics, nlen) == (9, 1, 1)
    nparts, index, err = struct.unpack_from(">iih", data, 11)
    assert (nparts, index, err) == (1, 0, 35)
    s.close()


def test_many_parallel_connections_and_pipelining(broker):
    """Requests pipelined on one socket come back in order; many sockets work at once."""
    socks = [_raw(broker) for _ in range(20)]
    frames = [b"".join(encode_request(METADATA, 9, i, "p", {"topics": None}) for i in range(1, 11)) for _ in socks]
    for s, f in zip(socks, frames):
        s.sendall(f)
    for s in socks:
        for expected in range(1, 11):
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            size = struct.unpack(">i", head)[0]
            body = b""
            while len(body) < size:
                body += s.recv(size - len(body))
            cid, _ = decode_response(METADATA, 9, body)
            assert cid == expected
        s.close()


# Structurally valid requests with nulls and extreme values are answered as Kafka answers them.


def test_metadata_null_topic_name(broker, healthy_client):
    v10 = healthy_client.request(METADATA, {"topics": [{"name": None, "topic_id": None}]}, version=10)
    assert [t.error_code.value for t in v10.topics] == [42]  # INVALID_REQUEST: names cannot be null before v12
    v12 = healthy_client.request(METADATA, {"topics": [{"name": None, "topic_id": None}]}, version=12)
    assert [(t.name, t.error_code.value) for t in v12.topics] == [(None, 100)]  # UNKNOWN_TOPIC_ID
    assert broker.alive()


def test_fetch_with_the_zero_topic_id(broker, healthy_client):
    req = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic_id": None, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}],
    }  # fmt: skip
    resp = healthy_client.request(FETCH, req, version=13)
    assert [p.error_code.value for t in resp.responses for p in t.partitions] == [100]  # UNKNOWN_TOPIC_ID
    _assert_healthy(broker, healthy_client)


def test_requests_for_billions_of_partitions_are_refused(broker, healthy_client):
    created = healthy_client.request(
        CREATE_TOPICS,
        {"topics": [{"name": "huge", "num_partitions": 2**31 - 1, "replication_factor": 1, "assignments": [], "configs": []}],
         "timeout": 30000, "validate_only": False},
    )  # fmt: skip
    assert [(t.error_code.value, t.error_message) for t in created.topics] == [
        (44, "Excessively large number of partitions per request.")  # POLICY_VIOLATION, as Kafka
    ]
    healthy_client.request(
        CREATE_TOPICS,
        {"topics": [{"name": "small", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
         "timeout": 30000, "validate_only": False},
    )  # fmt: skip
    grown = healthy_client.request(
        CREATE_PARTITIONS,
        {"topics": [{"name": "small", "count": 1 << 30, "assignments": None}], "timeout": 30000, "validate_only": False},
    )
    assert [r.error_code.value for r in grown.results] == [44]
    md = healthy_client.request(METADATA, {"topics": [{"name": "small"}]}, version=9)
    assert len(md.topics[0].partitions) == 1
    _assert_healthy(broker, healthy_client)
