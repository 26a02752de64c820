"""Compaction of the remote tier of a compacted topic (docs/compaction.md, "Compacted topics in the
remote tier").

A round maps the keys of the dirty remote segments with the local cleaner's own ``build_offset_map`` and
rewrites every remote segment up to where the map ends with its batch filter (``Cleaner.clean_segment``),
over the segments fetched into a scratch directory. Each rewritten segment is uploaded as a replacement
covering the same offsets with the same leader-epoch map under a new segment id, then the old segment is
deleted. The RLMM serves, for a leader epoch and a start offset, the segment finished last, so the
replacement's COPY_SEGMENT_FINISHED is the one moment readers move from the old copy to the new one; a
crash before it leaves an unfinished upload, after it a superseded copy, both removed by the
expiration task. Blocking I/O throughout: the RLM's pools only, never the event loop.
"""

from __future__ import annotations

import filecmp
import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

from tieredlog.formats.txn_index import AbortedTxn, collect_aborted_across, decode_txn_entries
from tieredlog.log.cleaner.batch_filter import RecordFilter
from tieredlog.log.cleaner.cleaner import Cleaner, CleanerStats
from tieredlog.log.cleaner.txn_metadata import CleanedTransactionMetadata
from tieredlog.log.segment import LogSegment, filename_prefix
from tieredlog.log.types import TopicPartition
from tieredlog.rlm.contracts import TieredLog
from tieredlog.rlm.copier import tiering_log
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rsm.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)
from tieredlog.rsm.listing import MalformedPartitionObjectError

log = logging.getLogger(__name__)

DIR_NAME = "remote-log-cleaner"  # in the first log dir: the segments of the round being cleaned


def served_segments(lifecycle: RemoteSegmentLifecycle, plog: TieredLog, tip_state: PartitionState) -> list[RemoteLogSegmentMetadata]:
    """The FINISHED remote segments readers are served, in offset order, from the log start on: the copy
    the RLMM maps for each segment's first offset under its first epoch (never a superseded one)."""
    tip = tip_state.tip
    out = []
    for md in lifecycle.segments(tip):
        if md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED or md.end_offset < plog.log_start_offset:
            continue
        epoch = min(md.segment_leader_epochs, key=lambda e: md.segment_leader_epochs[e])
        found = lifecycle.segment_for(tip, epoch, md.start_offset)
        if found is not None and found.remote_log_segment_id == md.remote_log_segment_id:
            out.append(md)
    out.sort(key=lambda m: m.start_offset)
    return out


DOWNLOAD_CHUNK = 64 * 1024  # fine enough for the throttle to pace a download, not only the time after it


def download(stream: BinaryIO, out: BinaryIO, throttle: Callable[[int], None]) -> int:
    """Copy a remote object into a scratch file, charging every chunk to the remote cleaner's throttle
    (``log.cleaner.io.max.bytes.per.second``: the tier is read at that pace, not at the network's and
    then processed at it). The bytes copied."""
    total = 0
    while chunk := stream.read(DOWNLOAD_CHUNK):
        out.write(chunk)
        total += len(chunk)
        throttle(len(chunk))
    return total


@dataclass(frozen=True, slots=True)
class RemoteCleanPlan:
    """Which remote segments a round maps (``dirty``) and rewrites (``to_clean`` up to the map's end)."""

    segments: list[RemoteLogSegmentMetadata]  # served, cleanable (older than min.compaction.lag.ms)
    dirty: list[RemoteLogSegmentMetadata]
    total_bytes: int
    needs_compaction_now: bool
    first_dirty_offset: int = 0  # where the map starts: inside dirty[0] when the last round's map filled there

    @property
    def dirty_bytes(self) -> int:
        return sum(m.segment_size_in_bytes for m in self.dirty)

    @property
    def cleanable_ratio(self) -> float:
        return self.dirty_bytes / self.total_bytes if self.total_bytes else 0.0


