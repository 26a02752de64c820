"""Kafka's RemoteLogMetadataSerde: the value format of ``__remote_log_metadata`` records.

A value is ``uvarint frame_version (1) | uvarint api_key | uvarint version | message`` where the
message is a flexible-version Kafka message (compact strings, compact arrays, compact nullable
bytes, a tagged-field section after every struct). Schemas (apache/kafka
``storage/src/main/resources/message/*.json``):

- 0 RemoteLogSegmentMetadataRecord: RemoteLogSegmentId{TopicIdPartition{Name, Id, Partition}, Id},
  StartOffset i64, EndOffset i64, BrokerId i32, MaxTimestampMs i64, EventTimestampMs i64,
  SegmentLeaderEpochs[]{LeaderEpoch i32, Offset i64}, SegmentSizeInBytes i32, CustomMetadata bytes?,
  RemoteLogSegmentState i8; tagged 0 TxnIndexEmpty bool (0+), 1 BrokerLeaderEpoch i32 (1+).
- 1 RemoteLogSegmentMetadataUpdateRecord: RemoteLogSegmentId, BrokerId, EventTimestampMs,
  CustomMetadata bytes?, RemoteLogSegmentState; tagged (1+) 0 BrokerLeaderEpoch, 1 EndOffset.
- 2 RemotePartitionDeleteMetadataRecord: TopicIdPartition, BrokerId, EventTimestampMs,
  RemotePartitionDeleteState i8; tagged (1+) 0 BrokerLeaderEpoch, 1 EndOffset.
- 3 RemoteLogSegmentMetadataSnapshotRecord: SegmentId uuid, then as 0 without the topic partition.

We write version 0 (what every Kafka 3.x/4.x reader accepts) and read versions 0 and 1; unknown
tagged fields are skipped, as Kafka does. Record keys on the topic are null.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Mapping, Union

from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.varint import read_uvarint, write_uvarint
from tieredlog.rsm.api import (
    CustomMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_METADATA_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
SEGMENT_METADATA_SNAPSHOT_API_KEY = 3
WRITE_VERSION = 0
MAX_READ_VERSION = 1

# Kafka's unsigned varints (ByteUtils.readUnsignedVarint) are 32-bit: five bytes at most.
_MAX_UVARINT_BYTES = 5
_EPOCH_ENTRY_SIZE = 4 + 8 + 1  # LeaderEpoch i32, Offset i64, empty tagged fields
_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class MetadataSerdeError(ValueError):
    """A value that is not a valid RemoteLogMetadata record."""


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's RemoteLogSegmentMetadataSnapshot (api key 3): a segment without its topic partition,
    used only in local snapshot files."""

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState
    custom_metadata: CustomMetadata | None = None
    tx_index_present: bool = False


RemoteLogMetadata = Union[
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemoteLogSegmentMetadataSnapshot,
]


# -- primitive writers ---------------------------------------------------------------------------




def _write_compact_string(out: bytearray, s: str) -> None:
    data = s.encode("utf-8")
    write_uvarint(out, len(data) + 1)
    out += data


def _write_compact_nullable_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out.append(0)
        return
    write_uvarint(out, len(b) + 1)
    out += b


def _write_uuid(out: bytearray, u: uuid.UUID) -> None:
    out += u.bytes  # most significant 8 bytes, then least significant: Kafka's order


def _write_tagged(out: bytearray, fields: list[tuple[int, bytes]]) -> None:
    write_uvarint(out, len(fields))
    for tag, data in sorted(fields):
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def _write_topic_id_partition(out: bytearray, tp: TopicIdPartition) -> None:
    _write_compact_string(out, tp.topic)
    _write_uuid(out, tp.topic_id)
    out += _I32.pack(tp.partition)
    _write_tagged(out, [])


def _write_segment_id(out: bytearray, sid: RemoteLogSegmentId) -> None:
    _write_topic_id_partition(out, sid.topic_id_partition)
    _write_uuid(out, sid.id)
    _write_tagged(out, [])


def _write_epochs(out: bytearray, epochs: Mapping[int, int]) -> None:
    items = sorted(epochs.items())
    write_uvarint(out, len(items) + 1)
    for epoch, offset in items:
        out += _I32.pack(epoch)
        out += _I64.pack(offset)
        _write_tagged(out, [])


