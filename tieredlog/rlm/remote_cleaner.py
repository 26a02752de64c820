"""Compaction of the remote tier of a compacted topic (docs/compaction.md, "Compacted topics in the
remote tier").

A round maps the keys of the dirty remote segments with the local cleaner's own ``build_offset_map`` and
rewrites every remote segment up to where the map ends with its batch filter (``Cleaner.clean_segment``),
over the segments fetched into a scratch directory. What stays of adjacent segments is written as one
replacement while it fits one segment (``remote_merge.joins_group``, Kafka's grouping bounds), covering
their offsets with their leader epochs under a new segment id; then the old segments are deleted. The
RLMM serves, for a leader epoch and an offset, the segment finished last that covers it, so the
replacement's COPY_SEGMENT_FINISHED is the one moment readers move from the old copies to the new one; a
crash before it leaves an unfinished upload, after it superseded copies, all removed by the expiration
task. Blocking I/O throughout: the RLM's pools only, never the event loop."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Generator, Iterator

from tieredlog.formats.checkpoints import parse_leader_epoch_checkpoint
from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.txn_index import AbortedTxn, collect_aborted_across, decode_txn_entries
from tieredlog.log.cleaner.batch_filter import RecordFilter, empty_batch
from tieredlog.log.cleaner.cleaner import Cleaner, CleanerStats
from tieredlog.log.cleaner.txn_metadata import CleanedTransactionMetadata
from tieredlog.log.segment import LogSegment, filename_prefix
from tieredlog.log.types import TopicPartition
from tieredlog.records.batch import read_header
from tieredlog.rlm.contracts import TieredLog
from tieredlog.rlm.copier import tiering_log
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rlm.remote_merge import CleanedSize, joins_group, lineage_holds, merged_leader_epochs
from tieredlog.rsm.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
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
    start_offset: int = 0  # where the round's key map started
    segments_written: int = 0  # replacements uploaded; segments_replaced counts the old copies they retired
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
        # one round at a time: the cleaner's offset map is not shared. Held while a round waits for the
        # throttle off its thread too, and then released by whichever thread ends that round.
        self._busy = threading.Lock()
        self._guard = threading.Lock()  # guards _suspended
        self._suspended: _Suspended | None = None

    def update_io_rate(self, bytes_per_second: float) -> None:
        """``log.cleaner.io.max.bytes.per.second`` changed live (AlterConfigs on the broker, as Kafka's
        LogCleaner takes it): the next chunk a round reads or writes is paced by the new rate."""
        self._cleaner.throttler.rate = bytes_per_second

    def try_clean(self, state: PartitionState, plog: TieredLog, plan: RemoteCleanPlan,
                  cancelled: Callable[[], bool]) -> RemoteCleanStats | float | None:
        """Start a round: its figures once it ran to its end, or the seconds to wait before :meth:`resume`
        when it stopped between segments to wait for the throttle (``log.cleaner.io.max.bytes.per.second``)
        off this thread; None while another partition's round holds the cleaner (the task tries next
        interval)."""
        self._drop_abandoned()
        if not self._busy.acquire(blocking=False):
            return None
        try:
            # a round killed with the broker left its scratch files: no round runs now, so all are stale
            if self._scratch_root.is_dir():
                for stale in self._scratch_root.iterdir():
                    shutil.rmtree(stale, ignore_errors=True)
        except BaseException:
            self._busy.release()
            raise
        return self._advance(_Suspended(state.tip, self._steps(state, plog, plan, cancelled), cancelled))

    def resume(self, tip: TopicIdPartition) -> RemoteCleanStats | float | None:
        """Go on with ``tip``'s round stopped for the throttle, as :meth:`try_clean` answers; None when it
        has none."""
        self._drop_abandoned()  # a round of an earlier leadership of the partition is not this one's
        with self._guard:
            s = self._suspended
            if s is None or s.tip != tip:
                return None
            self._suspended = None
        return self._advance(s)

    def _advance(self, s: _Suspended) -> RemoteCleanStats | float:
        try:
            wait = next(s.steps)
        except StopIteration as done:
            self._busy.release()
            return done.value
        except BaseException:
            self._busy.release()
            raise
        with self._guard:
            self._suspended = s
        return wait

    def _drop_abandoned(self, everything: bool = False) -> None:
        """A round stopped for the throttle whose partition this broker no longer leads (its task was
        cancelled and will not resume it) gives the cleaner back; its scratch files go."""
        with self._guard:
            s = self._suspended
            if s is None or not (everything or s.cancelled()):
                return
            self._suspended = None
        s.steps.close()
        self._busy.release()

    def close(self) -> None:
        """The broker stops: a round stopped for the throttle is dropped (the old segments stay served)."""
        self._drop_abandoned(everything=True)

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
        """Clean the remote tier per ``plan`` on this thread, throttle waits included; returns the round's
        figures (``end_offset`` is where the next round's dirty part begins). Stops between segments when
        ``cancelled``."""
        steps = self._steps(state, plog, plan, cancelled)
        while True:
            try:
                wait = next(steps)
            except StopIteration as done:
                return done.value
            time.sleep(wait)

    def _pause(self) -> Iterator[float]:
        """Between two steps of a round: the throttle's debt, to be waited out off this thread when long."""
        wait = self._cleaner.throttler.take_debt()
        if wait >= MIN_YIELD_S:
            yield wait
        elif wait > 0:
            time.sleep(wait)

    def _steps(self, state: PartitionState, plog: TieredLog, plan: RemoteCleanPlan,
               cancelled: Callable[[], bool]) -> Generator[float, None, RemoteCleanStats]:
        """A round, stopping after each segment fetched or cleaned while the throttle is owed time (it
        yields the seconds to wait); returns its figures."""
        stats = RemoteCleanStats(start_offset=plan.first_dirty_offset)
        self._scratch_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="remote-clean-", dir=self._scratch_root) as tmp:
            scratch = Path(tmp)
            fetched: dict[int, LogSegment] = {}
            group: list[_CleanedPart] = []  # cleaned, not yet written
            try:
                now = self._clock()
                aborted = self._aborted(plog, plan.segments, scratch)
                for md in plan.dirty:
                    fetched[md.start_offset] = self._fetch(md, scratch / "fetched")
                    stats.segments_read += 1
                    yield from self._pause()
                dirty_end = plan.dirty[-1].end_offset + 1
                source = _FetchedSegments(plog.topic_partition, dirty_end, aborted)
                dirty_segs = [fetched[m.start_offset] for m in plan.dirty]
                offset_map = self._cleaner.build_offset_map(source, dirty_segs, plan.first_dirty_offset, dirty_end,
                                                            stats.cleaner)
                record_filter = RecordFilter(offset_map, now, plog.config.delete_retention_ms, stats.cleaner.filter)
                r = _Round(state, plog, scratch, source, record_filter, CleanedTransactionMetadata(),
                           plog.last_records_of_active_producers(), now, offset_map.latest_offset + 1, stats, group)
                stats.end_offset = plan.segments[0].start_offset
                yield from self._clean_groups(r, plan, fetched, cancelled)
            finally:  # also a round that failed half-way, or was dropped while it waited
                for part in group:
                    part.seg.close()
                for seg in fetched.values():
                    seg.close()
        stats.cleaner.ended = time.monotonic()
        return stats

    def _clean_groups(self, r: _Round, plan: RemoteCleanPlan, fetched: dict[int, LogSegment],
                      cancelled: Callable[[], bool]) -> Iterator[float]:
        """Clean each segment up to the map's end into a part, and write each run of parts that fits one
        segment (``joins_group``) as one replacement."""
        cfg = r.plog.config
        for md in plan.segments:
            if md.start_offset >= r.end_offset or cancelled():
                break
            seg = fetched.pop(md.start_offset, None)
            if seg is None:
                seg = self._fetch(md, r.scratch / "fetched")
                r.stats.segments_read += 1
            r.stats.bytes_read += seg.size
            part = self._clean_part(r, md, seg)
            seg.close()
            seg.log_path.unlink()
            if r.group and not joins_group([p.size for p in r.group], part.size, cfg.segment_bytes,
                                           cfg.segment_index_bytes):
                self._write_group(r)
            r.group.append(part)
            yield from self._pause()
        if r.group and not cancelled():  # cancelled: a group not yet written is dropped, the old copies stay
            self._write_group(r)

    def _write_group(self, r: _Round) -> None:
        self._replace(r, r.group)
        # the next round's dirty part starts where this round's map ended (Kafka's checkpoint), even inside
        # the last segment cleaned: keys past the map's end were not mapped yet
        r.stats.end_offset = min(r.group[-1].old.end_offset + 1, r.end_offset)
        r.group.clear()

    def _clean_part(self, r: _Round, md: RemoteLogSegmentMetadata, seg: LogSegment) -> _CleanedPart:
        """What stays of one old segment, in a scratch segment of its own, its last batch gone like any other
        when nothing of it stays (the replacement it ends is given its header back)."""
        cfg = r.plog.config
        dest = LogSegment(r.scratch / "cleaned" / str(md.remote_log_segment_id.id), md.start_offset,
                          index_interval_bytes=cfg.index_interval_bytes, max_index_size=cfg.segment_index_bytes,
                          created_ms=r.now, active=True)
        self._cleaner.clean_segment(r.source, seg, md.end_offset + 1, dest, r.record_filter, r.txns, r.last_records,
                                    keep_end=False)
        last_header = None
        for _, h in seg.iter_headers(seg.offset_index.lookup(md.end_offset)[1]):
            last_header = h
        if last_header is None or last_header.last_offset != md.end_offset:
            raise CorruptRecordError(f"remote segment {md.remote_log_segment_id.id} does not end at its end "
                                     f"offset {md.end_offset}")
        marker = b""
        if dest.next_offset != md.end_offset + 1:
            marker = empty_batch(last_header)
            r.record_filter.stats.bytes_retained += len(marker)
        unchanged = dest.size + len(marker) == seg.size and _same_bytes(seg.log_path, dest.log_path, marker)
        size = CleanedSize(md.start_offset, md.end_offset, dict(md.segment_leader_epochs), dest.size,
                           dest.offset_index.size_bytes, dest.time_index.size_bytes)
        return _CleanedPart(md, dest, marker, unchanged, size)

    def _replace(self, r: _Round, group: list[_CleanedPart]) -> None:
        """Write ``group`` as one replacement of its old segments (each part alone when the last one's
        leader-epoch checkpoint does not hold the group's epochs); a lone part that cleaning left as it was
        stays, no request spent."""
        try:
            if len(group) == 1 and group[0].unchanged:
                return
            last = group[-1].old
            epochs_path = self._get(last, IndexType.LEADER_EPOCH, r.scratch / f"{last.remote_log_segment_id.id}.epochs")
            checkpoint = epochs_path.read_bytes()
            if len(group) == 1:
                part = group[0]
                if part.marker:
                    part.seg.make_active()
                    part.seg.append(part.marker, [read_header(part.marker, 0)])
                    part.seg.on_become_inactive()
                part.seg.flush()
                self._upload(r, [part.old], part.seg, dict(part.old.segment_leader_epochs), checkpoint)
                return
            sizes = [p.size for p in group]
            if not lineage_holds(sizes, parse_leader_epoch_checkpoint(checkpoint, str(epochs_path))):
                log.warning("%s: remote segments [%d, %d] do not share one leader-epoch lineage; replaced one by one",
                            r.state.tip, group[0].old.start_offset, last.end_offset)
                for part in group:
                    self._replace(r, [part])
                return
            merged = self._merge(r, group)
            try:
                self._upload(r, [p.old for p in group], merged, merged_leader_epochs(sizes), checkpoint)
            finally:
                _remove_segment(merged)
        finally:
            for part in group:
                _remove_segment(part.seg)

    def _merge(self, r: _Round, group: list[_CleanedPart]) -> LogSegment:
        """One segment of the parts' batches (and the last one's end marker), indexes rebuilt as it is written."""
        cfg = r.plog.config
        merged = LogSegment(r.scratch / "merged", group[0].old.start_offset,
                            index_interval_bytes=cfg.index_interval_bytes, max_index_size=cfg.segment_index_bytes,
                            created_ms=r.now, active=True)
        throttle = self._cleaner.throttler.maybe_throttle
        for part in group:
            chunk_start, headers = 0, []
            for pos, h in part.seg.iter_headers():
                headers.append(h)
                if pos + h.size - chunk_start >= MERGE_CHUNK:
                    merged.append(part.seg.read_bytes(chunk_start, pos + h.size - chunk_start), headers)
                    throttle(pos + h.size - chunk_start)
                    chunk_start, headers = pos + h.size, []
            if headers:
                merged.append(part.seg.read_bytes(chunk_start, part.seg.size - chunk_start), headers)
                throttle(part.seg.size - chunk_start)
            for txn in part.seg.txn_index.aborted_txns:
                merged.txn_index.append(txn)
        marker = group[-1].marker
        if marker:
            merged.append(marker, [read_header(marker, 0)])
        merged.on_become_inactive()
        merged.flush()
        return merged

    def _upload(self, r: _Round, olds: list[RemoteLogSegmentMetadata], dest: LogSegment, epochs: dict[int, int],
                leader_epochs: bytes) -> None:
        """The replacement of ``olds`` goes up (STARTED, upload, FINISHED: from then on it is the copy served
        for all their offsets), then the old copies are deleted. Compaction changes neither the producer state
        at the last one's end nor the leader epochs, so its producer snapshot and leader-epoch index are reused."""
        last = olds[-1]
        state, stats = r.state, r.stats
        stem = r.scratch / str(last.remote_log_segment_id.id)
        snapshot = self._get(last, IndexType.PRODUCER_SNAPSHOT, Path(f"{stem}.snapshot"))
        txn = dest.txn_index_path if dest.txn_index_path.exists() and dest.txn_index_path.stat().st_size else None
        new = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(state.tip),
            start_offset=olds[0].start_offset,
            end_offset=last.end_offset,
            # record timestamps never change; keeping the old maximum never lets retention delete earlier
            max_timestamp_ms=max(m.max_timestamp_ms for m in olds),
            broker_id=self._broker_id,
            # strictly later than the old copies': readers of manifests take the latest upload
            event_timestamp_ms=max(self._clock(), max(m.event_timestamp_ms for m in olds) + 1),
            segment_size_in_bytes=dest.size,
            segment_leader_epochs=epochs,
            tx_index_present=txn is not None,
        )
        data = LogSegmentData(log_segment=dest.log_path, offset_index=dest.offset_index_path,
                              time_index=dest.time_index_path, transaction_index=txn,
                              producer_snapshot_index=snapshot, leader_epoch_index=leader_epochs)
        # expiration leaves them all alone meanwhile: the upload in progress, and the old copies, superseded
        # from the replacement's COPY_SEGMENT_FINISHED on, that this round deletes itself (two deletions of
        # one segment would publish its DELETE_SEGMENT_FINISHED twice)
        ids = {new.remote_log_segment_id.id} | {m.remote_log_segment_id.id for m in olds}
        state.being_copied |= ids
        try:
            self._lifecycle.copy(new, data, self._custom_metadata_max_bytes)
            for old in olds:
                self._lifecycle.delete(old)
        finally:
            state.being_copied -= ids
        stats.segments_written += 1
        stats.segments_replaced += len(olds)
        stats.bytes_written += dest.size
        log.info("%s: compacted remote segment%s [%d, %d] from %d to %d bytes as %s", state.tip,
                 f"s ({len(olds)} merged)" if len(olds) > 1 else "", new.start_offset, new.end_offset,
                 sum(m.segment_size_in_bytes for m in olds), new.segment_size_in_bytes, new.remote_log_segment_id.id)


