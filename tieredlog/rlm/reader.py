"""The remote read path: offset -> remote segment -> byte range -> whole record batches.

Runs on the reader pool (it blocks on the RSM), except :meth:`RemoteReadPath.read_inline`, which
any thread (the event loop) may call: it only slices bytes a sequential reader's stream already
holds in memory, and answers None when serving would need a read or a wait. Bytes come back
exactly as they were produced: the segment's batches are sliced out of the remote object, never
decoded or rebuilt.
"""

from __future__ import annotations

import logging
import struct
import threading
from concurrent.futures import CancelledError, Future
from typing import Callable, NamedTuple

from tieredlog.errors import OffsetOutOfRangeError
from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.index import CorruptIndexError
from tieredlog.formats.lineage import (
    as_pairs,
    epoch_of_offset_in_segment,
    holds_offset_on_lineage,
    is_within_lineage,
)
from tieredlog.records.batch import (
    BATCH_LENGTH_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    iter_headers,
    next_offset_at,
    peek_size,
    read_header,
)
from tieredlog.records.record import record_at_or_after  # decompresses: only for timestamp lookups
from tieredlog.rlm.index_cache import RemoteIndexCache
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.metrics import metrics
from tieredlog.rlm.pool import RemoteReaderPool
from tieredlog.rlm.prefetch import (
    CHUNK_GROWN,
    CHUNK_MAX,
    CHUNK_MIN,
    READ_AHEAD_CHUNKS,
    READ_AHEAD_MAX_BYTES,
    PrefetchCache,
    ReadStream,
)
from tieredlog.rsm.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# Extra bytes asked for beyond max_bytes: the offset index entry found is up to
# index.interval.bytes (4 KiB by default) plus one batch before the wanted offset.
SLACK_BYTES = 64 * 1024


class RemoteRecords(NamedTuple):
    """What one remote read returns: whole batches sliced from one remote segment (a read crosses a
    segment boundary only after segments holding nothing but empty batches), that segment (the last
    one read), and the offset after the last batch (the fetch offset when nothing was returned). A
    read_committed fetch finds its aborted transactions from the last two."""

    records: bytes | memoryview
    segment: RemoteLogSegmentMetadata | None  # None: no segment held the offset
    next_offset: int


class OffsetAndTimestamp(NamedTuple):
    """``(offset, timestamp, leader_epoch)``; also readable by name like UnifiedLog's TimestampAndOffset."""

    offset: int
    timestamp: int
    leader_epoch: int


