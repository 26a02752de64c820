"""Loading `__consumer_offsets` (Kafka's GroupMetadataManager.loadGroupsAndOffsets): at start-up for
a broker alone, in a cluster for each partition this broker becomes the leader of.

Every record of every partition is replayed in log order; the last value of a key wins and a
tombstone deletes it. A group with stored members comes back Stable with its last generation, so its
members keep their assignment and only have to heartbeat. A group keeps the current_state_timestamp of
its GroupMetadataValue: an Empty group's offsets expire counting from it, not from the load. A record
this version cannot read is skipped (one line for all of them): damage or a newer Kafka's schema never
stops start-up.

KIP-848 consumer groups (record types 3-8, consumer_group/records.py) come back with their group epoch,
target assignment and each member's epoch and current assignment: members heartbeat on at the epoch they
had, within a new session. Each also gets its GroupMetadata (its committed offsets), as a running
coordinator keeps one.
"""

from __future__ import annotations

import logging
import struct
from typing import Iterable

from tieredlog.coordinator import schema
from tieredlog.coordinator.consumer_group import records as consumer_records
from tieredlog.coordinator.consumer_group.group import ConsumerGroup
from tieredlog.coordinator.consumer_group.member import ConsumerMember, MemberState
from tieredlog.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
)
from tieredlog.coordinator.storage import GroupStore, ReplayedRecord

log = logging.getLogger(__name__)


def load_groups(store: GroupStore, now_ms: int,
                consumer_groups: dict[str, ConsumerGroup] | None = None) -> dict[str, GroupMetadata]:
    return load_records(store.replay(), now_ms, consumer_groups)


def load_records(records: Iterable[ReplayedRecord], now_ms: int,
                 consumer_groups: dict[str, ConsumerGroup] | None = None) -> dict[str, GroupMetadata]:
    """The groups that ``records`` (key, value or None), in log order, leave behind; those of a
    transaction still open come back as its pending offsets. ``now_ms`` (wall clock) is the state
    timestamp of a group without a GroupMetadataValue, as in Kafka. KIP-848 groups go to
    ``consumer_groups`` when given."""
    consumer: dict[consumer_records.ConsumerKey, bytes | None] = {}
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
    pending: dict[str, dict[int, dict[tuple[str, int], OffsetAndMetadata]]] = {}
    stored: dict[str, schema.StoredGroup | None] = {}
    unreadable = 0
    first_unreadable: schema.SchemaError | None = None
    for key_bytes, value, producer_id in records:
        try:
            if len(key_bytes) >= 2 and struct.unpack_from(">h", key_bytes)[0] in consumer_records.RECORD_TYPES:
                ckey = consumer_records.decode_key(struct.unpack_from(">h", key_bytes)[0], key_bytes, 2)
                consumer.pop(ckey, None)  # keep log order: the last write of a key decides
                consumer[ckey] = value
                continue
            key = schema.decode_key(key_bytes)
            if isinstance(key, schema.OffsetKey):
                tp = (key.topic, key.partition)
                if producer_id >= 0:
                    if value is not None:
                        pending.setdefault(key.group, {}).setdefault(producer_id, {})[tp] = schema.decode_offset_value(value)
                elif value is None:
                    offsets.get(key.group, {}).pop(tp, None)
                else:
                    offsets.setdefault(key.group, {})[tp] = schema.decode_offset_value(value)
            else:
                stored[key.group] = None if value is None else schema.decode_group_value(value)
        except schema.SchemaError as exc:
            unreadable += 1
            first_unreadable = first_unreadable or exc
    if first_unreadable is not None:
        log.warning("skipped %d unreadable __consumer_offsets record(s); the first: %s", unreadable, first_unreadable)
    groups: dict[str, GroupMetadata] = {}
    for group_id in set(offsets) | set(pending) | {g for g, v in stored.items() if v is not None}:
        group = GroupMetadata(group_id, state_timestamp_ms=now_ms)
        group.offsets = offsets.get(group_id, {})
        group.pending_txn_offsets = pending.get(group_id, {})
        saved = stored.get(group_id)
        if saved is not None:
            _restore(group, saved)
        if group.members or group.offsets or group.pending_txn_offsets or group.generation_id > 0:
            groups[group_id] = group
    if consumer_groups is not None:
        for cg in _consumer_groups(consumer).values():
            consumer_groups[cg.group_id] = cg
            shell = groups.get(cg.group_id)
            if shell is None or shell.members:
                shell = groups[cg.group_id] = GroupMetadata(cg.group_id, state_timestamp_ms=now_ms,
                                                            offsets=offsets.get(cg.group_id, {}))
            shell.protocol_type = CONSUMER_PROTOCOL_TYPE
    return groups