MERGE_CHUNK = 1 << 20  # a merged replacement is written from its parts this much at a time
# A round owing the throttle less than this sleeps it on its thread; more, and it frees the thread.
MIN_YIELD_S = 0.1
# What the remote cleaner's throttle leaves owed (not slept where the bytes are charged) for a round
# to wait out between segments off its thread (Throttler's defer_s).
THROTTLE_DEFER_S = 2.0


@dataclass(slots=True)
class _Suspended:
    """A round stopped between segments to wait for the throttle, and the partition it cleans."""

    tip: TopicIdPartition
    steps: Generator[float, None, RemoteCleanStats]
    cancelled: Callable[[], bool]


@dataclass(slots=True)
class _Round:
    """What the steps of one remote cleaning round share."""

    state: PartitionState
    plog: TieredLog
    scratch: Path
    source: _FetchedSegments
    record_filter: RecordFilter
    txns: CleanedTransactionMetadata
    last_records: dict[int, tuple[int, int]]
    now: int
    end_offset: int  # where the key map ends: no segment starting there or later is cleaned
    stats: RemoteCleanStats
    group: list[_CleanedPart] = field(default_factory=list)  # cleaned, not yet written


@dataclass(slots=True)
class _CleanedPart:
    """One old remote segment cleaned into a scratch segment of its own (``seg``), not yet uploaded."""

    old: RemoteLogSegmentMetadata
    seg: LogSegment
    marker: bytes  # the old last batch's header, when nothing of that batch stays: the replacement's end
    unchanged: bool  # ``seg`` and ``marker`` are the old segment byte for byte
    size: CleanedSize


