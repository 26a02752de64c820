"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete of a group.

A commit from a group member must come from the current generation (and counts as a heartbeat); a
commit with a negative generation to an Empty group (or to no group: the "simple" group is created) is
a standalone consumer's or an admin's, whatever member id it carries. Every accepted
commit is one OffsetCommitValue record in the group's `__consumer_offsets` partition, a deletion a
tombstone.

Offset expiry (offsets.retention.minutes, KIP-211): every offsets.retention.check.interval.ms,
`cleanup_group_metadata` (Kafka's GroupMetadataManager.cleanupGroupMetadata) removes the offsets
`GroupMetadata.expired_offsets` names: an Empty group's once the retention has passed since it became
Empty, a Stable consumer group's for topics it no longer subscribes to and a standalone consumer's by
their commit time. Each gets a tombstone; an Empty group left without offsets becomes Dead, leaves the
group table and, if it ever had a generation, its GroupMetadataValue gets a tombstone too. In a
cluster only the groups of the partitions led here are looked at, and the tombstones are not waited
for: a leader that loses them expires the offsets again (Kafka appends them with acks=0).

A KIP-848 consumer group's commits carry the member epoch where classic ones carry the generation:
a member's commit must come with its current epoch (STALE_MEMBER_EPOCH otherwise), one with a negative
epoch (an admin's, or a consumer's that assigned its partitions itself) is taken only while the group has
no member, and refused with UNKNOWN_MEMBER_ID (STALE_MEMBER_EPOCH if its member id is a member's) otherwise. Its offsets live in the GroupMetadata of its
id like a classic group's; while it has members, only offsets of topics none of them subscribes to
expire (by commit time), and OffsetDelete refuses the subscribed ones.

Alone, a broker's commit is committed once appended (`commit_offsets` answers at once). In a cluster
the answer waits until the ISR has the record (`handle_commit_offsets`), and only then does the offset
become what OffsetFetch returns (Kafka's pending offset commits).
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.consumer_group import records as consumer_records
from tieredlog.coordinator.consumer_group.group import ConsumerGroup
from tieredlog.coordinator.contracts import SubscribedTopics
from tieredlog.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
)
from tieredlog.coordinator.membership import GroupMembership
from tieredlog.coordinator.state import CoordinatorState, cancel, valid_group_id
from tieredlog.coordinator.storage import WaitForIsr, store_error_code

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (offset, leader epoch, metadata) as OffsetCommit carries them
OffsetCommit = tuple[int, int, "str | None"]


def accept_offsets(offsets: dict[TopicPartition, OffsetCommit], now_ms: int, metadata_max_bytes: int
                   ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
    """(the partitions refused, with why; the offsets to store): metadata longer than
    offset.metadata.max.bytes is refused with OFFSET_METADATA_TOO_LARGE, as Kafka does."""
    refused: dict[TopicPartition, ErrorCode] = {}
    accepted: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, (offset, leader_epoch, metadata) in offsets.items():
        metadata = metadata or ""
        if len(metadata.encode("utf-8")) > metadata_max_bytes:
            refused[tp] = ErrorCode.offset_metadata_too_large
            continue
        accepted[tp] = OffsetAndMetadata(offset, leader_epoch, metadata, now_ms)
    return refused, accepted


@dataclass
class _PendingCommit:
    """A commit appended to the leader's log whose answer waits for the ISR."""

    group: GroupMetadata
    accepted: dict[TopicPartition, OffsetAndMetadata]
    result: dict[TopicPartition, ErrorCode]  # the partitions refused before the append
    wait: WaitForIsr
    seq: int


class CommittedOffsets:
    def __init__(self, state: CoordinatorState, membership: GroupMembership, subscriptions: SubscribedTopics) -> None:
        self.state = state
        self.membership = membership
        self.subscriptions = subscriptions
        self._commit_seq = itertools.count()

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommit],        api_version: int = 9,
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit (offset, leader epoch, metadata) per partition; returns the error code per partition.
        Answers at once, so the store must commit inline (one broker); in a cluster the server awaits
        `handle_commit_offsets`."""
        outcome = self._commit(group_id, member_id, group_instance_id, generation_id, offsets, api_version)
        if isinstance(outcome, _PendingCommit):
            raise TypeError("the store replicates its appends: await handle_commit_offsets")
        return outcome

    async def handle_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommit],        api_version: int = 9,
    ) -> dict[TopicPartition, ErrorCode]:
        """`commit_offsets` for any store: in a cluster, answered once the ISR has the commit (or its
        wait failed: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR as Kafka maps them)."""
        outcome = self._commit(group_id, member_id, group_instance_id, generation_id, offsets, api_version)
        if not isinstance(outcome, _PendingCommit):
            return outcome
        pending = outcome
        group = pending.group
        waiting = Counter(pending.accepted.keys())
        group.pending_offset_commits.update(waiting)
        try:
            await pending.wait()
        except Exception as exc:  # noqa: BLE001 - a failed wait is this commit's answer, not the broker's
            code = store_error_code(exc)
            return {**pending.result, **{tp: code for tp in pending.accepted}}
        finally:
            group.pending_offset_commits -= waiting
        for tp, value in pending.accepted.items():
            # an older commit whose wait ended after a newer one's must not overwrite it
            if group.offset_commit_seq.get(tp, -1) < pending.seq:
                group.offsets[tp] = value
                group.offset_commit_seq[tp] = pending.seq
        return {**pending.result, **{tp: ErrorCode.none for tp in pending.accepted}}

    def _commit(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommit],        api_version: int = 9,
    ) -> dict[TopicPartition, ErrorCode] | _PendingCommit:
        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if (code := self.state.not_ready_error()) is not None:
            return all_(code)
        if not valid_group_id(group_id, allow_empty=True):
            return all_(ErrorCode.invalid_group_id)
        if (code := self.state.ownership_error(group_id)) is not None:
            return all_(code)
        group = self.state.groups.get(group_id)
        consumer_group = self.state.consumer_groups.get(group_id)
        if consumer_group is not None and group is not None:
            code = validate_consumer_commit(consumer_group, member_id, group_instance_id, generation_id,
                                            api_version=api_version)
            if code != ErrorCode.none:
                return all_(code)
            return self._store_offsets(group, offsets)
        if group is None:
            if generation_id >= 0:
                # v9 (KIP-848) answers GROUP_ID_NOT_FOUND for both protocols; older versions keep their answer
                return all_(ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation)
            # Kafka creates the "simple" group for a negative generation whatever member id comes with it:
            # a consumer that assigned its partitions itself may send the id it made up (librdkafka does)
            group = self.state.new_group(group_id)
        if group.is_state(GroupState.DEAD):
            return all_(ErrorCode.coordinator_not_available)
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            pass  # a standalone consumer's or an admin's commit, member id or not (Kafka's ClassicGroup)
        elif generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            # A commit from a group member (Kafka's validateOffsetCommit): it must be current, and a
            # static member replaced by a newer instance is fenced.
            code = self.membership.validate_member(group, member_id, group_instance_id)
            if code != ErrorCode.none:
                return all_(code)
            if generation_id != group.generation_id:
                return all_(ErrorCode.illegal_generation)
            if group.is_state(GroupState.COMPLETING_REBALANCE):
                # the member has the new generation from JoinGroup but not its assignment yet
                return all_(ErrorCode.rebalance_in_progress)
            self.membership.schedule_heartbeat(group, group.members[member_id])
        elif not group.is_state(GroupState.EMPTY):
            # only members commit to a group that has some
            return all_(ErrorCode.unknown_member_id)
        return self._store_offsets(group, offsets)

    def _store_offsets(
        self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetCommit]
    ) -> dict[TopicPartition, ErrorCode] | _PendingCommit:
        now = self.state.scheduler.wall_clock_ms()
        result, accepted = accept_offsets(offsets, now, self.state.config.offset_metadata_max_bytes)
        if accepted:
            records = [
                (schema.encode_offset_key(group.group_id, t, p), schema.encode_offset_value(v))
                for (t, p), v in accepted.items()
            ]
            try:
                wait = self.state.store.append(group.group_id, records, now)
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                code = store_error_code(exc)
                return {**result, **{tp: code for tp in accepted}}
            if wait is not None:
                return _PendingCommit(group, accepted, result, wait, next(self._commit_seq))
            group.offsets.update(accepted)
            result.update({tp: ErrorCode.none for tp in accepted})
        return result

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (None = nothing committed); `partitions=None` asks for all of them."""
        if (code := self.state.not_ready_error()) is not None:
            return code, {}
        if not valid_group_id(group_id, allow_empty=True):
            return ErrorCode.invalid_group_id, {}
        if (code := self.state.ownership_error(group_id)) is not None:
            return code, {}
        group = self.state.groups.get(group_id)
        committed = {} if group is None or group.is_state(GroupState.DEAD) else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(committed)
        # Without transactional commits there is never a pending offset, so require_stable is met.
        return ErrorCode.none, {tp: committed.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if (code := self.state.not_ready_error()) is not None:
            return code, {}
        if not valid_group_id(group_id, allow_empty=False):
            return ErrorCode.invalid_group_id, {}
        if (code := self.state.ownership_error(group_id)) is not None:
            return code, {}
        group = self.state.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        result: dict[TopicPartition, ErrorCode] = {}
        deletable: list[TopicPartition] = []
        consumer_group = self.state.consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.members:
            topics = consumer_group.subscribed_topic_names()
            for tp in partitions:
                if tp[0] in topics:
                    result[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        elif group.is_state(GroupState.EMPTY):
            deletable = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            # None: some member's subscription cannot be read, so every topic counts as subscribed.
            subscribed = group.subscribed_topics(self.subscriptions)
            for tp in partitions:
                if subscribed is None or tp[0] in subscribed:
                    result[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        else:
            return ErrorCode.non_empty_group, {}
        present = [tp for tp in deletable if tp in group.offsets]
        if present:
            tombstones = [(schema.encode_offset_key(group_id, t, p), None) for t, p in present]
            try:
                self.state.store.append(group_id, tombstones, self.state.scheduler.wall_clock_ms())
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                return store_error_code(exc), {}
            for tp in present:
                del group.offsets[tp]
        result.update({tp: ErrorCode.none for tp in deletable})
        return ErrorCode.none, result

    # -- offset expiry -------------------------------------------------------------------------------
    def cleanup_group_metadata(self) -> int:
        """One run of offset expiry over the groups this coordinator serves; the number of offsets removed."""
        now = self.state.scheduler.wall_clock_ms()
        removed = 0
        for group in list(self.state.groups.values()):
            if self.state.ownership_error(group.group_id) is None:
                removed += self._remove_expired_offsets(group, now)
        if removed:
            log.info("Removed %d expired offsets in %d milliseconds.", removed,
                     self.state.scheduler.wall_clock_ms() - now)
        return removed

    def _remove_expired_offsets(self, group: GroupMetadata, now: int) -> int:
        consumer_group = self.state.consumer_groups.get(group.group_id)
        retention = self.state.config.offsets_retention_ms
        if consumer_group is not None and consumer_group.members:
            subscribed = consumer_group.subscribed_topic_names()
            expired = {tp: o for tp, o in group.offsets.items()
                       if tp[0] not in subscribed and tp not in group.pending_offset_commits
                       and o.commit_timestamp + retention <= now}
        else:
            expired = group.expired_offsets(now, retention, self.subscriptions)
        dead = (group.is_state(GroupState.EMPTY) and group.offsets.keys() <= expired.keys()
                and not group.has_pending_offsets()
                and (consumer_group is None or not consumer_group.members))
        tombstones: list[tuple[bytes, bytes | None]] = [
            (schema.encode_offset_key(group.group_id, t, p), None) for t, p in expired]
        if dead and group.generation_id > 0:
            # generation 0: a group that only ever stored offsets has no GroupMetadataValue to delete
            tombstones.append((schema.encode_group_key(group.group_id), None))
        if dead and consumer_group is not None:
            tombstones += [(consumer_records.encode_key(t, group.group_id), None) for t in (
                consumer_records.TARGET_ASSIGNMENT_METADATA, consumer_records.PARTITION_METADATA,
                consumer_records.GROUP_METADATA)]
        if tombstones:
            try:
                self.state.store.append(group.group_id, tombstones, now)
            except Exception as exc:  # noqa: BLE001 - the next run tries again; the offsets stay meanwhile
                log.error("group %s: failed to append %d tombstone(s) for expired offsets: %s",
                          group.group_id, len(tombstones), exc)
                return 0
        for tp in expired:
            del group.offsets[tp]
            group.offset_commit_seq.pop(tp, None)
        if dead:
            log.info("Group %s transitioned to Dead in generation %d", group.group_id, group.generation_id)
            cancel(group.join_handle)
            cancel(group.sync_handle)
            for handle in group.pending_members.values():
                cancel(handle)
            group.transition_to(GroupState.DEAD, now)
            if self.state.groups.get(group.group_id) is group:
                del self.state.groups[group.group_id]
            if consumer_group is not None:
                consumer_group.dead = True
                self.state.consumer_groups.pop(group.group_id, None)
        return len(expired)


def validate_consumer_commit(group: ConsumerGroup, member_id: str, instance_id: str | None,
                             member_epoch: int, transactional: bool = False, api_version: int = 9) -> ErrorCode:
    """Kafka's ConsumerGroup.validateOffsetCommit. A commit with a negative epoch is an admin's or a
    standalone consumer's, taken only while the group has no member (whatever member id it carries);
    otherwise its member id must be a member's (UNKNOWN_MEMBER_ID). A transactional one without member
    is a producer's that does not name its consumer (as for classic groups, taken). A consumer-protocol
    member's own commit must come as OffsetCommit v9 or later (UNSUPPORTED_VERSION). A member's must carry its current epoch:
    STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION in a transaction (what TxnOffsetCommit clients expect)."""
    if member_epoch < 0 and not group.members:
        return ErrorCode.none  # whatever member id: a consumer that assigned its partitions itself may send one
    if transactional and member_epoch == -1 and member_id == UNKNOWN_MEMBER_ID and instance_id is None:
        return ErrorCode.none
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if not transactional and member.classic is None and api_version < 9:
        return ErrorCode.unsupported_version  # a consumer-protocol member commits with v9 or later
    if member_epoch != member.member_epoch:
        # a classic member (online migration) commits with its generation: ILLEGAL_GENERATION, as for classic groups
        return ErrorCode.illegal_generation if transactional or member.classic is not None \
            else ErrorCode.stale_member_epoch
    return ErrorCode.none
