"""One partition's log (Kafka's UnifiedLog + LocalLog): the only object the server and the RLM touch.

Offsets, from low to high:
  log_start_offset <= local_log_start_offset <= ... <= last_stable_offset <= high_watermark <= log_end_offset
``log_start_offset`` includes the remote tier; ``local_log_start_offset`` is the first offset still on
local disk. Fetches in ``[log_start_offset, local_log_start_offset)`` raise OffsetMovedToTieredStorageError
so the server reads from the remote tier instead.

The produce path is bytes in, bytes out: each batch's 61-byte header is read and its CRC checked, base
offset and leader epoch are patched in place (outside the CRC), and the buffer is written as is.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tieredlog import errors
from tieredlog.log.checkpoints import LeaderEpochCheckpointFile, PartitionMetadataFile
from tieredlog.log.config import LogConfig
from tieredlog.log.index import AbortedTxn, CorruptIndexError
from tieredlog.log.leader_epoch import LeaderEpochFileCache
from tieredlog.log.producer_state import (
    CompletedTxn,
    DuplicateBatch,
    ProducerStateManager,
    read_control_record,
    snapshot_path,
)
from tieredlog.log.segment import (
    DELETED_SUFFIX,
    LOG_SUFFIX,
    FileSlice,
    LogSegment,
    filename_prefix,
    offset_from_filename,
)
from tieredlog.log.types import TopicPartition, parse_partition_dir
from tieredlog.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_PRODUCER_EPOCH,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    assign_offsets,
    compute_crc,
    read_header,
    validate_batch,
)
from tieredlog.records.errors import CorruptRecordError, InvalidRecordError, RecordError

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
LONG_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

ISOLATIONS = ("log_end", "high_watermark", "txn_committed")

_MAX_TS_FIELD = struct.Struct(">q")
_ATTR_FIELD = struct.Struct(">h")
_CRC_FIELD = struct.Struct(">I")
_MAX_TIMESTAMP_OFFSET = 35


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False  # a retried idempotent batch answered with its original offsets


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    records: FileSlice | bytes
    first_offset: int
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RateLimitedLog:
    """One line per key per ``interval_s``: a producer retrying against a full disk, or a periodic task
    failing every run, must not flood the broker log. Repeats in between are counted and the count
    is appended to the next line that gets through."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[object, float] = {}
        self._suppressed: dict[object, int] = {}

    def error(self, key: object, msg: str, *args: object) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            n = self._suppressed.pop(key, 0)
        if n:
            msg += " (%d more since the last report)"
            args = (*args, n)
        log.error(msg, *args)
        return True


# Shared by the log layer and the broker's periodic tasks (see docs/operations.md, "Full disk").
storage_error_log = RateLimitedLog()