def plan_remote_clean(served: list[RemoteLogSegmentMetadata], clean_offset: int, min_lag_ms: int, max_lag_ms: int,
                      min_dirty_ratio: float, now_ms: int) -> RemoteCleanPlan | None:
    """Kafka's LogCleanerManager rules over the remote bytes: the cleanable segments are those whose
    newest record is older than ``min.compaction.lag.ms`` (a prefix: compaction never skips a segment),
    the dirty ones those from ``clean_offset`` (the first offset never cleaned remotely) on. None when
    nothing is due: the dirty share is not above ``min.cleanable.dirty.ratio`` and no dirty segment is
    older than ``max.compaction.lag.ms``."""
    cleanable: list[RemoteLogSegmentMetadata] = []
    for md in served:
        if md.max_timestamp_ms > now_ms - min_lag_ms:
            break
        cleanable.append(md)
    dirty = [m for m in cleanable if m.end_offset >= clean_offset]
    if not dirty:
        return None
    total = sum(m.segment_size_in_bytes for m in served)
    overdue = any(m.max_timestamp_ms < now_ms - max_lag_ms for m in dirty)
    plan = RemoteCleanPlan(cleanable, dirty, total, overdue, max(clean_offset, dirty[0].start_offset))
    return plan if overdue or plan.cleanable_ratio > min_dirty_ratio else None


@dataclass(slots=True)
class RemoteCleanStats:
    cleaner: CleanerStats = field(default_factory=CleanerStats)
    segments_read: int = 0
    segments_replaced: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    end_offset: int = 0  # the first offset the round did not clean: the next round's clean offset


class _FetchedSegments:
    """The remote segments of a round as a ``CleanSource``: fetched into a scratch directory, with the
    aborted transactions of the whole remote tier and of the local log."""

    def __init__(self, tp: TopicPartition, end_offset: int, aborted: list[AbortedTxn]) -> None:
        self._tp = tp
        self._end = end_offset
        self._aborted = aborted

    @property
    def topic_partition(self) -> TopicPartition:
        return self._tp

    @property
    def log_end_offset(self) -> int:
        return self._end

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        return [t for t in self._aborted if t.last_offset >= start_offset and t.first_offset < upper_bound_offset]


