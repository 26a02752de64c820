"""Kafka's LocalLog: one partition's local segments, and the file work on them.

The segment map (base offset -> LogSegment), the log end offset and the recovery point, and the
operations that change files: roll, read, flush, truncate, delete. Offsets that involve the remote
tier, the high watermark, epochs and producer state belong to the UnifiedLog above it.

The event loop appends under ``lock``, so nothing holds it while waiting on a disk: a flush and a
retention delete decide under the lock what to do, then fsync, rename and unlink without it.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from tieredlog.atomic_file import fsync_dir
from tieredlog.formats.txn_index import AbortedTxn, collect_aborted_across
from tieredlog.log.config import LogConfig
from tieredlog.log.flush_stats import LOG_FLUSH_STATS
from tieredlog.log.scheduler import InlineScheduler, Scheduler
from tieredlog.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    filename_prefix,
)
from tieredlog.log.storage_errors import describe_os_error, storage_error_log
from tieredlog.log.types import FetchDataInfo, SupportsBaseOffset, TopicPartition, parse_partition_dir

log = logging.getLogger(__name__)


def _fsync_path(path: Path) -> None:
    """fsync a file through a descriptor of our own: the segment may close or rename its files
    meanwhile (a file renamed ``.deleted`` or gone needs no durability)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_paths(seg: LogSegment) -> list[Path]:
    return [seg.log_path, seg.offset_index_path, seg.time_index_path, seg.txn_index_path]