class RemoteReadPath:
    def __init__(
        self,
        lifecycle: RemoteSegmentLifecycle,
        rsm: RemoteStorageManager,
        index_cache: RemoteIndexCache,
        reader_pool: RemoteReaderPool,
        read_ahead_max_bytes: int = READ_AHEAD_MAX_BYTES,
    ) -> None:
        self._lifecycle = lifecycle
        self._rsm = rsm
        self._index_cache = index_cache
        self._pool = reader_pool
        self.prefetch = PrefetchCache(max_bytes=read_ahead_max_bytes)
        self.chunk_min = CHUNK_MIN  # ranged reads are at least this long (and twice the fetch size)
        self.chunk_grown = CHUNK_GROWN  # read-ahead sizes double up to this
        self.inline_hits = 0  # fetches read_inline answered from memory
        self.inline_misses = 0  # ... and those it left to the reader pool
        # next-segment set-ups that read_inline queued on the pool, by (partition, first offset):
        # a pool read of that offset waits for its set-up instead of starting a second stream
        self._starting: dict[tuple, Future] = {}
        self._starting_lock = threading.Lock()

    # -- segment lookup -------------------------------------------------------------------------
    def find_segment(self, tip: TopicIdPartition, log, offset: int) -> RemoteLogSegmentMetadata | None:
        lineage = as_pairs(log.leader_epoch_cache.epoch_entries())

        def on_lineage(md: RemoteLogSegmentMetadata) -> bool:
            # After unclean elections several segments hold the same offsets with different records, and
            # the metadata serves an epoch's offset from the last copy of it, whichever history that is.
            # A copy that leaves the lineage only past ``offset`` still serves it (after hard failures
            # it may be the only copy of it): reads stop where it leaves (ReadStream.lineage_end).
            return holds_offset_on_lineage(md, lineage, offset)

        epoch = log.leader_epoch_cache.epoch_for_offset(offset)
        if epoch is not None:
            md = self._lifecycle.segment_for(tip, epoch, offset)
            if md is not None and on_lineage(md):
                return md
        # Below the local log the leader-epoch cache may have been truncated (or the offset's
        # epoch is older than the cache): use the epochs recorded in the remote segments.
        candidates = [
            m
            for m in self._lifecycle.segments(tip)
            if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and m.start_offset <= offset <= m.end_offset
            and on_lineage(m)
        ]
        candidates.sort(key=lambda m: -m.event_timestamp_ms)
        for m in candidates:
            found = self._lifecycle.segment_for(tip, epoch_of_offset_in_segment(m, offset), offset)
            if found is not None and on_lineage(found):
                return found
        # the metadata serves another history's copy of that epoch: this one holds the log's own records
        return candidates[0] if candidates else None

    # -- bytes --------------------------------------------------------------------------------
    def fetch_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the remote segment, shorter at the end of the object."""
        end = min(end, md.segment_size_in_bytes) if md.segment_size_in_bytes > 0 else end
        if start >= end:
            return b""
        stream = self._rsm.fetch_log_segment(md, start, end - 1)
        parts: list[bytes] = []
        try:
            want = end - start
            first = stream.read(want) or b""
            parts.append(first)
            if len(first) >= want:
                return first
            want -= len(first)
            while want > 0:
                chunk = stream.read(want)
                if not chunk:
                    break
                parts.append(chunk)
                want -= len(chunk)
        finally:
            stream.close()
            # one ranged GET, whatever it returned
            metrics().object_store.record(md.topic_id_partition.topic, "GET", 1, sum(len(p) for p in parts))
        return b"".join(parts)

    def read_inline(
        self, tip: TopicIdPartition, log, fetch_offset: int, max_bytes: int, min_one_message: bool = True,
        segment_ready: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
    ) -> RemoteRecords | None:
        """:meth:`_read_inline_segment`, going on into the next segments while what it answers holds no
        record up to its segment's end (see :meth:`read`); None when a continuation is not in memory."""
        got = self._read_inline_segment(tip, log, fetch_offset, max_bytes, min_one_message, segment_ready)
        parts: list[bytes | memoryview] = []
        used = 0
        while got is not None and _empty_to_segment_end(got, log, max_bytes - used):
            nxt = self._read_inline_segment(tip, log, got.next_offset, max_bytes - used - len(got.records), False,
                                            segment_ready)
            if nxt is None:
                return None  # the pool's read goes on from a fresh stream
            if not nxt.records:
                break
            parts.append(got.records)
            used += len(got.records)
            got = nxt
        if parts and got is not None:
            return RemoteRecords(b"".join([*parts, got.records]), got.segment, got.next_offset)
        return got

    def _read_inline_segment(
        self, tip: TopicIdPartition, log, fetch_offset: int, max_bytes: int, min_one_message: bool = True,
        segment_ready: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
    ) -> RemoteRecords | None:
        """What :meth:`_read_segment` would answer, when the sequential stream waiting at ``fetch_offset``
        already holds those bytes in memory; None when it does not (no such stream, the bytes are
        still being read ahead, a read failed, the segment ends oddly): then call :meth:`read` on
        the pool. Never does I/O and never waits for a read in flight, so any thread, the event
        loop included, may call it. Queues the stream's next read-ahead on the pool.
        ``segment_ready``: whether the caller can answer from the stream's segment without I/O
        (a read_committed fetch needs its aborted transactions); when not, None and the stream is
        left as it was for the pool's read."""
        s = self.prefetch.take(tip, fetch_offset, count=False)
        if s is None:
            self.inline_misses += 1
            return None
        if segment_ready is not None and not segment_ready(s.md):
            self.prefetch.put(s)
            self.inline_misses += 1
            return None
        s.log = log
        try:
            got = self._serve_inline(s, fetch_offset, max_bytes, min_one_message)
        except Exception:
            # bytes the slow path would fail on: it starts over from a fresh stream and reports it
            self.prefetch.release(s)
            self.inline_misses += 1
            return None
        if got is None:
            self.prefetch.put(s)  # back for the pool's read, state unchanged in meaning
            self.inline_misses += 1
            return None
        self.prefetch.count_hit()
        self.inline_hits += 1
        return got

    def read(
        self, tip: TopicIdPartition, log, fetch_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> RemoteRecords:
        """Whole batches from the segment holding ``fetch_offset`` (:meth:`_read_segment`). When they hold
        no record up to the segment's end (a compacted topic's segment whose records were all superseded
        keeps one empty batch, its range being fixed), the read goes on into the next segments within
        ``max_bytes``: an answer of nothing but empty batches, again and again, makes librdkafka report
        MSG_SIZE_TOO_LARGE. The answer names the last segment read: only it has records, so only its
        aborted transactions matter."""
        got = self._read_segment(tip, log, fetch_offset, max_bytes, min_one_message)
        parts: list[bytes | memoryview] = []
        used = 0
        while _empty_to_segment_end(got, log, max_bytes - used):
            nxt = self._read_segment(tip, log, got.next_offset, max_bytes - used - len(got.records), False)
            if not nxt.records:
                break
            parts.append(got.records)
            used += len(got.records)
            got = nxt
        if parts:
            return RemoteRecords(b"".join([*parts, got.records]), got.segment, got.next_offset)
        return got

    def _read_segment(
        self, tip: TopicIdPartition, log, fetch_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> RemoteRecords:
        pending = self._starting.get((tip, fetch_offset))
        if pending is not None and pending.running():
            # read_inline queued this segment's set-up ahead of this read (the pool runs tasks in
            # order, so it is running or done): take its stream rather than start another
            try:
                pending.result()
            except (Exception, CancelledError):
                pass
        s = self.prefetch.take(tip, fetch_offset)
        if s is not None:
            s.log = log
            # a sequential reader: continue where the previous fetch ended, from bytes read ahead
            try:
                got = self._serve(s, fetch_offset, max_bytes, min_one_message)
            except BaseException:
                self.prefetch.release(s)
                raise
            if got is not None:
                return got
            fetch_offset = max(fetch_offset, s.md.end_offset + 1)
            if fetch_offset >= log.local_log_start_offset:
                return RemoteRecords(b"", None, fetch_offset)
        md = self.find_segment(tip, log, fetch_offset)
        if md is None:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} of {tip} is in no remote segment (log start {log.log_start_offset})"
            )
        while md is not None:
            if fetch_offset <= md.start_offset:
                # the segment's first batch holds its start offset: no index to fetch (a catch-up
                # from the log start, or a fetch at a segment boundary, costs no index GETs)
                entry_offset, pos = md.start_offset, 0
            else:
                entry_offset, pos = self._index_cache.lookup_offset_entry(md, fetch_offset)
            s = ReadStream(tip, md, fetch_offset, pos, log)
            s.chunk = s.first_chunk = min(CHUNK_MAX, max(self.chunk_min, 2 * max_bytes))
            try:
                got = self._serve(s, fetch_offset, max_bytes, min_one_message, entry_offset if pos else None)
            except CorruptIndexError:
                self.prefetch.release(s)
                # fetched again on the next read: a bad transfer heals, a bad object fails again
                self._index_cache.remove(md.remote_log_segment_id.id)
                raise
            except BaseException:
                self.prefetch.release(s)
                raise
            if got is not None:
                return got
            # nothing at or after fetch_offset in this segment: the range ended in an offset gap
            fetch_offset = md.end_offset + 1
            if fetch_offset >= log.local_log_start_offset:
                break
            md = self.find_segment(tip, log, fetch_offset)
        return RemoteRecords(b"", None, fetch_offset)

    # -- one stream -----------------------------------------------------------------------------
    def _serve(
        self, s: ReadStream, fetch_offset: int, max_bytes: int, min_one: bool, index_entry: int | None = None
    ) -> RemoteRecords | None:
        """Whole batches from ``s`` starting at the batch holding ``fetch_offset``, up to
        ``max_bytes`` (at least one batch when ``min_one``); None when the segment has no batch
        at or after ``fetch_offset``. Puts ``s`` back for the next fetch, or releases it.
        ``index_entry``: the offset of the index entry a fresh stream's position came from."""
        # (_serve_inline is the same without I/O: keep the two in step)
        # skip the batches before fetch_offset (a fresh stream starts at an index floor)
        while True:
            if not self._ensure(s, HEADER_SIZE):
                if index_entry is not None:
                    raise CorruptIndexError(f"offset index of {_name(s)} points at byte {s.pos}, past its end")
                self.prefetch.release(s)
                return None
            h = _checked_header(s)
            if index_entry is not None:
                # the batch an entry points at starts at or before the entry's offset (Kafka keys
                # entries by a batch's last offset); anything else is an index that lies
                if not s.md.start_offset <= h.base_offset <= index_entry:
                    raise CorruptIndexError(
                        f"offset index of {_name(s)} maps offset {index_entry} to byte {s.pos}, where a batch "
                        f"of offsets {h.base_offset}..{h.last_offset} starts"
                    )
                index_entry = None
            if h.last_offset >= fetch_offset:
                break
            if not self._ensure(s, h.size):
                self.prefetch.release(s)
                return None
            s.p += h.size
        first_size = h.size
        md = s.md  # read before parking: once parked, another thread may take the stream
        if first_size > max_bytes and not min_one:
            self._park(s, fetch_offset)
            return RemoteRecords(b"", md, fetch_offset)
        limit = max(first_size, max_bytes) if min_one else max_bytes
        # Only the first batch must be whole: the answer stops at the end of what the stream holds rather
        # than join it to the next read (a copy of that read), as Kafka's stops at a segment's end.
        self._ensure(s, first_size)
        cut = _cut(s, limit)
        if cut is None:
            # the first batch is cut short: the object ends early (a truncated upload)
            self.prefetch.release(s)
            return None
        data, s.p, next_offset = cut
        self._park(s, next_offset)
        return RemoteRecords(data, md, next_offset)

    def _serve_inline(
        self, s: ReadStream, fetch_offset: int, max_bytes: int, min_one: bool
    ) -> RemoteRecords | None:
        """:meth:`_serve` from the bytes ``s`` holds or has read ahead (landed reads only): the
        same answer, parked the same way; None, with ``s`` neither parked nor released (its state
        still valid for :meth:`_serve`), when that answer needs a read or a wait, or when the
        segment has no more batches or ends early (the slow path handles those)."""
        while True:
            if not self._ensure_now(s, HEADER_SIZE) or len(s.data) - s.p < HEADER_SIZE:
                return None
            h = _checked_header(s)
            if h.last_offset >= fetch_offset:
                break
            if not self._ensure_now(s, h.size) or len(s.data) - s.p < h.size:
                return None
            s.p += h.size
        first_size = h.size
        md = s.md
        if first_size > max_bytes and not min_one:
            self._park(s, fetch_offset, inline=True)
            return RemoteRecords(b"", md, fetch_offset)
        limit = max(first_size, max_bytes) if min_one else max_bytes
        if not self._ensure_now(s, first_size):
            return None
        cut = _cut(s, limit)
        if cut is None:
            return None
        data, s.p, next_offset = cut
        self._park(s, next_offset, inline=True)
        return RemoteRecords(data, md, next_offset)

    def _ensure(self, s: ReadStream, n: int) -> bool:
        """Make ``s.data[s.p:]`` hold ``n`` bytes, or everything up to the end of the segment;
        False when no byte at all is left."""
        size = s.size
        while len(s.data) - s.p < n:
            if s.data_pos + len(s.data) >= size > 0:
                break
            if s.ahead:
                start, end, fut = s.ahead.popleft()
                if fut.cancel():  # still queued behind other work: read it here instead
                    chunk = self.fetch_range(s.md, start, end)
                else:
                    try:
                        chunk = fut.result()
                    except Exception:  # a failed read-ahead is retried once, here
                        chunk = self.fetch_range(s.md, start, end)
            else:
                start = s.data_pos + len(s.data)
                end = start + max(n - (len(s.data) - s.p), s.chunk)
                chunk = self.fetch_range(s.md, start, end)
                s.fetched_to = max(s.fetched_to, start + len(chunk))
            if not _splice(s, start, end, chunk):
                break
        return len(s.data) > s.p

    @staticmethod
    def _ensure_now(s: ReadStream, n: int) -> bool:
        """:meth:`_ensure` from reads that have landed, without I/O or waiting: True when
        ``s.data[s.p:]`` now holds what :meth:`_ensure` would leave there (``n`` bytes, or all
        there is); False when getting there needs a read that is missing, in flight, failed or
        cancelled (``s`` stays valid: the slow path goes on from it)."""
        size = s.size
        while len(s.data) - s.p < n:
            if s.data_pos + len(s.data) >= size > 0:
                return True
            if not s.ahead:
                return False
            start, end, fut = s.ahead[0]
            if not fut.done() or fut.cancelled() or fut.exception() is not None:
                return False
            s.ahead.popleft()
            if not _splice(s, start, end, fut.result()):
                return True
        return True

    def _park(self, s: ReadStream, next_offset: int, inline: bool = False) -> None:
        """Keep ``s`` for a fetch at ``next_offset`` and read ahead of it; drop it at the segment end.
        ``inline``: on a thread that must not block, the next segment is set up on the pool."""
        s.next_offset = next_offset
        start_next = self._start_next_segment_on_pool if inline else self._start_next_segment
        if s.lineage_end is not None and next_offset >= s.lineage_end:
            # the rest of this copy is another history: the next fetch looks the offset up afresh
            self.prefetch.release(s)
            return
        if next_offset > s.md.end_offset or s.pos >= s.size:
            self.prefetch.release(s)
            if not s.next_started and s.log is not None and next_offset > s.md.end_offset:
                s.next_started = True
                start_next(s)
            return
        # drop what was consumed, so the stream only holds bytes ahead of the reader
        if s.p >= len(s.data):
            s.data_pos += len(s.data)
            s.data, s.p = b"", 0
        self._read_ahead(s)
        self.prefetch.put(s)
        if not s.next_started and s.fetched_to >= s.size > 0 and s.log is not None:
            s.next_started = True
            start_next(s)

    def _read_ahead(self, s: ReadStream) -> None:
        size = s.size
        pool = self._pool
        while len(s.ahead) < READ_AHEAD_CHUNKS and s.fetched_to < size:
            start = s.fetched_to
            end = min(size, start + s.chunk)
            if size - end < s.chunk // 2:
                end = size  # no short read for a small tail
            held = (len(s.data) - s.p) + sum(e - b for b, e, _ in s.ahead) + (end - start)
            if not self.prefetch.account(s, held):
                s.chunk = s.first_chunk  # memory is short: back to small reads
                break  # over the read-ahead budget: this reader fetches inline
            if pool is None or not pool.has_room(0.5):
                break  # the pool is busy with real fetches; read-ahead is only an optimisation
            try:
                fut = pool.submit(self.fetch_range, s.md, start, end)
            except Exception:
                break
            s.ahead.append((start, end, fut))
            s.fetched_to = end
            s.chunk = max(s.first_chunk, min(self.chunk_grown, 2 * s.chunk))
        self.prefetch.account(s, (len(s.data) - s.p) + sum(e - b for b, e, _ in s.ahead))

    def _start_next_segment_on_pool(self, s: ReadStream) -> None:
        """:meth:`_start_next_segment` queued on the reader pool (it asks the RLMM, which may block)."""
        pool = self._pool
        if pool is None or not pool.has_room(0.5):
            s.next_started = False  # the pool is busy: a later fetch of this stream tries again
            return
        key = (s.tip, s.md.end_offset + 1)
        try:
            fut = pool.submit(self._start_next_segment, s)
        except Exception:
            s.next_started = False
            return
        with self._starting_lock:
            self._starting[key] = fut

        def done(f: Future) -> None:
            with self._starting_lock:
                if self._starting.get(key) is f:
                    del self._starting[key]

        fut.add_done_callback(done)

    def _start_next_segment(self, s: ReadStream) -> None:
        """Set up (and read ahead) the stream of the segment after ``s``'s, so a reader crossing
        the segment boundary finds its bytes on the way instead of starting cold."""
        log = s.log
        offset = s.md.end_offset + 1
        try:
            if offset >= log.local_log_start_offset or self.prefetch.contains(s.tip, offset):
                return
            md = self.find_segment(s.tip, log, offset)
        except Exception:  # only an optimisation: the reader's own fetch reports any failure
            return
        if md is None or md.start_offset != offset or md.segment_size_in_bytes <= 0:
            return  # an offset gap, or nothing more remote: found on demand, as without read-ahead
        nxt = ReadStream(s.tip, md, offset, 0, log)  # a segment starts with the batch holding its start offset
        nxt.first_chunk = s.first_chunk
        nxt.chunk = s.chunk
        self._read_ahead(nxt)
        self.prefetch.put(nxt)

    # -- ListOffsets by timestamp -----------------------------------------------------------------
    def find_offset_by_timestamp(self, tip: TopicIdPartition, log, timestamp: int) -> tuple[int, int, int] | None:
        lineage = as_pairs(log.leader_epoch_cache.epoch_entries())
        start_offset = log.log_start_offset
        segments = sorted(
            (
                m
                for m in self._lifecycle.segments(tip)
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
        pos = self._index_cache.lookup_timestamp(md, timestamp, starting_offset)
        chunk = 1 << 20
        buf = b""
        base = pos
        p = 0
        while True:
            need = HEADER_SIZE if len(buf) - p < HEADER_SIZE else _batch_size(buf, p, base + p, md)
            if len(buf) - p < need:
                # everything the batch needs in one read: growing by chunks would copy it over and over
                fetched_to = base + max(len(buf), p)
                more = self.fetch_range(md, fetched_to, fetched_to + max(chunk, need - (len(buf) - p)))
                if not more:
                    return None
                buf = buf[p:] + more
                base += p
                p = 0
                continue
            h = read_header(buf, p)
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                hit = record_at_or_after(buf, p, timestamp, starting_offset)
                if hit is not None:
                    return OffsetAndTimestamp(hit[0], hit[1], h.partition_leader_epoch)
            p += h.size


def _empty_to_segment_end(got: RemoteRecords, log, room: int) -> bool:
    """Whether ``got`` reaches its segment's end holding only empty batches, with room and a remote
    segment after it: checked batch by batch only then (once a segment; the first batch with a record
    ends it)."""
    md = got.segment
    if (md is None or not got.records or got.next_offset <= md.end_offset or len(got.records) >= room
            or got.next_offset >= log.local_log_start_offset):
        return False
    return all(h.records_count == 0 for _, h in iter_headers(got.records))


def _name(s: ReadStream) -> str:
    return f"remote segment {s.md.remote_log_segment_id.id} ({s.md.start_offset}..{s.md.end_offset})"


def _batch_size(buf, p: int, file_pos: int, md: RemoteLogSegmentMetadata) -> int:
    """The size the batch at ``buf[p:]`` declares, refused when no batch can have it: under a header
    (a reader would never move on) or past the segment's end (a reader would fetch the rest of it)."""
    size = peek_size(buf, p)
    if size < HEADER_SIZE or 0 < md.segment_size_in_bytes < file_pos + size:
        raise CorruptRecordError(
            f"batch at byte {file_pos} of remote segment {md.remote_log_segment_id.id} declares {size} bytes "
            f"(segment size {md.segment_size_in_bytes})",
            position=file_pos,
        )
    return size


def _checked_header(s: ReadStream):
    """The header at the stream's position, its size checked as :func:`_batch_size` does."""
    _batch_size(s.data, s.p, s.pos, s.md)
    return read_header(s.data, s.p)


def _splice(s: ReadStream, start: int, end: int, chunk) -> bool:
    """Append ``chunk`` (the segment's bytes from ``start``, asked up to ``end``) to ``s.data``;
    False when no more bytes follow it (empty, or the object is shorter than the metadata says)."""
    if not chunk:
        return False
    short = len(chunk) < end - start
    left = len(s.data) - s.p
    if left <= 0:
        s.data_pos += len(s.data)
        s.data = chunk  # the read as it came: fetches are zero-copy views of it
    else:
        # The leftover is the start of a batch the read boundary cut. Only that batch is copied whole;
        # the rest of the read waits, as it came, first in line: joining the leftover to the whole read
        # would copy every byte read once more.
        s.data_pos += s.p
        head = memoryview(s.data)[s.p:]
        k = _rest_of_batch(head, chunk)
        if 0 < k < len(chunk) and not short:
            s.data = b"".join((head, memoryview(chunk)[:k]))
            rest: Future = Future()
            rest.set_result(memoryview(chunk)[k:])
            s.ahead.appendleft((start + k, end, rest))
        else:  # a batch longer than the read, or the object's end: one join
            s.data = b"".join((head, chunk))
    s.p = 0
    if short:
        # the object is shorter than the metadata says: stop here
        s.cancel()
        s.fetched_to = s.data_pos + len(s.data)
        return False
    return True


def _rest_of_batch(head: memoryview, chunk) -> int:
    """How many bytes of ``chunk`` complete the batch whose first bytes are ``head``; 0 when its
    length field cannot be read or is impossible (the caller's checks report the corruption)."""
    if len(head) >= LOG_OVERHEAD:
        size = _I32.unpack_from(head, BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
    else:
        need = LOG_OVERHEAD - len(head)
        if len(chunk) < need:
            return 0
        size = _I32.unpack_from(b"".join((head, memoryview(chunk)[:need])), BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
    return size - len(head) if size >= HEADER_SIZE else 0


def _cut(s: ReadStream, limit: int) -> tuple[bytes | memoryview, int, int] | None:
    """The whole batches in ``s.data`` from ``s.p`` within ``limit`` bytes: (those bytes, a view
    into ``s.data``; position after them in ``s.data``; offset after them); None when not even the
    first batch is whole."""
    buf, p = s.data, s.p
    n = len(buf)
    stop = min(n, p + limit)
    end = last = p
    i32_at = _I32.unpack_from  # peek_size's checks per batch cost 10% of a cut of small batches
    lineage_end = s.lineage_end
    while stop - end >= LOG_OVERHEAD:
        size = i32_at(buf, end + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or end + size > stop:
            break
        if lineage_end is not None and end > p and _I64.unpack_from(buf, end)[0] >= lineage_end:
            break
        last = end
        end += size
    if end == p:
        return None
    next_offset = next_offset_at(buf, last)
    # a view, not a copy: it keeps the chunk alive until the response carrying it is sent
    data = memoryview(buf)[p:end] if (p or end != n) else buf
    return data, end, next_offset


__all__ = ["RemoteReadPath", "RemoteRecords", "PrefetchCache", "OffsetAndTimestamp", "SLACK_BYTES", "CHUNK_MIN", "READ_AHEAD_CHUNKS"]
