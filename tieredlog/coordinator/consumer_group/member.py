"""A member of a KIP-848 consumer group: what it subscribes to and where its reconciliation stands."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tieredlog.coordinator.consumer_group.assignors import Partitions

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's MemberState, stored as an int8 in ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    # the member must give back partitions before it moves to the new epoch
    UNREVOKED_PARTITIONS = 1
    # the member is at the new epoch but waits for partitions other members still own
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer group
    (KIP-848's online migration): its session timeout and the protocols of its JoinGroup, kept as Kafka
    keeps them in ConsumerGroupMemberMetadataValue.ClassicMemberMetadata."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None
    session_handle: Any = None
    revocation_handle: Any = None
    # a classic member's join (rejoin after REBALANCE_IN_PROGRESS) or sync deadline
    classic_handle: Any = None

    def owns(self, topic_id: Any, partition: int) -> bool:
        return partition in self.assigned.get(topic_id, ()) or partition in self.pending_revocation.get(topic_id, ())

    def partition_count(self) -> int:
        return sum(len(p) for p in self.assigned.values())


def is_subset(owned: Partitions, of: Partitions) -> bool:
    return all(ps <= of.get(t, frozenset()) for t, ps in owned.items())


def normalize(value: Partitions) -> Partitions:
    return {t: frozenset(ps) for t, ps in value.items() if ps}
