"""Kafka's Cleaner: one round of compaction of one log, on a cleaner thread.

The round maps every key of the dirty part ``[first_dirty, first_uncleanable)`` to its latest offset,
then rewrites the log from its start up to where the map ends, a group of segments at a time, into
one ``.cleaned`` segment per group that keeps a record only if it is the latest of its key (a
tombstone only until its delete horizon), and swaps it in. A group takes the next segment while what
is written so far and all of that segment would still fit one segment, so segments whose records are
all superseded join their neighbours rather than each becoming a segment of one empty batch (the
group's end marker): a fetch there would answer with no record, and librdkafka, after ten such
answers, reports MSG_SIZE_TOO_LARGE (kcat stops). Offsets never change and order is kept;
the active segment is never touched. The event loop never waits for any of it: segments below the
active one are immutable, and the log's lock is taken only to create the cleaned segment and to swap.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.log.cleaner.batch_filter import (
    BatchRetention,
    FilterStats,
    RecordFilter,
    add_keys_to_map,
    control_type,
    empty_batch,
)
from tieredlog.log.cleaner.offset_map import OffsetMap
from tieredlog.log.cleaner.throttler import Throttler
from tieredlog.log.cleaner.txn_metadata import CleanedTransactionMetadata
from tieredlog.log.index import INT32_MAX
from tieredlog.log.segment import LogSegment
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import DELETE_HORIZON_MASK, BatchHeader, read_header

log = logging.getLogger(__name__)

# Kafka's log.cleaner.io.buffer.load.factor: the map is never filled past this share of its slots.
DEFAULT_LOAD_FACTOR = 0.9


class CleanSource(Protocol):
    """What mapping and rewriting read of the log besides its segments: a local log (UnifiedLog), or
    the remote tier's segments fetched for a remote cleaning round."""

    @property
    def topic_partition(self) -> TopicPartition: ...
    @property
    def log_end_offset(self) -> int: ...

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]: ...


