"""Offsets committed inside a transaction: TxnOffsetCommit and the markers that settle them.

A transactional producer's offsets are written to the group's `__consumer_offsets` partition as a
transactional batch of that producer, and kept pending (invisible to OffsetFetch) until the
transaction coordinator's marker reaches the partition: COMMIT applies them, ABORT drops them
(Kafka's GroupMetadata.prepareTxnOffsetCommit / completePendingTxnOffsetCommit). OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT for a partition with pending offsets, so a consumer
that takes over never starts from an offset that may still be rolled back.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.group import UNKNOWN_MEMBER_ID, GroupState
from tieredlog.coordinator.membership import GroupMembership
from tieredlog.coordinator.offsets import OffsetCommit, accept_offsets, validate_consumer_commit
from tieredlog.coordinator.state import CoordinatorState, valid_group_id
from tieredlog.coordinator.storage import Producer, store_error_code

TopicPartition = tuple[str, int]


class TransactionalOffsets:
    def __init__(self, state: CoordinatorState, membership: GroupMembership) -> None:
        self.state = state
        self.membership = membership

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer: Producer,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if (code := self.state.not_ready_error()) is not None:
            return all_(code)
        if not valid_group_id(group_id, allow_empty=False):
            return all_(ErrorCode.invalid_group_id)
        if (code := self.state.ownership_error(group_id)) is not None:
            return all_(code)
        group = self.state.groups.get(group_id) or self.state.new_group(group_id)
        if group.is_state(GroupState.DEAD):
            return all_(ErrorCode.coordinator_not_available)
        consumer_group = self.state.consumer_groups.get(group_id)
        if consumer_group is not None:
            # a KIP-848 group: the generation is the member's epoch
            code = validate_consumer_commit(consumer_group, member_id, group_instance_id, generation_id,
                                            transactional=True)
            if code != ErrorCode.none:
                return all_(code)
        # Kafka's doTxnCommitOffsets: members are checked only as far as the request names them
        elif group_instance_id is not None or member_id != UNKNOWN_MEMBER_ID:
            code = self.membership.validate_member(group, member_id, group_instance_id)
            if code != ErrorCode.none:
                return all_(code)
        if consumer_group is None and generation_id >= 0 and generation_id != group.generation_id:
            return all_(ErrorCode.illegal_generation)
        now = self.state.scheduler.wall_clock_ms()
        result, accepted = accept_offsets(offsets, now, self.state.config.offset_metadata_max_bytes)
        if not accepted:
            return result
        records = [(schema.encode_offset_key(group_id, t, p), schema.encode_offset_value(v))
                   for (t, p), v in accepted.items()]
        group.pending_txn_appends += 1
        try:
            wait = self.state.store.append(group_id, records, now, producer)
            if wait is not None:
                await wait()
        except Exception as exc:  # noqa: BLE001 - a failed append is this commit's answer
            code = store_error_code(exc)
            return {**result, **{tp: code for tp in accepted}}
        finally:
            group.pending_txn_appends -= 1
        group.pending_txn_offsets.setdefault(producer.producer_id, {}).update(accepted)
        return {**result, **{tp: ErrorCode.none for tp in accepted}}

    def complete_txn(self, producer_id: int, committed: bool, partition: int | None) -> None:
        """A marker for ``producer_id`` reached `__consumer_offsets` partition ``partition`` (None: a
        broker alone, which holds every partition's groups): settle its pending offsets there."""
        own = self.state.ownership
        for group_id, group in self.state.groups.items():
            if partition is not None and own is not None and own.partition_for(group_id) != partition:
                continue
            pending = group.pending_txn_offsets.pop(producer_id, None)
            if pending and committed:
                group.offsets.update(pending)

    def unstable(self, group_id: str, partitions: list[TopicPartition]) -> set[TopicPartition]:
        """The partitions of ``group_id`` with offsets pending in an open transaction."""
        group = self.state.groups.get(group_id)
        if group is None or not group.pending_txn_offsets:
            return set()
        pending = {tp for offsets in group.pending_txn_offsets.values() for tp in offsets}
        return {tp for tp in partitions if tp in pending}
