"""Kafka's SkimpyOffsetMap: key digest -> latest offset, in one preallocated table.

Each slot is 24 bytes, a 16-byte MD5 digest of the key and the 8-byte offset (the digest's 9.1 claim:
24 bytes per entry), so the cleaner's memory is the table and nothing per key: no Python object per
key or record. A digest collision makes two keys one, as in Kafka; with 128-bit digests that is
never seen in practice. Open addressing with double hashing over a prime number of slots keeps the
probe count low at Kafka's 0.9 load factor; an all-zero digest marks an empty slot.
"""

from __future__ import annotations

import hashlib
import struct

DIGEST_SIZE = 16
ENTRY_SIZE = DIGEST_SIZE + 8
_EMPTY = bytes(DIGEST_SIZE)
_OFFSET = struct.Struct("<q")
_md5 = hashlib.md5


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def slots_for(memory_bytes: int) -> int:
    """The largest prime number of slots whose table fits ``memory_bytes`` (at least 3)."""
    n = max(3, memory_bytes // ENTRY_SIZE)
    while not _is_prime(n):
        n -= 1
    return n


class OffsetMap:
    """Not thread-safe: one cleaner thread owns it."""

    def __init__(self, memory_bytes: int):
        self.slots = slots_for(memory_bytes)
        self._table = bytearray(self.slots * ENTRY_SIZE)
        self.size = 0  # entries in use
        self.latest_offset = -1
        self.probes = 0  # probes past the first slot, over the map's life: how crowded it runs

    @property
    def memory_bytes(self) -> int:
        return len(self._table)

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    def clear(self) -> None:
        if self.size:
            self._table[:] = bytes(len(self._table))
        self.size = 0
        self.latest_offset = -1
        self.probes = 0

    def update_latest_offset(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset

    def _slot(self, digest: bytes) -> tuple[int, bool]:
        """The byte position of ``digest``'s slot, and whether it is already there (else empty)."""
        slots = self.slots
        table = self._table
        x = int.from_bytes(digest, "little")
        i = x % slots
        p = i * ENTRY_SIZE
        cur = table[p : p + DIGEST_SIZE]
        if cur == digest:
            return p, True
        if cur == _EMPTY:
            return p, False
        step = (x >> 64) % (slots - 1) + 1
        while True:
            self.probes += 1
            i += step
            if i >= slots:
                i -= slots
            p = i * ENTRY_SIZE
            cur = table[p : p + DIGEST_SIZE]
            if cur == digest:
                return p, True
            if cur == _EMPTY:
                return p, False

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Record ``offset`` as the latest for ``key``; the caller keeps the load factor below 1."""
        digest = _md5(key).digest()
        p, found = self._slot(digest)
        if not found:
            if digest == _EMPTY:  # pragma: no cover - needs an MD5 preimage of zero
                return
            self._table[p : p + DIGEST_SIZE] = digest
            self.size += 1
        _OFFSET.pack_into(self._table, p + DIGEST_SIZE, offset)
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset recorded for ``key``, or -1."""
        p, found = self._slot(_md5(key).digest())
        return _OFFSET.unpack_from(self._table, p + DIGEST_SIZE)[0] if found else -1
