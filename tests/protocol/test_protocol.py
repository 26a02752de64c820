"""Protocol layer: kio-backed codec, dict->entity builder, hand-encoded Fetch responses."""

from __future__ import annotations

import uuid

import pytest

from tieredlog.errors import InvalidTopicError
from tieredlog.protocol.api import CORE_VERSIONS, FETCH, METADATA, PRODUCE
from tieredlog.protocol.codec import (
    InvalidRequest,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tieredlog.protocol.fetch_encoder import FetchPartitionData, FetchTopicData, encode_fetch_response
from tieredlog.server.topic_store import validate_topic_name


class Region:
    """A stand-in file region: the encoder only needs its size; the test splices the bytes in."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


@pytest.mark.parametrize("version", range(4, 17))
def test_fetch_response_encoding_decodes_with_kio(version):
    tid = uuid.uuid4()
    batch = bytes(range(200))
    topics = [
        FetchTopicData("orders", tid, [
            FetchPartitionData(0, 0, 42, 40, 3, [(9, 10)], Region(batch)),
            FetchPartitionData(1, 1, -1, -1, -1, None, None),
            FetchPartitionData(2, 0, 5, 5, 0, None, b"inline"),
        ]),
    ]
    parts, total = encode_fetch_response(version, 77, topics, session_id=0)
    wire = b"".join(p.data if isinstance(p, Region) else p for p in parts)
    assert len(wire) == total and int.from_bytes(wire[:4], "big") == total - 4
    cid, body = decode_response(FETCH, version, memoryview(wire)[4:])
    assert cid == 77
    (t,) = body.responses
    if version >= 13:
        assert t.topic_id == tid
    else:
        assert t.topic == "orders"
    p0, p1, p2 = t.partitions
    assert (p0.partition_index, p0.high_watermark, p0.last_stable_offset) == (0, 42, 40)
    assert p0.records == batch
    assert p1.error_code.value == 1 and not p1.records
    assert p2.records == b"inline"
    if version >= 5:
        assert p0.log_start_offset == 3
    assert [(a.producer_id, a.first_offset) for a in p0.aborted_transactions] == [(9, 10)]


@pytest.mark.parametrize("version", [4, 12, 16])
def test_large_in_memory_records_are_sent_uncopied(version):
    # remote reads hand the encoder megabytes in memory: they must go out as their own part
    big = bytes(range(256)) * 4096  # 1 MiB
    small = b"tiny"
    topics = [FetchTopicData("t", uuid.uuid4(), [
        FetchPartitionData(0, 0, 10, 10, 0, None, big),
        FetchPartitionData(1, 0, 10, 10, 0, None, small),
    ])]
    parts, total = encode_fetch_response(version, 5, topics)
    assert any(part is big for part in parts)
    wire = b"".join(parts)
    assert len(wire) == total and int.from_bytes(wire[:4], "big") == total - 4
    _, body = decode_response(FETCH, version, memoryview(wire)[4:])
    p0, p1 = body.responses[0].partitions
    assert p0.records == big and p1.records == small


def test_request_round_trip_and_trailing_bytes_tolerated():
    frame = encode_request(METADATA, 12, 5, "cid", {"topics": [{"name": "a", "topic_id": uuid.UUID(int=0)}]})
    header, body = decode_request(frame[4:] + b"\x00\x01\x02")
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 5, "cid")
    assert body.topics[0].name == "a"


def test_garbage_and_unknown_versions():
    with pytest.raises(InvalidRequest):
        decode_request(b"\x00\x03")
    frame = encode_request(METADATA, 9, 1, "x", {"topics": None})
    with pytest.raises(InvalidRequest):
        decode_request(frame[4:20])
    with pytest.raises(UnsupportedVersion):
        decode_request(b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x00")  # Produce v1: no kio schema
    with pytest.raises(UnsupportedVersion):
        decode_request(b"\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00")


def test_response_builder_fills_version_specific_fields():
    body = {
        "responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 7, "log_append_time": -1, "log_start_offset": 0,
             "error_message": "ignored by old versions"}]}],
        "throttle_time": 0,
    }
    for v in (3, 5, 8, 11):
        _, resp = decode_response(PRODUCE, v, encode_response(PRODUCE, v, 9, body)[4:])
        assert resp.responses[0].partition_responses[0].base_offset == 7


def test_advertised_versions_exist_in_kio_except_rejected_produce():
    from kio.index import load_request_schema, load_response_schema

    for key, (lo, hi) in CORE_VERSIONS.items():
        for v in range(max(lo, 3 if key == PRODUCE else lo), hi + 1):
            load_request_schema(key, v)
            load_response_schema(key, v)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "sp ace", "ünï"])
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_legal_topic_names():
    for name in ("a", "a.b_c-D9", "x" * 249):
        validate_topic_name(name)


def test_warm_up_loads_highest_known_version_of_each_api():
    from tieredlog.protocol import codec

    for cache in (codec._reader_cache, codec._writer_cache):
        for v in (15, 16):
            cache.pop((FETCH, v), None)
        for key in [k for k in cache if k[0] == METADATA]:
            cache.pop(key)
    # Metadata: a range above what kio knows falls back to kio's highest; api 9999 is unknown
    assert codec.warm_up({FETCH: (4, 16), METADATA: (0, 99), 9999: (0, 3)}) == 2
    assert (FETCH, 16) in codec._reader_cache and (FETCH, 16) in codec._writer_cache
    assert (FETCH, 15) not in codec._reader_cache  # only the highest version
    assert [k for k in codec._reader_cache if k[0] == METADATA] == [k for k in codec._writer_cache if k[0] == METADATA]
    assert len([k for k in codec._reader_cache if k[0] == METADATA]) == 1
