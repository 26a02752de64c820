"""The remote read path: offset -> remote segment -> byte range -> whole record batches.

Runs on the reader pool only (it blocks on the RSM). Bytes come back exactly as they were
produced: the segment's batches are sliced out of the remote object, never decoded or rebuilt.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, NamedTuple

from tieredlog.errors import OffsetOutOfRangeError
from tieredlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, peek_size, read_header
from tieredlog.rlm.lineage import as_pairs, epoch_of_offset_in_segment, is_within_lineage
from tieredlog.rsm.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

if TYPE_CHECKING:
    from tieredlog.rlm.manager import RemoteLogManager

log = logging.getLogger(__name__)

# Extra bytes asked for beyond max_bytes: the offset index entry found is up to
# index.interval.bytes (4 KiB by default) plus one batch before the wanted offset.
SLACK_BYTES = 64 * 1024


class OffsetAndTimestamp(NamedTuple):
    """``(offset, timestamp, leader_epoch)``; also readable by name like PartitionLog's TimestampAndOffset."""

    offset: int
    timestamp: int
    leader_epoch: int


class PrefetchCache:
    """A few chunks read ahead for sequential (catch-up) readers, keyed by (segment id, position).

    Bounded by entry count and total bytes; a chunk is handed out once and then dropped.
    """

    def __init__(self, max_entries: int = 64, max_bytes: int = 128 * 1024 * 1024) -> None:
        self._lock = threading.Lock()
        self._chunks: "OrderedDict[tuple, Future]" = OrderedDict()
        self._sizes: dict[tuple, int] = {}
        self._bytes = 0
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = 0

    def reserve(self, key: tuple, size_hint: int) -> Future | None:
        """A future the prefetching thread fills, or None if already present / no room."""
        with self._lock:
            if key in self._chunks:
                return None
            fut: Future = Future()
            self._chunks[key] = fut
            self._sizes[key] = size_hint
            self._bytes += size_hint
            self._evict()
            return fut if key in self._chunks else None

    def put(self, key: tuple, data: bytes) -> None:
        fut = self.reserve(key, len(data))
        if fut is not None:
            fut.set_result(data)

    def take(self, key: tuple) -> Future | None:
        with self._lock:
            fut = self._chunks.pop(key, None)
            if fut is not None:
                self._bytes -= self._sizes.pop(key, 0)
                self.hits += 1
            return fut

    def drop_segment(self, segment_id) -> None:
        with self._lock:
            for key in [k for k in self._chunks if k[0] == segment_id]:
                self._chunks.pop(key).cancel()
                self._bytes -= self._sizes.pop(key, 0)

    def _evict(self) -> None:
        while self._chunks and (len(self._chunks) > self.max_entries or self._bytes > self.max_bytes):
            key, fut = self._chunks.popitem(last=False)
            fut.cancel()
            self._bytes -= self._sizes.pop(key, 0)


