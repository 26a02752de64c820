"""Classic members of a consumer group (KIP-848's online migration): JoinGroup, SyncGroup, Heartbeat and
LeaveGroup served by the consumer group, as Kafka's GroupMetadataManager does (classicGroupJoinToConsumerGroup,
classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup, classicGroupLeaveToConsumerGroup).

A classic member is a consumer group member whose subscription comes from its JoinGroup metadata and whose
assignment goes out in its SyncGroup answer. Its member epoch is its generation. A JoinGroup is its
heartbeat with a subscription: it may bump the group epoch, the target assignment follows, and the member
is reconciled with the owned partitions its subscription reports (none for an eager client, which revoked
everything before rejoining). Between joins, its Heartbeat answers REBALANCE_IN_PROGRESS when it must
rejoin: the group epoch moved past it, it has partitions to revoke, or partitions it waits for are free.
No member is the leader: the coordinator assigns, so the JoinGroup answer lists no members.

Deadlines, as in Kafka: its classic session timeout; the rebalance timeout to send SyncGroup after a
JoinGroup, and to rejoin after being told to. A member that misses one is removed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Protocol

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.consumer_group import records
from tieredlog.coordinator.consumer_group.assignors import Partitions
from tieredlog.coordinator.consumer_group.group import ConsumerGroup
from tieredlog.coordinator.consumer_group.member import JOIN_EPOCH, ClassicMemberMetadata, ConsumerMember, MemberState
from tieredlog.coordinator.consumer_group.migration import (
    EmbeddedConsumerProtocol,
    GroupMigration,
    MigrationHost,
    Record,
    ids_to_names,
    names_to_ids,
)
from tieredlog.coordinator.group import CONSUMER_PROTOCOL_TYPE, UNKNOWN_MEMBER_ID, Protocols
from tieredlog.coordinator.membership import JoinResult, SyncResult
from tieredlog.coordinator.state import cancel
from tieredlog.coordinator.storage import WaitForIsr, store_error_code

log = logging.getLogger(__name__)


class ClassicMembersHost(MigrationHost, Protocol):
    """What classic members need of the ConsumerGroupCoordinator that owns them (which imports this module)."""

    @property
    def migration(self) -> GroupMigration | None: ...

    def advance_member(self, group: ConsumerGroup, member: ConsumerMember, bump: bool, owned: Partitions | None,
                       out: list[Record]) -> None: ...

    def forget(self, group: ConsumerGroup, member: ConsumerMember, out: list[Record]) -> None: ...

    def remove(self, group: ConsumerGroup, member: ConsumerMember, out: list[Record]) -> None: ...

    def remove_on_timer(self, group: ConsumerGroup, member: ConsumerMember) -> None: ...

    def append(self, group_id: str, out: list[Record], now: int) -> WaitForIsr | None: ...


class ClassicMembers:
    def __init__(self, coordinator: ClassicMembersHost, protocol: EmbeddedConsumerProtocol) -> None:
        self.coordinator = coordinator
        self.state = coordinator.state
        self.protocol = protocol

    def _find(self, group: ConsumerGroup, member_id: str, instance_id: str | None
              ) -> tuple[ConsumerMember | None, ErrorCode]:
        """Kafka's validateConsumerGroupMember plus throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.member_by_instance_id(instance_id)
            if member is not None and member.member_id != member_id:
                return None, ErrorCode.fenced_instance_id
        if member is None or member.classic is None:
            return None, ErrorCode.unknown_member_id
        return member, ErrorCode.none

    @staticmethod
    def _supports(group: ConsumerGroup, protocol_type: str, protocols: Protocols) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: one of the offered protocols is supported by
        every classic member."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return False
        classic = [m.classic for m in group.members.values() if m.classic is not None]
        return any(all(name in {n for n, _ in c.protocols} for c in classic) for name, _ in protocols)

    # -- JoinGroup -----------------------------------------------------------------------------------------
    async def join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Protocols, require_known_member_id: bool) -> JoinResult:
        config = self.state.config
        c = self.coordinator
        if not (config.min_session_timeout_ms <= session_timeout_ms <= config.max_session_timeout_ms):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        unknown = member_id == UNKNOWN_MEMBER_ID
        if unknown:
            member_id = str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= config.consumer_max_size:
            return JoinResult(ErrorCode.group_max_size_reached, member_id)
        if not self._supports(group, protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if unknown and require_known_member_id and instance_id is None:
            log.info("group %s: a classic member with unknown member id joins the consumer group; asked to "
                     "rejoin as %s", group.group_id, member_id)
            return JoinResult(ErrorCode.member_id_required, member_id)
        subscription = self.protocol.subscription(protocols[0][1])
        if subscription is None:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        out: list[Record] = []
        replaced = group.member_by_instance_id(instance_id) if instance_id is not None and unknown else None
        member, code = self._member_to_join(group, member_id, instance_id, unknown, out)
        if member is None:
            return JoinResult(code, member_id)
        now = self.state.scheduler.wall_clock_ms()
        topics = c.topics()
        names = tuple(sorted(set(subscription.topics)))
        bump = member.subscribed_topic_names != names or member.member_id not in group.target
        member.subscribed_topic_names = names
        member.instance_id = instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
        group.members[member.member_id] = member
        out.append(c.member_metadata_record(group, member))
        c.advance_member(group, member, bump, names_to_ids(subscription.owned, topics), out)
        if replaced is not None and replaced.classic is None and c.migration is not None \
                and c.migration.can_downgrade(group, ""):
            # it took the place of the last consumer-protocol member: the group is classic again, without a
            # rebalance (Kafka's validateOnlineDowngradeWithReplacedMemberId)
            classic = c.migration.downgrade(group, "", out, rebalance=False)
            code = await self._stored(c.append(group.group_id, out, now))
            return JoinResult(code, member.member_id, classic.generation_id, CONSUMER_PROTOCOL_TYPE,
                              classic.protocol_name, "")
        cancel(member.classic_handle)
        c.schedule_session(group, member)
        self._deadline(group, member, member.rebalance_timeout_ms, "did not send SyncGroup")
        code = await self._stored(c.append(group.group_id, out, now))
        if code != ErrorCode.none:
            return JoinResult(code, member.member_id)
        return JoinResult(ErrorCode.none, member.member_id, member.member_epoch, CONSUMER_PROTOCOL_TYPE,
                          protocols[0][0], "")

    @staticmethod
    async def _stored(wait: WaitForIsr | None) -> ErrorCode:
        if wait is not None:
            try:
                await wait()
            except Exception as exc:  # noqa: BLE001 - the wait's failure is this join's answer
                return store_error_code(exc)
        return ErrorCode.none

    def _member_to_join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, unknown: bool,
                        out: list[Record]) -> tuple[ConsumerMember | None, ErrorCode]:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                return (ConsumerMember(member_id), ErrorCode.none) if unknown else (None, ErrorCode.unknown_member_id)
            if member.classic is None:
                return None, ErrorCode.unknown_member_id
            return member, ErrorCode.none
        existing = group.member_by_instance_id(instance_id)
        if existing is None:
            return (ConsumerMember(member_id, instance_id), ErrorCode.none) if unknown \
                else (None, ErrorCode.unknown_member_id)
        if not unknown:
            return (existing, ErrorCode.none) if existing.member_id == member_id else (None, ErrorCode.fenced_instance_id)
        # KIP-345: the restarted instance takes over its previous incarnation's place and assignment
        c = self.coordinator
        c.forget(group, existing, out)
        member = replace(existing, member_id=member_id, session_handle=None, revocation_handle=None,
                         classic_handle=None, member_epoch=JOIN_EPOCH, previous_member_epoch=JOIN_EPOCH)
        group.members[member_id] = member
        if existing.member_id in group.target:
            group.target[member_id] = group.target.pop(existing.member_id)
            out.append((records.encode_key(records.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                        records.encode_target_member(group.target[member_id])))
        out.append(c.current_assignment_record(group, member))
        return member, ErrorCode.none

    # -- SyncGroup -----------------------------------------------------------------------------------------
    def sync(self, group: ConsumerGroup, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        member, code = self._find(group, member_id, instance_id)
        if member is None:
            return SyncResult(code)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.illegal_generation)
        chosen, metadata = member.classic.protocols[0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name != chosen):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            # a rebalance started since its join: it rejoins first (and finishes revoking before that)
            self._deadline(group, member, member.rebalance_timeout_ms, "did not rejoin", if_absent=True)
            return SyncResult(ErrorCode.rebalance_in_progress)
        cancel(member.classic_handle)
        member.classic_handle = None
        self.coordinator.schedule_session(group, member)
        names = self.coordinator.topic_names(group)
        assignment = self.protocol.encode_assignment(ids_to_names(member.assigned, names), metadata)
        return SyncResult(ErrorCode.none, assignment, CONSUMER_PROTOCOL_TYPE, chosen)

    def described(self, group: ConsumerGroup, member: ConsumerMember) -> tuple[bytes, bytes]:
        """DescribeGroups: a classic member's subscription and its assignment, as a classic group shows them."""
        if member.classic is None:
            return b"", b""
        metadata = member.classic.protocols[0][1]
        names = self.coordinator.topic_names(group)
        return metadata, self.protocol.encode_assignment(ids_to_names(member.assigned, names), metadata)

    # -- Heartbeat -----------------------------------------------------------------------------------------
    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
                  ) -> ErrorCode:
        member, code = self._find(group, member_id, instance_id)
        if member is None:
            return code
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        self.coordinator.schedule_session(group, member)
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting(group, member))):
            self._deadline(group, member, member.rebalance_timeout_ms, "did not rejoin", if_absent=True)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    @staticmethod
    def _waiting(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: a partition of its target is still held by another member."""
        owners = group.owners()
        for topic, partitions in group.target.get(member.member_id, {}).items():
            for p in partitions - member.assigned.get(topic, frozenset()):
                holder = owners.get((topic, p))
                if holder is not None and holder != member.member_id:
                    return True
        return False

    # -- LeaveGroup ----------------------------------------------------------------------------------------
    def leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]
              ) -> list[tuple[str, str | None, ErrorCode]]:
        results: list[tuple[str, str | None, ErrorCode]] = []
        out: list[Record] = []
        for member_id, instance_id in leaving:
            if instance_id is not None and member_id == UNKNOWN_MEMBER_ID:
                # KIP-345's administrative removal by instance id
                found = group.member_by_instance_id(instance_id)
                member, code = (found, ErrorCode.none) if found is not None and found.classic is not None \
                    else (None, ErrorCode.unknown_member_id)
            else:
                member, code = self._find(group, member_id, instance_id)
            if member is None:
                results.append((member_id, instance_id, code))
                continue
            log.info("group %s: classic member %s left the consumer group", group.group_id, member.member_id)
            self.coordinator.remove(group, member, out)
            results.append((member.member_id, instance_id, ErrorCode.none))
        if out:
            try:
                self.coordinator.append(group.group_id, out, self.state.scheduler.wall_clock_ms())
            except Exception:  # noqa: BLE001 - the members are gone here; the records follow with the next change
                log.exception("group %s: writing the departure of classic members failed", group.group_id)
        return results

    # -- deadlines -----------------------------------------------------------------------------------------
    def _deadline(self, group: ConsumerGroup, member: ConsumerMember, timeout_ms: int, what: str,
                  if_absent: bool = False) -> None:
        if if_absent and member.classic_handle is not None:
            return
        cancel(member.classic_handle)

        def expired() -> None:
            if group.members.get(member.member_id) is member:
                log.info("group %s: classic member %s %s within %d ms: removed", group.group_id, member.member_id,
                         what, timeout_ms)
                self.coordinator.remove_on_timer(group, member)

        member.classic_handle = self.state.scheduler.call_later(max(timeout_ms, 1), expired)
