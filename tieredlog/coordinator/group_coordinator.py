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

KIP-848 consumer groups (`consumer_group.ConsumerGroupCoordinator`: ConsumerGroupHeartbeat,
ConsumerGroupDescribe) share the state, the store and the loading; each keeps its committed offsets in a
GroupMetadata of its id without classic members. An empty classic group becomes a consumer group on its
first consumer heartbeat; one with members is upgraded (KIP-848's online migration, consumer_group/
migration.py) when group.consumer.migration.policy allows it and it uses the consumer protocol, else the
heartbeat gets GROUP_ID_NOT_FOUND. The classic calls on a consumer group's id are served by the consumer
group (consumer_group/classic_members.py), which goes back to classic when its last consumer-protocol
member leaves. Without the consumer protocol's codec (`protocol`), the classic calls refuse a consumer
group's id (JoinGroup: INCONSISTENT_GROUP_PROTOCOL, the others UNKNOWN_MEMBER_ID).

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
from typing import Awaitable

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.admin import GroupAdmin, GroupSummary, MemberSummary
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.consumer_group.coordinator import ConsumerGroupCoordinator
from tieredlog.coordinator.consumer_group.group import ConsumerGroup
from tieredlog.coordinator.consumer_group.migration import EmbeddedConsumerProtocol
from tieredlog.coordinator.contracts import SubscribedTopics
from tieredlog.coordinator.group import CONSUMER_PROTOCOL_TYPE, GroupMetadata, GroupState, Protocols
from tieredlog.coordinator.loader import load_groups, load_records
from tieredlog.coordinator.membership import GroupMembership, JoinResult, SyncResult
from tieredlog.coordinator.offsets import CommittedOffsets
from tieredlog.coordinator.state import CoordinatorState, PartitionOwnership
from tieredlog.coordinator.storage import (
    OFFSETS_TOPIC,
    GroupStore,
    MemoryGroupStore,
    PartitionedGroupStore,
    store_error_code,
)
from tieredlog.coordinator.timer import Cancellable, Scheduler
from tieredlog.coordinator.txn_offsets import TransactionalOffsets

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(
        self, config: GroupConfig, scheduler: Scheduler, store: GroupStore | None = None, *,
        subscriptions: SubscribedTopics, protocol: EmbeddedConsumerProtocol | None = None,
    ):
        """`subscriptions` reads the topics of a consumer member's JoinGroup metadata (OffsetDelete
        refuses to delete offsets of topics a live consumer group is subscribed to); `protocol` reads and
        writes the consumer protocol's subscriptions and assignments for the online migration."""
        self.state = CoordinatorState(config, scheduler, store if store is not None else MemoryGroupStore())
        self._partitioned: PartitionedGroupStore | None = None
        self._loads: set[asyncio.Task] = set()
        self._cleanup_timer: Cancellable | None = None
        self.membership = GroupMembership(self.state)
        self.consumer = ConsumerGroupCoordinator(self.state)
        if protocol is not None:
            self.consumer.enable_migration(protocol, self.membership)
        self.offsets = CommittedOffsets(self.state, self.membership, subscriptions)
        self.admin = GroupAdmin(self.state)
        self.consumer_group_heartbeat = self.consumer.heartbeat
        self.consumer_group_describe = self.consumer.describe
        self.commit_offsets = self.offsets.commit_offsets
        self.handle_commit_offsets = self.offsets.handle_commit_offsets
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_offsets = self.offsets.delete_offsets
        self.cleanup_group_metadata = self.offsets.cleanup_group_metadata
        self.list_groups = self.admin.list_groups
        self.txn_offsets = TransactionalOffsets(self.state, self.membership)
        self.txn_commit_offsets = self.txn_offsets.txn_commit_offsets
        self.complete_txn = self.txn_offsets.complete_txn
        self.unstable_offsets = self.txn_offsets.unstable

    # -- classic calls, refused for a consumer group's id ------------------------------------------------
    def _consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.state.consumer_groups.get(group_id) if self.state.active else None

    @staticmethod
    def _done(value: object) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(value)
        return future

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Protocols, require_known_member_id: bool, supports_skip_assignment: bool = False
                   ) -> Awaitable[JoinResult]:
        group = self._consumer_group(group_id)
        if group is None:
            return self.membership.join_group(group_id, member_id, group_instance_id, client_id, client_host,
                                              session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                                              require_known_member_id, supports_skip_assignment)
        if self.consumer.classic is None:
            return self._done(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        return self.consumer.classic.join(group, member_id, group_instance_id, client_id, client_host,
                                          session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                                          require_known_member_id)

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]
                   ) -> Awaitable[SyncResult]:
        group = self._consumer_group(group_id)
        if group is None:
            return self.membership.sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                              protocol_name, assignments)
        if self.consumer.classic is None:
            return self._done(SyncResult(ErrorCode.unknown_member_id))
        return self._done(self.consumer.classic.sync(group, generation_id, member_id, group_instance_id,
                                                     protocol_type, protocol_name))

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        group = self._consumer_group(group_id)
        if group is None:
            return self.membership.heartbeat(group_id, member_id, group_instance_id, generation_id)
        if self.consumer.classic is None:
            return ErrorCode.unknown_member_id
        return self.consumer.classic.heartbeat(group, member_id, group_instance_id, generation_id)

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        group = self._consumer_group(group_id)
        if group is None:
            return self.membership.leave_group(group_id, leaving)
        if self.consumer.classic is None:
            return ErrorCode.none, [(mid, iid, ErrorCode.unknown_member_id) for mid, iid in leaving]
        return ErrorCode.none, self.consumer.classic.leave(group, leaving)

    def describe_group(self, group_id: str) -> GroupSummary:
        """DescribeGroups: a consumer group is shown with its KIP-848 state, its assignor as the protocol, its
        classic members (online migration) with their subscription and assignment, the others without
        (ConsumerGroupDescribe has the details)."""
        group = self._consumer_group(group_id)
        if group is None or self.state.ownership_error(group_id) is not None:
            return self.admin.describe_group(group_id)
        classic = self.consumer.classic
        return GroupSummary(group_id, ErrorCode.none, group.state.value, CONSUMER_PROTOCOL_TYPE,
                            self.consumer.assignor_for(group),
                            [MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host,
                                           *(classic.described(group, m) if classic is not None else (b"", b"")))
                             for m in group.members.values()])

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: a consumer group only when it has no member (NON_EMPTY_GROUP otherwise); its
        offsets and every record of it get tombstones."""
        result: dict[str, ErrorCode] = {}
        classic: list[str] = []
        for group_id in group_ids:
            group = self._consumer_group(group_id)
            if group is None or self.state.ownership_error(group_id) is not None:
                classic.append(group_id)
                continue
            if group.members:
                result[group_id] = ErrorCode.non_empty_group
                continue
            shell = self.state.groups.get(group_id)
            tombstones = self.consumer.tombstones(group)
            if shell is not None:
                tombstones += [(schema.encode_offset_key(group_id, t, p), None) for t, p in shell.offsets]
            try:
                self.state.store.append(group_id, tombstones, self.state.scheduler.wall_clock_ms())
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                result[group_id] = store_error_code(exc)
                continue
            del self.state.consumer_groups[group_id]
            group.dead = True
            if shell is not None:
                shell.offsets.clear()
                shell.transition_to(GroupState.DEAD, self.state.scheduler.wall_clock_ms())
                self.state.groups.pop(group_id, None)
            result[group_id] = ErrorCode.none
        if classic:
            result.update(self.admin.delete_groups(classic))
        return result

    @classmethod
    def for_cluster(cls, config: GroupConfig, scheduler: Scheduler, store: PartitionedGroupStore, *,
                    subscriptions: SubscribedTopics, protocol: EmbeddedConsumerProtocol | None = None
                    ) -> "GroupCoordinator":
        """A cluster member's coordinator: it serves no group until it leads that group's partition."""
        coordinator = cls(config, scheduler, store, subscriptions=subscriptions, protocol=protocol)
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
            self.state.groups = load_groups(self.state.store, self.state.scheduler.wall_clock_ms(),
                                            self.state.consumer_groups)
            self._adopt(self.state.groups)
            self.consumer.adopt(self.state.consumer_groups)
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
        self.consumer.shutdown()

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
            consumer_group = self.state.consumer_groups.pop(group_id, None)
            if consumer_group is not None:
                self.consumer.unload(consumer_group)
        log.info("%s-%d: no longer the coordinator, unloaded %d group(s)", OFFSETS_TOPIC, partition, len(dropped))

    async def _load(self, partition: int, leader_epoch: int) -> None:
        own, store = self.state.ownership, self._partitioned
        assert own is not None and store is not None
        now = self.state.scheduler.wall_clock_ms()
        started = time.monotonic()
        try:
            # reading the log is disk I/O: off the event loop, as start-up reads it before serving
            consumer_groups: dict[str, ConsumerGroup] = {}
            groups = await asyncio.to_thread(
                lambda: load_records(store.replay_partition(partition), now, consumer_groups))
        except Exception:  # noqa: BLE001 - the partition stays unserved here; clients keep looking
            log.exception("%s-%d: loading the groups failed", OFFSETS_TOPIC, partition)
            if own.loading.get(partition) == leader_epoch:
                del own.loading[partition]
            return
        if own.loading.get(partition) != leader_epoch or not self.state.active:
            return  # resigned (or elected again, at a newer epoch) while loading
        del own.loading[partition]
        self.state.groups.update(groups)
        self.state.consumer_groups.update(consumer_groups)
        self._adopt(groups)
        self.consumer.adopt(consumer_groups)
        own.owned[partition] = leader_epoch
        log.info("%s-%d: loaded %d group(s) in %.0f ms (leader epoch %d)", OFFSETS_TOPIC, partition, len(groups),
                 (time.monotonic() - started) * 1000, leader_epoch)
