"""Keys and values of `__consumer_offsets` records, in Kafka's own wire schemas.

Written so that a Kafka broker (or `kafka-console-consumer --formatter ...OffsetsMessageFormatter`) reads
our records and we read theirs:
- key version 0/1 `OffsetCommitKey` (group, topic, partition); key version 2 `GroupMetadataKey` (group);
- value `OffsetCommitValue` written as version 3 (offset, leaderEpoch, metadata, commitTimestamp), read 0-3;
- value `GroupMetadataValue` written as version 3, read 0-3.
A null value is a tombstone: the offset (or the whole group) was deleted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tieredlog.coordinator.group import OffsetAndMetadata

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


class SchemaError(ValueError):
    """A key or value in `__consumer_offsets` that this version cannot read."""


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units in signed 32-bit arithmetic."""
    h = 0
    units = value.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- primitive writers / readers ---------------------------------------------------------------------


def encode_string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(value)) + value


class SchemaReader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError("truncated record")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError("invalid utf-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise SchemaError("null where a string is required")
        return value

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n == -1 else self._take(n)


# -- keys --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_COMMIT_KEY_VERSION) + encode_string(group) + encode_string(topic) + struct.pack(">i", partition)


def encode_group_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + encode_string(group)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = SchemaReader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupKey(r.string())
    raise SchemaError(f"unknown __consumer_offsets key version {version}")


# -- offset values -----------------------------------------------------------------------------------


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return (
        struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, value.offset, value.leader_epoch)
        + encode_string(value.metadata)
        + struct.pack(">q", value.commit_timestamp)
    )


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = SchemaReader(data)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise SchemaError(f"unknown offset commit value version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp)


# -- group metadata values ---------------------------------------------------------------------------


@dataclass
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class StoredGroup:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[StoredMember]


def encode_group_value(group: StoredGroup) -> bytes:
    parts = [
        struct.pack(">h", GROUP_METADATA_VALUE_VERSION),
        encode_string(group.protocol_type),
        struct.pack(">i", group.generation),
        encode_string(group.protocol),
        encode_string(group.leader),
        struct.pack(">q", group.current_state_timestamp),
        struct.pack(">i", len(group.members)),
    ]
    for m in group.members:
        parts += [
            encode_string(m.member_id),
            encode_string(m.group_instance_id),
            encode_string(m.client_id),
            encode_string(m.client_host),
            struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def decode_group_value(data: bytes) -> StoredGroup:
    r = SchemaReader(data)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise SchemaError(f"unknown group metadata value version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0:
        raise SchemaError("negative member count")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_timeout = r.int32()
        # v1 put the rebalance timeout before the session timeout; v0 had only the session timeout.
        if version >= 1:
            rebalance_timeout, session_timeout = session_timeout, r.int32()
        else:
            rebalance_timeout = session_timeout
        subscription = r.nullable_bytes() or b""
        assignment = r.nullable_bytes() or b""
        members.append(
            StoredMember(
                member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout,
                subscription, assignment,
            )
        )
    return StoredGroup(protocol_type, generation, protocol, leader, timestamp, members)
