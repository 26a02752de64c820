"""The classic-protocol group coordinator: one object the server's group handlers call.

A state machine that never touches a socket. Each request is answered by the part that owns its
seam (Kafka keeps them all in GroupCoordinator and GroupMetadataManager):
`membership.GroupMembership` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the rebalance),
`offsets.CommittedOffsets` (OffsetCommit, OffsetFetch, OffsetDelete), `admin.GroupAdmin` (ListGroups,
DescribeGroups, DeleteGroups); `loader.load_groups` rebuilds the group table at start-up. They share
one `CoordinatorState`. Durable state goes through a `GroupStore` as `__consumer_offsets` records;
timers come from a `Scheduler` (the broker's runs on the asyncio loop).
"""

from __future__ import annotations

from tieredlog.coordinator.admin import GroupAdmin
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.contracts import SubscribedTopics
from tieredlog.coordinator.group import GroupMetadata
from tieredlog.coordinator.loader import load_groups
from tieredlog.coordinator.membership import GroupMembership
from tieredlog.coordinator.offsets import CommittedOffsets
from tieredlog.coordinator.state import CoordinatorState
from tieredlog.coordinator.storage import GroupStore, MemoryGroupStore
from tieredlog.coordinator.timer import Scheduler


class GroupCoordinator:
    def __init__(
        self, config: GroupConfig, scheduler: Scheduler, store: GroupStore | None = None, *,
        subscriptions: SubscribedTopics,
    ):
        """`subscriptions` reads the topics of a consumer member's JoinGroup metadata (OffsetDelete
        refuses to delete offsets of topics a live consumer group is subscribed to)."""
        self.state = CoordinatorState(config, scheduler, store if store is not None else MemoryGroupStore())
        self.membership = GroupMembership(self.state)
        self.offsets = CommittedOffsets(self.state, self.membership, subscriptions)
        self.admin = GroupAdmin(self.state)
        self.join_group = self.membership.join_group
        self.sync_group = self.membership.sync_group
        self.heartbeat = self.membership.heartbeat
        self.leave_group = self.membership.leave_group
        self.commit_offsets = self.offsets.commit_offsets
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_offsets = self.offsets.delete_offsets
        self.list_groups = self.admin.list_groups
        self.describe_group = self.admin.describe_group
        self.delete_groups = self.admin.delete_groups

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
        self.state.groups = load_groups(self.state.store, self.state.scheduler.now_ms())
        for group in self.state.groups.values():
            # Restored members keep their assignment if they heartbeat within their session.
            for member in group.members.values():
                self.membership.schedule_heartbeat(group, member)
        self.state.active = True

    async def shutdown(self) -> None:
        self.state.active = False
        self.membership.shutdown()
