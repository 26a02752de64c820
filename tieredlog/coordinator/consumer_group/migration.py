"""KIP-848's online migration between a classic group and a consumer group (Kafka's GroupMetadataManager:
validateOnlineUpgrade / convertToConsumerGroup, validateOnlineDowngradeWithFencedMember /
convertToClassicGroup), under group.consumer.migration.policy.

Upgrade: the first ConsumerGroupHeartbeat of a member joining a classic group that has members. The group
must use the consumer protocol (protocol type "consumer") and fit group.consumer.max.size; otherwise the
heartbeat gets GROUP_ID_NOT_FOUND, as in Kafka. The classic members become members of the consumer group
that still speak the classic protocol: each keeps its last assignment (read from its SyncGroup assignment)
as its current and target assignment, at the classic generation as its member epoch, and the group epoch
starts at that generation. Members parked in JoinGroup/SyncGroup get REBALANCE_IN_PROGRESS and rejoin.
Written: a tombstone of the GroupMetadataValue, then the consumer group's records.

Downgrade: the last consumer-protocol member leaves (or is fenced) while classic members remain, or a classic
static member takes its place (then without a rebalance). The group becomes a classic group of the remaining members at the group epoch as generation, each with its target
assignment as ConsumerProtocolAssignment bytes, and a rebalance starts. Written: tombstones of every
consumer group record, then the GroupMetadataValue.

The consumer protocol's bytes are read and written by an `EmbeddedConsumerProtocol` the server hands in
(the coordinator never imports the protocol package).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from tieredlog.coordinator import schema
from tieredlog.coordinator.consumer_group import records
from tieredlog.coordinator.consumer_group.assignors import Partitions
from tieredlog.coordinator.consumer_group.group import ConsumerGroup
from tieredlog.coordinator.consumer_group.member import ClassicMemberMetadata, ConsumerMember, MemberState
from tieredlog.coordinator.group import CONSUMER_PROTOCOL_TYPE, GroupMetadata, GroupState, MemberMetadata
from tieredlog.coordinator.membership import group_record
from tieredlog.coordinator.state import CoordinatorState

log = logging.getLogger(__name__)

Record = tuple[bytes, "bytes | None"]
# topic name -> (topic id, partition count) of every topic the broker has
TopicsView = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]


class MigrationHost(Protocol):
    """What a migration needs of the ConsumerGroupCoordinator that owns it (which imports this module)."""

    @property
    def state(self) -> CoordinatorState: ...

    @property
    def groups(self) -> dict[str, ConsumerGroup]: ...

    @property
    def topics(self) -> TopicsView: ...

    def topic_names(self, group: ConsumerGroup) -> dict[uuid.UUID, str]: ...

    def schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None: ...

    def member_metadata_record(self, group: ConsumerGroup, m: ConsumerMember) -> Record: ...

    def current_assignment_record(self, group: ConsumerGroup, m: ConsumerMember) -> Record: ...

    def tombstones(self, group: ConsumerGroup) -> list[Record]: ...


@dataclass(frozen=True)
class EmbeddedSubscription:
    """What a ConsumerProtocolSubscription says: topics, owned partitions (v1+), rack (v3+)."""

    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None


class EmbeddedConsumerProtocol(Protocol):
    def subscription(self, metadata: bytes) -> EmbeddedSubscription | None:
        """None when the bytes are not a ConsumerProtocolSubscription."""
        ...

    def assignment(self, data: bytes) -> dict[str, frozenset[int]] | None:
        """A ConsumerProtocolAssignment's partitions by topic name ({} for no bytes), None when malformed."""
        ...

    def encode_assignment(self, partitions: Mapping[str, Iterable[int]], subscription_metadata: bytes) -> bytes:
        """ConsumerProtocolAssignment bytes in the version of the member's subscription."""
        ...


class ClassicRebalance(Protocol):
    """What the migration needs of the classic membership."""

    def hand_over(self, group: GroupMetadata) -> None: ...

    def take_over(self, group: GroupMetadata, rebalance_reason: str | None) -> None: ...


def names_to_ids(partitions: Mapping[str, frozenset[int]], topics: Mapping[str, tuple[uuid.UUID, int]]) -> Partitions:
    return {topics[n][0]: frozenset(ps) for n, ps in partitions.items() if ps and n in topics}


def ids_to_names(partitions: Partitions, names: Mapping[uuid.UUID, str]) -> dict[str, frozenset[int]]:
    return {names[t]: ps for t, ps in partitions.items() if t in names}