def _custom_bytes(cm: CustomMetadata | None) -> bytes | None:
    return None if cm is None else bytes(cm.value)


def _segment_body(out: bytearray, md: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot) -> None:
    out += _I64.pack(md.start_offset)
    out += _I64.pack(md.end_offset)
    out += _I32.pack(md.broker_id)
    out += _I64.pack(md.max_timestamp_ms)
    out += _I64.pack(md.event_timestamp_ms)
    _write_epochs(out, md.segment_leader_epochs)
    out += _I32.pack(md.segment_size_in_bytes)
    _write_compact_nullable_bytes(out, _custom_bytes(md.custom_metadata))
    out += _I8.pack(int(md.state))
    # TxnIndexEmpty is a tagged field with default false: written only when true.
    _write_tagged(out, [] if md.tx_index_present else [(0, b"\x01")])


def serialize(md: RemoteLogMetadata) -> bytes:
    """Encode one metadata object as a ``__remote_log_metadata`` record value."""
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    if isinstance(md, RemoteLogSegmentMetadata):
        write_uvarint(out, SEGMENT_METADATA_API_KEY)
        write_uvarint(out, WRITE_VERSION)
        _write_segment_id(out, md.remote_log_segment_id)
        _segment_body(out, md)
    elif isinstance(md, RemoteLogSegmentMetadataUpdate):
        write_uvarint(out, SEGMENT_METADATA_UPDATE_API_KEY)
        write_uvarint(out, WRITE_VERSION)
        _write_segment_id(out, md.remote_log_segment_id)
        out += _I32.pack(md.broker_id)
        out += _I64.pack(md.event_timestamp_ms)
        _write_compact_nullable_bytes(out, _custom_bytes(md.custom_metadata))
        out += _I8.pack(int(md.state))
        _write_tagged(out, [])
    elif isinstance(md, RemotePartitionDeleteMetadata):
        write_uvarint(out, PARTITION_DELETE_API_KEY)
        write_uvarint(out, WRITE_VERSION)
        _write_topic_id_partition(out, md.topic_id_partition)
        out += _I32.pack(md.broker_id)
        out += _I64.pack(md.event_timestamp_ms)
        out += _I8.pack(int(md.state))
        _write_tagged(out, [])
    elif isinstance(md, RemoteLogSegmentMetadataSnapshot):
        write_uvarint(out, SEGMENT_METADATA_SNAPSHOT_API_KEY)
        write_uvarint(out, WRITE_VERSION)
        _write_uuid(out, md.segment_id)
        _segment_body(out, md)
    else:
        raise MetadataSerdeError(f"cannot serialize {type(md).__name__}")
    return bytes(out)


# -- reader ----------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview):
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise MetadataSerdeError(f"truncated record: need {n} bytes at {self.pos}, have {len(self.buf) - self.pos}")
        data = self.buf[self.pos : end]
        self.pos = end
        return data

    def uvarint(self) -> int:
        try:
            value, end = read_uvarint(self.buf, self.pos)
        except CorruptRecordError as exc:
            raise MetadataSerdeError(str(exc)) from None
        if end - self.pos > _MAX_UVARINT_BYTES:
            raise MetadataSerdeError(f"varint longer than {_MAX_UVARINT_BYTES} bytes at byte {self.pos}")
        self.pos = end
        return value

    def count(self, min_item_size: int, compact_array: bool = False) -> int:
        """A tagged section's item count, or a compact array's length + 1 (0 = null), checked
        against the bytes left, so no loop runs longer than the data can feed it."""
        at = self.pos
        n = self.uvarint()
        if (n - 1 if compact_array and n else n) * min_item_size > len(self.buf) - self.pos:
            raise MetadataSerdeError(f"count {n} at byte {at} cannot fit in the {len(self.buf) - self.pos} bytes left")
        return n

    def i8(self) -> int:
        return _I8.unpack(self._take(1))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def compact_string(self) -> str:
        n = self.uvarint()
        if n == 0:
            raise MetadataSerdeError("null string in a non-nullable field")
        try:
            return self._take(n - 1).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetadataSerdeError(f"invalid UTF-8 string: {exc}") from None

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1)

    def tagged(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.count(2)):  # a tag and a length
            tag = self.uvarint()
            fields[tag] = self._take(self.uvarint())
        return fields