def _consumer_groups(latest: dict[consumer_records.ConsumerKey, bytes | None]) -> dict[str, ConsumerGroup]:
    groups: dict[str, ConsumerGroup] = {}
    assignments: list[tuple[str, str, consumer_records.StoredCurrentAssignment]] = []
    for key, value in latest.items():
        if value is None:
            continue
        try:
            group = groups.setdefault(key.group, ConsumerGroup(key.group))
            rtype = key.record_type
            if rtype == consumer_records.GROUP_METADATA:
                group.group_epoch = consumer_records.decode_epoch(value)
            elif rtype == consumer_records.PARTITION_METADATA:
                group.subscription_metadata = consumer_records.decode_partition_metadata(value)
            elif rtype == consumer_records.TARGET_ASSIGNMENT_METADATA:
                group.assignment_epoch = consumer_records.decode_epoch(value)
            elif rtype == consumer_records.REGULAR_EXPRESSION:
                group.resolved_regexes[key.member_id or ""] = consumer_records.decode_resolved_regex(value)
            elif rtype == consumer_records.TARGET_ASSIGNMENT_MEMBER:
                group.target[key.member_id or ""] = consumer_records.decode_target_member(value)
            elif rtype == consumer_records.MEMBER_METADATA:
                m = consumer_records.decode_member_metadata(value)
                group.members[key.member_id or ""] = ConsumerMember(
                    key.member_id or "", m.instance_id, m.rack_id, m.client_id, m.client_host,
                    m.subscribed_topic_names, m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor,
                    classic=m.classic)
            else:
                assignments.append((key.group, key.member_id or "", consumer_records.decode_current_assignment(value)))
        except schema.SchemaError as exc:
            log.warning("skipped an unreadable consumer group record of group %s: %s", key.group, exc)
    for group_id, member_id, a in assignments:
        member = groups[group_id].members.get(member_id)
        if member is not None:
            member.member_epoch, member.previous_member_epoch = a.member_epoch, a.previous_member_epoch
            member.state = MemberState(a.state) if a.state in MemberState._value2member_map_ else MemberState.UNKNOWN
            member.assigned, member.pending_revocation = a.assigned, a.pending_revocation
    for group in groups.values():
        group.target = {m: p for m, p in group.target.items() if m in group.members}
    # a deleted group leaves only tombstones of its epoch record: nothing of it comes back
    return {g.group_id: g for g in groups.values() if g.group_epoch > 0 or g.members}


def _restore(group: GroupMetadata, saved: schema.StoredGroup) -> None:
    group.generation_id = saved.generation
    group.protocol_type = saved.protocol_type or None
    group.protocol_name = saved.protocol
    for m in saved.members:
        group.members[m.member_id] = MemberMetadata(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.rebalance_timeout_ms, m.session_timeout_ms, saved.protocol_type,
            [(saved.protocol or "", m.subscription)], m.assignment,
        )
    group.leader_id = saved.leader if saved.leader in group.members else None
    group.state_timestamp_ms = saved.current_state_timestamp
    if group.members:
        group.state = GroupState.STABLE
