"""`__consumer_offsets` records of KIP-848 consumer groups, in Kafka's group-coordinator schemas.

Keys are not flexible: an int16 record type (Kafka's "version" of the key) then the fields, so they sit
beside the classic keys (0/1 offsets, 2 group metadata). Values are an int16 version (0 for all of these)
then flexible encoding (compact strings and arrays, a tagged-field section per struct). We write no tagged
field and skip those we read (e.g. MetadataHash of a 4.1 ConsumerGroupMetadataValue).

- 3 ConsumerGroupMetadata (group) -> Epoch
- 4 ConsumerGroupPartitionMetadata (group) -> Epoch?, Topics [TopicId, TopicName, NumPartitions, PartitionRacks]
- 5 ConsumerGroupMemberMetadata (group, member) -> InstanceId, RackId, ClientId, ClientHost,
  SubscribedTopicNames, SubscribedTopicRegex, RebalanceTimeoutMs, ServerAssignor, and in tagged field 0 the
  ClassicMemberMetadata (SessionTimeoutMs, SupportedProtocols) of a classic member (online migration)
- 6 ConsumerGroupTargetAssignmentMetadata (group) -> AssignmentEpoch
- 7 ConsumerGroupTargetAssignmentMember (group, member) -> TopicPartitions [TopicId, Partitions]
- 8 ConsumerGroupCurrentMemberAssignment (group, member) -> MemberEpoch, PreviousMemberEpoch, State,
  AssignedPartitions, PartitionsPendingRevocation
- 16 ConsumerGroupRegularExpression (group, regex) -> Topics, Version, Timestamp: a subscribed regex's
  resolution (Kafka 4). Version is the group epoch it was resolved at (Kafka: its metadata image's offset).
A null value is a tombstone.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from tieredlog.coordinator.consumer_group.assignors import Partitions
from tieredlog.coordinator.consumer_group.member import ClassicMemberMetadata
from tieredlog.coordinator.schema import SchemaError, encode_string

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1)) | {REGULAR_EXPRESSION}
# keys with a second string after the group id: the member id, or the regex of a type-16 key
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, REGULAR_EXPRESSION})


@dataclass(frozen=True)
class ConsumerKey:
    record_type: int
    group: str
    member_id: str | None = None


def encode_key(record_type: int, group: str, member_id: str | None = None) -> bytes:
    out = struct.pack(">h", record_type) + encode_string(group)
    if record_type in _PER_MEMBER:
        out += encode_string(member_id or "")
    return out


def decode_key(record_type: int, data: bytes, pos: int) -> ConsumerKey:
    r = _Reader(data, pos)
    group = r.legacy_string()
    member = r.legacy_string() if record_type in _PER_MEMBER else None
    return ConsumerKey(record_type, group, member)


# -- flexible encoding ---------------------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class _Writer:
    def __init__(self, versioned: bool = True) -> None:
        self.parts: list[bytes] = [struct.pack(">h", 0)] if versioned else []

    def int8(self, v: int) -> None:
        self.parts.append(struct.pack(">b", v))

    def int32(self, v: int) -> None:
        self.parts.append(struct.pack(">i", v))

    def int64(self, v: int) -> None:
        self.parts.append(struct.pack(">q", v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.parts.append(_uvarint(0))
            return
        raw = v.encode("utf-8")
        self.parts.append(_uvarint(len(raw) + 1) + raw)

    def array_len(self, n: int) -> None:
        self.parts.append(_uvarint(n + 1))

    def uuid(self, v: uuid.UUID) -> None:
        self.parts.append(v.bytes)

    def bytes_(self, v: bytes) -> None:
        self.parts.append(_uvarint(len(v) + 1) + v)

    def no_tags(self) -> None:
        self.parts.append(b"\x00")

    def partitions(self, value: Partitions) -> None:
        topics = sorted(value.items(), key=lambda kv: str(kv[0]))
        self.array_len(len(topics))
        for topic_id, parts in topics:
            self.uuid(topic_id)
            self.array_len(len(parts))
            for p in sorted(parts):
                self.int32(p)
            self.no_tags()

    def done(self, tags: dict[int, bytes] | None = None) -> bytes:
        if not tags:
            self.no_tags()
        else:
            self.parts.append(_uvarint(len(tags)))
            for tag in sorted(tags):
                self.parts.append(_uvarint(tag) + _uvarint(len(tags[tag])) + tags[tag])
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError("truncated consumer group record")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise SchemaError("varint too long")

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def legacy_string(self) -> str:
        n = self.int16()
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError("invalid utf-8") from exc

    def string(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        try:
            return self._take(n - 1).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError("invalid utf-8") from exc

    def array_len(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise SchemaError("null array")
        return n - 1

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def bytes_(self) -> bytes:
        n = self.uvarint()
        if n == 0:
            raise SchemaError("null bytes")
        return self._take(n - 1)

    def skip_tags(self) -> None:
        self.tags()

    def tags(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out

    def version(self) -> None:
        if (v := self.int16()) != 0:
            raise SchemaError(f"unknown consumer group value version {v}")

    def partitions(self) -> Partitions:
        out: dict[uuid.UUID, frozenset[int]] = {}
        for _ in range(self.array_len()):
            topic_id = self.uuid()
            out[topic_id] = frozenset(self.int32() for _ in range(self.array_len()))
            self.skip_tags()
        return out


# -- values ------------------------------------------------------------------------------------------


def encode_epoch(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue and ConsumerGroupTargetAssignmentMetadataValue: one int32 epoch."""
    w = _Writer()
    w.int32(epoch)
    return w.done()


