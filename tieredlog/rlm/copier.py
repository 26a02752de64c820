"""The leader's copy task (Kafka's RLMCopyTask): tier every rolled segment below the LSO, in order.

Per segment the ``RemoteSegmentLifecycle`` records COPY_SEGMENT_STARTED, uploads and records
COPY_SEGMENT_FINISHED; only then ``update_highest_offset_in_remote_storage`` runs, which is what
lets local retention delete the segment. A failed upload is deleted from the remote tier and the
whole task is retried later (the scheduler backs off) with a fresh segment id.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Sequence

from tieredlog.formats.checkpoints import encode_leader_epoch_checkpoint
from tieredlog.formats.lineage import as_pairs, highest_remote_offset, segment_leader_epochs
from tieredlog.rate_limited_log import RateLimitedLog
from tieredlog.rlm.contracts import LogProvider, LogSegmentView, TieredLog
from tieredlog.rlm.lifecycle import CustomMetadataSizeLimitExceededException, RemoteSegmentLifecycle
from tieredlog.rlm.metrics import RemoteStorageMetrics
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rlm.quota import RLMQuotaManager
from tieredlog.rsm.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageException,
)

__all__ = ["CustomMetadataSizeLimitExceededException", "RLMCopyTask", "candidate_segments", "update_copy_lag"]

log = logging.getLogger(__name__)

# one INFO line per tiered segment, up to this many per partition a minute; the next line after a
# busy minute (a backlog being tiered) says how many were left out
TIERING_LINES_PER_MINUTE = 10
tiering_log = RateLimitedLog(log, 60.0, burst=TIERING_LINES_PER_MINUTE)


def candidate_segments(plog: TieredLog, from_offset: int, lso: int) -> list[LogSegmentView]:
    """Rolled segments whose whole range is below the LSO and that end at or after
    ``from_offset``; never the active segment (``segments_to_copy`` excludes it)."""
    if lso <= 0:
        return []
    return [s for s in plog.segments_to_copy(lso, from_offset) if plog.next_segment_base_offset(s) <= lso]


def update_copy_lag(metrics: RemoteStorageMetrics, state: PartitionState, plog: TieredLog) -> None:
    pending: Sequence[LogSegmentView] = plog.only_local_log_segments()[:-1]  # the active one is not due yet
    labels = (state.tp.topic, str(state.tp.partition))
    metrics.copy_lag_bytes.labels(*labels).set(sum(s.size for s in pending))
    metrics.copy_lag_segments.labels(*labels).set(len(pending))


class RLMCopyTask:
    def __init__(
        self,
        state: PartitionState,
        logs: LogProvider,
        lifecycle: RemoteSegmentLifecycle,
        quota: RLMQuotaManager,
        metrics: RemoteStorageMetrics,
        is_tiered: Callable[[TieredLog], bool],
        closing: Callable[[], bool],
        broker_id: int,
        custom_metadata_max_bytes: int,
    ) -> None:
        self.state = state
        self._logs = logs
        self._lifecycle = lifecycle
        self._quota = quota
        self._metrics = metrics
        self._is_tiered = is_tiered
        self._closing = closing
        self._broker_id = broker_id
        self._custom_metadata_max_bytes = custom_metadata_max_bytes

    def run(self, ctx: TaskContext) -> None:
        state = self.state
        if state.copy_disabled_reason:
            return
        plog = self._logs.get_log(state.tp)
        if plog is None or not self._is_tiered(plog) or plog.config.remote_log_copy_disable:
            return
        if not self._lifecycle.ready(state.tip):
            return  # the RLMM has not loaded this partition's metadata yet: try next interval
        if not state.log_start_checked:
            self._maybe_update_log_start_offset_on_becoming_leader(plog)
            state.log_start_checked = True
        if state.copied_offset is None:
            state.copied_offset = self._highest_remote_offset(plog)
            plog.update_highest_offset_in_remote_storage(state.copied_offset)
        lso = plog.last_stable_offset
        # before copying, as Kafka records it: with the object store down the lag still shows growing
        update_copy_lag(self._metrics, state, plog)
        if lso > 0 and state.copied_offset < lso:
            from_offset = max(state.copied_offset + 1, plog.log_start_offset)
            for segment in candidate_segments(plog, from_offset, lso):
                if ctx.cancelled or self._closing():
                    return
                if not self._quota.acquire(segment.size, lambda: ctx.cancelled or self._closing()):
                    return
                self.copy_segment(plog, segment)
        update_copy_lag(self._metrics, state, plog)

    def _highest_remote_offset(self, plog: TieredLog) -> int:
        entries = as_pairs(plog.leader_epoch_cache.epoch_entries())
        offset, _ = highest_remote_offset(
            entries, plog.log_end_offset, lambda epoch: self._lifecycle.highest_offset_for_epoch(self.state.tip, epoch)
        )
        return offset

    def _maybe_update_log_start_offset_on_becoming_leader(self, plog: TieredLog) -> None:
        """After a restart or a leadership change the local log may not know that the remote tier
        starts later than its own start (remote retention ran elsewhere): take the earliest
        remote segment of the lineage as the log start (Kafka's findLogStartOffset)."""
        for epoch, _ in as_pairs(plog.leader_epoch_cache.epoch_entries()):
            live = [s for s in self._lifecycle.segments(self.state.tip, epoch)
                    if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
            if live:
                start = min(min(s.start_offset for s in live), plog.high_watermark)
                if start > plog.log_start_offset:
                    plog.maybe_increment_log_start_offset(start, "SegmentDeletion")
                return

    def copy_segment(self, plog: TieredLog, segment: LogSegmentView) -> RemoteLogSegmentMetadata:
        state = self.state
        tip = state.tip
        next_offset = plog.next_segment_base_offset(segment)
        end_offset = next_offset - 1
        entries = as_pairs(plog.leader_epoch_cache.epoch_entries())
        seg_epochs = segment_leader_epochs(entries, segment.base_offset, next_offset)
        if not seg_epochs:
            # no epoch history (e.g. data written before any leader epoch): attribute it to epoch 0
            seg_epochs = {max(0, plog.leader_epoch_cache.latest_epoch or 0): segment.base_offset}
        txn_path = Path(segment.txn_index_path)
        txn = txn_path if txn_path.exists() and txn_path.stat().st_size > 0 else None
        snapshot = plog.producer_snapshot_for(segment)
        if snapshot is None or not Path(snapshot).exists():
            raise RemoteStorageException(f"{tip}: no producer snapshot at offset {next_offset}; cannot tier segment")
        segment_id = RemoteLogSegmentId.generate_new(tip)
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id,
            start_offset=segment.base_offset,
            end_offset=end_offset,
            max_timestamp_ms=segment.largest_timestamp,
            broker_id=self._broker_id,
            event_timestamp_ms=int(time.time() * 1000),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=seg_epochs,
            tx_index_present=txn is not None,
        )
        data = LogSegmentData(
            log_segment=Path(segment.log_path),
            offset_index=Path(segment.offset_index_path),
            time_index=Path(segment.time_index_path),
            transaction_index=txn,
            producer_snapshot_index=Path(snapshot),
            leader_epoch_index=encode_leader_epoch_checkpoint([(e, o) for e, o in entries if o < next_offset]),
        )
        state.being_copied.add(segment_id.id)
        started = time.monotonic()
        try:
            finished = self._lifecycle.copy(md, data, self._custom_metadata_max_bytes)
        except CustomMetadataSizeLimitExceededException:
            state.copy_disabled_reason = "custom metadata too large"
            self._metrics.copy_errors.labels(tip.topic).inc()
            raise
        except BaseException:
            self._metrics.copy_errors.labels(tip.topic).inc()
            raise
        finally:
            state.being_copied.discard(segment_id.id)
        self._metrics.copy_bytes.labels(tip.topic).inc(segment.size)
        state.copied_offset = end_offset
        plog.update_highest_offset_in_remote_storage(end_offset)
        update_copy_lag(self._metrics, state, plog)
        tiering_log.log(("copied", tip), logging.INFO, "%s: copied segment [%d, %d] (%d bytes) to the remote tier "
                        "in %.2f s as %s", tip, md.start_offset, end_offset, segment.size,
                        time.monotonic() - started, segment_id.id)
        return finished
