"""Kafka's LogCleanerManager: which compacted log to clean next, who is cleaning what, and the
``cleaner-offset-checkpoint`` of each log dir (where each log's clean part ends).

A log's cleanable part runs from its first dirty offset (the checkpoint, or the log start) up to its
first uncleanable offset: the lowest of the last stable offset (no open transaction and nothing above
the high watermark is cleaned), the active segment's base, and the first segment newer than
min.compaction.lag.ms. The log whose cleanable share of its bytes is highest is cleaned next, if that
share reaches min.cleanable.dirty.ratio or its oldest dirty data is older than max.compaction.lag.ms.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, Iterable

from tieredlog.formats.checkpoints import CorruptCheckpointError
from tieredlog.log.checkpoints import OffsetCheckpointFile
from tieredlog.log.cleaner.cleaner import LogCleaningAbortedError, LogToClean
from tieredlog.log.storage_errors import describe_os_error
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


def cleanable_offsets(plog: UnifiedLog, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether max.compaction.lag.ms forces a round)."""
    cfg = plog.config
    segs = plog.segments
    start = plog.log_start_offset
    if checkpoint is None or checkpoint < start or checkpoint > segs[-1].base_offset:
        first_dirty = start
    else:
        first_dirty = checkpoint
    candidates = [plog.last_stable_offset, segs[-1].base_offset]
    dirty = [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset > first_dirty]
    if cfg.min_compaction_lag_ms > 0:
        horizon = now_ms - cfg.min_compaction_lag_ms
        newer = next((s for s in dirty if s.largest_timestamp > horizon), None)
        if newer is not None:
            candidates.append(newer.base_offset)
    first_uncleanable = max(min(candidates), first_dirty)
    forced = False
    if dirty and 0 < cfg.max_compaction_lag_ms < (1 << 62):
        first_ts = dirty[0].rolling_based_timestamp()
        forced = first_ts >= 0 and now_ms - cfg.max_compaction_lag_ms > first_ts
    return first_dirty, first_uncleanable, forced


def log_to_clean(plog: UnifiedLog, checkpoint: int | None, now_ms: int) -> LogToClean:
    first_dirty, first_uncleanable, forced = cleanable_offsets(plog, checkpoint, now_ms)
    segs = plog.segments
    clean = cleanable = 0
    for i, s in enumerate(segs):
        upper = segs[i + 1].base_offset if i + 1 < len(segs) else plog.log_end_offset
        if upper <= first_dirty:
            clean += s.size
        elif s.base_offset < first_uncleanable and first_dirty < first_uncleanable:
            cleanable += s.size
    return LogToClean(plog, first_dirty, first_uncleanable, clean, cleanable, forced)


class LogCleanerManager:
    """Thread-safe; the cleaner threads and the log's owners (truncation, deletion) share it."""

    def __init__(self, log_dirs: Iterable[Path], logs: Callable[[], list[UnifiedLog]]) -> None:
        self.log_dirs = list(log_dirs)
        self._logs = logs
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # writers of one checkpoint share its ".tmp" file
        self._in_progress: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()
        self._stopping = False
        self.dirtiest_ratio = 0.0
        self._checkpoints: dict[TopicPartition, int] = {}
        for d in self.log_dirs:
            self._checkpoints.update(self._read_checkpoint(d))

    @staticmethod
    def _read_checkpoint(d: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT).read()
        except (CorruptCheckpointError, ValueError, OSError) as e:
            # the cost is one round that cleans a log from its start again
            log.warning("ignoring unreadable cleaner checkpoint in %s: %s", d, e)
            return {}

    def checkpoint_of(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._checkpoints.get(tp)

    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        """The log to clean now, marked in progress (``done_cleaning`` releases it); None if none is due."""
        candidates: list[LogToClean] = []
        for plog in self._logs():
            cfg = plog.config
            tp = plog.topic_partition
            if not cfg.compact or cfg.remote_storage_enable:
                continue
            with self._lock:
                if tp in self._in_progress or tp in self.uncleanable:
                    continue
                floor = plog.local_log.take_truncation_floor()
                checkpoint = self._checkpoints.get(tp)
                if floor is not None and checkpoint is not None and checkpoint > floor:
                    checkpoint = self._checkpoints[tp] = floor
            try:
                ltc = log_to_clean(plog, checkpoint, now_ms)
            except (OSError, IndexError) as e:  # a log deleted meanwhile: its segments are gone
                log.debug("skipping %s for cleaning: %s", tp, e)
                continue
            if ltc.cleanable_bytes > 0 and (ltc.needs_compaction_now or ltc.cleanable_ratio > cfg.min_cleanable_dirty_ratio):
                candidates.append(ltc)
        with self._lock:
            candidates = [c for c in candidates if c.topic_partition not in self._in_progress]
            if not candidates:
                self.dirtiest_ratio = 0.0
                return None
            chosen = max(candidates, key=lambda c: c.cleanable_ratio)
            self.dirtiest_ratio = chosen.cleanable_ratio
            self._in_progress.add(chosen.topic_partition)
            return chosen

    def check_done(self, tp: TopicPartition) -> None:
        """Raises LogCleaningAbortedError once ``abort_cleaning`` was called for ``tp``, or ``abort_all``."""
        if tp in self._aborted or self._stopping:
            raise LogCleaningAbortedError(f"cleaning of {tp} was aborted")

    def abort_all(self) -> None:
        """The broker stops: every round stops at its next batch."""
        self._stopping = True

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """A log is deleted: a round on it stops at its next batch."""
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)
            self._checkpoints.pop(tp, None)

    def done_cleaning(self, plog: UnifiedLog, end_offset: int | None) -> None:
        """The round is over; ``end_offset`` (None: it failed or was aborted) is the new checkpoint."""
        tp = plog.topic_partition
        with self._lock:
            self._in_progress.discard(tp)
            self._aborted.discard(tp)
            if end_offset is not None:
                self._checkpoints[tp] = end_offset
        if end_offset is not None:
            self.write_checkpoint(plog.dir.parent)

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self.uncleanable.add(tp)

    def write_checkpoint(self, log_dir: Path) -> None:
        live = {p.topic_partition for p in self._logs() if p.dir.parent == log_dir}
        with self._lock:
            offsets = {tp: o for tp, o in self._checkpoints.items() if tp in live}
        try:
            with self._write_lock:
                OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(offsets)
        except OSError as e:
            log.error("cannot write %s in %s: %s", CLEANER_OFFSET_CHECKPOINT, log_dir, describe_os_error(e))
