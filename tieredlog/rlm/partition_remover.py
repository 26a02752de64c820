"""The remote partition remover of a cluster (KIP-405's RPRM).

When a topic is deleted, every replica stops and drops its local log; the remote data must go too,
once, whoever hosted the partition. The controller, after every replica has answered StopReplica,
records ``DELETE_PARTITION_MARKED`` for each partition (``mark``). The broker that leads the
``__remote_log_metadata`` partition a user partition maps to reads that whole metadata partition and
deletes the marked partitions' segments between ``DELETE_PARTITION_STARTED`` and ``FINISHED``. The
markers live in the replicated metadata topic, so a new metadata leader resumes what a failed one
left (a partition left STARTED is started again; every step is idempotent).
"""

from __future__ import annotations

import logging
from typing import Iterable, Protocol

from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.pool import FixedDelayScheduler, TaskContext
from tieredlog.rsm.api import RemotePartitionDeleteState, TopicIdPartition

log = logging.getLogger(__name__)


class PartitionDeleteSource(Protocol):
    """What the remover needs of the RLMM: whole metadata partitions and their pending deletions."""

    def load_metadata_partition(self, p: int) -> None: ...

    def partitions_pending_delete(self, p: int) -> list[TopicIdPartition]: ...


class RemotePartitionRemover:
    def __init__(self, rlmm: PartitionDeleteSource, lifecycle: RemoteSegmentLifecycle,
                 scheduler: FixedDelayScheduler, interval_ms: int) -> None:
        self.rlmm = rlmm
        self.lifecycle = lifecycle
        self.scheduler = scheduler
        self.interval_ms = interval_ms

    def mark(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Record DELETE_PARTITION_MARKED for ``partitions`` in the background, retried until written.
        Cheap: safe to call on the controller's event thread."""
        for tip in partitions:
            key = ("mark-deleted", tip)

            def run(ctx: TaskContext, tip: TopicIdPartition = tip, key: tuple = key) -> None:
                self.lifecycle.mark_partition(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
                self.scheduler.cancel(key)
                log.info("%s: marked for remote deletion", tip)

            self.scheduler.schedule(key, run, self.interval_ms)

    def on_metadata_leadership(self, metadata_partition: int, is_leader: bool) -> None:
        key = ("remover", metadata_partition)
        if not is_leader:
            self.scheduler.cancel(key)
            return
        self.rlmm.load_metadata_partition(metadata_partition)

        def run(ctx: TaskContext) -> None:
            for tip in self.rlmm.partitions_pending_delete(metadata_partition):
                if ctx.cancelled:
                    return
                if self.lifecycle.delete_partition(tip, lambda: ctx.cancelled):
                    log.info("%s: remote data deleted (the topic was deleted)", tip)

        self.scheduler.schedule(key, run, self.interval_ms)