class GroupMigration:
    def __init__(self, coordinator: MigrationHost, protocol: EmbeddedConsumerProtocol,
                 membership: ClassicRebalance) -> None:
        self.coordinator = coordinator
        self.state = coordinator.state
        self.protocol = protocol
        self.membership = membership

    # -- upgrade -------------------------------------------------------------------------------------------
    def can_upgrade(self, classic: GroupMetadata) -> bool:
        config = self.state.config
        group_id = classic.group_id
        if not config.online_upgrade:
            log.info("Cannot upgrade classic group %s to consumer group because the online upgrade is disabled.",
                     group_id)
            return False
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            log.info("Cannot upgrade classic group %s to consumer group because the group does not use the "
                     "consumer embedded protocol.", group_id)
            return False
        if len(classic.members) > config.consumer_max_size:
            log.info("Cannot upgrade classic group %s to consumer group because the group size exceeds the "
                     "consumer group maximum size.", group_id)
            return False
        return True

    def upgrade(self, classic: GroupMetadata, out: list[Record]) -> ConsumerGroup | None:
        """The consumer group the classic group becomes; None (nothing changed) when a member's embedded
        protocol cannot be read."""
        topics = self.coordinator.topics()
        generation = classic.generation_id
        group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
        for m in classic.members.values():
            metadata = m.metadata_for(classic.protocol_name) if classic.protocol_name else m.protocols[0][1]
            subscription = self.protocol.subscription(metadata)
            assigned_names = self.protocol.assignment(m.assignment)
            if subscription is None or assigned_names is None:
                log.warning("Cannot upgrade the classic group %s to consumer group because the embedded consumer "
                            "protocol of member %s is malformed.", classic.group_id, m.member_id)
                return None
            assigned = names_to_ids(assigned_names, topics)
            group.members[m.member_id] = ConsumerMember(
                m.member_id, m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
                tuple(sorted(set(subscription.topics))), None, m.rebalance_timeout_ms, None,
                member_epoch=generation, previous_member_epoch=generation, state=MemberState.STABLE,
                assigned=assigned, classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))
            group.target[m.member_id] = assigned
        self.membership.hand_over(classic)
        out.append((schema.encode_group_key(classic.group_id), None))
        coordinator = self.coordinator
        gid = group.group_id
        out.extend(coordinator.member_metadata_record(group, m) for m in group.members.values())
        out.append((records.encode_key(records.GROUP_METADATA, gid), records.encode_epoch(group.group_epoch)))
        out.extend((records.encode_key(records.TARGET_ASSIGNMENT_MEMBER, gid, mid), records.encode_target_member(t))
                   for mid, t in group.target.items())
        out.append((records.encode_key(records.TARGET_ASSIGNMENT_METADATA, gid),
                    records.encode_epoch(group.assignment_epoch)))
        out.extend(coordinator.current_assignment_record(group, m) for m in group.members.values())
        # the classic group's metadata goes; it stays as the holder of the group's committed offsets
        classic.members.clear()
        classic.pending_members.clear()
        classic.pending_sync.clear()
        classic.generation_id = 0
        classic.protocol_name = classic.leader_id = None
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.state = GroupState.EMPTY
        coordinator.groups[gid] = group
        for member in group.members.values():
            coordinator.schedule_session(group, member)
        log.info("group %s: upgraded from classic to consumer group at epoch %d with %d classic member(s)",
                 gid, generation, len(group.members))
        return group

    # -- downgrade -----------------------------------------------------------------------------------------
    def can_downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: every other member speaks the classic protocol."""
        others = [m for mid, m in group.members.items() if mid != leaving_member_id]
        if not others or any(m.classic is None for m in others):
            return False
        config = self.state.config
        if not config.online_downgrade:
            log.info("Cannot downgrade consumer group %s to classic group because the online downgrade is disabled.",
                     group.group_id)
            return False
        if len(others) > config.max_size:
            log.info("Cannot downgrade consumer group %s to classic group because its group size is greater than "
                     "classic group max size.", group.group_id)
            return False
        return True

    def downgrade(self, group: ConsumerGroup, leaving_member_id: str, out: list[Record], rebalance: bool = True
                  ) -> GroupMetadata:
        """``leaving_member_id``: the member whose departure triggers it ("" for none: a classic static member
        took the last consumer-protocol member's place, and no rebalance follows)."""
        coordinator = self.coordinator
        now = self.state.scheduler.wall_clock_ms()
        names = coordinator.topic_names(group)
        targets = dict(group.target)
        remaining = [m for mid, m in group.members.items() if mid != leaving_member_id]
        out.extend(coordinator.tombstones(group))
        coordinator.groups.pop(group.group_id, None)
        group.dead = True
        classic = self.state.groups.get(group.group_id) or self.state.new_group(group.group_id)
        classic.generation_id = group.group_epoch
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.members.clear()
        classic.leader_id = None
        for m in remaining:
            assert m.classic is not None
            classic.add(MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                       m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols)))
        classic.protocol_name = classic.select_protocol()
        assignments: dict[str, bytes] = {}
        for member in classic.members.values():
            member.assignment = assignments[member.member_id] = self.protocol.encode_assignment(
                ids_to_names(targets.get(member.member_id, {}), names), member.metadata_for(classic.protocol_name))
        classic.state = GroupState.STABLE
        classic.state_timestamp_ms = now
        out.append(group_record(classic, assignments))
        self.membership.take_over(classic, f"Downgrade group {group.group_id} from consumer to classic."
                                  if rebalance else None)
        log.info("group %s: downgraded from consumer to classic group at generation %d with %d member(s)",
                 group.group_id, classic.generation_id, len(classic.members))
        return classic