def decode_epoch(data: bytes) -> int:
    r = _Reader(data)
    r.version()
    return r.int32()


def encode_partition_metadata(topics: dict[uuid.UUID, tuple[str, int]]) -> bytes:
    """ConsumerGroupPartitionMetadataValue (4.0's layout: no Epoch field)."""
    w = _Writer()
    items = sorted(topics.items(), key=lambda kv: kv[1][0])
    w.array_len(len(items))
    for topic_id, (name, count) in items:
        w.uuid(topic_id)
        w.string(name)
        w.int32(count)
        w.array_len(0)  # PartitionRacks: racks are not tracked
        w.no_tags()
    return w.done()


def decode_partition_metadata(data: bytes) -> dict[uuid.UUID, tuple[str, int]]:
    r = _Reader(data)
    r.version()
    out: dict[uuid.UUID, tuple[str, int]] = {}
    for _ in range(r.array_len()):
        topic_id = r.uuid()
        name = r.string() or ""
        count = r.int32()
        for _ in range(r.array_len()):
            r.int32()
            for _ in range(r.array_len()):
                r.string()
            r.skip_tags()
        r.skip_tags()
        out[topic_id] = (name, count)
    return out


@dataclass
class StoredMemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


# ConsumerGroupMemberMetadataValue's ClassicMemberMetadata: a nullable struct in tagged field 0, written
# (as Kafka's generated code writes a present nullable tagged struct) after a presence byte of 1
_CLASSIC_MEMBER_METADATA_TAG = 0


def _encode_classic(c: ClassicMemberMetadata) -> bytes:
    w = _Writer(versioned=False)
    w.parts.append(_uvarint(1))
    w.int32(c.session_timeout_ms)
    w.array_len(len(c.protocols))
    for name, metadata in c.protocols:
        w.string(name)
        w.bytes_(metadata)
        w.no_tags()
    return w.done()


def _decode_classic(data: bytes) -> ClassicMemberMetadata | None:
    r = _Reader(data)
    if r.uvarint() == 0:
        return None
    session = r.int32()
    protocols = []
    for _ in range(r.array_len()):
        name = r.string() or ""
        protocols.append((name, r.bytes_()))
        r.skip_tags()
    r.skip_tags()
    return ClassicMemberMetadata(session, tuple(protocols))


def encode_member_metadata(m: StoredMemberMetadata) -> bytes:
    w = _Writer()
    w.string(m.instance_id)
    w.string(m.rack_id)
    w.string(m.client_id)
    w.string(m.client_host)
    w.array_len(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.string(name)
    w.string(m.subscribed_topic_regex)
    w.int32(m.rebalance_timeout_ms)
    w.string(m.server_assignor)
    return w.done({_CLASSIC_MEMBER_METADATA_TAG: _encode_classic(m.classic)} if m.classic is not None else None)


def decode_member_metadata(data: bytes) -> StoredMemberMetadata:
    r = _Reader(data)
    r.version()
    instance_id, rack_id = r.string(), r.string()
    client_id, client_host = r.string() or "", r.string() or ""
    names = tuple(r.string() or "" for _ in range(r.array_len()))
    regex = r.string()
    rebalance_timeout = r.int32()
    assignor = r.string()
    classic_bytes = r.tags().get(_CLASSIC_MEMBER_METADATA_TAG)
    classic = _decode_classic(classic_bytes) if classic_bytes is not None else None
    return StoredMemberMetadata(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout, assignor,
                                classic)


def encode_target_member(assignment: Partitions) -> bytes:
    w = _Writer()
    w.partitions(assignment)
    return w.done()


def decode_target_member(data: bytes) -> Partitions:
    r = _Reader(data)
    r.version()
    return r.partitions()


@dataclass
class StoredCurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Partitions
    pending_revocation: Partitions


def encode_current_assignment(a: StoredCurrentAssignment) -> bytes:
    w = _Writer()
    w.int32(a.member_epoch)
    w.int32(a.previous_member_epoch)
    w.int8(a.state)
    w.partitions(a.assigned)
    w.partitions(a.pending_revocation)
    return w.done()


def decode_current_assignment(data: bytes) -> StoredCurrentAssignment:
    r = _Reader(data)
    r.version()
    epoch, previous, state = r.int32(), r.int32(), r.int8()
    return StoredCurrentAssignment(epoch, previous, state, r.partitions(), r.partitions())


@dataclass(frozen=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp_ms: int


def encode_resolved_regex(r: ResolvedRegex) -> bytes:
    w = _Writer()
    w.array_len(len(r.topics))
    for name in sorted(r.topics):
        w.string(name)
    w.int64(r.version)
    w.int64(r.timestamp_ms)
    return w.done()


def decode_resolved_regex(data: bytes) -> ResolvedRegex:
    r = _Reader(data)
    r.version()
    topics = frozenset(r.string() or "" for _ in range(r.array_len()))
    return ResolvedRegex(topics, r.int64(), r.int64())
