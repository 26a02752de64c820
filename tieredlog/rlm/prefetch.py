"""Sequential remote readers' state: the bytes a reader of one remote segment holds and reads ahead,
and the bounded cache of those streams between fetches. The remote read path (tieredlog.rlm.reader)
fills and serves them."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from concurrent.futures import Future

from tieredlog.formats.lineage import as_pairs, lineage_end_in_segment
from tieredlog.rsm.api import RemoteLogSegmentMetadata

# Read-ahead for sequential (catch-up) readers: a stream's first ranged read is CHUNK_MIN bytes or
# twice the fetch size (at most CHUNK_MAX), short so the first fetch answers soon; every read
# ahead doubles the size up to CHUNK_GROWN (or the first size when larger): an object store
# pays a request's fixed cost (signing, parsing, time to first byte) per read, so a reader
# that keeps going should pay it rarely. Up to READ_AHEAD_CHUNKS reads beyond what the reader
# holds; when the whole segment is held or in flight, the next segment's first read is issued.
CHUNK_MIN = 2 * 1024 * 1024
CHUNK_MAX = 32 * 1024 * 1024
CHUNK_GROWN = 16 * 1024 * 1024
READ_AHEAD_CHUNKS = 2
# remote.log.reader.read.ahead.max.bytes: what all streams together may hold or read ahead
READ_AHEAD_MAX_BYTES = 128 * 1024 * 1024


class ReadStream:
    """One sequential reader of one remote segment: bytes fetched ahead of it and reads in flight.

    ``data[p:]`` holds the segment's bytes from file position ``pos`` (the batch where
    ``next_offset`` starts); ``ahead`` holds (start, end, future) ranged reads contiguous after
    ``data``. Only the thread serving a fetch touches a stream (it is taken out of the table).
    """

    __slots__ = ("tip", "md", "next_offset", "data", "p", "data_pos", "ahead", "fetched_to", "reserved", "chunk",
                 "first_chunk", "log", "next_started", "lineage_end")

    def __init__(self, tip, md: RemoteLogSegmentMetadata, next_offset: int, pos: int, log=None) -> None:
        self.tip = tip
        self.log = log  # the partition's log: finds the next segment when this one is all read
        self.md = md
        self.next_offset = next_offset
        self.data: bytes = b""
        self.p = 0
        self.data_pos = pos  # file position of data[0]
        self.ahead: "deque[tuple[int, int, Future]]" = deque()
        self.fetched_to = pos  # end of data plus every read in flight
        self.reserved = 0  # bytes of read-ahead counted against the table's budget
        self.chunk = CHUNK_MIN  # size of the next ranged read
        self.first_chunk = CHUNK_MIN  # ... back to this under memory pressure
        self.next_started = False  # the next segment's stream has been set up
        # from here on the segment holds another history's records (a copy made before a truncation)
        self.lineage_end: int | None = None if log is None else lineage_end_in_segment(
            md, as_pairs(log.leader_epoch_cache.epoch_entries()), next_offset)

    @property
    def pos(self) -> int:
        return self.data_pos + self.p

    @property
    def size(self) -> int:
        return self.md.segment_size_in_bytes

    def cancel(self) -> None:
        for _, _, fut in self.ahead:
            fut.cancel()
        self.ahead.clear()


class PrefetchCache:
    """Sequential readers' streams keyed by (partition, next offset), least recently used first.

    Bounded by stream count and by the bytes held or being read ahead (``max_bytes``); streams
    over the bounds are dropped (their reads in flight are cancelled or left to finish unused).
    """

    def __init__(self, max_entries: int = 64, max_bytes: int = READ_AHEAD_MAX_BYTES) -> None:
        self._lock = threading.Lock()
        self._streams: "OrderedDict[tuple, ReadStream]" = OrderedDict()
        self._bytes = 0
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = 0

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._streams)

    def contains(self, tip, offset: int) -> bool:
        with self._lock:
            return (tip, offset) in self._streams

    def take(self, tip, offset: int, count: bool = True) -> ReadStream | None:
        with self._lock:
            s = self._streams.pop((tip, offset), None)
            if s is not None and count:
                self.hits += 1
            return s

    def count_hit(self) -> None:
        with self._lock:
            self.hits += 1

    def put(self, s: ReadStream) -> None:
        with self._lock:
            old = self._streams.pop((s.tip, s.next_offset), None)
            if old is not None and old is not s:
                self._release_locked(old)
            self._streams[(s.tip, s.next_offset)] = s
            self._evict_locked(keep=s)

    def account(self, s: ReadStream, held: int) -> bool:
        """Set the bytes ``s`` holds or reads ahead; False when that does not fit the budget."""
        with self._lock:
            delta = held - s.reserved
            if delta > 0 and self._bytes + delta > self.max_bytes:
                return False
            self._bytes += delta
            s.reserved = held
            return True

    def release(self, s: ReadStream) -> None:
        with self._lock:
            self._release_locked(s)

    def drop_segment(self, segment_id) -> None:
        with self._lock:
            for key in [k for k, s in self._streams.items() if s.md.remote_log_segment_id.id == segment_id]:
                self._release_locked(self._streams.pop(key))

    def clear(self) -> None:
        with self._lock:
            for s in self._streams.values():
                self._release_locked(s)
            self._streams.clear()

    def _release_locked(self, s: ReadStream) -> None:
        s.cancel()
        self._bytes -= s.reserved
        s.reserved = 0
        s.data = b""

    def _evict_locked(self, keep: ReadStream) -> None:
        while len(self._streams) > self.max_entries or (self._bytes > self.max_bytes and len(self._streams) > 1):
            key = next(iter(self._streams))
            if self._streams[key] is keep:
                break
            self._release_locked(self._streams.pop(key))


__all__ = ["ReadStream", "PrefetchCache", "CHUNK_MIN", "CHUNK_MAX", "CHUNK_GROWN", "READ_AHEAD_CHUNKS",
           "READ_AHEAD_MAX_BYTES"]
