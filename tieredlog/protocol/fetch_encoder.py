"""Fetch responses encoded by hand, so record data can stay in the segment file.

kio would need the record bytes in memory; here the response is a list of parts: ``bytes`` for
everything the broker writes and file regions (objects with ``size``) for record data, which the
connection sends with ``loop.sendfile``. Layout follows FetchResponse.json for v4-v16.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from tieredlog.formats.varint import encode_uvarint

_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_i64 = struct.Struct(">q").pack


class Region(Protocol):
    size: int


@dataclass(slots=True)
class FetchPartitionData:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer_id, first_offset)
    records: Any = b""  # bytes | a file region with .size; None encodes a null record set
    # (leader id, leader epoch) for NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (KIP-951): the client
    # goes to the new leader without a Metadata round trip
    current_leader: tuple[int, int] | None = None
    preferred_read_replica: int = -1  # KIP-392: the follower a consumer should fetch from instead
    # (epoch, end offset) when the fetch's last_fetched_epoch diverges from the leader's log (KIP-320)
    diverging_epoch: tuple[int, int] | None = None

    @property
    def records_size(self) -> int:
        r = self.records
        if r is None:
            return 0
        return len(r) if isinstance(r, (bytes, bytearray, memoryview)) else int(r.size)


@dataclass(slots=True)
class FetchTopicData:
    topic: str
    topic_id: uuid.UUID
    partitions: list[FetchPartitionData] = field(default_factory=list)


_INLINE_RECORDS_MAX = 16 * 1024


class _Parts:
    """Accumulates bytes, flushing them as one part whenever a file region is appended."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.buf = bytearray()
        self.size = 0

    def b(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def region(self, region: Any, size: int) -> None:
        """A part sent as it is: a file region (sendfile) or a large in-memory record set (no copy)."""
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.size += len(self.buf)
            self.buf = bytearray()
        self.parts.append(region)
        self.size += size

    def finish(self) -> tuple[list[Any], int]:
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.size += len(self.buf)
        return self.parts, self.size


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[FetchTopicData],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
) -> tuple[list[Any], int]:
    """(parts, total size) of a Fetch response frame including its 4-byte size prefix."""
    if not 4 <= version <= 16:
        raise ValueError(f"Fetch v{version} not encodable")
    flexible = version >= 12
    p = _Parts()

    def array_len(n: int) -> bytes:
        return encode_uvarint(n + 1) if flexible else _i32(n)

    p.b(b"\0\0\0\0")  # size, patched at the end
    p.b(_i32(correlation_id))
    if flexible:
        p.b(b"\0")  # response header v1 tagged fields
    p.b(_i32(throttle_time_ms))
    if version >= 7:
        p.b(_i16(error_code))
        p.b(_i32(session_id))
    p.b(array_len(len(topics)))
    for t in topics:
        if version >= 13:
            p.b(t.topic_id.bytes)
        else:
            name = t.topic.encode()
            p.b(encode_uvarint(len(name) + 1) if flexible else _i16(len(name)))
            p.b(name)
        p.b(array_len(len(t.partitions)))
        for part in t.partitions:
            p.b(_i32(part.partition_index) + _i16(part.error_code) + _i64(part.high_watermark))
            p.b(_i64(part.last_stable_offset))
            if version >= 5:
                p.b(_i64(part.log_start_offset))
            aborted = part.aborted_transactions
            if aborted is None:
                p.b(b"\0" if flexible else _i32(-1))
            else:
                p.b(array_len(len(aborted)))
                for producer_id, first_offset in aborted:
                    p.b(_i64(producer_id) + _i64(first_offset))
                    if flexible:
                        p.b(b"\0")
            if version >= 11:
                p.b(_i32(part.preferred_read_replica))
            records = part.records
            if records is None:
                p.b(b"\0" if flexible else _i32(-1))
            else:
                size = part.records_size
                p.b(encode_uvarint(size + 1) if flexible else _i32(size))
                if isinstance(records, (bytes, bytearray, memoryview)):
                    # remote reads hand over megabytes in memory: copying them into the frame
                    # buffer would cost more than the rest of the response
                    if size >= _INLINE_RECORDS_MAX:
                        p.region(records, size)
                    else:
                        p.b(records)
                elif size:
                    p.region(records, size)
            if flexible:
                if part.diverging_epoch is None and part.current_leader is None:
                    p.b(b"\0")  # no partition tagged fields: the common answer
                    continue
                # partition tagged fields, in tag order: 0 DivergingEpoch (int32, int64 and its own
                # tag buffer: 13 bytes), 1 CurrentLeader (two int32 and a tag buffer: 9 bytes)
                tagged = bytearray()
                count = 0
                if part.diverging_epoch is not None:
                    epoch, end_offset = part.diverging_epoch
                    tagged += b"\x00\x0d" + _i32(epoch) + _i64(end_offset) + b"\0"
                    count += 1
                if part.current_leader is not None:
                    leader_id, leader_epoch = part.current_leader
                    tagged += b"\x01\x09" + _i32(leader_id) + _i32(leader_epoch) + b"\0"
                    count += 1
                p.b(encode_uvarint(count) + tagged)
        if flexible:
            p.b(b"\0")  # topic tagged fields
    if flexible:
        if version >= 16 and node_endpoints:
            body = bytearray(encode_uvarint(len(node_endpoints) + 1))
            for node_id, host, port, rack in node_endpoints:
                h = host.encode()
                body += _i32(node_id) + encode_uvarint(len(h) + 1) + h + _i32(port)
                if rack is None:
                    body += b"\0"
                else:
                    r = rack.encode()
                    body += encode_uvarint(len(r) + 1) + r
                body += b"\0"
            p.b(b"\x01" + b"\0" + encode_uvarint(len(body)) + body)  # tag 0: NodeEndpoints
        else:
            p.b(b"\0")  # response tagged fields
    parts, total = p.finish()
    first = bytearray(parts[0])
    first[0:4] = _i32(total - 4)
    parts[0] = bytes(first)
    return parts, total