def _read_topic_id_partition(r: _Reader) -> TopicIdPartition:
    name = r.compact_string()
    topic_id = r.uuid()
    partition = r.i32()
    r.tagged()
    return TopicIdPartition(topic_id, name, partition)


def _read_segment_id(r: _Reader) -> RemoteLogSegmentId:
    tp = _read_topic_id_partition(r)
    sid = r.uuid()
    r.tagged()
    return RemoteLogSegmentId(tp, sid)


def _read_epochs(r: _Reader) -> dict[int, int]:
    n = r.count(_EPOCH_ENTRY_SIZE, compact_array=True)
    if n == 0:
        raise MetadataSerdeError("null SegmentLeaderEpochs")
    epochs = {}
    for _ in range(n - 1):
        epoch = r.i32()
        epochs[epoch] = r.i64()
        r.tagged()
    return epochs


def _segment_state(v: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(v)
    except ValueError:
        raise MetadataSerdeError(f"unknown RemoteLogSegmentState {v}") from None


def _read_segment_body(r: _Reader) -> dict:
    fields = dict(
        start_offset=r.i64(),
        end_offset=r.i64(),
        broker_id=r.i32(),
        max_timestamp_ms=r.i64(),
        event_timestamp_ms=r.i64(),
        segment_leader_epochs=_read_epochs(r),
        segment_size_in_bytes=r.i32(),
    )
    custom = r.compact_nullable_bytes()
    fields["custom_metadata"] = None if custom is None else CustomMetadata(custom)
    fields["state"] = _segment_state(r.i8())
    tags = r.tagged()
    txn_index_empty = tags.get(0, b"\x00") != b"\x00"
    fields["tx_index_present"] = not txn_index_empty
    return fields


def deserialize(value: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """Decode a ``__remote_log_metadata`` record value."""
    r = _Reader(value)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MetadataSerdeError(f"unknown frame version {frame}")
    api_key = r.uvarint()
    version = r.uvarint()
    if version > MAX_READ_VERSION:
        raise MetadataSerdeError(f"unsupported version {version} of api key {api_key}")
    try:
        if api_key == SEGMENT_METADATA_API_KEY:
            sid = _read_segment_id(r)
            md: RemoteLogMetadata = RemoteLogSegmentMetadata(remote_log_segment_id=sid, **_read_segment_body(r))
        elif api_key == SEGMENT_METADATA_UPDATE_API_KEY:
            sid = _read_segment_id(r)
            broker_id = r.i32()
            ts = r.i64()
            custom = r.compact_nullable_bytes()
            state = _segment_state(r.i8())
            r.tagged()
            md = RemoteLogSegmentMetadataUpdate(sid, ts, None if custom is None else CustomMetadata(custom), state,
                                                broker_id)
        elif api_key == PARTITION_DELETE_API_KEY:
            tp = _read_topic_id_partition(r)
            broker_id = r.i32()
            ts = r.i64()
            raw_state = r.i8()
            r.tagged()
            try:
                delete_state = RemotePartitionDeleteState(raw_state)
            except ValueError:
                raise MetadataSerdeError(f"unknown RemotePartitionDeleteState {raw_state}") from None
            md = RemotePartitionDeleteMetadata(tp, delete_state, ts, broker_id)
        elif api_key == SEGMENT_METADATA_SNAPSHOT_API_KEY:
            segment_id = r.uuid()
            md = RemoteLogSegmentMetadataSnapshot(segment_id=segment_id, **_read_segment_body(r))
        else:
            raise MetadataSerdeError(f"unknown api key {api_key}")
    except MetadataSerdeError:
        raise
    except ValueError as exc:  # invariants of the metadata classes (offsets, empty epochs)
        raise MetadataSerdeError(str(exc)) from None
    if r.pos != len(r.buf):
        raise MetadataSerdeError(f"{len(r.buf) - r.pos} trailing bytes after api key {api_key}")
    return md
