"""The request length guard: accepts every valid request, refuses every length the frame cannot hold."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from tieredlog.protocol.api import CORE_VERSIONS, GROUP_VERSIONS
from tieredlog.protocol.codec import InvalidRequest, UnsupportedVersion, _request_codec, decode_request, encode_request
from tieredlog.protocol.guard import FrameError, entity_checker

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _schemas() -> list[tuple[int, int]]:
    out = []
    for key, (lo, hi) in {**CORE_VERSIONS, **GROUP_VERSIONS}.items():
        for version in range(lo, hi + 1):
            try:
                _request_codec(key, version)
            except UnsupportedVersion:
                continue  # Produce v0-2: advertised, answered by hand, no kio schema
            out.append((key, version))
    return out


SCHEMAS = _schemas()


def test_every_advertised_schema_has_a_guard():
    assert len(SCHEMAS) > 140


@pytest.mark.parametrize("api_key,version", SCHEMAS)
def test_the_guard_ends_where_kio_ends_on_valid_requests(api_key, version):
    cls = _request_codec(api_key, version)[0]
    write, read, check = entity_writer(cls), entity_reader(cls), entity_checker(cls)

    @settings(max_examples=8, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def agree(body) -> None:
        buf = io.BytesIO()
        try:
            write(buf, body)
        except (ValueError, OverflowError):
            return  # a value kio itself cannot write (an out-of-range timedelta)
        data = buf.getvalue()
        assert check(data, 0, len(data)) == read(data, 0)[1] == len(data)

    agree()


def _metadata_v9(body: bytes) -> bytes:
    return struct.pack(">hhih", 3, 9, 1, -1) + b"\x00" + body


def test_the_twenty_byte_frame_is_refused_before_kio_reads_it():
    with pytest.raises(InvalidRequest, match=r"MetadataRequest.topics: array of 4294967294 items at byte 16"):
        decode_request(_metadata_v9(b"\xff\xff\xff\xff\x0f"))


@pytest.mark.parametrize(
    "body,message",
    [
        (b"\xff\xff\xff\xff\xff\x0f", "varint longer than 5 bytes"),
        (b"\x80", "varint cut off"),
        (b"\x05a", "array of 4 items"),  # four topics announced, one byte left
        (b"\x02\x05ab", "MetadataRequestTopic.name: 4 bytes at byte 13, only 2 left"),
    ],
)
def test_compact_lengths_are_checked(body, message):
    with pytest.raises(InvalidRequest, match=message):
        decode_request(_metadata_v9(body))


def test_legacy_lengths_and_nulls_are_checked():
    header = struct.pack(">hhih", 20, 1, 1, -1)  # DeleteTopics v1: topic_names is a non-nullable array
    with pytest.raises(InvalidRequest, match="array of 1073741824 items"):
        decode_request(header + struct.pack(">i", 1 << 30))
    with pytest.raises(InvalidRequest, match="non-nullable field DeleteTopicsRequest.topic_names was serialized as null"):
        decode_request(header + struct.pack(">ii", -1, 1000))
    with pytest.raises(InvalidRequest, match=r"length -2"):
        decode_request(header + struct.pack(">ih", 1, -2) + struct.pack(">i", 0))
    with pytest.raises(InvalidRequest, match=r"32767 bytes at byte \d+, only 1 left"):
        decode_request(header + struct.pack(">ih", 1, 0x7FFF) + b"x")


def test_nullable_fields_may_be_null_and_trailing_bytes_are_allowed():
    header, body = decode_request(encode_request(3, 9, 5, None, {"topics": None})[4:] + b"extra")
    assert header.correlation_id == 5 and body.topics is None


def test_a_known_tagged_field_is_checked_inside_its_size():
    # Fetch v12's tagged cluster_id (tag 0): a compact string that claims more bytes than its tag holds
    frame = bytearray(encode_request(1, 12, 1, "c", {"topics": [], "forgotten_topics_data": [], "rack_id": ""})[4:])
    assert frame[-1] == 0  # no tagged fields
    frame[-1:] = b"\x01\x00\x02\x7f\x00"  # one tag: 0, size 2, string length 126
    with pytest.raises(InvalidRequest, match="FetchRequest.cluster_id: 126 bytes"):
        decode_request(bytes(frame))


def test_checkers_are_built_once_per_class():
    cls = _request_codec(0, 9)[0]
    assert entity_checker(cls) is entity_checker(cls)
    with pytest.raises(FrameError):
        entity_checker(cls)(b"", 0, 0)