def _same_bytes(old: Path, kept: Path, tail: bytes) -> bool:
    """Whether ``old`` holds exactly ``kept``'s bytes followed by ``tail`` (sizes already equal)."""
    with open(old, "rb") as a, open(kept, "rb") as b:
        while chunk := b.read(MERGE_CHUNK):
            if a.read(len(chunk)) != chunk:
                return False
        return a.read() == tail


def _remove_segment(seg: LogSegment) -> None:
    seg.close()
    for p in (seg.log_path, seg.offset_index_path, seg.time_index_path, seg.txn_index_path):
        p.unlink(missing_ok=True)


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
        """A round's figures when one ended in this run; a round stopped for the throttle asks for the next
        run when its wait is over (``ctx.run_again_in_s``) and goes on then."""
        resumed = self._cleaner.resume(self.state.tip)
        if resumed is not None:
            return self._round_over(ctx, resumed)
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
        started = self._cleaner.try_clean(self.state, plog, plan, lambda: ctx.cancelled or self._closing())
        return None if started is None else self._round_over(ctx, started)

    def _round_over(self, ctx: TaskContext, outcome: RemoteCleanStats | float) -> RemoteCleanStats | None:
        if not isinstance(outcome, RemoteCleanStats):
            ctx.run_again_in_s = outcome  # waiting for the throttle, its thread free meanwhile
            return None
        stats = outcome
        self.state.remote_clean_offset = max(self.state.remote_clean_offset or 0, stats.end_offset)
        c = stats.cleaner
        log.info("%s: cleaned the remote tier from offset %d up to offset %d: %d segment(s) read, %d replaced by %d, "
                 "%.1f MB read, %.1f MB written, %.0f%% of the records kept", self.state.tip, stats.start_offset,
                 stats.end_offset, stats.segments_read, stats.segments_replaced, stats.segments_written,
                 stats.bytes_read / 1e6, stats.bytes_written / 1e6,
                 100.0 * c.filter.messages_retained / max(c.filter.messages_read, 1))
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