def describe_os_error(e: BaseException) -> str:
    """``No space left on device`` rather than ``[Errno 28] No space left on device: '/path'``."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def _check_next_in_request(prev: BatchHeader, h: BatchHeader, txn_open: bool) -> None:
    """Kafka's sequence rules for a producer's batch that follows ``prev`` in the same request."""
    pid, epoch = h.producer_id, h.producer_epoch
    if epoch < prev.producer_epoch:
        raise errors.InvalidProducerEpochError(
            f"producer {pid} has epoch {epoch}, smaller than epoch {prev.producer_epoch} earlier in the request"
        )
    if epoch != prev.producer_epoch:
        if h.base_sequence != 0 and prev.producer_epoch != NO_PRODUCER_EPOCH:
            raise errors.OutOfOrderSequenceNumberError(
                f"producer {pid}: new epoch {epoch} must start at sequence 0, got {h.base_sequence}"
            )
    else:
        expected = 0 if prev.last_sequence == INT32_MAX else prev.last_sequence + 1  # sequences wrap
        if h.base_sequence != expected:
            raise errors.OutOfOrderSequenceNumberError(
                f"producer {pid} epoch {epoch}: out of order sequence {h.base_sequence}, expected {expected}"
            )
    if txn_open and not h.is_transactional:
        raise errors.InvalidTxnStateError(
            f"producer {pid} has a transaction open but sent a non-transactional batch"
        )


class PartitionLog:
    """A partition's segments, offsets, leader-epoch cache and producer state.

    Thread safety: the event loop appends and reads; RLM threads read rolled segments and call the
    tiering hooks. One RLock guards the segment map and every offset.
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
    ):
        self.dir = Path(dir)
        self.topic_partition: TopicPartition = parse_partition_dir(self.dir.name)
        self.config = config
        self._clock = clock
        self._lock = threading.RLock()
        self._segments: dict[int, LogSegment] = {}
        self._bases: list[int] = []  # sorted base offsets, for floor lookups by bisect
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.highest_offset_in_remote_storage = -1
        self.recovery_point = recovery_point
        self._unflushed_messages = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        self.last_flush_ms = clock()
        self.topic_id = self._init_topic_id(topic_id)
        self.leader_epoch_cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT))
        self.producer_state = ProducerStateManager(self.dir, producer_id_expiration_ms)
        self._load(had_clean_shutdown, log_start_offset)
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    # ---- loading ----------------------------------------------------------------------------------
    def _init_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID | None:
        meta = PartitionMetadataFile(self.dir / PARTITION_METADATA)
        stored = meta.read() if meta.exists() else None
        if stored is not None and topic_id is not None and stored != topic_id:
            raise errors.InconsistentTopicIdError(
                f"partition {self.dir.name} has topic id {stored} on disk but {topic_id} was requested"
            )
        if stored is None and topic_id is not None:
            meta.write(topic_id)
        return stored or topic_id

    def _new_segment(self, base_offset: int, active: bool) -> LogSegment:
        cfg = self.config
        jitter = 0
        if cfg.segment_jitter_ms > 0:
            jitter = int.from_bytes(os.urandom(8), "big") % min(cfg.segment_jitter_ms, cfg.segment_ms)
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            roll_jitter_ms=jitter,
            created_ms=self._clock(),
            active=active,
        )

    def _add_segment(self, seg: LogSegment) -> None:
        if seg.base_offset not in self._segments:
            bisect.insort(self._bases, seg.base_offset)
        self._segments[seg.base_offset] = seg

    def _remove_segment(self, base: int) -> LogSegment:
        seg = self._segments.pop(base)
        self._bases.remove(base)
        return seg

    def _load(self, clean: bool, log_start_offset: int | None) -> None:
        bases = []
        for name in sorted(os.listdir(self.dir)):
            path = self.dir / name
            if name.endswith(DELETED_SUFFIX) or name.endswith(".cleaned") or name.endswith(".swap") or name.endswith(".tmp"):
                path.unlink(missing_ok=True)  # leftovers of an interrupted delete or write
                continue
            if name.endswith(LOG_SUFFIX) and name[:20].isdigit() and len(name) == 24:
                bases.append(offset_from_filename(name))
        base_set = set(bases)
        for name in os.listdir(self.dir):
            # Index files without their log are orphans: Kafka deletes them too.
            if name.endswith((".index", ".timeindex", ".txnindex")) and name[:20].isdigit():
                if offset_from_filename(name) not in base_set:
                    (self.dir / name).unlink(missing_ok=True)
        for base in sorted(bases):
            seg = self._new_segment(base, active=False)
            self._add_segment(seg)
        # Indexes carry no checksum: rebuild any that fail the sanity check, even after a clean shutdown.
        # After an unclean one, the segments from the recovery point on are rebuilt from the log by
        # _recover_unflushed whatever their indexes hold (Kafka's recoverLog), so checking them first is
        # wasted work, and the active segment's index is still preallocated, which fails the check anyway.
        recover_from = self._bases[self._floor_index(self.recovery_point)] if not clean and self._bases else None
        for base in list(self._bases):
            if base not in self._segments:
                continue
            if recover_from is not None and base >= recover_from:
                break
            seg = self._segments[base]
            try:
                seg.sanity_check()
            except (CorruptIndexError, RecordError) as e:
                log.warning("rebuilding indexes of %s: %s", seg.log_path, e)
                if seg.recover() > 0:
                    self._delete_segments_after(base)
        if not clean:
            self._recover_unflushed()
        if not self._bases:
            self._add_segment(self._new_segment(log_start_offset or 0, active=True))
        active = self.active_segment
        active.make_active()
        self.log_end_offset = active.next_offset
        first_base = self._bases[0]
        if log_start_offset is None:
            # Kafka's LogLoader: a tiered log without a checkpointed start may have data below its first
            # local segment, so it starts at 0 until the RLM moves it up to the earliest remote segment
            log_start_offset = 0 if self.config.remote_storage_enable else first_base
        if not self.config.remote_storage_enable:
            log_start_offset = max(log_start_offset, first_base)
        self.log_start_offset = min(log_start_offset, self.log_end_offset)
        self.local_log_start_offset = max(first_base, self.log_start_offset)
        self.recovery_point = min(max(self.recovery_point, 0), self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._rebuild_producer_state(rebuild_txn_from=None if clean else self.recovery_point)

    def _delete_segments_after(self, base: int) -> None:
        for b in [b for b in self._bases if b > base]:
            seg = self._remove_segment(b)
            log.warning("deleting segment %s after a corrupt one", seg.log_path)
            seg.delete()

    def _recover_unflushed(self) -> None:
        """Unclean shutdown: re-validate every batch past the recovery point, cut torn or garbage tails."""
        i = max(bisect.bisect_right(self._bases, self.recovery_point) - 1, 0)
        latest = self.leader_epoch_cache.latest_epoch

        def on_batch(h: BatchHeader) -> None:
            nonlocal latest
            if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
                latest = h.partition_leader_epoch

        for base in list(self._bases[i:]):
            seg = self._segments[base]
            seg.txn_index.truncate_to(max(self.recovery_point, base))
            truncated = seg.recover(on_batch)
            if truncated:
                log.warning("truncated %d invalid bytes at the end of %s", truncated, seg.log_path)
                self._delete_segments_after(base)
                break
        # An empty segment past the first one is useless after a crash (Kafka drops it as well).
        while len(self._bases) > 1 and self._segments[self._bases[-1]].size == 0:
            self._remove_segment(self._bases[-1]).delete()

    def _rebuild_producer_state(self, rebuild_txn_from: int | None) -> None:
        """Load the newest producer snapshot and replay batch headers from there to the log end.

        ``rebuild_txn_from``: aborted transactions whose marker lies at or after it are re-added to the
        transaction indexes (those indexes were truncated by recovery).
        """
        ps = self.producer_state
        start = ps.truncate_and_reload(self.local_log_start_offset, self.log_end_offset)
        start = max(start, self.local_log_start_offset)
        if start >= self.log_end_offset:
            return
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        for base in self._bases[i:]:
            seg = self._segments[base]
            for pos, h in seg.iter_headers(0 if base >= start else seg.offset_index.lookup(start)[1]):
                if h.last_offset < start or not h.has_producer_id:
                    continue
                control = None
                if h.is_control:
                    control = read_control_record(seg.read_bytes(pos, h.size))
                done = ps.update(h, h.base_offset, h.max_timestamp, control)
                if done is not None and done.is_aborted and rebuild_txn_from is not None and done.last_offset >= rebuild_txn_from:
                    seg.txn_index.append(
                        AbortedTxn(done.producer_id, done.first_offset, done.last_offset, ps.last_stable_offset(done))
                    )
        ps.map_end_offset = self.log_end_offset

    # ---- accessors --------------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self._segments[self._bases[-1]]

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return [self._segments[b] for b in self._bases]

    @property
    def num_segments(self) -> int:
        return len(self._bases)

    @property
    def size(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments.values())

    @property
    def last_stable_offset(self) -> int:
        fuo = self.producer_state.first_unstable_offset()
        return self.high_watermark if fuo is None else min(fuo, self.high_watermark)

    @property
    def remote_enabled(self) -> bool:
        return self.config.remote_storage_enable

    # ---- produce ----------------------------------------------------------------------------------
    def _validate(self, buf: bytearray, origin: str) -> list[BatchHeader]:
        """Check every batch as Kafka's LogValidator does for a leader append; map to Kafka errors."""
        n = len(buf)
        if n == 0:
            raise errors.InvalidRecordError("empty record set")
        headers: list[BatchHeader] = []
        pos = 0
        max_size = self.config.max_message_bytes
        while pos < n:
            if n - pos < HEADER_SIZE:
                if n - pos > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] in (0, 1):
                    raise errors.UnsupportedForMessageFormatError(f"message format v{buf[pos + MAGIC_OFFSET]} is not supported")
                raise errors.CorruptMessageError(f"record set truncated: {n - pos} bytes left at byte {pos}")
            magic = buf[pos + MAGIC_OFFSET]
            if magic in (0, 1):
                # We only store v2; old clients' message sets would need conversion, which we never do.
                raise errors.UnsupportedForMessageFormatError(f"message format v{magic} at byte {pos} is not supported")
            if magic != 2:
                raise errors.InvalidRecordError(f"unknown magic {magic} at byte {pos}")
            size = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True) + LOG_OVERHEAD
            if size > max_size:
                raise errors.MessageTooLargeError(
                    f"batch at byte {pos} is {size} bytes, larger than max.message.bytes {max_size}"
                )
            try:
                h = validate_batch(buf, pos)
            except CorruptRecordError as e:
                raise errors.CorruptMessageError(str(e)) from None
            except InvalidRecordError as e:
                raise errors.InvalidRecordError(str(e)) from None
            if h.records_count <= 0 or h.last_offset_delta + 1 != h.records_count:
                raise errors.InvalidRecordError(
                    f"batch at byte {pos}: record count {h.records_count} does not match lastOffsetDelta {h.last_offset_delta}"
                )
            if h.is_control and origin == "client":
                raise errors.InvalidRecordError("clients are not allowed to write control records")
            if h.has_producer_id and h.base_sequence < 0 and origin == "client":
                raise errors.InvalidRecordError(f"batch at byte {pos} has a producer id but no sequence number")
            headers.append(h)
            pos += h.size
        return headers

    def _check_timestamps(self, headers: list[BatchHeader], now: int) -> None:
        cfg = self.config
        for h in headers:
            # Header-level check (no record decoding): the max timestamp bounds the future, the first
            # record's timestamp the past.
            if h.max_timestamp > now + cfg.message_timestamp_after_max_ms:
                raise errors.InvalidTimestampError(
                    f"timestamp {h.max_timestamp} is more than message.timestamp.after.max.ms in the future"
                )
            if cfg.message_timestamp_before_max_ms < LONG_MAX and 0 <= h.base_timestamp < now - cfg.message_timestamp_before_max_ms:
                raise errors.InvalidTimestampError(
                    f"timestamp {h.base_timestamp} is more than message.timestamp.before.max.ms in the past"
                )

    @staticmethod
    def _set_log_append_time(buf: bytearray, headers: list[BatchHeader], now: int) -> None:
        """LogAppendTime: set the timestamp-type bit and maxTimestamp, then recompute the CRC (both lie inside it)."""
        pos = 0
        for h in headers:
            _ATTR_FIELD.pack_into(buf, pos + ATTRIBUTES_OFFSET, h.attributes | TIMESTAMP_TYPE_MASK)
            _MAX_TS_FIELD.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, now)
            _CRC_FIELD.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, h.size))
            pos += h.size

    def append_as_leader(self, records: bytes | bytearray, leader_epoch: int, origin: str = "client") -> LogAppendInfo:
        """Validate, assign offsets and append. ``origin``: "client", or "coordinator" for transaction markers."""
        buf = records if isinstance(records, bytearray) else bytearray(records)
        headers = self._validate(buf, origin)
        if len(buf) > self.config.segment_bytes:
            raise errors.RecordListTooLargeError(
                f"record set of {len(buf)} bytes is larger than segment.bytes {self.config.segment_bytes}"
            )
        with self._lock:
            now = self._clock()
            log_append_time = self.config.message_timestamp_type == "LogAppendTime"
            if not log_append_time:
                self._check_timestamps(headers, now)
            if origin == "client":
                dup = self._check_sequences(headers)
                if dup is not None:
                    return LogAppendInfo(
                        dup.first_offset, dup.last_offset, dup.timestamp if log_append_time else -1,
                        self.log_start_offset, dup.last_offset - dup.first_offset + 1, duplicate=True,
                    )
            first = self.log_end_offset
            assign_offsets(buf, headers, first, leader_epoch)
            if log_append_time:
                self._set_log_append_time(buf, headers, now)
            # One header object per batch, re-read after patching so offsets and timestamps are final.
            final = self._reread_headers(buf, headers)
            return self._append(buf, final, now, origin, leader_epoch, now if log_append_time else -1)

    def _check_sequences(self, headers: list[BatchHeader]) -> DuplicateBatch | None:
        """Producer checks of a client request, before anything is written.

        A producer's first batch in the request is checked against its stored state; its later batches
        against the batch before them in the same request, as Kafka's per-request ProducerAppendInfo
        does (the stored state only changes once the whole request is appended). A retry of a stored
        batch answers the whole request as a duplicate, as Kafka does.
        """
        ps = self.producer_state
        seen: dict[int, tuple[BatchHeader, bool]] = {}  # producer id -> (its previous batch here, txn open)
        for h in headers:
            if not h.has_producer_id:
                continue
            pid = h.producer_id
            prev = seen.get(pid)
            if prev is None:
                dup = ps.check_sequence(h)
                if dup is not None:
                    return dup
                entry = ps.last_entry(pid)
                txn_open = entry is not None and entry.current_txn_first_offset is not None
            else:
                entry = ps.last_entry(pid)
                stored = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence) if entry else None
                if stored is not None:
                    return DuplicateBatch(stored.first_offset, stored.last_offset, stored.timestamp)
                p, txn_open = prev
                _check_next_in_request(p, h, txn_open)
            seen[pid] = (h, txn_open or h.is_transactional)
        return None

    @staticmethod
    def _reread_headers(buf, headers: list[BatchHeader]) -> list[BatchHeader]:
        out, pos = [], 0
        for h in headers:
            out.append(read_header(buf, pos))
            pos += h.size
        return out

    def append_as_follower(self, records: bytes | bytearray) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs (replication); CRC still checked."""
        buf = records if isinstance(records, (bytes, bytearray)) else bytes(records)
        headers = self._validate(bytearray(buf) if isinstance(buf, bytes) else buf, "replication")
        with self._lock:
            if headers[0].base_offset < self.log_end_offset:
                raise errors.OffsetOutOfRangeError(
                    f"follower append at {headers[0].base_offset} is below the log end offset {self.log_end_offset}"
                )
            for a, b in zip(headers, headers[1:]):
                if b.base_offset < a.next_offset:
                    raise errors.InvalidRecordError("follower batches are not in offset order")
            return self._append(buf, headers, self._clock(), "replication", None, -1)

    def _append(
        self, buf, headers: list[BatchHeader], now: int, origin: str, leader_epoch: int | None, append_time: int
    ) -> LogAppendInfo:
        first, last = headers[0].base_offset, headers[-1].last_offset
        max_ts = max(h.max_timestamp for h in headers)
        count = sum(h.records_count for h in headers)
        try:
            seg = self.active_segment
            if seg.should_roll(
                messages_size=len(buf),
                max_timestamp_in_messages=max_ts,
                max_offset_in_messages=last,
                now_ms=now,
                segment_bytes=self.config.segment_bytes,
                segment_ms=self.config.segment_ms,
            ):
                seg = self._roll(first)  # undoes itself if it fails
            self._append_to_segment(seg, buf, headers, append_time, count)
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

    def _append_to_segment(self, seg: LogSegment, buf, headers: list[BatchHeader], append_time: int, count: int) -> None:
        """Write the batches, then update the epoch cache, producer state and offsets. Any failure undoes
        every step already made, so no torn batch is visible, recovered later or given an offset."""
        cache = self.leader_epoch_cache
        ps = self.producer_state
        first = headers[0].base_offset
        old_end, old_unflushed = self.log_end_offset, self._unflushed_messages
        mark = seg.append_mark()
        touched_producers = False
        try:
            seg.append(buf, headers)  # undoes its own partial writes
            latest = cache.latest_epoch
            for h in headers:
                epoch = h.partition_leader_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    cache.assign(epoch, h.base_offset)  # writes the leader-epoch checkpoint
                    latest = epoch
            pos = 0
            for h in headers:
                if h.has_producer_id:
                    touched_producers = True
                    control = read_control_record(buf, pos) if h.is_control else None
                    done = ps.update(h, h.base_offset, append_time if append_time >= 0 else h.max_timestamp, control)
                    if done is not None:
                        self._on_txn_completed(seg, done)  # may write the transaction index
                pos += h.size
            self.log_end_offset = headers[-1].next_offset
            self._unflushed_messages += count
            if self._unflushed_messages >= self.config.flush_messages:
                self.flush()  # flush.messages: not acknowledged unless it is on disk
        except BaseException:
            seg.rollback_to(mark)
            self.log_end_offset, self._unflushed_messages = old_end, old_unflushed
            # The checkpoint file may keep an entry past the end; loading truncates the cache to the log end.
            cache.truncate_from_end(first, flush=False)
            if touched_producers:
                try:
                    self._rebuild_producer_state(rebuild_txn_from=None)
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
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # nothing to roll: the empty active segment already starts there
            raise errors.KafkaStorageError(f"segment {new_base} already exists in {self.dir}")
        # Every fallible step comes before the segment map changes, and a failure (a full disk: the
        # snapshot, the new files, index preallocation, the roll's time-index entry) undoes the steps
        # already made, so the old active segment stays active and writable.
        ps = self.producer_state
        old_map_end = ps.map_end_offset
        snapshot = snapshot_path(self.dir, new_base)
        new_files = [self.dir / f"{filename_prefix(new_base)}{sfx}" for sfx in (LOG_SUFFIX, ".index", ".timeindex")]
        preexisting = {p for p in [snapshot, *new_files] if p.exists()}
        time_entries = active.time_index.entries
        seg: LogSegment | None = None
        try:
            # The producer snapshot at the new base offset is what the RLM uploads with the rolled segment.
            ps.map_end_offset = max(old_map_end, new_base)
            ps.take_snapshot(new_base)
            seg = self._new_segment(new_base, active=True)
            active.on_become_inactive()
        except BaseException as e:
            ps.map_end_offset = old_map_end
            if seg is not None:
                seg.delete()
            for p in [snapshot, snapshot.with_name(snapshot.name + ".tmp"), *new_files]:
                if p not in preexisting:
                    p.unlink(missing_ok=True)
            try:
                active.make_active()
                active.time_index.truncate_to_entries(time_entries)
            except OSError:
                pass  # its indexes are rebuilt from the log by recovery if they stay short
            if isinstance(e, OSError):
                storage_error_log.error(
                    ("roll", str(self.topic_partition)),
                    "partition %s: cannot roll a new segment at offset %d: %s",
                    self.topic_partition, new_base, describe_os_error(e),
                )
            raise
        self._add_segment(seg)
        # Kafka flushes the rolled segment right away (asynchronously); the recovery point follows. If
        # the fsync fails the roll still stands: the recovery point stays and the flusher retries.
        try:
            self._flush_to(new_base)
        except OSError as e:
            storage_error_log.error(
                ("flush", str(self.topic_partition)),
                "partition %s: cannot flush the rolled segment: %s", self.topic_partition, describe_os_error(e),
            )
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

    def _floor_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(
        self, fetch_offset: int, max_bytes: int, isolation: str = "high_watermark", min_one_message: bool = True
    ) -> FetchDataInfo:
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, not {isolation!r}")
        with self._lock:
            self._check_fetch_offset(fetch_offset)
            upper = {
                "log_end": self.log_end_offset,
                "high_watermark": self.high_watermark,
                "txn_committed": self.last_stable_offset,
            }[isolation]
            segs = [self._segments[b] for b in self._bases[self._floor_index(fetch_offset) :]]
        if fetch_offset >= upper:
            return FetchDataInfo(b"", fetch_offset, [] if isolation == "txn_committed" else None)
        for i, seg in enumerate(segs):
            if seg.base_offset >= upper:
                break
            max_position = None
            if upper < seg.next_offset:
                found = seg.translate_offset(upper)
                max_position = found[0] if found else None
            res = seg.read(fetch_offset, max_bytes, max_position, min_one_message)
            if res is None:
                continue
            fslice, first = res
            aborted = None
            if isolation == "txn_committed":
                aborted = self._collect_aborted(segs[i:], fetch_offset, upper)
            return FetchDataInfo(fslice, first, aborted)
        return FetchDataInfo(b"", fetch_offset, [] if isolation == "txn_committed" else None)

    @staticmethod
    def _collect_aborted(segs: list[LogSegment], start: int, upper: int) -> list[AbortedTxn]:
        out: list[AbortedTxn] = []
        for seg in segs:
            if seg.base_offset >= upper:
                break
            res = seg.txn_index.collect_aborted(start, upper)
            out.extend(res.aborted)
            if res.is_complete:
                break
        return out

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)`` in the local segments."""
        with self._lock:
            segs = [self._segments[b] for b in self._bases[self._floor_index(start_offset) :]]
        return self._collect_aborted(segs, start_offset, upper_bound_offset)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
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
            segs = self.segments
        if timestamp == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for seg in segs:
                if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = seg
            if best is None:
                return None
            o = best.offset_of_max_timestamp_so_far
            return TimestampAndOffset(best.max_timestamp_so_far, o, cache.epoch_for_offset(o))
        if timestamp < 0:
            raise errors.InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")
        start = self.local_log_start_offset
        for seg in segs:
            if seg.size == 0 or seg.largest_timestamp < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, start)
            if found is None:
                continue
            pos, h = found
            offset, ts = self._first_record_at_or_after(seg, pos, h, timestamp, start)
            epoch = h.partition_leader_epoch if h.partition_leader_epoch >= 0 else cache.epoch_for_offset(offset)
            return TimestampAndOffset(ts, offset, epoch)
        return None

    @staticmethod
    def _first_record_at_or_after(
        seg: LogSegment, pos: int, h: BatchHeader, timestamp: int, start: int
    ) -> tuple[int, int]:
        """The exact record inside the matching batch. ListOffsets is not a hot path, so decoding this
        one batch is fine; with LogAppendTime every record carries the batch's max timestamp."""
        if h.timestamp_type == 1:
            return max(h.base_offset, start), h.max_timestamp
        from tieredlog.records.record import decode_batch

        _, records = decode_batch(seg.read_bytes(pos, h.size))
        for r in records:
            if r.timestamp >= timestamp and r.offset >= start:
                return r.offset, r.timestamp
        return h.last_offset, h.max_timestamp

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
        recovery point there. The recovery point moves only here."""
        with self._lock:
            self._flush_to(self.log_end_offset if offset is None else min(offset, self.log_end_offset))

    def _flush_to(self, offset: int) -> None:
        if offset <= self.recovery_point:
            return
        lo = self._floor_index(self.recovery_point)
        for base in self._bases[lo:]:
            if base >= offset:
                break
            self._segments[base].flush()
        self.recovery_point = offset
        self.last_flush_ms = self._clock()
        if offset >= self.log_end_offset:
            self._unflushed_messages = 0

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """flush.ms: called by the LogManager's flusher."""
        now_ms = self._clock() if now_ms is None else now_ms
        with self._lock:
            if self.log_end_offset > self.recovery_point and now_ms - self.last_flush_ms >= self.config.flush_ms:
                self._flush_to(self.log_end_offset)
                return True
        return False

    # ---- truncation -------------------------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or above ``target_offset`` (follower truncation). Returns True if anything went."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {target_offset}")
        with self._lock:
            if target_offset >= self.log_end_offset:
                return False
            if target_offset < self.local_log_start_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            for base in [b for b in self._bases if b > target_offset]:
                if len(self._bases) > 1:
                    self._remove_segment(base).delete()
            seg = self.active_segment
            seg.truncate_to(target_offset)
            seg.make_active()
            self.log_end_offset = min(seg.next_offset, target_offset) if seg.size else seg.base_offset
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self._rebuild_producer_state(rebuild_txn_from=None)
            return True

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None = None) -> None:
        """Drop every local segment and restart the log at ``new_offset`` (a follower rebuilding from remote)."""
        with self._lock:
            for base in list(self._bases):
                self._remove_segment(base).delete()
            self._add_segment(self._new_segment(new_offset, active=True))
            self.log_end_offset = new_offset
            self.local_log_start_offset = new_offset
            self.log_start_offset = new_offset if log_start_offset is None else min(log_start_offset, new_offset)
            self.high_watermark = new_offset
            self.recovery_point = new_offset
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(new_offset)

    # ---- retention --------------------------------------------------------------------------------
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention as Kafka's deleteOldSegments: log-start breach, then size, then time. Tiered topics use
        local retention and may delete only segments already in remote storage. Returns segments deleted."""
        now = self._clock() if now_ms is None else now_ms
        cfg = self.config
        with self._lock:
            n = self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset, now)
            if not cfg.delete:
                return n
            tiered = self.remote_enabled
            retention_bytes = cfg.effective_local_retention_bytes if tiered else cfg.retention_bytes
            retention_ms = cfg.effective_local_retention_ms if tiered else cfg.retention_ms
            if retention_bytes >= 0:
                diff = self.size - retention_bytes
                if diff > 0:
                    budget = [diff]

                    def by_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                        if budget[0] - seg.size >= 0:
                            budget[0] -= seg.size
                            return True
                        return False

                    n += self._delete_segments(by_size, now)
            if retention_ms >= 0:
                n += self._delete_segments(lambda seg, nxt: now - seg.largest_timestamp > retention_ms, now)
            return n

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool], now: int) -> int:
        tiered = self.remote_enabled
        deletable: list[LogSegment] = []
        segs = [self._segments[b] for b in self._bases]
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
            return 0
        if not deletable:
            return 0
        if len(deletable) == len(segs):
            self._roll()  # never delete the active segment: start a new one first
        for seg in deletable:
            self._remove_segment(seg.base_offset)
            seg.close()
            seg.change_file_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        first = self._bases[0]
        if tiered:
            self.local_log_start_offset = max(self.local_log_start_offset, first)
        else:
            if first > self.log_start_offset:
                self.log_start_offset = first
                self.leader_epoch_cache.truncate_from_start(first)
            self.local_log_start_offset = max(self.local_log_start_offset, first)
        self.producer_state.delete_snapshots_below(first)
        self.delete_expired_files(now)
        return len(deletable)

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Physically delete ``.deleted`` segment files whose ``file.delete.delay.ms`` has passed."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            due = [s for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for seg in due:
            seg.delete()
        return len(due)

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` (never one with an open transaction)."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            return self.producer_state.remove_expired_producers(now)

    # ---- tiering hooks ------------------------------------------------------------------------------
    def segments_to_copy(self, upper_bound_exclusive: int, from_offset: int | None = None) -> list[LogSegment]:
        """Rolled segments that end below ``upper_bound_exclusive`` (the LSO) and at or after ``from_offset``
        (default: just past the highest offset in remote storage). Never the active segment."""
        with self._lock:
            start = max(self.highest_offset_in_remote_storage + 1, self.log_start_offset) if from_offset is None else from_offset
            segs = [self._segments[b] for b in self._bases]
        out = []
        for seg, nxt in zip(segs, segs[1:]):
            if nxt.base_offset > upper_bound_exclusive:
                break
            if nxt.base_offset - 1 >= start:
                out.append(seg)
        return out

    def next_segment_base_offset(self, segment: LogSegment) -> int:
        """The offset after ``segment``'s range (its remote end offset + 1), gaps included."""
        with self._lock:
            i = bisect.bisect_right(self._bases, segment.base_offset)
            return self._bases[i] if i < len(self._bases) else self.log_end_offset

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        with self._lock:
            if offset > self.highest_offset_in_remote_storage:
                self.highest_offset_in_remote_storage = offset

    def producer_snapshot_for(self, segment: LogSegment) -> Path:
        """The producer snapshot taken when ``segment`` rolled (named by the next segment's base offset)."""
        nxt = self.next_segment_base_offset(segment)
        path = self.producer_state.snapshot_file(nxt)
        if path is None:
            raise FileNotFoundError(f"no producer snapshot at offset {nxt} in {self.dir}")
        return path

    def only_local_segments_size(self) -> int:
        """Bytes of local segments not yet in remote storage (the RLM's copy-lag metric)."""
        with self._lock:
            return sum(s.size for s in self._segments.values() if s.base_offset >= self.highest_offset_in_remote_storage)

    # ---- lifecycle ----------------------------------------------------------------------------------
    def close(self, flush: bool = True) -> None:
        with self._lock:
            if flush:
                self._flush_to(self.log_end_offset)
            self.producer_state.map_end_offset = self.log_end_offset
            try:
                self.producer_state.take_snapshot(self.log_end_offset)
            finally:
                # A snapshot that cannot be written (full disk) is rebuilt from the log at the next
                # start; the descriptors are released either way.
                for seg in self._segments.values():
                    try:
                        seg.close()  # releases its descriptors even when trimming the indexes fails
                    except OSError as e:
                        log.error("partition %s: cannot close %s cleanly: %s", self.topic_partition,
                                  seg.log_path.name, describe_os_error(e))
            for _, seg in self._pending_deletes:
                seg.close_handles()

    def close_handles(self) -> None:
        """Release every descriptor without writing (the directory is about to be removed)."""
        with self._lock:
            for seg in self._segments.values():
                seg.close()
            for _, seg in self._pending_deletes:
                seg.close_handles()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        with self._lock:
            self.close_handles()
            self._segments.clear()
            self._bases.clear()
            self._pending_deletes.clear()
            shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic_partition}, start={self.log_start_offset}, local_start={self.local_log_start_offset}, "
            f"hw={self.high_watermark}, end={self.log_end_offset}, segments={len(self._bases)})"
        )