class RemoteCleaner:
    """Runs remote cleaning rounds; owns one ``Cleaner`` (its offset map) and is used by one thread at a time."""

    def __init__(self, lifecycle: RemoteSegmentLifecycle, cleaner: Cleaner, scratch_root: Path, broker_id: int,
                 custom_metadata_max_bytes: int, clock: Callable[[], int] | None = None) -> None:
        self._lifecycle = lifecycle
        self._cleaner = cleaner
        self._scratch_root = scratch_root
        self._broker_id = broker_id
        self._custom_metadata_max_bytes = custom_metadata_max_bytes
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._busy = threading.Lock()  # one round at a time: the cleaner's offset map is not shared

    def update_io_rate(self, bytes_per_second: float) -> None:
        """``log.cleaner.io.max.bytes.per.second`` changed live (AlterConfigs on the broker, as Kafka's
        LogCleaner takes it): the next chunk a round reads or writes is paced by the new rate."""
        self._cleaner.throttler.rate = bytes_per_second

    def try_clean(self, state: PartitionState, plog: TieredLog, plan: RemoteCleanPlan,
                  cancelled: Callable[[], bool]) -> RemoteCleanStats | None:
        """``clean``, unless another partition's round is running (None: the task tries next interval)."""
        if not self._busy.acquire(blocking=False):
            return None
        try:
            # a round killed with the broker left its scratch files: no round runs now, so all are stale
            if self._scratch_root.is_dir():
                for stale in self._scratch_root.iterdir():
                    shutil.rmtree(stale, ignore_errors=True)
            return self.clean(state, plog, plan, cancelled)
        finally:
            self._busy.release()

    # ---- object store reads -----------------------------------------------------------------------
    def _get(self, md: RemoteLogSegmentMetadata, kind: IndexType | None, dest: Path) -> Path:
        rsm = self._lifecycle.rsm
        stream = rsm.fetch_log_segment(md, 0) if kind is None else rsm.fetch_index(md, kind)
        with stream, open(dest, "wb") as out:
            download(stream, out, self._cleaner.throttler.maybe_throttle)
        self._lifecycle.metrics.object_store.record(md.topic_id_partition.topic, "GET", 1, dest.stat().st_size)
        return dest

    def _fetch(self, md: RemoteLogSegmentMetadata, into: Path) -> LogSegment:
        into.mkdir(parents=True, exist_ok=True)
        stem = into / filename_prefix(md.start_offset)
        self._get(md, None, Path(f"{stem}.log"))
        seg = LogSegment(into, md.start_offset, active=True)
        seg.rebuild_indexes()
        seg.on_become_inactive()
        return seg

    def _aborted(self, plog: TieredLog, segments: list[RemoteLogSegmentMetadata], scratch: Path) -> list[AbortedTxn]:
        lists: list[list[AbortedTxn]] = []
        for md in segments:
            if md.tx_index_present:
                path = self._get(md, IndexType.TRANSACTION, scratch / f"{md.remote_log_segment_id.id}.txnindex")
                lists.append(decode_txn_entries(path.read_bytes(), str(path)))
        start = segments[0].start_offset if segments else plog.local_log_start_offset
        found = collect_aborted_across(iter(lists), start, plog.local_log_start_offset)
        local = plog.collect_aborted_transactions(plog.local_log_start_offset, plog.log_end_offset)
        return list(dict.fromkeys(found + local))  # once each: remote and local copies of one range overlap

    # ---- a round ----------------------------------------------------------------------------------
    def clean(self, state: PartitionState, plog: TieredLog, plan: RemoteCleanPlan,
              cancelled: Callable[[], bool]) -> RemoteCleanStats:
        """Clean the remote tier per ``plan``; returns the round's figures (``end_offset`` is where
        the next round's dirty part begins). Stops between segments when ``cancelled``."""
        stats = RemoteCleanStats()
        self._scratch_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="remote-clean-", dir=self._scratch_root) as tmp:
            scratch = Path(tmp)
            now = self._clock()
            aborted = self._aborted(plog, plan.segments, scratch)
            dirty_end = plan.dirty[-1].end_offset + 1
            fetched = {md.start_offset: self._fetch(md, scratch / "fetched") for md in plan.dirty}
            stats.segments_read += len(fetched)
            source = _FetchedSegments(plog.topic_partition, dirty_end, aborted)
            dirty_segs = [fetched[m.start_offset] for m in plan.dirty]
            offset_map = self._cleaner.build_offset_map(source, dirty_segs, plan.first_dirty_offset, dirty_end,
                                                        stats.cleaner)
            end_offset = offset_map.latest_offset + 1
            record_filter = RecordFilter(offset_map, now, plog.config.delete_retention_ms, stats.cleaner.filter)
            txns = CleanedTransactionMetadata()
            last_records = plog.last_records_of_active_producers()
            stats.end_offset = plan.segments[0].start_offset
            for md in plan.segments:
                if md.start_offset >= end_offset or cancelled():
                    break
                seg = fetched.pop(md.start_offset, None)
                if seg is None:
                    seg = self._fetch(md, scratch / "fetched")
                    stats.segments_read += 1
                stats.bytes_read += seg.size
                self._replace(state, plog, md, seg, source, record_filter, txns, last_records, scratch, now, stats)
                seg.close()
                seg.log_path.unlink()
                # the next round's dirty part starts where this round's map ended (Kafka's checkpoint), even
                # inside the last segment cleaned: keys past the map's end were not mapped yet
                stats.end_offset = min(md.end_offset + 1, end_offset)
            for seg in fetched.values():
                seg.close()
        stats.cleaner.ended = time.monotonic()
        return stats

    def _replace(self, state: PartitionState, plog: TieredLog, md: RemoteLogSegmentMetadata, seg: LogSegment,
                 source: _FetchedSegments, record_filter: RecordFilter, txns: CleanedTransactionMetadata,
                 last_records: dict[int, tuple[int, int]], scratch: Path, now: int, stats: RemoteCleanStats) -> None:
        cfg = plog.config
        out_dir = scratch / "cleaned"
        dest = LogSegment(out_dir, md.start_offset, index_interval_bytes=cfg.index_interval_bytes,
                          max_index_size=cfg.segment_index_bytes, created_ms=now, active=True)
        try:
            self._cleaner.clean_segment(source, seg, md.end_offset + 1, dest, record_filter, txns, last_records)
            if dest.size == seg.size and filecmp.cmp(dest.log_path, seg.log_path, shallow=False):
                return  # nothing changed: the old copy stays, no request spent
            self._upload(state, md, dest, scratch)
            stats.segments_replaced += 1
            stats.bytes_written += dest.size
        finally:
            dest.close()
            for p in (dest.log_path, dest.offset_index_path, dest.time_index_path, dest.txn_index_path):
                p.unlink(missing_ok=True)

    def _upload(self, state: PartitionState, old: RemoteLogSegmentMetadata, dest: LogSegment, scratch: Path) -> None:
        """The replacement goes up (STARTED, upload, FINISHED: from then on it is the copy served), then the
        old copy is deleted. Compaction changes neither the producer state at the segment's end nor its
        leader epochs, so the old segment's producer snapshot and leader-epoch index are reused."""
        stem = scratch / str(old.remote_log_segment_id.id)
        snapshot = self._get(old, IndexType.PRODUCER_SNAPSHOT, Path(f"{stem}.snapshot"))
        epochs = self._get(old, IndexType.LEADER_EPOCH, Path(f"{stem}.leader-epoch")).read_bytes()
        txn = dest.txn_index_path if dest.txn_index_path.exists() and dest.txn_index_path.stat().st_size else None
        new = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(state.tip),
            start_offset=old.start_offset,
            end_offset=old.end_offset,
            # record timestamps never change; keeping the old maximum never lets retention delete earlier
            max_timestamp_ms=old.max_timestamp_ms,
            broker_id=self._broker_id,
            # strictly later than the old copy's: readers of manifests take the latest upload
            event_timestamp_ms=max(self._clock(), old.event_timestamp_ms + 1),
            segment_size_in_bytes=dest.size,
            segment_leader_epochs=dict(old.segment_leader_epochs),
            tx_index_present=txn is not None,
        )
        data = LogSegmentData(log_segment=dest.log_path, offset_index=dest.offset_index_path,
                              time_index=dest.time_index_path, transaction_index=txn,
                              producer_snapshot_index=snapshot, leader_epoch_index=epochs)
        # expiration leaves both alone meanwhile: the upload in progress, and the old copy, superseded from
        # the replacement's COPY_SEGMENT_FINISHED on, that this round deletes itself (two deletions of one
        # segment would publish its DELETE_SEGMENT_FINISHED twice)
        ids = {new.remote_log_segment_id.id, old.remote_log_segment_id.id}
        state.being_copied |= ids
        try:
            self._lifecycle.copy(new, data, self._custom_metadata_max_bytes)
            self._lifecycle.delete(old)
        finally:
            state.being_copied -= ids
        log.info("%s: compacted remote segment [%d, %d] from %d to %d bytes as %s", state.tip, old.start_offset,
                 old.end_offset, old.segment_size_in_bytes, new.segment_size_in_bytes, new.remote_log_segment_id.id)