class LocalLog:
    """The segments of one partition directory (named ``<topic>-<partition>``).

    Thread safety: ``lock`` (re-entrant, shared with the UnifiedLog) guards the segment map and the
    offsets here; callers hold it for every method unless the method says otherwise.
    """

    def __init__(
        self, dir: Path | str, config: LogConfig, *, clock: Callable[[], int], recovery_point: int = 0,
        scheduler: Scheduler | None = None,
    ):
        self.dir = Path(dir)
        self.topic_partition: TopicPartition = parse_partition_dir(self.dir.name)
        self.config = config
        self.clock = clock
        self.scheduler: Scheduler = scheduler or InlineScheduler()
        self.lock = threading.RLock()
        # Waited on by truncation while a retention delete renames files outside the lock: a segment
        # re-created at the same base offset must not have its new files renamed away.
        self._files_settled = threading.Condition(self.lock)
        self._file_ops_in_flight = 0
        self._segments: dict[int, LogSegment] = {}
        self._bases: list[int] = []  # sorted base offsets, for floor lookups by bisect
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.recovery_point = recovery_point
        self.log_end_offset = 0
        # Bumped by every truncation: a flush that started before one must not move the recovery point,
        # and a cleaned segment built before one must not be swapped in.
        self._truncations = 0
        # The lowest offset truncated to since the cleaner last asked: its checkpoint must not stay above it.
        self._truncated_to: int | None = None
        # Segment files created (bumped) and covered by a finished directory fsync: a flush whose range
        # holds a new segment fsyncs the directory too, and concurrent flushes each wait for their own.
        self._dir_changes = 0
        self._dir_synced = 0
        # One background flush per partition at a time, its target raised by later rolls: on a slow disk
        # rolls must not queue a flush each, all fsyncing the same segments at once.
        self._flush_target = 0
        self._flush_scheduled = False
        # Files written without fsync under the lock (a roll's producer snapshot, the leader-epoch
        # checkpoint): every flush fsyncs them before it moves the recovery point.
        self._unsynced_files: list[Path] = []
        self.dir.mkdir(parents=True, exist_ok=True)
        self.last_flush_ms = clock()

    # ---- the segment map --------------------------------------------------------------------------
    def new_segment(self, base_offset: int, active: bool) -> LogSegment:
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
            created_ms=self.clock(),
            active=active,
        )

    def add_segment(self, seg: LogSegment) -> None:
        if seg.base_offset not in self._segments:
            bisect.insort(self._bases, seg.base_offset)
        self._segments[seg.base_offset] = seg
        self._dir_changes += 1

    def remove_segment(self, base: int) -> LogSegment:
        seg = self._segments.pop(base)
        self._bases.remove(base)
        return seg

    def segment_at(self, base: int) -> LogSegment | None:
        return self._segments.get(base)

    def floor_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[self._bases[-1]]

    @property
    def first_base_offset(self) -> int:
        return self._bases[0]

    @property
    def segments(self) -> list[LogSegment]:
        with self.lock:
            return [self._segments[b] for b in self._bases]

    def segments_from(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` (its floor) and every later one."""
        with self.lock:
            return [self._segments[b] for b in self._bases[self.floor_index(offset) :]]

    @property
    def num_segments(self) -> int:
        return len(self._bases)

    @property
    def size(self) -> int:
        with self.lock:
            return sum(s.size for s in self._segments.values())

    def next_base_offset(self, segment: SupportsBaseOffset) -> int:
        """The offset after ``segment``'s range: the next segment's base (gaps included), or the log end."""
        with self.lock:
            i = bisect.bisect_right(self._bases, segment.base_offset)
            return self._bases[i] if i < len(self._bases) else self.log_end_offset

    def delete_segments_after(self, base: int) -> None:
        """Recovery found ``base`` corrupt: what follows it cannot be trusted either."""
        for b in [b for b in self._bases if b > base]:
            seg = self.remove_segment(b)
            log.warning("deleting segment %s after a corrupt one", seg.log_path)
            seg.delete()

    # ---- roll -------------------------------------------------------------------------------------
    def roll(self, new_base: int) -> LogSegment:
        """Start a new active segment at ``new_base``. Every fallible step comes before the segment map
        changes, and a failure (a full disk: the new files, index preallocation, the roll's time-index
        entry) undoes the steps already made, so the old active segment stays active and writable."""
        active = self.active_segment
        new_files = [self.dir / f"{filename_prefix(new_base)}{sfx}" for sfx in (LOG_SUFFIX, ".index", ".timeindex")]
        preexisting = {p for p in new_files if p.exists()}
        time_entries = active.time_index.entries
        seg: LogSegment | None = None
        try:
            seg = self.new_segment(new_base, active=True)
            active.on_become_inactive()
        except BaseException:
            if seg is not None:
                seg.delete()
            for p in new_files:
                if p not in preexisting:
                    p.unlink(missing_ok=True)
            try:
                active.make_active()
                active.time_index.truncate_to_entries(time_entries)
            except OSError:
                pass  # its indexes are rebuilt from the log by recovery if they stay short
            raise
        self.add_segment(seg)
        return seg

    # ---- reads (no lock: the caller took the segment list under it) --------------------------------
    @staticmethod
    def read(
        segs: list[LogSegment], fetch_offset: int, max_bytes: int, upper: int, min_one_message: bool,
        include_aborted: bool, *, nowait: bool = False,
    ) -> FetchDataInfo:
        """Read from ``segs`` (the floor segment of ``fetch_offset`` on), never at or past ``upper``.
        ``nowait``: PagesNotCached when a batch-header read would wait for the disk."""
        for i, seg in enumerate(segs):
            if seg.base_offset >= upper:
                break
            max_position = None
            if upper < seg.next_offset:
                found = seg.translate_offset(upper, nowait=nowait)
                max_position = found[0] if found else None
            res = seg.read(fetch_offset, max_bytes, max_position, min_one_message, nowait=nowait)
            if res is None:
                continue
            fslice, first = res
            aborted = LocalLog.collect_aborted(segs[i:], fetch_offset, upper) if include_aborted else None
            return FetchDataInfo(fslice, first, aborted)
        return FetchDataInfo(b"", fetch_offset, [] if include_aborted else None)

    @staticmethod
    def collect_aborted(segs: list[LogSegment], start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, upper)`` from ``segs`` (the segment holding
        ``start`` and the later ones). Segments at or past ``upper`` are searched too: a transaction
        that began below ``upper`` has its entry in the segment of its abort marker, wherever that
        is; the search stops once complete (Kafka's LocalLog.collectAbortedTransactions)."""
        return collect_aborted_across((seg.txn_index.aborted_txns for seg in segs), start, upper)

    # ---- flush ------------------------------------------------------------------------------------
    def mark_unsynced(self, path: Path) -> None:
        """``path`` was just written (and renamed into place) without fsync: the next flush makes it durable."""
        self._unsynced_files.append(path)
        self._dir_changes += 1

    def flush(self, offset: int) -> bool:
        """fsync the segments holding ``[recovery_point, offset)`` and the files written unsynced so far,
        then move the recovery point there: only what is on disk is below it (Kafka's LocalLog.flush +
        markFlushed).

        Takes ``lock`` only to pick the files and to move the recovery point; the fsyncs run without it
        unless the caller holds it (flush.messages, close). Returns False when there was nothing to do."""
        with self.lock:
            unsynced, self._unsynced_files = self._unsynced_files, []
            if offset <= self.recovery_point and not unsynced:
                return False
            paths = list(unsynced)
            lo = self.floor_index(self.recovery_point)
            for base in self._bases[lo:]:
                if base >= offset:
                    break
                paths.extend(_segment_paths(self._segments[base]))
            dir_changes = self._dir_changes
            sync_dir = dir_changes > self._dir_synced
            truncations = self._truncations
        started = time.monotonic()
        try:
            for p in paths:
                _fsync_path(p)
            if sync_dir:
                fsync_dir(self.dir)
        except BaseException:
            with self.lock:
                self._unsynced_files[:0] = unsynced  # still not durable: the next flush tries again
            raise
        LOG_FLUSH_STATS.record((time.monotonic() - started) * 1000.0)
        with self.lock:
            self._dir_synced = max(self._dir_synced, dir_changes) if sync_dir else self._dir_synced
            if truncations == self._truncations and offset > self.recovery_point:
                self.recovery_point = min(offset, self.log_end_offset)
                self.last_flush_ms = self.clock()
        return True

    def schedule_flush(self, offset: int) -> None:
        """Flush up to ``offset`` (and the unsynced files) in the background: a rolled segment, Kafka's
        "flush-log" task. A failure leaves the recovery point where it was; the flusher or the next roll
        covers the range again."""
        with self.lock:
            self._flush_target = max(self._flush_target, offset)
            if self._flush_scheduled:
                return  # the flush already scheduled takes the new target when it runs
            self._flush_scheduled = True
        self.scheduler.schedule_once(f"flush-log {self.topic_partition}", self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        with self.lock:
            target = self._flush_target
        while True:
            try:
                self.flush(target)
            except BaseException:
                with self.lock:
                    self._flush_scheduled = False
                raise
            with self.lock:
                if self._flush_target <= target and not self._unsynced_files:
                    self._flush_scheduled = False  # decided under the lock a new roll takes to schedule
                    return
                target = self._flush_target

    # ---- truncation -------------------------------------------------------------------------------
    def _await_file_ops(self) -> None:
        while self._file_ops_in_flight:
            self._files_settled.wait()

    def _note_truncation(self, offset: int) -> None:
        self._truncations += 1
        self._truncated_to = offset if self._truncated_to is None else min(self._truncated_to, offset)

    @property
    def truncations(self) -> int:
        return self._truncations

    def take_truncation_floor(self) -> int | None:
        """The lowest offset the log was truncated to since the last call (None: no truncation)."""
        with self.lock:
            floor, self._truncated_to = self._truncated_to, None
            return floor

    def truncate_to(self, target_offset: int) -> None:
        """Remove every batch at or above ``target_offset`` (which lies within the local segments)."""
        self._await_file_ops()
        self._note_truncation(target_offset)
        self._flush_target = min(self._flush_target, target_offset)
        for base in [b for b in self._bases if b > target_offset]:
            if len(self._bases) > 1:
                self.remove_segment(base).delete()
        seg = self.active_segment
        seg.truncate_to(target_offset)
        seg.make_active()
        self.log_end_offset = min(seg.next_offset, target_offset) if seg.size else seg.base_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        self._await_file_ops()
        self._note_truncation(new_offset)
        self._flush_target = new_offset
        for base in list(self._bases):
            self.remove_segment(base).delete()
        self.add_segment(self.new_segment(new_offset, active=True))
        self.log_end_offset = new_offset
        self.recovery_point = new_offset

    # ---- deletion ---------------------------------------------------------------------------------
    def remove_segments(self, segs: list[LogSegment]) -> None:
        """Take ``segs`` out of the map (under ``lock``); the caller must hand them to
        ``delete_segment_files`` once it released the lock."""
        for seg in segs:
            self.remove_segment(seg.base_offset)
        self._file_ops_in_flight += len(segs)

    def delete_segment_files(self, segs: list[LogSegment], now: int) -> None:
        """Rename the files of ``segs`` ``.deleted`` without holding ``lock``; the files go after
        ``file.delete.delay.ms`` (``delete_expired_files``, scheduled), so a read already holding them
        finishes. Kafka's deleteSegmentFiles with asyncDelete."""
        delay = self.config.file_delete_delay_ms
        try:
            for seg in segs:
                try:
                    # The .log descriptor stays open until the physical delete: a fetch already sending
                    # from it finishes, which is what file.delete.delay.ms is for.
                    seg.offset_index.close()
                    seg.time_index.close()
                    seg.txn_index.close()
                    seg.change_file_suffix(DELETED_SUFFIX)
                except OSError as e:
                    # The directory itself may be gone (the topic was deleted meanwhile); what is left
                    # of this segment is unlinked with the others or removed at the next start.
                    storage_error_log.error(("delete", str(self.topic_partition)),
                                            "partition %s: cannot rename %s for deletion: %s",
                                            self.topic_partition, seg.log_path.name, describe_os_error(e))
        finally:
            with self.lock:
                self._pending_deletes.extend((now + delay, seg) for seg in segs)
                self._file_ops_in_flight -= len(segs)
                self._files_settled.notify_all()
        self.scheduler.schedule_once(
            f"delete-segments {self.topic_partition}", lambda: self.delete_expired_files(self.clock()), delay
        )

    def delete_expired_files(self, now: int) -> int:
        """Physically delete ``.deleted`` segment files whose ``file.delete.delay.ms`` has passed (the caller
        holds no lock; the unlinks happen outside it)."""
        with self.lock:
            due = [s for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for seg in due:
            seg.delete()
        return len(due)

    # ---- compaction -------------------------------------------------------------------------------
    def new_cleaned_segment(self, base_offset: int) -> LogSegment | None:
        """An empty ``.cleaned`` segment at ``base_offset`` for the cleaner to write (Kafka's
        createNewCleanedSegment), or None once the partition's directory is gone (deleted: creating
        files there would bring it back). Under ``lock``, which a log deletion takes to rename it."""
        with self.lock:
            if not self.dir.is_dir():
                return None
            for sfx in (CLEANED_SUFFIX, SWAP_SUFFIX):
                for ext in (LOG_SUFFIX, ".index", ".timeindex", ".txnindex"):
                    (self.dir / f"{filename_prefix(base_offset)}{ext}{sfx}").unlink(missing_ok=True)
            cfg = self.config
            return LogSegment(self.dir, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                              max_index_size=cfg.segment_index_bytes, created_ms=self.clock(),
                              file_suffix=CLEANED_SUFFIX, active=True)

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment], truncations: int, now: int) -> bool:
        """Swap the cleaned segment (written and fsynced) in for ``old`` (Kafka's replaceSegments).
        False, and nothing changed, when the log moved on meanwhile: a truncation since
        ``truncations`` was read, or one of ``old`` no longer in the map (retention took it).

        Crash safety: the cleaned files become ``.swap`` before the map changes; from then on a load
        finishes the swap (the segments it covers go, the ``.swap`` files take their names), so any
        crash leaves either the old segments or the cleaned one. The renames of the old files to
        ``.deleted`` and of the ``.swap`` files to their names happen outside ``lock``."""
        with self.lock:
            if self._truncations != truncations or any(self._segments.get(s.base_offset) is not s for s in old):
                return False
            cleaned.change_file_suffix(SWAP_SUFFIX, log_last=True)
            for seg in old:
                self.remove_segment(seg.base_offset)
            self.add_segment(cleaned)
            self._file_ops_in_flight += len(old) + 1
        try:
            self.delete_segment_files(old, now)  # settles the len(old) file operations
            cleaned.change_file_suffix("", log_last=True)
        finally:
            with self.lock:
                self._file_ops_in_flight -= 1
                self._files_settled.notify_all()
        fsync_dir(self.dir)
        return True

    # ---- lifecycle --------------------------------------------------------------------------------
    def close_segments(self) -> None:
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
        with self.lock:
            for seg in self._segments.values():
                seg.close()
            for _, seg in self._pending_deletes:
                seg.close_handles()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        with self.lock:
            self._await_file_ops()
            self.close_handles()
            self._segments.clear()
            self._bases.clear()
            self._pending_deletes.clear()
            shutil.rmtree(self.dir, ignore_errors=True)
