"""The follower's side of the remote tier.

``RLMFollowerTask`` keeps ``highest_offset_in_remote_storage`` current from the remote metadata, so
local retention on a follower deletes only what the leader has tiered. ``fetch_aux_state`` reads
what a follower rebuilding from the remote tier needs (KIP-405's BuildingRemoteLogAuxState).
"""

from __future__ import annotations

from dataclasses import dataclass

from tieredlog.formats.checkpoints import parse_leader_epoch_checkpoint
from tieredlog.formats.lineage import as_pairs, highest_remote_offset
from tieredlog.log.types import EpochEntry
from tieredlog.rlm.contracts import LogProvider
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.metrics import metrics
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rsm.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)


class RLMFollowerTask:
    def __init__(self, state: PartitionState, logs: LogProvider, lifecycle: RemoteSegmentLifecycle) -> None:
        self.state = state
        self._logs = logs
        self._lifecycle = lifecycle

    def run(self, ctx: TaskContext) -> None:
        tip = self.state.tip
        plog = self._logs.get_log(self.state.tp)
        if plog is None or not self._lifecycle.ready(tip):
            return
        offset, _ = highest_remote_offset(
            as_pairs(plog.leader_epoch_cache.epoch_entries()),
            plog.log_end_offset,
            lambda epoch: self._lifecycle.highest_offset_for_epoch(tip, epoch),
        )
        plog.update_highest_offset_in_remote_storage(offset)


@dataclass(frozen=True, slots=True)
class RemoteLogAuxState:
    """What a follower needs of the remote tier to start replicating at ``next_offset`` (KIP-405's
    auxiliary state): the leader-epoch lineage and the producer snapshot shipped with the remote
    segment that ends at ``next_offset - 1``."""

    segment: RemoteLogSegmentMetadata
    epochs: list[EpochEntry]
    producer_snapshot: bytes | None

    @property
    def next_offset(self) -> int:
        return self.segment.end_offset + 1


def fetch_aux_state(lifecycle: RemoteSegmentLifecycle, rsm: RemoteStorageManager, tip: TopicIdPartition,
                    target_epoch: int, target_offset: int) -> RemoteLogAuxState:
    """Kafka's TierStateMachine#buildRemoteLogAuxState, the remote half. Blocking (RLMM and object
    store): runs on the remote reader pool. Raises while the RLMM has no finished segment holding
    ``target_offset`` in ``target_epoch`` yet (the leader's metadata record may still be on its way):
    the fetcher retries."""
    md = lifecycle.segment_for(tip, target_epoch, target_offset)
    if md is None:
        raise RemoteStorageException(
            f"{tip}: previous remote log segment metadata was not found for epoch {target_epoch} "
            f"and offset {target_offset}")
    usage = metrics().object_store
    with rsm.fetch_index(md, IndexType.LEADER_EPOCH) as f:
        raw = f.read()
    usage.record(tip.topic, "GET", 1, len(raw))
    epochs = [EpochEntry(*e) for e in parse_leader_epoch_checkpoint(
        raw, f"remote leader-epoch index of {md.remote_log_segment_id.id}")]
    try:
        with rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as f:
            snapshot: bytes | None = f.read()
    except RemoteResourceNotFoundException:
        snapshot = None  # segments tiered before producer snapshots existed: the state starts empty
    usage.record(tip.topic, "GET", 1, len(snapshot or b""))
    return RemoteLogAuxState(md, epochs, snapshot)
