"""The leader's copy task (Kafka's RLMCopyTask): tier every rolled segment below the LSO, in order.

Per segment: COPY_SEGMENT_STARTED in the RLMM (metadata before data), the RSM upload, then
COPY_SEGMENT_FINISHED, and only then ``update_highest_offset_in_remote_storage``, which is what
lets local retention delete the segment. A failed upload is deleted from the remote tier and
the whole task is retried later (the scheduler backs off) with a fresh segment id.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tieredlog.rlm.lineage import as_pairs, checkpoint_text, highest_remote_offset, segment_leader_epochs
from tieredlog.rlm.pool import TaskContext
from tieredlog.rsm.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageException,
)

if TYPE_CHECKING:
    from tieredlog.rlm.manager import PartitionState, RemoteLogManager

log = logging.getLogger(__name__)


class CustomMetadataSizeLimitExceededException(RemoteStorageException):
    """The RSM returned custom metadata over remote.log.metadata.custom.metadata.max.bytes;
    Kafka stops copying for the partition until leadership changes."""


def candidate_segments(plog, from_offset: int, lso: int) -> list:
    """Rolled segments whose whole range is below the LSO and that end at or after
    ``from_offset``; never the active segment (``segments_to_copy`` excludes it)."""
    if lso <= 0:
        return []
    return [s for s in plog.segments_to_copy(lso, from_offset) if plog.next_segment_base_offset(s) <= lso]


def find_highest_remote_offset(rlm: "RemoteLogManager", state: "PartitionState", plog) -> int:
    entries = as_pairs(plog.leader_epoch_cache.epoch_entries())
    offset, _ = highest_remote_offset(
        entries, plog.log_end_offset, lambda epoch: rlm.rlmm.highest_offset_for_epoch(state.tip, epoch)
    )
    return offset


def maybe_update_log_start_offset_on_becoming_leader(rlm: "RemoteLogManager", state: "PartitionState", plog) -> None:
    """After a restart or a leadership change the local log may not know that the remote tier
    starts later than its own start (remote retention ran elsewhere): take the earliest
    remote segment of the lineage as the log start (Kafka's findLogStartOffset)."""
    entries = as_pairs(plog.leader_epoch_cache.epoch_entries())
    for epoch, _ in entries:
        segs = list(rlm.rlmm.list_remote_log_segments(state.tip, epoch))
        live = [s for s in segs if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        if live:
            start = min(s.start_offset for s in live)
            start = min(start, plog.high_watermark)
            if start > plog.log_start_offset:
                plog.maybe_increment_log_start_offset(start, "SegmentDeletion")
            return


def copy_task(rlm: "RemoteLogManager", state: "PartitionState", ctx: TaskContext) -> None:
    plog = rlm.get_log(state)
    if plog is None or not rlm.is_tiered(plog) or plog.config.remote_log_copy_disable:
        return
    if not rlm.rlmm_ready(state.tip):
        return  # the RLMM has not loaded this partition's metadata yet: try next interval
    if not state.log_start_checked:
        maybe_update_log_start_offset_on_becoming_leader(rlm, state, plog)
        state.log_start_checked = True
    if state.copied_offset is None:
        state.copied_offset = find_highest_remote_offset(rlm, state, plog)
        plog.update_highest_offset_in_remote_storage(state.copied_offset)
    lso = plog.last_stable_offset
    if lso > 0 and state.copied_offset < lso:
        from_offset = max(state.copied_offset + 1, plog.log_start_offset)
        for segment in candidate_segments(plog, from_offset, lso):
            if ctx.cancelled or rlm.closing:
                return
            if not rlm.copy_quota.acquire(segment.size, lambda: ctx.cancelled or rlm.closing):
                return
            copy_segment(rlm, state, plog, segment)
    rlm.update_copy_lag(state, plog)


def copy_segment(rlm: "RemoteLogManager", state: "PartitionState", plog, segment) -> RemoteLogSegmentMetadata:
    tip = state.tip
    m = rlm.metrics
    next_offset = plog.next_segment_base_offset(segment)
    end_offset = next_offset - 1
    entries = as_pairs(plog.leader_epoch_cache.epoch_entries())
    seg_epochs = segment_leader_epochs(entries, segment.base_offset, next_offset)
    if not seg_epochs:
        # no epoch history (e.g. data written before any leader epoch): attribute it to epoch 0
        seg_epochs = {max(0, plog.leader_epoch_cache.latest_epoch or 0): segment.base_offset}
    txn = Path(segment.txn_index_path) if getattr(segment, "txn_index_path", None) else None
    if txn is not None and (not txn.exists() or txn.stat().st_size == 0):
        txn = None
    snapshot = plog.producer_snapshot_for(segment)
    if snapshot is None or not Path(snapshot).exists():
        raise RemoteStorageException(f"{tip}: no producer snapshot at offset {next_offset}; cannot tier segment")
    segment_id = RemoteLogSegmentId.generate_new(tip)
    md = RemoteLogSegmentMetadata(
        remote_log_segment_id=segment_id,
        start_offset=segment.base_offset,
        end_offset=end_offset,
        max_timestamp_ms=segment.largest_timestamp,
        broker_id=rlm.broker_id,
        event_timestamp_ms=int(time.time() * 1000),
        segment_size_in_bytes=segment.size,
        segment_leader_epochs=seg_epochs,
        tx_index_present=txn is not None,
    )
    state.being_copied.add(segment_id.id)
    try:
        rlm.rlmm_add(md)
        history = [(e, o) for e, o in entries if o < next_offset]
        data = LogSegmentData(
            log_segment=Path(segment.log_path),
            offset_index=Path(segment.offset_index_path),
            time_index=Path(segment.time_index_path),
            transaction_index=txn,
            producer_snapshot_index=Path(snapshot),
            leader_epoch_index=checkpoint_text(history),
        )
        m.copy_requests.labels(tip.topic).inc()
        try:
            custom = rlm.rsm.copy_log_segment_data(md, data)
        except BaseException:
            try:
                rlm.delete_remote_segment(md)  # never leave a half-written object behind
            except Exception:
                log.warning("%s: could not delete failed upload %s", tip, segment_id.id, exc_info=True)
            raise
        if custom is not None and len(custom.value) > rlm.config.custom_metadata_max_bytes:
            try:
                rlm.delete_remote_segment(md)
            finally:
                state.copy_disabled_reason = "custom metadata too large"
            raise CustomMetadataSizeLimitExceededException(
                f"{tip}: custom metadata of {len(custom.value)} bytes exceeds "
                f"remote.log.metadata.custom.metadata.max.bytes={rlm.config.custom_metadata_max_bytes}"
            )
        finished = rlm.rlmm_update(md, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, custom)
        m.copy_bytes.labels(tip.topic).inc(segment.size)
        state.copied_offset = end_offset
        plog.update_highest_offset_in_remote_storage(end_offset)
        rlm.update_copy_lag(state, plog)
        log.info("%s: tiered segment [%d, %d] as %s", tip, md.start_offset, end_offset, segment_id.id)
        return finished
    except BaseException:
        m.copy_errors.labels(tip.topic).inc()
        raise
    finally:
        state.being_copied.discard(segment_id.id)
