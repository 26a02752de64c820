"""The classic-protocol group coordinator: one object the server's group handlers call.

A state machine that never touches a socket. Each request is answered by the part that owns its
seam (Kafka keeps them all in GroupCoordinator and GroupMetadataManager):
`membership.GroupMembership` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the rebalance),
`offsets.CommittedOffsets` (OffsetCommit, OffsetFetch, OffsetDelete), `txn_offsets.TransactionalOffsets`
(TxnOffsetCommit and the transaction markers that settle it), `admin.GroupAdmin` (ListGroups,
DescribeGroups, DeleteGroups); `loader.load_groups` rebuilds the group table at start-up. They share
one `CoordinatorState`. Durable state goes through a `GroupStore` as `__consumer_offsets` records;
timers come from a `Scheduler` (the broker's runs on the asyncio loop), among them offset expiry
(`CommittedOffsets.cleanup_group_metadata`) from start-up on and every offsets.retention.check.interval.ms.

Alone, a broker coordinates every group and loads them all at start-up. In a cluster
(`GroupCoordinator.for_cluster`) it coordinates the groups of the `__consumer_offsets` partitions it
leads: `on_elected` loads a partition's groups off the event loop (its groups answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile), `on_resigned` drops them (NOT_COORDINATOR): Kafka's
GroupCoordinator.onElection / onResignation.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tieredlog.coordinator.admin import GroupAdmin
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.contracts import SubscribedTopics
from tieredlog.coordinator.group import GroupMetadata
from tieredlog.coordinator.loader import load_groups, load_records
from tieredlog.coordinator.membership import GroupMembership
from tieredlog.coordinator.offsets import CommittedOffsets
from tieredlog.coordinator.state import CoordinatorState, PartitionOwnership
from tieredlog.coordinator.storage import OFFSETS_TOPIC, GroupStore, MemoryGroupStore, PartitionedGroupStore
from tieredlog.coordinator.timer import Cancellable, Scheduler
from tieredlog.coordinator.txn_offsets import TransactionalOffsets

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(
        self, config: GroupConfig, scheduler: Scheduler, store: GroupStore | None = None, *,
        subscriptions: SubscribedTopics,
    ):
        """`subscriptions` reads the topics of a consumer member's JoinGroup metadata (OffsetDelete
        refuses to delete offsets of topics a live consumer group is subscribed to)."""
        self.state = CoordinatorState(config, scheduler, store if store is not None else MemoryGroupStore())
        self._partitioned: PartitionedGroupStore | None = None
        self._loads: set[asyncio.Task] = set()
        self._cleanup_timer: Cancellable | None = None
        self.membership = GroupMembership(self.state)
        self.offsets = CommittedOffsets(self.state, self.membership, subscriptions)
        self.admin = GroupAdmin(self.state)
        self.join_group = self.membership.join_group
        self.sync_group = self.membership.sync_group
        self.heartbeat = self.membership.heartbeat
        self.leave_group = self.membership.leave_group
        self.commit_offsets = self.offsets.commit_offsets
        self.handle_commit_offsets = self.offsets.handle_commit_offsets
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_offsets = self.offsets.delete_offsets
        self.cleanup_group_metadata = self.offsets.cleanup_group_metadata
        self.list_groups = self.admin.list_groups
        self.describe_group = self.admin.describe_group
        self.delete_groups = self.admin.delete_groups
        self.txn_offsets = TransactionalOffsets(self.state, self.membership)
        self.txn_commit_offsets = self.txn_offsets.txn_commit_offsets
        self.complete_txn = self.txn_offsets.complete_txn
        self.unstable_offsets = self.txn_offsets.unstable

    @classmethod
    def for_cluster(cls, config: GroupConfig, scheduler: Scheduler, store: PartitionedGroupStore, *,
                    subscriptions: SubscribedTopics) -> "GroupCoordinator":
        """A cluster member's coordinator: it serves no group until it leads that group's partition."""
        coordinator = cls(config, scheduler, store, subscriptions=subscriptions)
        coordinator._partitioned = store
        coordinator.state.ownership = PartitionOwnership(store.partition_for)
        return coordinator

    @property
    def config(self) -> GroupConfig:
        return self.state.config

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        return self.state.groups

    @property
    def active(self) -> bool:
        """False until `start` has loaded the store, and after `shutdown`: requests are then refused."""
        return self.state.active

    async def start(self) -> None:
        if self.state.ownership is None:
            self.state.groups = load_groups(self.state.store, self.state.scheduler.wall_clock_ms())
            self._adopt(self.state.groups)
        self.state.active = True
        # Kafka's "delete-expired-group-metadata" task: a first run at start-up, then periodically
        self._schedule_cleanup(0)

    def _schedule_cleanup(self, delay_ms: int) -> None:
        def run() -> None:
            if not self.state.active:
                return
            try:
                self.offsets.cleanup_group_metadata()
            finally:
                self._schedule_cleanup(self.config.offsets_retention_check_interval_ms)

        self._cleanup_timer = self.state.scheduler.call_later(delay_ms, run)

    def _adopt(self, groups: dict[str, GroupMetadata]) -> None:
        for group in groups.values():
            # Restored members keep their assignment if they heartbeat within their session.
            for member in group.members.values():
                self.membership.schedule_heartbeat(group, member)

    async def shutdown(self) -> None:
        self.state.active = False
        if self._cleanup_timer is not None:
            self._cleanup_timer.cancel()
        for task in list(self._loads):
            task.cancel()
        self.membership.shutdown()

    # -- leadership of __consumer_offsets partitions (a cluster) -------------------------------------
    def on_elected(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``partition`` at ``leader_epoch``: load its groups (on the event loop)."""
        own = self.state.ownership
        if own is None or self._partitioned is None:
            return
        if partition in own.owned:
            # led here all along (a new epoch of the same leadership): the groups in memory are current
            own.owned[partition] = max(own.owned[partition], leader_epoch)
            return
        if own.loading.get(partition, -1) >= leader_epoch:
            return
        own.loading[partition] = leader_epoch
        task = asyncio.get_running_loop().create_task(self._load(partition, leader_epoch),
                                                      name=f"load-{OFFSETS_TOPIC}-{partition}")
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)

    def on_resigned(self, partition: int, leader_epoch: int) -> None:
        """Another broker leads ``partition`` now (or nobody): drop its groups."""
        own = self.state.ownership
        if own is None:
            return
        held = own.owned.get(partition, own.loading.get(partition))
        if held is None:
            return  # never led here (a new follower): nothing to drop
        if leader_epoch < held:
            return  # news of an older leadership than the one this broker holds
        own.owned.pop(partition, None)
        own.loading.pop(partition, None)  # a load under way sees this and throws its result away
        dropped = [g for g in self.state.groups if own.partition_for(g) == partition]
        for group_id in dropped:
            self.membership.unload(self.state.groups.pop(group_id))
        log.info("%s-%d: no longer the coordinator, unloaded %d group(s)", OFFSETS_TOPIC, partition, len(dropped))

    async def _load(self, partition: int, leader_epoch: int) -> None:
        own, store = self.state.ownership, self._partitioned
        assert own is not None and store is not None
        now = self.state.scheduler.wall_clock_ms()
        started = time.monotonic()
        try:
            # reading the log is disk I/O: off the event loop, as start-up reads it before serving
            groups = await asyncio.to_thread(lambda: load_records(store.replay_partition(partition), now))
        except Exception:  # noqa: BLE001 - the partition stays unserved here; clients keep looking
            log.exception("%s-%d: loading the groups failed", OFFSETS_TOPIC, partition)
            if own.loading.get(partition) == leader_epoch:
                del own.loading[partition]
            return
        if own.loading.get(partition) != leader_epoch or not self.state.active:
            return  # resigned (or elected again, at a newer epoch) while loading
        del own.loading[partition]
        self.state.groups.update(groups)
        self._adopt(groups)
        own.owned[partition] = leader_epoch
        log.info("%s-%d: loaded %d group(s) in %.0f ms (leader epoch %d)", OFFSETS_TOPIC, partition, len(groups),
                 (time.monotonic() - started) * 1000, leader_epoch)
