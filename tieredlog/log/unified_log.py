"""Kafka's UnifiedLog: one partition's log across both tiers; the only object the server and the RLM touch.

Offsets, from low to high:
  log_start_offset <= local_log_start_offset <= ... <= last_stable_offset <= high_watermark <= log_end_offset
``log_start_offset`` includes the remote tier; ``local_log_start_offset`` is the first offset still on
local disk. Fetches in ``[log_start_offset, local_log_start_offset)`` raise OffsetMovedToTieredStorageError
so the server reads from the remote tier instead.

The UnifiedLog owns the offsets, the high watermark and LSO, the leader-epoch cache, the producer state
and the tiering hooks; the segments and their files are the LocalLog's (``local_log.py``), batch checks
the LogValidator's (``log_validator.py``), loading the LogLoader's (``log_loader.py``).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Callable

from tieredlog import errors
from tieredlog.atomic_file import atomic_write
from tieredlog.formats.checkpoints import CorruptCheckpointError
from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA_FILE,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
)
from tieredlog.log.config import LogConfig
from tieredlog.log.leader_epoch import LeaderEpochFileCache
from tieredlog.log.local_log import LocalLog
from tieredlog.log.log_loader import LogLoader, rebuild_producer_state
from tieredlog.log.log_validator import LogValidator
from tieredlog.log.producer_state import CompletedTxn, ProducerStateManager, read_control_record, snapshot_path
from tieredlog.log.scheduler import Scheduler
from tieredlog.log.segment import LogSegment
from tieredlog.log.storage_errors import describe_os_error, storage_error_log
from tieredlog.log.types import (
    AppendOrigin,
    EpochEntry,
    FetchDataInfo,
    FetchIsolation,
    LogAppendInfo,
    SupportsBaseOffset,
    TimestampAndOffset,
    TopicPartition,
)
from tieredlog.rate_limited_log import RateLimitedLog
from tieredlog.records.batch import BatchHeader
from tieredlog.records.record import record_at_or_after

log = logging.getLogger(__name__)
# a tiered log's local deletions: a line per segment, up to 10 per partition a minute (as the RLM's copies)
_tiered_deletions = RateLimitedLog(log, 60.0, burst=10)


# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class UnifiedLog:
    """A partition's offsets, leader-epoch cache and producer state over its LocalLog.

    Thread safety: the event loop appends and reads; RLM threads read rolled segments and call the
    tiering hooks. One RLock (the LocalLog's) guards the segment map and every offset.
    """

    def __init__(
        self,
        dir: Path | str,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = True,
        clock: Callable[[], int] = _now_ms,
        producer_id_expiration_ms: int = 86_400_000,
        scheduler: Scheduler | None = None,
    ):
        """``scheduler`` runs the background flush of rolled segments and delayed file deletes (the
        LogManager's threads); without one they run inline, for a log used on its own."""
        self.local_log = LocalLog(dir, config, clock=clock, recovery_point=recovery_point, scheduler=scheduler)
        self._lock = self.local_log.lock
        self._clock = clock
        self.highest_offset_in_remote_storage = -1
        self.topic_id = self._init_topic_id(topic_id)
        checkpoint = LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT)
        try:
            self.leader_epoch_cache = LeaderEpochFileCache(checkpoint)
            rebuild_epochs = False
        except CorruptCheckpointError as e:
            # The append path writes it without waiting for the fsync, so a machine crash can leave it
            # torn; every batch carries its leader epoch, so the loader rebuilds it from the log.
            log.warning("partition %s: %s; rebuilding the leader-epoch cache from the log", self.dir.name, e)
            checkpoint.path.unlink(missing_ok=True)
            self.leader_epoch_cache = LeaderEpochFileCache(checkpoint)
            rebuild_epochs = True
        self.producer_state = ProducerStateManager(self.dir, producer_id_expiration_ms)
        offsets = LogLoader(
            self.local_log, self.leader_epoch_cache, self.producer_state, had_clean_shutdown=had_clean_shutdown,
            log_start_offset=log_start_offset, remote_storage_enable=config.remote_storage_enable,
            rebuild_leader_epochs=rebuild_epochs,
        ).load()
        self.log_start_offset = offsets.log_start_offset
        self.local_log_start_offset = offsets.local_log_start_offset
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    def _init_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID | None:
        meta = PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE)
        try:
            stored = meta.read()
        except CorruptCheckpointError as e:
            # Only the topic id lives there, and the broker knows it (its topic store): a damaged file
            # must not keep the partition, and the broker, from loading. It is written again now, or
            # by assign_topic_id once the LogManager passes the id in.
            log.warning("partition %s: %s; %s", self.dir.name, e,
                        f"rewriting it with topic id {topic_id}" if topic_id else "it is rewritten when the topic id is assigned")
            stored = None
        if stored is not None and topic_id is not None and stored != topic_id:
            raise errors.InconsistentTopicIdError(
                f"partition {self.dir.name} has topic id {stored} on disk but {topic_id} was requested"
            )
        if stored is None and topic_id is not None:
            meta.write(topic_id)
        return stored or topic_id

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Kafka's assignTopicId: a log loaded without a readable topic id (a missing or damaged
        ``partition.metadata``) gets the one its topic has, and the file is written."""
        if self.topic_id == topic_id:
            return
        if self.topic_id is not None:
            raise errors.InconsistentTopicIdError(
                f"partition {self.dir.name} has topic id {self.topic_id} but {topic_id} was requested"
            )
        PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE).write(topic_id)
        self.topic_id = topic_id

    # ---- accessors --------------------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return self.local_log.dir

    @property
    def topic_partition(self) -> TopicPartition:
        return self.local_log.topic_partition

    @property
    def config(self) -> LogConfig:
        return self.local_log.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic config change (AlterConfigs): applies from the next append, roll and retention run."""
        self.local_log.config = config

    @property
    def log_end_offset(self) -> int:
        return self.local_log.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self.local_log.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self.local_log.last_flush_ms

    @property
    def active_segment(self) -> LogSegment:
        return self.local_log.active_segment

    @property
    def segments(self) -> list[LogSegment]:
        return self.local_log.segments

    @property
    def num_segments(self) -> int:
        return self.local_log.num_segments

    @property
    def size(self) -> int:
        return self.local_log.size

    @property
    def last_stable_offset(self) -> int:
        fuo = self.producer_state.first_unstable_offset()
        return self.high_watermark if fuo is None else min(fuo, self.high_watermark)

    @property
    def remote_enabled(self) -> bool:
        return self.config.remote_storage_enable

    # ---- produce ----------------------------------------------------------------------------------
    def append_as_leader(
        self, records: bytes | bytearray, leader_epoch: int, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Validate, assign offsets and append; ``origin`` COORDINATOR for transaction markers."""
        buf = records if isinstance(records, bytearray) else bytearray(records)
        validator = LogValidator(self.config, origin, self.topic_partition)
        headers = validator.validate_batches(buf)
        if len(buf) > self.config.segment_bytes:
            raise errors.RecordListTooLargeError(
                f"record set of {len(buf)} bytes is larger than segment.bytes {self.config.segment_bytes}"
            )
        missing_keys = validator.find_missing_keys(buf, headers)
        with self._lock:
            now = self._clock()
            log_append_time = validator.uses_log_append_time
            validator.validate_records(buf, headers, now, missing_keys)
            if origin is AppendOrigin.COORDINATOR:
                pos = 0
                for h in headers:
                    if h.is_control and h.has_producer_id:
                        self.producer_state.check_marker(h, read_control_record(buf, pos))
                    pos += h.size
            if origin is AppendOrigin.CLIENT:
                dup = self.producer_state.check_request(headers)
                if dup is not None:
                    return LogAppendInfo(
                        dup.first_offset, dup.last_offset, dup.timestamp if log_append_time else -1,
                        self.log_start_offset, dup.last_offset - dup.first_offset + 1, duplicate=True,
                    )
            final = validator.assign_offsets_and_timestamps(buf, headers, self.log_end_offset, leader_epoch, now)
            return self._append(buf, final, now, now if log_append_time else -1)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs (replication); CRC still checked.

        ``records`` is read, never written, and only during this call: a view of a fetch response
        goes to the segment file as it is, without a copy."""
        headers = LogValidator(self.config, AppendOrigin.REPLICATION).validate_batches(records)
        with self._lock:
            first = headers[0].base_offset
            if first < self.log_end_offset:
                raise errors.UnexpectedAppendOffsetError(
                    f"follower append at {first} is below the log end offset {self.log_end_offset}",
                    first, headers[-1].last_offset,
                )
            for a, b in zip(headers, headers[1:]):
                if b.base_offset < a.next_offset:
                    raise errors.InvalidRecordError("follower batches are not in offset order")
            return self._append(records, headers, self._clock(), -1)

    def _append(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], now: int, append_time: int) -> LogAppendInfo:
        first, last = headers[0].base_offset, headers[-1].last_offset
        max_ts = max(h.max_timestamp for h in headers)
        count = sum(h.records_count for h in headers)
        try:
            seg = self.local_log.active_segment
            if seg.should_roll(
                messages_size=len(buf),
                max_timestamp_in_messages=max_ts,
                max_offset_in_messages=last,
                now_ms=now,
                segment_bytes=self.config.segment_bytes,
                segment_ms=self.config.segment_ms,
            ):
                seg = self._roll(first)  # undoes itself if it fails
            self._append_to_segment(seg, buf, headers, append_time)
        except OSError as e:
            # A full disk (ENOSPC, EDQUOT, EFBIG) or another write failure: the log is exactly as it was
            # before this call, no offset was used, and the client gets KAFKA_STORAGE_ERROR (retriable).
            reason = describe_os_error(e)
            storage_error_log.error(
                ("append", str(self.topic_partition)),
                "partition %s: cannot append %d bytes: %s", self.topic_partition, len(buf), reason,
            )
            raise errors.KafkaStorageError(
                f"partition {self.topic_partition}: cannot append {len(buf)} bytes: {reason}"
            ) from e
        return LogAppendInfo(first, last, append_time, self.log_start_offset, count)

    def _append_to_segment(
        self, seg: LogSegment, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], append_time: int
    ) -> None:
        """Write the batches, then update the epoch cache, producer state and offsets. Any failure undoes
        every step already made, so no torn batch is visible, recovered later or given an offset."""
        cache = self.leader_epoch_cache
        ps = self.producer_state
        local = self.local_log
        first = headers[0].base_offset
        old_end = local.log_end_offset
        mark = seg.append_mark()
        touched_producers = False
        try:
            seg.append(buf, headers, mark)  # undoes its own partial writes, back to the same mark
            latest = cache.latest_epoch
            for h in headers:
                epoch = h.partition_leader_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    # Written now, fsynced by the next flush (scheduled here) before the recovery point
                    # passes this offset: a new partition's first append must not wait for the disk.
                    if cache.assign(epoch, h.base_offset, sync=False):
                        local.mark_unsynced(self.dir / LEADER_EPOCH_CHECKPOINT)
                        local.schedule_flush(local.recovery_point)
                    latest = epoch
            pos = 0
            for h in headers:
                if h.has_producer_id:
                    touched_producers = True
                    # a cleaned log's empty control batch (a producer's last, kept for its epoch) has no record
                    control = read_control_record(buf, pos) if h.is_control and h.records_count > 0 else None
                    done = ps.update(h, h.base_offset, append_time if append_time >= 0 else h.max_timestamp, control)
                    if done is not None:
                        self._on_txn_completed(seg, done)  # may write the transaction index
                pos += h.size
            local.log_end_offset = headers[-1].next_offset
            if local.log_end_offset - local.recovery_point >= self.config.flush_messages:
                self.flush()  # flush.messages: not acknowledged unless it is on disk
        except BaseException:
            seg.rollback_to(mark)
            local.log_end_offset = old_end
            # The checkpoint file may keep an entry past the end; loading truncates the cache to the log end.
            cache.truncate_from_end(first, flush=False)
            if touched_producers:
                try:
                    rebuild_producer_state(ps, local, self.local_log_start_offset, rebuild_txn_from=None)
                except OSError as e:  # pragma: no cover - reading back what was just there
                    log.error("partition %s: cannot rebuild producer state: %s", self.topic_partition, describe_os_error(e))
            raise

    def _on_txn_completed(self, seg: LogSegment, done: CompletedTxn) -> None:
        if done.is_aborted:
            seg.txn_index.append(
                AbortedTxn(done.producer_id, done.first_offset, done.last_offset, self.producer_state.last_stable_offset(done))
            )

    # ---- roll -------------------------------------------------------------------------------------
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        with self._lock:
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None = None) -> LogSegment:
        local = self.local_log
        new_base = max(expected_next_offset or 0, local.log_end_offset)
        active = local.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # nothing to roll: the empty active segment already starts there
            raise errors.KafkaStorageError(f"segment {new_base} already exists in {self.dir}")
        ps = self.producer_state
        old_map_end = ps.map_end_offset
        snapshot = snapshot_path(self.dir, new_base)
        snapshot_existed = snapshot.exists()
        try:
            # The producer snapshot at the new base offset is what the RLM uploads with the rolled segment.
            # No fsync under the lock: it is flushed with the rolled segment below.
            ps.map_end_offset = max(old_map_end, new_base)
            ps.take_snapshot(new_base, sync=False)
            seg = local.roll(new_base)  # undoes its own steps if it fails
        except BaseException as e:
            ps.map_end_offset = old_map_end
            if not snapshot_existed:
                for p in (snapshot, snapshot.with_name(snapshot.name + ".tmp")):
                    p.unlink(missing_ok=True)
            if isinstance(e, OSError):
                storage_error_log.error(
                    ("roll", str(self.topic_partition)),
                    "partition %s: cannot roll a new segment at offset %d: %s",
                    self.topic_partition, new_base, describe_os_error(e),
                )
            raise
        # As Kafka: the rolled segment is flushed right away but asynchronously, off the append path and
        # the lock (a 256 MiB segment's fsync would stall every partition's requests). The recovery point
        # moves when the fsync is done; if it fails the roll still stands, the flusher retries.
        local.mark_unsynced(snapshot)
        local.schedule_flush(new_base)
        return seg

    # ---- reads ------------------------------------------------------------------------------------
    def _check_fetch_offset(self, offset: int) -> None:
        if offset < self.local_log_start_offset and offset >= self.log_start_offset and self.remote_enabled:
            raise errors.OffsetMovedToTieredStorageError(
                f"offset {offset} of {self.topic_partition} is below the local log start offset "
                f"{self.local_log_start_offset}: it is in remote storage"
            )
        if offset < self.local_log_start_offset or offset > self.log_end_offset:
            raise errors.OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic_partition}: "
                f"[{self.log_start_offset}, {self.log_end_offset}]"
            )

    def read(
        self, fetch_offset: int, max_bytes: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        min_one_message: bool = True, *, nowait: bool = False,
    ) -> FetchDataInfo:
        """``nowait`` (the event loop's fetches): raise PagesNotCached (tieredlog.log.segment) rather
        than wait for the disk to read batch headers; the caller then runs the same read, blocking,
        on a thread."""
        txn = isolation is FetchIsolation.TXN_COMMITTED
        with self._lock:
            self._check_fetch_offset(fetch_offset)
            if isolation is FetchIsolation.HIGH_WATERMARK:
                upper = self.high_watermark
            elif txn:
                upper = self.last_stable_offset
            elif isolation is FetchIsolation.LOG_END:
                upper = self.log_end_offset
            else:
                raise TypeError(f"isolation must be a FetchIsolation, not {isolation!r}")
            if fetch_offset >= upper:
                return FetchDataInfo(b"", fetch_offset, [] if txn else None)
            segs = self.local_log.segments_from(fetch_offset)
        # Segment reads happen outside the lock: a rolled segment's bytes never change.
        return LocalLog.read(segs, fetch_offset, max_bytes, upper, min_one_message, txn, nowait=nowait)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)`` in the local segments."""
        return LocalLog.collect_aborted(self.local_log.segments_from(start_offset), start_offset, upper_bound_offset)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets. A real timestamp returns the exact record, which decodes (maybe decompresses,
        up to 64 MiB) one batch: call it off the event loop. Thread-safe: the lock is held to find
        the batch and to dup the segment's descriptor, never while the batch is read or decoded."""
        cache = self.leader_epoch_cache
        with self._lock:
            if timestamp == EARLIEST_TIMESTAMP:
                return TimestampAndOffset(-1, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset))
            if timestamp == EARLIEST_LOCAL_TIMESTAMP:
                o = self.local_log_start_offset
                return TimestampAndOffset(-1, o, cache.epoch_for_offset(o))
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(-1, self.log_end_offset, cache.latest_epoch)
            if timestamp == LATEST_TIERED_TIMESTAMP:
                o = self.highest_offset_in_remote_storage
                return TimestampAndOffset(-1, o, cache.epoch_for_offset(o) if o >= 0 else None)
            if timestamp == MAX_TIMESTAMP:
                best: LogSegment | None = None
                for seg in self.segments:
                    if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                        best = seg
                if best is None:
                    return None
                o = best.offset_of_max_timestamp_so_far
                return TimestampAndOffset(best.max_timestamp_so_far, o, cache.epoch_for_offset(o))
            start = self.local_log_start_offset
        if timestamp < 0:
            raise errors.InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")
        short_reads = 0
        while True:
            with self._lock:
                found = self._batch_by_timestamp(timestamp, start)
                if found is None:
                    return None
                seg, pos, h = found
                f = seg.open_file()
            with f:
                data = os.pread(f.fileno(), h.size, pos)
            if len(data) < h.size:
                # truncated since the lock was released: look again in what is left, once
                short_reads += 1
                if short_reads > 1:
                    raise errors.KafkaStorageError(f"{seg.log_path}: {len(data)} of {h.size} bytes at {pos}")
                continue
            hit = record_at_or_after(data, 0, timestamp, start)
            if hit is None:
                # every record of the batch at or after the timestamp lies below the start: Kafka
                # goes on with the next batch
                start = h.last_offset + 1
                continue
            offset, ts = hit
            epoch = h.partition_leader_epoch if h.partition_leader_epoch >= 0 else cache.epoch_for_offset(offset)
            return TimestampAndOffset(ts, offset, epoch)

    def _batch_by_timestamp(self, timestamp: int, start: int) -> tuple[LogSegment, int, BatchHeader] | None:
        """The first batch at or after ``start`` whose max timestamp reaches ``timestamp`` (under the lock)."""
        for seg in self.segments:
            if seg.size == 0 or seg.largest_timestamp < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return seg, found[0], found[1]
        return None

    # ---- offsets ----------------------------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> int:
        with self._lock:
            hw = min(max(offset, self.log_start_offset), self.log_end_offset)
            self.high_watermark = hw
            self.producer_state.on_high_watermark_updated(hw)
            return hw

    def maybe_increment_log_start_offset(self, offset: int, reason: str = "client_delete_records") -> bool:
        """DeleteRecords, or the RLM's remote retention: move the log start offset up (never past the HW)."""
        with self._lock:
            if offset > self.high_watermark:
                raise errors.OffsetOutOfRangeError(
                    f"cannot increment the log start offset of {self.topic_partition} to {offset}: "
                    f"above the high watermark {self.high_watermark}"
                )
            if offset <= self.log_start_offset:
                return False
            log.info("%s: log start offset %d -> %d (%s)", self.topic_partition, self.log_start_offset, offset, reason)
            self.log_start_offset = offset
            if self.local_log_start_offset < offset:
                self.local_log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.on_log_start_offset_incremented(min(offset, self.local_log_start_offset))
            return True

    def maybe_increment_local_log_start_offset(self, offset: int) -> None:
        with self._lock:
            if offset > self.local_log_start_offset:
                self.local_log_start_offset = min(offset, self.log_end_offset)

    # ---- flush ------------------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding ``[recovery_point, offset)`` (default: everything) and move the
        recovery point there. The recovery point moves only after an fsync; the fsyncs run without the
        lock unless the caller holds it."""
        end = self.log_end_offset
        self.local_log.flush(end if offset is None else min(offset, end))

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """flush.ms: called by the LogManager's flusher (off the event loop, the fsyncs outside the lock)."""
        now_ms = self._clock() if now_ms is None else now_ms
        local = self.local_log
        with self._lock:
            end = local.log_end_offset
            due = end > local.recovery_point and now_ms - local.last_flush_ms >= self.config.flush_ms
        return due and local.flush(end)

    # ---- truncation -------------------------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or above ``target_offset`` (follower truncation). Returns True if anything went."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            if target_offset >= self.log_end_offset:
                # as Kafka: a broker that led an epoch and appended nothing in it keeps that epoch at
                # its log end; left there, a fetch naming it would diverge again and again
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            if target_offset < self.local_log_start_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            self.local_log.truncate_to(target_offset)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            rebuild_producer_state(self.producer_state, self.local_log, self.local_log_start_offset, rebuild_txn_from=None)
            return True

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None = None) -> None:
        """Drop every local segment and restart the log at ``new_offset`` (a follower rebuilding from remote)."""
        with self._lock:
            self.local_log.truncate_fully_and_start_at(new_offset)
            self.local_log_start_offset = new_offset
            self.log_start_offset = new_offset if log_start_offset is None else min(log_start_offset, new_offset)
            self.high_watermark = new_offset
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(new_offset)

    def rebuild_from_remote(self, next_offset: int, log_start_offset: int, epochs: list[EpochEntry],
                            producer_snapshot: bytes | None) -> None:
        """KIP-405's BuildingRemoteLogAuxState, the local half: the history below ``next_offset``
        lives in the remote tier, so the log restarts empty there with the leader-epoch lineage and
        the producer state of the remote segment that ends just below it. Touches the disk."""
        with self._lock:
            self.truncate_fully_and_start_at(next_offset, log_start_offset)
            self.leader_epoch_cache.assign_all(e for e in epochs if e.start_offset < next_offset)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
            if producer_snapshot is not None:
                atomic_write(snapshot_path(self.dir, next_offset), producer_snapshot)
                self.producer_state.truncate_fully_and_reload_snapshots()
                self.producer_state.load(next_offset, next_offset)
            # what the remote tier holds is below next_offset: local retention may count on it
            self.highest_offset_in_remote_storage = max(self.highest_offset_in_remote_storage, next_offset - 1)
            log.info("%s: rebuilt from the remote tier: log start %d, local log start %d, leader epochs %s",
                     self.topic_partition, self.log_start_offset, next_offset,
                     [tuple(e) for e in self.leader_epoch_cache.epoch_entries()])

    # ---- retention --------------------------------------------------------------------------------
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention as Kafka's deleteOldSegments: log-start breach, then size, then time. Tiered topics use
        local retention and may delete only segments already in remote storage. Returns segments deleted.

        The segments leave the map (and every offset moves) under the lock; their files are renamed and
        later unlinked after it is released."""
        now = self._clock() if now_ms is None else now_ms
        cfg = self.config
        doomed: list[LogSegment] = []
        try:
            with self._lock:
                self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset, doomed)
                # a compacted tiered log has local retention too: what is copied leaves the local disk
                if cfg.delete or self.remote_enabled:
                    tiered = self.remote_enabled
                    retention_bytes = cfg.effective_local_retention_bytes if tiered else cfg.retention_bytes
                    retention_ms = cfg.effective_local_retention_ms if tiered else cfg.retention_ms
                    if retention_bytes >= 0 and self.size > retention_bytes:
                        budget = [self.size - retention_bytes]

                        def by_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                            if budget[0] - seg.size >= 0:
                                budget[0] -= seg.size
                                return True
                            return False

                        self._delete_segments(by_size, doomed)
                    if retention_ms >= 0:
                        self._delete_segments(lambda seg, nxt: now - seg.largest_timestamp > retention_ms, doomed)
        finally:
            if doomed:  # also when a later step failed: these are out of the map already
                self.local_log.delete_segment_files(doomed, now)
        if doomed:
            self.delete_expired_files(now)
            if self.remote_enabled:
                self._log_tiered_deletions(doomed)
        return len(doomed)

    def _log_tiered_deletions(self, doomed: list[LogSegment]) -> None:
        ends = [seg.base_offset for seg in doomed[1:]] + [self.local_log_start_offset]
        for seg, end in zip(doomed, ends):
            _tiered_deletions.log(self.topic_partition, logging.INFO,
                                  "%s: deleted local segment [%d, %d] (%d bytes), in the remote tier; local log "
                                  "starts at %d", self.topic_partition, seg.base_offset, end - 1, seg.size,
                                  self.local_log_start_offset)

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool], doomed: list[LogSegment]) -> None:
        tiered = self.remote_enabled
        deletable: list[LogSegment] = []
        segs = self.segments
        roll_active = False
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and seg.size == 0:
                break
            # Never delete what consumers cannot have read yet.
            if self.high_watermark < upper or not predicate(seg, nxt):
                break
            if tiered and not (upper - 1 <= self.highest_offset_in_remote_storage or (nxt is not None and self.log_start_offset >= nxt.base_offset)):
                if nxt is None:
                    roll_active = True  # roll it so the RLM can tier it and local retention can follow
                break
            deletable.append(seg)
        if roll_active and not deletable:
            self._roll()
            return
        if not deletable:
            return
        if len(deletable) == len(segs):
            self._roll()  # never delete the active segment: start a new one first
        self.local_log.remove_segments(deletable)
        doomed.extend(deletable)
        first = self.local_log.first_base_offset
        if not tiered and first > self.log_start_offset:
            self.log_start_offset = first
            self.leader_epoch_cache.truncate_from_start(first)
        self.local_log_start_offset = max(self.local_log_start_offset, first)
        self.producer_state.delete_snapshots_below(first)

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Physically delete ``.deleted`` segment files whose ``file.delete.delay.ms`` has passed."""
        return self.local_log.delete_expired_files(self._clock() if now_ms is None else now_ms)

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` (never one with an open transaction)."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            return self.producer_state.remove_expired_producers(now)

    def last_records_of_active_producers(self) -> dict[int, tuple[int, int]]:
        """producer id -> (offset of its last data batch's last record or -1, its epoch): the batches
        compaction keeps, emptied if need be, so idempotence and fencing survive (Kafka's
        lastRecordsOfActiveProducers)."""
        with self._lock:
            return {pid: (e.last_data_offset, e.producer_epoch) for pid, e in self.producer_state.active_producers.items()}

    # ---- tiering hooks ------------------------------------------------------------------------------
    def segments_to_copy(self, upper_bound_exclusive: int, from_offset: int | None = None) -> list[LogSegment]:
        """Rolled segments that end below ``upper_bound_exclusive`` (the LSO) and at or after ``from_offset``
        (default: just past the highest offset in remote storage). Never the active segment."""
        with self._lock:
            start = max(self.highest_offset_in_remote_storage + 1, self.log_start_offset) if from_offset is None else from_offset
            segs = self.segments
        out = []
        for seg, nxt in zip(segs, segs[1:]):
            if nxt.base_offset > upper_bound_exclusive:
                break
            if nxt.base_offset - 1 >= start:
                out.append(seg)
        return out

    def next_segment_base_offset(self, segment: SupportsBaseOffset) -> int:
        """The offset after ``segment``'s range (its remote end offset + 1), gaps included."""
        return self.local_log.next_base_offset(segment)

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        with self._lock:
            if offset > self.highest_offset_in_remote_storage:
                self.highest_offset_in_remote_storage = offset

    def producer_snapshot_for(self, segment: SupportsBaseOffset) -> Path:
        """The producer snapshot taken when ``segment`` rolled (named by the next segment's base offset)."""
        nxt = self.next_segment_base_offset(segment)
        path = self.producer_state.snapshot_file(nxt)
        if path is None:
            raise FileNotFoundError(f"no producer snapshot at offset {nxt} in {self.dir}")
        return path

    def only_local_log_segments(self) -> list[LogSegment]:
        """Local segments holding offsets above ``highest_offset_in_remote_storage`` (not yet tiered, or
        not wholly), oldest first; the active segment is always the last."""
        with self._lock:
            highest = self.highest_offset_in_remote_storage
            segs = self.segments
        active = len(segs) - 1
        return [seg for i, seg in enumerate(segs) if i == active or segs[i + 1].base_offset - 1 > highest]

    def only_local_log_segments_size(self) -> int:
        """Bytes that exist only locally, the active segment included (Kafka's onlyLocalLogSegmentsSize):
        what remote size-based retention adds to the remote bytes."""
        return sum(s.size for s in self.only_local_log_segments())

    # ---- lifecycle ----------------------------------------------------------------------------------
    def close(self, flush: bool = True) -> None:
        with self._lock:
            if flush:
                self.local_log.flush(self.log_end_offset)
            self.producer_state.map_end_offset = self.log_end_offset
            try:
                self.producer_state.take_snapshot(self.log_end_offset)
            finally:
                # A snapshot that cannot be written (full disk) is rebuilt from the log at the next
                # start; the descriptors are released either way.
                self.local_log.close_segments()

    def close_handles(self) -> None:
        """Release every descriptor without writing (the directory is about to be removed)."""
        self.local_log.close_handles()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        self.local_log.delete()

    def __repr__(self) -> str:
        return (
            f"UnifiedLog({self.topic_partition}, start={self.log_start_offset}, local_start={self.local_log_start_offset}, "
            f"hw={self.high_watermark}, end={self.log_end_offset}, segments={self.num_segments})"
        )
