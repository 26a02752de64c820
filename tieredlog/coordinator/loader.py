"""Loading `__consumer_offsets` (Kafka's GroupMetadataManager.loadGroupsAndOffsets): at start-up for
a broker alone, in a cluster for each partition this broker becomes the leader of.

Every record of every partition is replayed in log order; the last value of a key wins and a
tombstone deletes it. A group with stored members comes back Stable with its last generation, so its
members keep their assignment and only have to heartbeat. A group keeps the current_state_timestamp of
its GroupMetadataValue: an Empty group's offsets expire counting from it, not from the load. A record
this version cannot read is skipped (one line for all of them): damage or a newer Kafka's schema never
stops start-up.
"""

from __future__ import annotations

import logging
from typing import Iterable

from tieredlog.coordinator import schema
from tieredlog.coordinator.group import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from tieredlog.coordinator.storage import GroupStore, ReplayedRecord

log = logging.getLogger(__name__)


def load_groups(store: GroupStore, now_ms: int) -> dict[str, GroupMetadata]:
    return load_records(store.replay(), now_ms)


def load_records(records: Iterable[ReplayedRecord], now_ms: int) -> dict[str, GroupMetadata]:
    """The groups that ``records`` (key, value or None), in log order, leave behind; those of a
    transaction still open come back as its pending offsets. ``now_ms`` (wall clock) is the state
    timestamp of a group without a GroupMetadataValue, as in Kafka."""
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
    pending: dict[str, dict[int, dict[tuple[str, int], OffsetAndMetadata]]] = {}
    stored: dict[str, schema.StoredGroup | None] = {}
    unreadable = 0
    first_unreadable: schema.SchemaError | None = None
    for key_bytes, value, producer_id in records:
        try:
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
    return groups


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