class RLMRemoteCleaningTask:
    """The leader's remote cleaning of one compacted partition, scheduled on the RLM's expiration pool:
    each run plans by the dirty-ratio rules and, when a round is due, runs it."""

    def __init__(self, state: PartitionState, logs: Callable[[], TieredLog | None],
                 lifecycle: RemoteSegmentLifecycle, cleaner: RemoteCleaner, closing: Callable[[], bool],
                 clock: Callable[[], int] | None = None) -> None:
        self.state = state
        self._log = logs
        self._lifecycle = lifecycle
        self._cleaner = cleaner
        self._closing = closing
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)

    def run(self, ctx: TaskContext) -> RemoteCleanStats | None:
        plog = self._log()
        if (plog is None or not plog.config.compact or not plog.config.remote_storage_enable
                or not self._lifecycle.ready(self.state.tip)):
            return None
        cfg = plog.config
        served = served_segments(self._lifecycle, plog, self.state)
        if self.state.remote_clean_offset is None and not self._load_clean_offset(served):
            return None
        clean_offset = self.state.remote_clean_offset or 0
        self._publish_clean_offset()  # a publication that failed after the last round
        plan = plan_remote_clean(served, clean_offset, cfg.min_compaction_lag_ms,
                                 cfg.max_compaction_lag_ms, cfg.min_cleanable_dirty_ratio, self._clock())
        if plan is None:
            return None
        stats = self._cleaner.try_clean(self.state, plog, plan, lambda: ctx.cancelled or self._closing())
        if stats is None:
            return None
        self.state.remote_clean_offset = max(clean_offset, stats.end_offset)
        c = stats.cleaner
        log.info("%s: cleaned the remote tier from offset %d up to offset %d: %d segment(s) read, %d replaced, "
                 "%.1f MB read, %.1f MB written, %.0f%% of the records kept", self.state.tip, plan.first_dirty_offset,
                 stats.end_offset, stats.segments_read, stats.segments_replaced, stats.bytes_read / 1e6,
                 stats.bytes_written / 1e6, 100.0 * c.filter.messages_retained / max(c.filter.messages_read, 1))
        self._publish_clean_offset()
        return stats

    def _load_clean_offset(self, served: list[RemoteLogSegmentMetadata]) -> bool:
        """Where the last leader left the tier clean (0 when none did). Never past the served segments' end:
        offsets above it were never cleaned here, whatever the object says; a malformed one counts as none.
        False: the store cannot be read now (the next run tries again; cleaning without it would redo what
        is clean already)."""
        malformed = False
        try:
            kept = self._lifecycle.read_cleaner_offset(self.state.tip)
        except MalformedPartitionObjectError as exc:  # not to be trusted: clean from the start
            log.warning("%s: ignoring the remote cleaner offset in the remote tier: %s", self.state.tip,
                        " ".join(str(exc).split())[:300])
            kept, malformed = None, True
        except Exception as exc:
            tiering_log.log(("cleaner-offset", self.state.tip), logging.WARNING,
                            "%s: cannot read the remote cleaner offset from the remote tier: %s", self.state.tip,
                            " ".join(str(exc).split())[:300])
            return False
        offset = kept or 0
        if served:
            offset = min(offset, served[-1].end_offset + 1)
        self.state.remote_clean_offset = offset
        # a malformed object is replaced at once (published differs), else only when a round moves it
        self.state.published_clean_offset = None if malformed else offset
        if offset:
            log.info("%s: the remote tier is clean up to offset %d (kept by the last leader)", self.state.tip, offset)
        return True

    def _publish_clean_offset(self) -> None:
        offset = self.state.remote_clean_offset
        if offset is None or offset == self.state.published_clean_offset:
            return
        try:
            self._lifecycle.publish_cleaner_offset(self.state.tip, offset)
        except Exception as exc:  # kept in memory meanwhile; the next run tries again
            tiering_log.log(("cleaner-offset", self.state.tip), logging.WARNING,
                            "%s: cannot keep the remote cleaner offset %d in the remote tier: %s", self.state.tip,
                            offset, " ".join(str(exc).split())[:300])
            return
        self.state.published_clean_offset = offset
