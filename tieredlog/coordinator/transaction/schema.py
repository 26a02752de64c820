"""Keys and values of `__transaction_state` records, in Kafka's wire schemas.

- key `TransactionLogKey` version 0: the transactional id;
- value `TransactionLogValue` written as version 0 (producer id, epoch, timeout, state, partitions,
  last update and start times), read 0-1 (version 1 is flexible and adds tagged fields we skip).
A null value is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tieredlog.coordinator.schema import SchemaError, SchemaReader, encode_string
from tieredlog.formats.varint import read_uvarint

KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True)
class StoredTransaction:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int  # TransactionState's id
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + encode_string(transactional_id)


def decode_key(data: bytes) -> str:
    r = SchemaReader(data)
    version = r.int16()
    if version != KEY_VERSION:
        raise SchemaError(f"unknown __transaction_state key version {version}")
    return r.string()


def encode_value(txn: StoredTransaction) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(struct.pack(">hqhib", VALUE_VERSION, txn.producer_id, txn.producer_epoch, txn.timeout_ms, txn.state))
    out += struct.pack(">i", len(by_topic))
    for topic, partitions in by_topic.items():
        out += encode_string(topic) + struct.pack(">i", len(partitions))
        out += struct.pack(f">{len(partitions)}i", *partitions)
    out += struct.pack(">qq", txn.last_update_ms, txn.start_ms)
    return bytes(out)


class _FlexibleReader(SchemaReader):
    """Version 1's compact strings and arrays (unsigned varint length + 1)."""

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.data, self.pos)
        except Exception as exc:  # a truncated varint
            raise SchemaError("truncated record") from exc
        return value

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise SchemaError("null where a string is required")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError("invalid utf-8") from exc

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


def decode_value(data: bytes) -> StoredTransaction:
    r = _FlexibleReader(data)
    version = r.int16()
    if version not in (0, 1):
        raise SchemaError(f"unknown __transaction_state value version {version}")
    flexible = version == 1
    producer_id = r.int64()
    epoch = r.int16()
    timeout_ms = r.int32()
    state = struct.unpack(">b", r._take(1))[0]
    partitions: set[tuple[str, int]] = set()
    count = r.uvarint() - 1 if flexible else r.int32()
    for _ in range(max(count, 0)):  # -1: null (no partitions)
        topic = r.compact_string() if flexible else r.string()
        n = r.uvarint() - 1 if flexible else r.int32()
        for _ in range(max(n, 0)):
            partitions.add((topic, r.int32()))
        if flexible:
            r.skip_tags()
    last_update_ms = r.int64()
    start_ms = r.int64()
    if flexible:
        r.skip_tags()  # previous/next producer id, client transaction version (KIP-890 part 2)
    return StoredTransaction(producer_id, epoch, timeout_ms, state, frozenset(partitions), last_update_ms, start_ms)
