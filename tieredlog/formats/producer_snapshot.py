"""Kafka's producer snapshot (``<20-digit next offset>.snapshot``), format version 1:

    version i16 (=1) | crc u32 (CRC-32C of everything after it) | entries: count i32, then each
    producerId i64 | epoch i16 | lastSequence i32 | lastOffset i64 | offsetDelta i32 |
    timestamp i64 | coordinatorEpoch i32 | currentTxnFirstOffset i64 (-1: none)

All big-endian. A snapshot is shipped with every remote segment, so Kafka's tools read ours.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

import crc32c as _crc32c

SNAPSHOT_VERSION = 1
NO_TXN_FIRST_OFFSET = -1

SNAPSHOT_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(ValueError):
    """A producer snapshot that cannot be trusted; ``position`` is the byte where reading failed."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


class SnapshotEntry(NamedTuple):
    """One producer of a snapshot, field for field."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int  # -1: no batch
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # NO_TXN_FIRST_OFFSET: no open transaction


def encode_producer_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    items = list(entries)
    body = bytearray(_COUNT.pack(len(items)))
    for e in items:
        body += _ENTRY.pack(*e)
    return SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, _crc32c.crc32c(bytes(body))) + bytes(body)


def decode_producer_snapshot(data: bytes) -> list[SnapshotEntry]:
    """Parse snapshot bytes; raises CorruptSnapshotError with the byte position of the problem."""
    if len(data) < SNAPSHOT_HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot truncated: {len(data)} bytes, header needs 10", len(data))
    version, crc = SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version} (expected {SNAPSHOT_VERSION})", 0)
    computed = _crc32c.crc32c(data[SNAPSHOT_HEADER.size :])
    if computed != crc:
        raise CorruptSnapshotError(f"CRC-32C mismatch (stored {crc:#010x}, computed {computed:#010x})", 2)
    (count,) = _COUNT.unpack_from(data, SNAPSHOT_HEADER.size)
    pos = SNAPSHOT_HEADER.size + _COUNT.size
    if count < 0 or pos + count * _ENTRY.size != len(data):
        raise CorruptSnapshotError(
            f"entry count {count} does not match the {len(data) - pos} bytes of entries", SNAPSHOT_HEADER.size
        )
    return [SnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(memoryview(data)[pos:])]
