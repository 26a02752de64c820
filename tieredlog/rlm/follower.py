"""The follower's task: keep ``highest_offset_in_remote_storage`` current from the remote metadata,
so local retention on a follower deletes only what the leader has tiered."""

from __future__ import annotations

from tieredlog.rlm.contracts import LogProvider
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.lineage import as_pairs, highest_remote_offset
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext


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