class RemoteReadPath:
    def __init__(self, rlm: "RemoteLogManager") -> None:
        self.rlm = rlm
        self.prefetch = PrefetchCache()
        # (segment id, next offset) -> file position where that offset's batch starts, learned
        # from the previous read, so a sequential reader skips the index lookup
        self._next_pos: "OrderedDict[tuple, int]" = OrderedDict()
        self._lock = threading.Lock()

    # -- segment lookup -------------------------------------------------------------------------
    def find_segment(self, tip: TopicIdPartition, log, offset: int) -> RemoteLogSegmentMetadata | None:
        rlmm = self.rlm.rlmm
        epoch = log.leader_epoch_cache.epoch_for_offset(offset)
        if epoch is not None:
            md = rlmm.remote_log_segment_metadata(tip, epoch, offset)
            if md is not None:
                return md
        # Below the local log the leader-epoch cache may have been truncated (or the offset's
        # epoch is older than the cache): use the epochs recorded in the remote segments.
        candidates = [
            m
            for m in self.rlm.list_segments(tip)
            if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and m.start_offset <= offset <= m.end_offset
        ]
        for m in sorted(candidates, key=lambda m: -m.event_timestamp_ms):
            found = rlmm.remote_log_segment_metadata(tip, epoch_of_offset_in_segment(m, offset), offset)
            if found is not None:
                return found
        return None

    # -- bytes --------------------------------------------------------------------------------
    def fetch_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the remote segment, shorter at the end of the object."""
        end = min(end, md.segment_size_in_bytes) if md.segment_size_in_bytes > 0 else end
        if start >= end:
            return b""
        key = (md.remote_log_segment_id.id, start)
        fut = self.prefetch.take(key)
        head = b""
        if fut is not None:
            try:
                head = fut.result(timeout=self.rlm.remote_fetch_max_wait_s)
            except Exception:
                head = b""
            if len(head) >= end - start:
                return head[: end - start]
        stream = self.rlm.rsm.fetch_log_segment(md, start + len(head), end - 1)
        try:
            parts = [head]
            want = end - start - len(head)
            while want > 0:
                chunk = stream.read(want)
                if not chunk:
                    break
                parts.append(chunk)
                want -= len(chunk)
        finally:
            stream.close()
        return b"".join(parts)

    def read(self, tip: TopicIdPartition, log, fetch_offset: int, max_bytes: int, min_one_message: bool = True) -> bytes:
        md = self.find_segment(tip, log, fetch_offset)
        if md is None:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} of {tip} is in no remote segment (log start {log.log_start_offset})"
            )
        while md is not None:
            data = self._read_segment(md, fetch_offset, max_bytes, min_one_message)
            if data is not None:
                return data
            # nothing at or after fetch_offset in this segment: the range ended in an offset gap
            fetch_offset = md.end_offset + 1
            if fetch_offset >= log.local_log_start_offset:
                break
            md = self.find_segment(tip, log, fetch_offset)
        return b""

    def _start_position(self, md: RemoteLogSegmentMetadata, fetch_offset: int) -> int:
        with self._lock:
            pos = self._next_pos.pop((md.remote_log_segment_id.id, fetch_offset), None)
        if pos is not None:
            return pos
        return self.rlm.index_cache.lookup_offset(md, fetch_offset)

    def _read_segment(self, md: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int, min_one: bool) -> bytes | None:
        start = self._start_position(md, fetch_offset)
        buf = self.fetch_range(md, start, start + max_bytes + SLACK_BYTES)
        eof = start + len(buf) >= md.segment_size_in_bytes
        pos = 0
        # skip the batches before fetch_offset (the index entry is a floor)
        while True:
            if len(buf) - pos < HEADER_SIZE:
                if eof:
                    return None
                fetched_to = start + max(len(buf), pos)  # pos may lie past the buffer after a skip
                more = self.fetch_range(md, fetched_to, fetched_to + max_bytes + SLACK_BYTES)
                if not more:
                    return None
                buf = buf[pos:] + more
                start += pos
                pos = 0
                eof = start + len(buf) >= md.segment_size_in_bytes
                continue
            h = read_header(buf, pos)
            if h.last_offset < fetch_offset:
                pos += h.size
                continue
            break
        first_size = h.size
        if first_size > max_bytes and not min_one:
            return b""
        limit = max(first_size, max_bytes) if min_one else max_bytes
        if len(buf) - pos < first_size and not eof:
            # the first batch is larger than what we asked for: fetch the rest of it
            buf = buf[pos:] + self.fetch_range(md, start + len(buf), start + pos + first_size)
            start += pos
            pos = 0
        end = pos
        last_next_offset = fetch_offset
        while len(buf) - end >= LOG_OVERHEAD:
            size = peek_size(buf, end)
            if size < HEADER_SIZE or end + size > len(buf) or end + size - pos > limit:
                break
            last_next_offset = read_header(buf, end).next_offset
            end += size
        data = bytes(buf[pos:end])
        self._remember(md, last_next_offset, start + end, buf[end:], max_bytes)
        return data

    # -- sequential readers ---------------------------------------------------------------------
    def _remember(self, md: RemoteLogSegmentMetadata, next_offset: int, next_pos: int, tail, max_bytes: int) -> None:
        if next_offset > md.end_offset or next_pos >= md.segment_size_in_bytes:
            return
        seg = md.remote_log_segment_id.id
        with self._lock:
            self._next_pos[(seg, next_offset)] = next_pos
            while len(self._next_pos) > 1024:
                self._next_pos.popitem(last=False)
        want = max_bytes + SLACK_BYTES
        if len(tail) >= want:
            self.prefetch.put((seg, next_pos), bytes(tail))
            return
        if not self.rlm.reader_pool.has_room(0.5):
            if tail:
                self.prefetch.put((seg, next_pos), bytes(tail))
            return  # the pool is busy with real fetches; read-ahead is only an optimisation
        fut = self.prefetch.reserve((seg, next_pos), want)
        if fut is None:
            return
        head = bytes(tail)

        def read_ahead() -> None:
            try:
                rest = self._raw_range(md, next_pos + len(head), next_pos + want)
                fut.set_result(head + rest)
            except BaseException as exc:  # noqa: BLE001 - a failed read-ahead is retried by the real read
                if not fut.done():
                    fut.set_exception(exc)

        try:
            self.rlm.reader_pool.submit(read_ahead)
        except Exception:
            fut.set_result(head)

    def _raw_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        end = min(end, md.segment_size_in_bytes)
        if start >= end:
            return b""
        stream = self.rlm.rsm.fetch_log_segment(md, start, end - 1)
        try:
            return stream.read(end - start) or b""
        finally:
            stream.close()

    # -- ListOffsets by timestamp -----------------------------------------------------------------
    def find_offset_by_timestamp(self, tip: TopicIdPartition, log, timestamp: int) -> tuple[int, int, int] | None:
        lineage = as_pairs(log.leader_epoch_cache.epoch_entries())
        start_offset = log.log_start_offset
        segments = sorted(
            (
                m
                for m in self.rlm.list_segments(tip)
                if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                and m.max_timestamp_ms >= timestamp
                and m.end_offset >= start_offset
            ),
            key=lambda m: m.start_offset,
        )
        for md in segments:
            if lineage and not is_within_lineage(md, lineage, log.log_end_offset):
                continue
            if md.start_offset >= log.local_log_start_offset:
                return None  # the answer is in the local log: the caller looks there
            found = self._scan_for_timestamp(md, timestamp, max(start_offset, md.start_offset))
            if found is not None:
                return found
        return None

    def _scan_for_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int):
        pos = self.rlm.index_cache.lookup_timestamp(md, timestamp, starting_offset)
        chunk = 1 << 20
        buf = b""
        base = pos
        p = 0
        while True:
            if len(buf) - p < HEADER_SIZE or len(buf) - p < peek_size(buf, p):
                fetched_to = base + max(len(buf), p)
                more = self.fetch_range(md, fetched_to, fetched_to + chunk)
                if not more:
                    return None
                buf = buf[p:] + more
                base += p
                p = 0
                continue
            h = read_header(buf, p)
            size = h.size
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                return _record_at_or_after(buf, p, h, timestamp, starting_offset)
            p += size


def _record_at_or_after(buf, pos: int, h, timestamp: int, starting_offset: int) -> tuple[int, int, int]:
    """The first record of the batch with timestamp >= target (Kafka scans inside the batch)."""
    if h.timestamp_type == 1:  # LogAppendTime: every record carries the batch's max timestamp
        return OffsetAndTimestamp(max(h.base_offset, starting_offset), h.max_timestamp, h.partition_leader_epoch)
    from tieredlog.records.record import decode_batch  # decompresses; only for this rare lookup

    _, records = decode_batch(bytes(buf[pos : pos + h.size]))
    for r in records:
        if r.offset >= starting_offset and r.timestamp >= timestamp:
            return OffsetAndTimestamp(r.offset, r.timestamp, h.partition_leader_epoch)
    return OffsetAndTimestamp(max(h.base_offset, starting_offset), h.max_timestamp, h.partition_leader_epoch)


__all__ = ["RemoteReadPath", "PrefetchCache", "OffsetAndTimestamp", "SLACK_BYTES"]
