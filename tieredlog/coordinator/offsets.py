"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete of a group.

A commit from a group member must come from the current generation (and counts as a heartbeat); a
commit with a negative generation to an Empty group is a standalone consumer's. Every accepted
commit is one OffsetCommitValue record in the group's `__consumer_offsets` partition, a deletion a
tombstone. Offset expiry (offsets.retention.minutes) is not done.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.contracts import SubscribedTopics
from tieredlog.coordinator.group import CONSUMER_PROTOCOL_TYPE, GroupMetadata, GroupState, OffsetAndMetadata
from tieredlog.coordinator.membership import GroupMembership
from tieredlog.coordinator.state import CoordinatorState, valid_group_id
from tieredlog.coordinator.storage import store_error_code

TopicPartition = tuple[str, int]
# (offset, leader epoch, metadata) as OffsetCommit carries them
OffsetCommit = tuple[int, int, "str | None"]


class CommittedOffsets:
    def __init__(self, state: CoordinatorState, membership: GroupMembership, subscriptions: SubscribedTopics) -> None:
        self.state = state
        self.membership = membership
        self.subscriptions = subscriptions

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit (offset, leader epoch, metadata) per partition; returns the error code per partition."""
        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if (code := self.state.not_ready_error()) is not None:
            return all_(code)
        if not valid_group_id(group_id, allow_empty=True):
            return all_(ErrorCode.invalid_group_id)
        group = self.state.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(ErrorCode.illegal_generation)
            group = self.state.new_group(group_id)
        if group.is_state(GroupState.DEAD):
            return all_(ErrorCode.coordinator_not_available)
        if not (generation_id < 0 and group.is_state(GroupState.EMPTY)):
            # A commit from a group member: it must be current.
            if group.is_state(GroupState.COMPLETING_REBALANCE):
                return all_(ErrorCode.rebalance_in_progress)
            code = self.membership.validate_member(group, member_id, group_instance_id)
            if code != ErrorCode.none:
                return all_(code)
            if generation_id != group.generation_id:
                return all_(ErrorCode.illegal_generation)
            self.membership.schedule_heartbeat(group, group.members[member_id])
        return self._store_offsets(group, offsets)

    def _store_offsets(
        self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetCommit]
    ) -> dict[TopicPartition, ErrorCode]:
        now = self.state.scheduler.wall_clock_ms()
        result: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.state.config.offset_metadata_max_bytes:
                result[tp] = ErrorCode.offset_metadata_too_large
                continue
            accepted[tp] = OffsetAndMetadata(offset, leader_epoch, metadata, now)
        if accepted:
            records = [
                (schema.encode_offset_key(group.group_id, t, p), schema.encode_offset_value(v))
                for (t, p), v in accepted.items()
            ]
            try:
                self.state.store.append(group.group_id, records, now)
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                code = store_error_code(exc)
                return {**result, **{tp: code for tp in accepted}}
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
        group = self.state.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        result: dict[TopicPartition, ErrorCode] = {}
        deletable: list[TopicPartition] = []
        if group.is_state(GroupState.EMPTY):
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