class LogCleaningAbortedError(Exception):
    """The partition was deleted, truncated or taken by retention during the round: nothing changed."""


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log and the part of it a round may clean (Kafka's LogToClean)."""

    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic_partition

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(slots=True)
class CleanerStats:
    """One round's figures (Kafka's CleanerStats)."""

    started: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    ended: float = 0.0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    filter: FilterStats = field(default_factory=FilterStats)
    buffer_utilization: float = 0.0
    map_memory_bytes: int = 0
    map_entries: int = 0

    @property
    def elapsed_s(self) -> float:
        return max(self.ended - self.started, 0.0)

    @property
    def recopy_ratio(self) -> float:
        return self.filter.bytes_retained / self.filter.bytes_read if self.filter.bytes_read else 0.0


def _batches(seg: LogSegment, start: int = 0) -> Iterator[tuple[memoryview, BatchHeader]]:
    for pos, view in seg.iter_batches(start):
        if view is None:
            raise CorruptRecordError(f"{seg.log_path}: unreadable batch at byte {pos}")
        yield view, read_header(view, 0)


class Cleaner:
    """Owns one offset map; ``clean`` runs one round on one log."""

    def __init__(self, cleaner_id: int, map_memory_bytes: int, *, io_buffer_size: int = 512 * 1024,
                 load_factor: float = DEFAULT_LOAD_FACTOR, throttler: Throttler | None = None,
                 clock: Callable[[], int] | None = None,
                 check_done: Callable[[TopicPartition], None] | None = None) -> None:
        self.id = cleaner_id
        self.map_memory_bytes = map_memory_bytes
        self.io_buffer_size = io_buffer_size
        self.load_factor = load_factor
        self.throttler = throttler or Throttler(float("inf"))
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._check_done = check_done or (lambda tp: None)
        self.offset_map: OffsetMap | None = None

    # ---- the offset map ---------------------------------------------------------------------------
    def _map_for(self, segs: list[LogSegment], start: int, end: int) -> OffsetMap:
        """The map, sized for the records of the dirty part up to the configured memory (Kafka
        allocates all of it up front; a broker whose compacted logs are small should not)."""
        records = 0
        for seg in segs:
            for _, h in seg.iter_headers(seg.offset_index.lookup(start)[1]):
                if h.base_offset >= end:
                    break
                records += max(h.records_count, 0)
        wanted = min(self.map_memory_bytes, max(int(records / self.load_factor) + 16, 1024) * 24)
        current = self.offset_map
        if current is None or current.memory_bytes < wanted:
            self.offset_map = None  # the old table is freed before the new one is allocated
            current = self.offset_map = OffsetMap(wanted)
        else:
            current.clear()
        return current

    def build_offset_map(self, plog: CleanSource, segs: list[LogSegment], start: int, end: int,
                         stats: CleanerStats) -> OffsetMap:
        """Kafka's buildOffsetMap: the latest offset of every key in ``[start, end)``, skipping the
        batches of aborted transactions; stops early (``latest_offset`` says where) when full."""
        tp = plog.topic_partition
        dirty = [s for i, s in enumerate(segs) if s.base_offset < end and _upper(segs, i, plog) > start]
        offset_map = self._map_for(dirty, start, end)
        max_entries = max(1, int(offset_map.slots * self.load_factor))
        txns = CleanedTransactionMetadata()
        txns.add_aborted(plog.collect_aborted_transactions(start, end))
        for i, seg in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            for view, h in _batches(seg, seg.offset_index.lookup(start)[1]):
                self._check_done(tp)
                if h.base_offset >= end:
                    break
                self.throttler.maybe_throttle(h.size)
                stats.map_bytes_read += h.size
                if h.is_control:
                    txns.on_control_batch(h.producer_id, h.last_offset, control_type(view, 0, h))
                    stats.map_messages_read += 1
                elif txns.on_data_batch(h.producer_id, h.last_offset, h.is_transactional):
                    stats.map_messages_read += max(h.records_count, 0)
                else:
                    full, read = add_keys_to_map(view, 0, h, start, offset_map, max_entries)
                    stats.map_messages_read += read
                    if full:
                        return offset_map
                if h.last_offset >= start:
                    offset_map.update_latest_offset(h.last_offset)
            offset_map.update_latest_offset(min(next_start, end) - 1)
        return offset_map

    # ---- a round ----------------------------------------------------------------------------------
    def clean(self, ltc: LogToClean) -> tuple[int, CleanerStats]:
        """Clean ``ltc``'s log: (the first offset not cleaned, the round's figures). Raises
        LogCleaningAbortedError when the log changed under the round (nothing is changed then)."""
        plog = ltc.log
        now = self._clock()
        stats = CleanerStats()
        local = plog.local_log
        truncations = local.truncations
        segs = plog.segments
        offset_map = self.build_offset_map(plog, segs, ltc.first_dirty_offset, ltc.first_uncleanable_offset, stats)
        end_offset = offset_map.latest_offset + 1
        stats.map_done = time.monotonic()
        stats.map_entries = offset_map.size
        stats.map_memory_bytes = offset_map.memory_bytes
        cfg = plog.config
        record_filter = RecordFilter(offset_map, now, cfg.delete_retention_ms, stats.filter)
        txns = CleanedTransactionMetadata()
        to_clean = [s for s in segs[:-1] if s.base_offset < end_offset]
        log.info("Cleaner %d: cleaning %s up to offset %d, %d segment(s), %d keys mapped", self.id,
                 plog.topic_partition, end_offset, len(to_clean), offset_map.size)
        i = 0
        while i < len(to_clean):
            i = self._clean_segments(plog, segs, to_clean, i, record_filter, txns, ltc.first_uncleanable_offset,
                                     truncations)
        stats.buffer_utilization = offset_map.utilization
        stats.ended = time.monotonic()
        return end_offset, stats

    def _clean_segments(self, plog: UnifiedLog, segs: list[LogSegment], to_clean: list[LogSegment], first: int,
                        record_filter: RecordFilter, txns: CleanedTransactionMetadata, round_upper: int,
                        truncations: int) -> int:
        """Clean ``to_clean[first]`` and as many of the segments after it as fit into one segment and
        swap it in (Kafka's cleanSegments); the index in ``to_clean`` of the segment after the group."""
        local = plog.local_log
        base = to_clean[first].base_offset
        cleaned = local.new_cleaned_segment(base)
        if cleaned is None:
            raise LogCleaningAbortedError(f"{plog.topic_partition} was deleted")
        cfg = plog.config
        group: list[LogSegment] = []
        # a tiered log's segments up to here are in the remote tier, whose cleaning keeps their ranges; a
        # cleaned group across this offset would be copied again over segments already there
        tiered = plog.highest_offset_in_remote_storage

        def ends_group(kept_bytes: int) -> bool:
            """Whether the group ends with its latest segment, whose last batch would add ``kept_bytes``:
            the next segment joins only if the cleaned segment holds all of it within a segment's size,
            index sizes and int32 relative offsets (Kafka's groupSegmentsBySize bounds, on what is
            written rather than on the old segments' sizes)."""
            n = first + len(group)
            if n >= len(to_clean):
                return True
            nxt = to_clean[n]
            last_offset = _upper(segs, segs.index(nxt), plog) - 1
            offsets, times = cleaned.offset_index, cleaned.time_index
            return (base <= tiered < nxt.base_offset  # a copy is a whole segment: keep its bounds
                    or cleaned.size + kept_bytes + nxt.size > cfg.segment_bytes
                    or offsets.size_bytes + nxt.offset_index.size_bytes + offsets.entry_size > cfg.segment_index_bytes
                    or times.size_bytes + nxt.time_index.size_bytes + times.entry_size > cfg.segment_index_bytes
                    or bool(nxt.size and last_offset - base > INT32_MAX))

        swapped = False
        try:
            txns.cleaned_index = cleaned.txn_index
            last_records = plog.last_records_of_active_producers()
            while True:
                seg = to_clean[first + len(group)]
                group.append(seg)
                upper = _upper(segs, segs.index(seg), plog)
                txns.add_aborted(plog.collect_aborted_transactions(seg.base_offset, upper))
                if self._clean_into(plog, seg, cleaned, record_filter, txns, last_records, round_upper, ends_group):
                    break
            cleaned.on_become_inactive()
            cleaned.flush()
            mtime = group[-1].last_modified_ms * 1_000_000
            os.utime(cleaned.log_path, ns=(mtime, mtime))
            swapped = local.replace_segments(cleaned, group, truncations, self._clock())
            if not swapped:
                raise LogCleaningAbortedError(f"{plog.topic_partition} changed while it was cleaned")
            log.debug("Cleaner %d: swapped in %s for %s", self.id, cleaned, group)
        finally:
            if not swapped:
                cleaned.delete()
        return first + len(group)

    def clean_segment(self, source: CleanSource, seg: LogSegment, upper: int, dest: LogSegment,
                      record_filter: RecordFilter, txns: CleanedTransactionMetadata,
                      last_records: dict[int, tuple[int, int]], *, keep_end: bool = True) -> None:
        """Write what stays of ``seg`` (offsets up to ``upper`` - 1) into ``dest``, a segment of its own
        covering the same offsets (the remote tier's replacements): its last batch stays, empty if none
        of its records does, so ``dest`` ends where ``seg`` did; without ``keep_end`` that batch goes as
        any other (the caller ends the replacement ``dest`` becomes part of). ``dest`` is flushed,
        indexes trimmed."""
        txns.cleaned_index = dest.txn_index
        txns.add_aborted(source.collect_aborted_transactions(seg.base_offset, upper))
        self._clean_into(source, seg, dest, record_filter, txns, last_records, upper if keep_end else -1,
                         lambda _: keep_end)
        dest.on_become_inactive()
        dest.flush()

    def _clean_into(self, plog: CleanSource, seg: LogSegment, dest: LogSegment, record_filter: RecordFilter,
                    txns: CleanedTransactionMetadata, last_records: dict[int, tuple[int, int]], round_upper: int,
                    ends_group: Callable[[int], bool]) -> bool:
        """Write what stays of ``seg`` into ``dest``; whether the group ends with ``seg`` (``ends_group``
        decides once all but its last batch are written). A group's last batch stays, empty if none of
        its records does: it keeps the cleaned segment's end where the old segments ended, so a load
        finishing the swap knows what it covers."""
        tp = plog.topic_partition
        now = record_filter.now_ms
        out: list[bytes | bytearray | memoryview] = []
        out_headers: list[BatchHeader] = []
        out_bytes = 0
        pending: tuple[memoryview, BatchHeader] | None = None
        throttle = self.throttler.maybe_throttle

        def keep(view: memoryview, h: BatchHeader) -> bytes | bytearray | memoryview | None:
            if h.is_control:
                can_discard = txns.on_control_batch(h.producer_id, h.last_offset, control_type(view, 0, h))
                discard_records = (can_discard and bool(h.attributes & DELETE_HORIZON_MASK)
                                   and h.base_timestamp <= now)
            else:
                can_discard = discard_records = txns.on_data_batch(h.producer_id, h.last_offset, h.is_transactional)
            producer = last_records.get(h.producer_id) if h.producer_id >= 0 else None
            if producer is not None and (h.last_offset == producer[0] if producer[0] >= 0
                                         else h.is_control and h.producer_epoch == producer[1]):
                retention = BatchRetention.RETAIN_EMPTY
            elif h.next_offset == round_upper:
                retention = BatchRetention.RETAIN_EMPTY  # the round's last batch keeps the log's end
            elif discard_records:
                retention = BatchRetention.DELETE
            else:
                retention = BatchRetention.DELETE_EMPTY
            kept = record_filter.filter(view, 0, h, retention, discard_records, can_discard and h.is_control)
            throttle(h.size)
            return kept

        def add(view: memoryview, h: BatchHeader, kept: bytes | bytearray | memoryview) -> None:
            nonlocal out_bytes
            out.append(kept)
            out_headers.append(h if kept is view else read_header(kept, 0))
            out_bytes += len(kept)

        def write() -> None:
            nonlocal out_bytes
            if out:
                data = b"".join(out)
                dest.append(data, out_headers)
                throttle(len(data))
                out.clear()
                out_headers.clear()
                out_bytes = 0

        for view, h in _batches(seg):
            self._check_done(tp)
            if pending is not None:
                kept = keep(*pending)
                if kept is not None:
                    add(*pending, kept)
                if out_bytes >= self.io_buffer_size:
                    write()
            pending = (view, h)  # each read makes a new chunk: the view stays valid
        if pending is None:
            write()
            return ends_group(0)
        view, h = pending
        kept = keep(view, h)
        write()  # dest's size and indexes are then all that is written so far
        ends = ends_group(len(kept) if kept is not None else 0)
        if ends and kept is None:
            kept = empty_batch(h)
            record_filter.stats.bytes_retained += len(kept)
        if kept is not None:
            add(view, h, kept)
        write()
        return ends


def _upper(segs: list[LogSegment], i: int, plog: CleanSource) -> int:
    """The offset after segment ``i``'s range: the next segment's base, or the log end."""
    return segs[i + 1].base_offset if i + 1 < len(segs) else plog.log_end_offset
