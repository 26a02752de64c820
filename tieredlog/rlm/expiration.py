"""The leader's expiration task (Kafka's RLMExpirationTask): remote retention.

Total retention (``retention.ms`` by a segment's max timestamp, ``retention.bytes`` over remote +
local-only bytes) and the log start offset (DeleteRecords) decide which remote segments go. The
log start offset is moved first, then each segment is deleted through DELETE_SEGMENT_STARTED ->
RSM delete -> DELETE_SEGMENT_FINISHED, so a crash in between leaves a DELETE_STARTED record the
next run retries. Leftovers are cleaned as well: orphaned COPY_SEGMENT_STARTED uploads (a copy
interrupted by a crash) and copies superseded by another copy of the same offsets.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from tieredlog.formats.lineage import as_pairs, is_within_lineage, segment_epoch_bounds
from tieredlog.rlm.contracts import LogProvider, TieredLog
from tieredlog.rlm.copier import tiering_log
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.metrics import RemoteStorageMetrics
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rsm.api import RemoteLogSegmentMetadata, RemoteLogSegmentState

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
_WHY = {S.COPY_SEGMENT_STARTED: "an upload that never finished", S.DELETE_SEGMENT_STARTED: "a deletion that never finished"}


class RLMExpirationTask:
    def __init__(
        self,
        state: PartitionState,
        logs: LogProvider,
        lifecycle: RemoteSegmentLifecycle,
        metrics: RemoteStorageMetrics,
        is_tiered: Callable[[TieredLog], bool],
        closing: Callable[[], bool],
    ) -> None:
        self.state = state
        self._logs = logs
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._is_tiered = is_tiered
        self._closing = closing

    def run(self, ctx: TaskContext) -> None:
        plog = self._logs.get_log(self.state.tp)
        if plog is None or not self._is_tiered(plog) or not self._lifecycle.ready(self.state.tip):
            return
        to_delete, new_log_start = self.plan(plog)
        if new_log_start is not None and new_log_start > plog.log_start_offset:
            # move the log start first: readers are sent below it no more before the data goes
            plog.maybe_increment_log_start_offset(new_log_start, "SegmentDeletion")
        self._publish_log_start(plog)
        for md in to_delete:
            if ctx.cancelled or self._closing():
                return
            self._lifecycle.delete(md)
            tiering_log.log(("deleted", self.state.tip), logging.INFO,
                            "%s: deleted remote segment [%d, %d] (%d bytes, %s): %s", self.state.tip,
                            md.start_offset, md.end_offset, md.segment_size_in_bytes,
                            md.remote_log_segment_id.id, _WHY.get(md.state, "remote retention"))

    def _publish_log_start(self, plog: TieredLog) -> None:
        """Readers without a broker see only the tier: when the log start has moved past the start of a
        committed remote segment (DeleteRecords inside it, or before the segments below it are
        deleted), publish it there first, so those readers skip the records Kafka no longer has."""
        log_start = plog.log_start_offset
        if log_start == self.state.published_log_start:
            return
        starts = [m.start_offset for m in self._lifecycle.segments(self.state.tip) if m.state == S.COPY_SEGMENT_FINISHED]
        if not starts or log_start <= min(starts):
            return
        try:
            self._lifecycle.publish_log_start(self.state.tip, log_start)
        except Exception as exc:  # retried on the next run; the deletions below do not depend on it
            tiering_log.log(("log-start", self.state.tip), logging.WARNING,
                            "%s: cannot publish log start offset %d to the remote tier: %s", self.state.tip,
                            log_start, " ".join(str(exc).split())[:300])
            return
        self.state.published_log_start = log_start

    def _superseded(self, md: RemoteLogSegmentMetadata) -> bool:
        """A FINISHED copy whose whole range the RLMM now serves from other copies (a new leader
        re-uploaded those offsets): nothing will ever read it again."""
        for epoch, first, last in segment_epoch_bounds(md):
            for offset in (first, last):
                other = self._lifecycle.segment_for(self.state.tip, epoch, offset)
                if other is None or other.remote_log_segment_id == md.remote_log_segment_id:
                    return False
        return True

    def plan(self, plog: TieredLog, now_ms: int | None = None) -> tuple[list[RemoteLogSegmentMetadata], int | None]:
        """(segments to delete, new log start offset or None). Pure planning, no side effects."""
        state = self.state
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        segments = sorted(self._lifecycle.segments(state.tip), key=lambda m: (m.start_offset, m.end_offset))
        cfg = plog.config
        lineage = as_pairs(plog.leader_epoch_cache.epoch_entries())
        log_start = plog.log_start_offset
        highest_remote = plog.highest_offset_in_remote_storage
        to_delete: list[RemoteLogSegmentMetadata] = []
        seen: set = set()

        def add(md: RemoteLogSegmentMetadata) -> None:
            if md.remote_log_segment_id not in seen:
                seen.add(md.remote_log_segment_id)
                to_delete.append(md)

        finished = [m for m in segments if m.state == S.COPY_SEGMENT_FINISHED]
        valid = [m for m in finished if not lineage or is_within_lineage(m, lineage, plog.log_end_offset)]
        labels = (state.tip.topic, str(state.tip.partition))
        self._metrics.remote_log_size_bytes.labels(*labels).set(sum(m.segment_size_in_bytes for m in finished))
        self._metrics.remote_log_metadata_count.labels(*labels).set(len(segments))

        for md in segments:
            if md.remote_log_segment_id.id in state.being_copied:
                continue
            if md.state == S.DELETE_SEGMENT_STARTED:
                add(md)  # an earlier delete failed half-way: finish it
            elif md.state == S.COPY_SEGMENT_STARTED:
                # an upload that never finished (crash, failover): once its range is tiered again by a
                # finished copy, or fell below the log start, nothing can still be writing it
                if md.end_offset <= highest_remote or md.end_offset < log_start:
                    add(md)
            elif md.end_offset < log_start:
                add(md)  # DeleteRecords or an earlier retention run moved the log start past it
            elif md.end_offset <= highest_remote and self._superseded(md):
                add(md)  # a duplicate: another copy of the same offsets is the one the RLMM serves

        new_log_start: int | None = None
        remaining = 0
        if cfg.retention_bytes >= 0 and cfg.delete:  # a compact-only topic keeps every key's latest value
            remote_size = sum(m.segment_size_in_bytes for m in valid if m.remote_log_segment_id not in seen)
            total = remote_size + plog.only_local_log_segments_size()
            remaining = max(0, total - cfg.retention_bytes)
        cleanup_until = now_ms - cfg.retention_ms if cfg.retention_ms >= 0 and cfg.delete else None
        for md in valid:
            if md.remote_log_segment_id in seen:
                continue
            if md.remote_log_segment_id.id in state.being_copied:
                break
            delete = False
            if cleanup_until is not None and md.max_timestamp_ms <= cleanup_until:
                delete = True
            elif remaining > 0 and remaining - md.segment_size_in_bytes >= 0:
                remaining -= md.segment_size_in_bytes
                delete = True
            if not delete:
                break  # retention deletes a prefix of the log, never a hole in the middle
            add(md)
            new_log_start = max(new_log_start or 0, md.end_offset + 1)
        return to_delete, new_log_start
