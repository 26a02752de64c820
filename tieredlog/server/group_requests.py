"""Typed views of the group APIs' requests, whatever their version.

kio decodes each version to its own class. Where every served version has the fields a handler
reads, the handler takes the union of those classes (``Kio...Request``), so the type checker checks
each field against every version. Where the versions differ, a view below has every field, with
Kafka's default where a version has none (the defaults of Kafka's message JSON, or what Kafka's
request class fills in, as JoinGroup v0's rebalance timeout), built once per request.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence, TypeAlias, cast

if TYPE_CHECKING:
    from kio.schema.consumer_group_describe import v0 as cgd0
    from kio.schema.consumer_group_describe import v1 as cgd1
    from kio.schema.consumer_group_heartbeat import v0 as cgh0
    from kio.schema.consumer_group_heartbeat import v1 as cgh1
    from kio.schema.delete_groups import v0 as delg0
    from kio.schema.delete_groups import v1 as delg1
    from kio.schema.delete_groups import v2 as delg2
    from kio.schema.describe_groups import v0 as dg0
    from kio.schema.describe_groups import v1 as dg1
    from kio.schema.describe_groups import v2 as dg2
    from kio.schema.describe_groups import v3 as dg3
    from kio.schema.describe_groups import v4 as dg4
    from kio.schema.describe_groups import v5 as dg5
    from kio.schema.find_coordinator import v0 as fc0
    from kio.schema.find_coordinator import v1 as fc1
    from kio.schema.find_coordinator import v2 as fc2
    from kio.schema.find_coordinator import v3 as fc3
    from kio.schema.find_coordinator import v4 as fc4
    from kio.schema.find_coordinator import v5 as fc5
    from kio.schema.find_coordinator import v6 as fc6
    from kio.schema.heartbeat import v0 as hb0
    from kio.schema.heartbeat import v1 as hb1
    from kio.schema.heartbeat import v2 as hb2
    from kio.schema.heartbeat import v3 as hb3
    from kio.schema.heartbeat import v4 as hb4
    from kio.schema.join_group import v0 as jg0
    from kio.schema.join_group import v1 as jg1
    from kio.schema.join_group import v2 as jg2
    from kio.schema.join_group import v3 as jg3
    from kio.schema.join_group import v4 as jg4
    from kio.schema.join_group import v5 as jg5
    from kio.schema.join_group import v6 as jg6
    from kio.schema.join_group import v7 as jg7
    from kio.schema.join_group import v8 as jg8
    from kio.schema.join_group import v9 as jg9
    from kio.schema.leave_group import v0 as lg0
    from kio.schema.leave_group import v1 as lg1
    from kio.schema.leave_group import v2 as lg2
    from kio.schema.leave_group import v3 as lg3
    from kio.schema.leave_group import v4 as lg4
    from kio.schema.leave_group import v5 as lg5
    from kio.schema.list_groups import v0 as lsg0
    from kio.schema.list_groups import v1 as lsg1
    from kio.schema.list_groups import v2 as lsg2
    from kio.schema.list_groups import v3 as lsg3
    from kio.schema.list_groups import v4 as lsg4
    from kio.schema.list_groups import v5 as lsg5
    from kio.schema.offset_commit import v2 as oc2
    from kio.schema.offset_commit import v3 as oc3
    from kio.schema.offset_commit import v4 as oc4
    from kio.schema.offset_commit import v5 as oc5
    from kio.schema.offset_commit import v6 as oc6
    from kio.schema.offset_commit import v7 as oc7
    from kio.schema.offset_commit import v8 as oc8
    from kio.schema.offset_commit import v9 as oc9
    from kio.schema.offset_delete import v0 as od0
    from kio.schema.offset_fetch import v1 as of1
    from kio.schema.offset_fetch import v2 as of2
    from kio.schema.offset_fetch import v3 as of3
    from kio.schema.offset_fetch import v4 as of4
    from kio.schema.offset_fetch import v5 as of5
    from kio.schema.offset_fetch import v6 as of6
    from kio.schema.offset_fetch import v7 as of7
    from kio.schema.offset_fetch import v8 as of8
    from kio.schema.offset_fetch import v9 as of9
    from kio.schema.sync_group import v0 as sg0
    from kio.schema.sync_group import v1 as sg1
    from kio.schema.sync_group import v2 as sg2
    from kio.schema.sync_group import v3 as sg3
    from kio.schema.sync_group import v4 as sg4
    from kio.schema.sync_group import v5 as sg5

    KioFindCoordinatorRequest: TypeAlias = (fc0.FindCoordinatorRequest | fc1.FindCoordinatorRequest
                                            | fc2.FindCoordinatorRequest | fc3.FindCoordinatorRequest
                                            | fc4.FindCoordinatorRequest | fc5.FindCoordinatorRequest
                                            | fc6.FindCoordinatorRequest)
    _KioFindCoordinatorRequestV1: TypeAlias = (fc1.FindCoordinatorRequest | fc2.FindCoordinatorRequest
                                               | fc3.FindCoordinatorRequest | fc4.FindCoordinatorRequest
                                               | fc5.FindCoordinatorRequest | fc6.FindCoordinatorRequest)
    _KioFindCoordinatorRequestV0To3: TypeAlias = (fc0.FindCoordinatorRequest | fc1.FindCoordinatorRequest
                                                  | fc2.FindCoordinatorRequest | fc3.FindCoordinatorRequest)
    _KioFindCoordinatorRequestV4: TypeAlias = (fc4.FindCoordinatorRequest | fc5.FindCoordinatorRequest
                                               | fc6.FindCoordinatorRequest)
    KioJoinGroupRequest: TypeAlias = (jg0.JoinGroupRequest | jg1.JoinGroupRequest | jg2.JoinGroupRequest
                                      | jg3.JoinGroupRequest | jg4.JoinGroupRequest | jg5.JoinGroupRequest
                                      | jg6.JoinGroupRequest | jg7.JoinGroupRequest | jg8.JoinGroupRequest
                                      | jg9.JoinGroupRequest)
    _KioJoinGroupRequestV1: TypeAlias = (jg1.JoinGroupRequest | jg2.JoinGroupRequest | jg3.JoinGroupRequest
                                         | jg4.JoinGroupRequest | jg5.JoinGroupRequest | jg6.JoinGroupRequest
                                         | jg7.JoinGroupRequest | jg8.JoinGroupRequest | jg9.JoinGroupRequest)
    _KioJoinGroupRequestV5: TypeAlias = (jg5.JoinGroupRequest | jg6.JoinGroupRequest | jg7.JoinGroupRequest
                                         | jg8.JoinGroupRequest | jg9.JoinGroupRequest)
    KioSyncGroupRequest: TypeAlias = (sg0.SyncGroupRequest | sg1.SyncGroupRequest | sg2.SyncGroupRequest
                                      | sg3.SyncGroupRequest | sg4.SyncGroupRequest | sg5.SyncGroupRequest)
    _KioSyncGroupRequestV3: TypeAlias = sg3.SyncGroupRequest | sg4.SyncGroupRequest | sg5.SyncGroupRequest
    _KioSyncGroupRequestV5: TypeAlias = sg5.SyncGroupRequest
    KioHeartbeatRequest: TypeAlias = (hb0.HeartbeatRequest | hb1.HeartbeatRequest | hb2.HeartbeatRequest
                                      | hb3.HeartbeatRequest | hb4.HeartbeatRequest)
    _KioHeartbeatRequestV3: TypeAlias = hb3.HeartbeatRequest | hb4.HeartbeatRequest
    KioLeaveGroupRequest: TypeAlias = (lg0.LeaveGroupRequest | lg1.LeaveGroupRequest | lg2.LeaveGroupRequest
                                       | lg3.LeaveGroupRequest | lg4.LeaveGroupRequest | lg5.LeaveGroupRequest)
    _KioLeaveGroupRequestV0To2: TypeAlias = lg0.LeaveGroupRequest | lg1.LeaveGroupRequest | lg2.LeaveGroupRequest
    _KioLeaveGroupRequestV3: TypeAlias = lg3.LeaveGroupRequest | lg4.LeaveGroupRequest | lg5.LeaveGroupRequest
    KioOffsetCommitRequest: TypeAlias = (oc2.OffsetCommitRequest | oc3.OffsetCommitRequest | oc4.OffsetCommitRequest
                                         | oc5.OffsetCommitRequest | oc6.OffsetCommitRequest | oc7.OffsetCommitRequest
                                         | oc8.OffsetCommitRequest | oc9.OffsetCommitRequest)
    _KioOffsetCommitRequestV6: TypeAlias = (oc6.OffsetCommitRequest | oc7.OffsetCommitRequest | oc8.OffsetCommitRequest
                                            | oc9.OffsetCommitRequest)
    _KioOffsetCommitRequestV7: TypeAlias = oc7.OffsetCommitRequest | oc8.OffsetCommitRequest | oc9.OffsetCommitRequest
    KioOffsetFetchRequest: TypeAlias = (of1.OffsetFetchRequest | of2.OffsetFetchRequest | of3.OffsetFetchRequest
                                        | of4.OffsetFetchRequest | of5.OffsetFetchRequest | of6.OffsetFetchRequest
                                        | of7.OffsetFetchRequest | of8.OffsetFetchRequest | of9.OffsetFetchRequest)
    _KioOffsetFetchRequestV1To7: TypeAlias = (of1.OffsetFetchRequest | of2.OffsetFetchRequest | of3.OffsetFetchRequest
                                              | of4.OffsetFetchRequest | of5.OffsetFetchRequest | of6.OffsetFetchRequest
                                              | of7.OffsetFetchRequest)
    _KioOffsetFetchRequestV7: TypeAlias = of7.OffsetFetchRequest | of8.OffsetFetchRequest | of9.OffsetFetchRequest
    _KioOffsetFetchRequestV8: TypeAlias = of8.OffsetFetchRequest | of9.OffsetFetchRequest
    KioDescribeGroupsRequest: TypeAlias = (dg0.DescribeGroupsRequest | dg1.DescribeGroupsRequest
                                           | dg2.DescribeGroupsRequest | dg3.DescribeGroupsRequest
                                           | dg4.DescribeGroupsRequest | dg5.DescribeGroupsRequest)
    _KioDescribeGroupsRequestV3: TypeAlias = (dg3.DescribeGroupsRequest | dg4.DescribeGroupsRequest
                                              | dg5.DescribeGroupsRequest)
    KioListGroupsRequest: TypeAlias = (lsg0.ListGroupsRequest | lsg1.ListGroupsRequest | lsg2.ListGroupsRequest
                                       | lsg3.ListGroupsRequest | lsg4.ListGroupsRequest | lsg5.ListGroupsRequest)
    _KioListGroupsRequestV4: TypeAlias = lsg4.ListGroupsRequest | lsg5.ListGroupsRequest
    _KioListGroupsRequestV5: TypeAlias = lsg5.ListGroupsRequest
    KioOffsetDeleteRequest: TypeAlias = od0.OffsetDeleteRequest
    KioDeleteGroupsRequest: TypeAlias = (delg0.DeleteGroupsRequest | delg1.DeleteGroupsRequest
                                         | delg2.DeleteGroupsRequest)
    KioConsumerGroupHeartbeatRequest: TypeAlias = (cgh0.ConsumerGroupHeartbeatRequest
                                                   | cgh1.ConsumerGroupHeartbeatRequest)
    _KioConsumerGroupHeartbeatRequestV1: TypeAlias = cgh1.ConsumerGroupHeartbeatRequest
    KioConsumerGroupDescribeRequest: TypeAlias = cgd0.ConsumerGroupDescribeRequest | cgd1.ConsumerGroupDescribeRequest


# -- FindCoordinator ---------------------------------------------------------------------------------------

_KEY_TYPE_SINCE, _COORDINATOR_KEYS_SINCE = 1, 4
GROUP_KEY_TYPE = 0


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str  # "" from v4
    key_type: int  # the group's before v1
    coordinator_keys: tuple[str, ...]  # () before v4


def find_coordinator_request(req: KioFindCoordinatorRequest, version: int) -> FindCoordinatorRequest:
    if version >= _COORDINATOR_KEYS_SINCE:
        v4 = cast("_KioFindCoordinatorRequestV4", req)
        return FindCoordinatorRequest("", v4.key_type, tuple(v4.coordinator_keys))
    key = cast("_KioFindCoordinatorRequestV0To3", req).key
    if version >= _KEY_TYPE_SINCE:
        return FindCoordinatorRequest(key, cast("_KioFindCoordinatorRequestV1", req).key_type, ())
    return FindCoordinatorRequest(key, GROUP_KEY_TYPE, ())


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------------

_REBALANCE_TIMEOUT_SINCE, _JOIN_INSTANCE_ID_SINCE = 1, 5


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout: datetime.timedelta
    rebalance_timeout: datetime.timedelta  # v0: the session timeout, as Kafka's JoinGroupRequest sets it
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata)


def join_group_request(req: KioJoinGroupRequest, version: int) -> JoinGroupRequest:
    rebalance = req.session_timeout
    if version >= _REBALANCE_TIMEOUT_SINCE:
        rebalance = cast("_KioJoinGroupRequestV1", req).rebalance_timeout
    instance_id = None
    if version >= _JOIN_INSTANCE_ID_SINCE:
        instance_id = cast("_KioJoinGroupRequestV5", req).group_instance_id
    return JoinGroupRequest(req.group_id, req.session_timeout, rebalance, req.member_id, instance_id,
                            req.protocol_type, [(p.name, bytes(p.metadata)) for p in req.protocols])


_SYNC_INSTANCE_ID_SINCE, _SYNC_PROTOCOL_SINCE = 3, 5


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None  # None before v5
    protocol_name: str | None  # None before v5
    assignments: dict[str, bytes]  # member id -> assignment


def sync_group_request(req: KioSyncGroupRequest, version: int) -> SyncGroupRequest:
    instance_id = protocol_type = protocol_name = None
    if version >= _SYNC_INSTANCE_ID_SINCE:
        instance_id = cast("_KioSyncGroupRequestV3", req).group_instance_id
    if version >= _SYNC_PROTOCOL_SINCE:
        v5 = cast("_KioSyncGroupRequestV5", req)
        protocol_type, protocol_name = v5.protocol_type, v5.protocol_name
    return SyncGroupRequest(req.group_id, req.generation_id, req.member_id, instance_id, protocol_type,
                            protocol_name, {a.member_id: bytes(a.assignment) for a in req.assignments})


_HEARTBEAT_INSTANCE_ID_SINCE = 3


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None  # None before v3


def heartbeat_request(req: KioHeartbeatRequest, version: int) -> HeartbeatRequest:
    instance_id = None
    if version >= _HEARTBEAT_INSTANCE_ID_SINCE:
        instance_id = cast("_KioHeartbeatRequestV3", req).group_instance_id
    return HeartbeatRequest(req.group_id, req.generation_id, req.member_id, instance_id)


MEMBERS_SINCE = 3  # LeaveGroup v3+ (KIP-345): a batch of members, each answered on its own


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: list[tuple[str, str | None]]  # (member_id, group_instance_id); before v3 the one member_id


def leave_group_request(req: KioLeaveGroupRequest, version: int) -> LeaveGroupRequest:
    if version >= MEMBERS_SINCE:
        v3 = cast("_KioLeaveGroupRequestV3", req)
        return LeaveGroupRequest(req.group_id, [(m.member_id, m.group_instance_id) for m in v3.members])
    member_id = cast("_KioLeaveGroupRequestV0To2", req).member_id
    return LeaveGroupRequest(req.group_id, [(member_id, None)])


# -- offsets -----------------------------------------------------------------------------------------------

_COMMITTED_LEADER_EPOCH_SINCE, _COMMIT_INSTANCE_ID_SINCE = 6, 7


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int  # -1 before v6
    committed_metadata: str | None


@dataclass(frozen=True, slots=True)
class OffsetCommitTopic:
    name: str
    partitions: list[OffsetCommitPartition]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None  # None before v7
    topics: list[OffsetCommitTopic]


def offset_commit_request(req: KioOffsetCommitRequest, version: int) -> OffsetCommitRequest:
    instance_id = None
    if version >= _COMMIT_INSTANCE_ID_SINCE:
        instance_id = cast("_KioOffsetCommitRequestV7", req).group_instance_id
    topics = []
    if version >= _COMMITTED_LEADER_EPOCH_SINCE:
        for t6 in cast("_KioOffsetCommitRequestV6", req).topics:
            topics.append(OffsetCommitTopic(t6.name, [
                OffsetCommitPartition(p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                      p.committed_metadata) for p in t6.partitions]))
    else:
        for t in req.topics:
            topics.append(OffsetCommitTopic(t.name, [
                OffsetCommitPartition(p.partition_index, p.committed_offset, -1, p.committed_metadata)
                for p in t.partitions]))
    return OffsetCommitRequest(req.group_id, req.generation_id_or_member_epoch, req.member_id, instance_id, topics)


_REQUIRE_STABLE_SINCE = 7
GROUPS_SINCE = 8  # OffsetFetch v8+ (KIP-709): a batch of groups, each answered on its own


@dataclass(frozen=True, slots=True)
class OffsetFetchGroup:
    group_id: str
    topics: Sequence[tuple[str, Sequence[int]]] | None  # (name, partition_indexes); None: every committed offset


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    groups: list[OffsetFetchGroup]  # before v8 the one group_id and its topics
    require_stable: bool  # False before v7


def offset_fetch_request(req: KioOffsetFetchRequest, version: int) -> OffsetFetchRequest:
    if version >= GROUPS_SINCE:
        v8 = cast("_KioOffsetFetchRequestV8", req)
        return OffsetFetchRequest([
            OffsetFetchGroup(g.group_id, None if g.topics is None
                             else [(t.name, list(t.partition_indexes)) for t in g.topics])
            for g in v8.groups], v8.require_stable)
    single = cast("_KioOffsetFetchRequestV1To7", req)
    require_stable = False
    if version >= _REQUIRE_STABLE_SINCE:
        require_stable = cast("_KioOffsetFetchRequestV7", req).require_stable
    topics = None if single.topics is None else [(t.name, list(t.partition_indexes)) for t in single.topics]
    return OffsetFetchRequest([OffsetFetchGroup(single.group_id, topics)], require_stable)


# -- admin ---------------------------------------------------------------------------------------------------

_INCLUDE_AUTHORIZED_OPERATIONS_SINCE = 3


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    groups: tuple[str, ...]
    include_authorized_operations: bool  # False before v3


def describe_groups_request(req: KioDescribeGroupsRequest, version: int) -> DescribeGroupsRequest:
    include = False
    if version >= _INCLUDE_AUTHORIZED_OPERATIONS_SINCE:
        include = cast("_KioDescribeGroupsRequestV3", req).include_authorized_operations
    return DescribeGroupsRequest(tuple(req.groups), include)


_STATES_FILTER_SINCE, _TYPES_FILTER_SINCE = 4, 5


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...]  # () before v4: every state
    types_filter: tuple[str, ...]  # () before v5: every type


def list_groups_request(req: KioListGroupsRequest, version: int) -> ListGroupsRequest:
    states: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    if version >= _STATES_FILTER_SINCE:
        states = tuple(cast("_KioListGroupsRequestV4", req).states_filter)
    if version >= _TYPES_FILTER_SINCE:
        types = tuple(cast("_KioListGroupsRequestV5", req).types_filter)
    return ListGroupsRequest(states, types)


# -- KIP-848 -------------------------------------------------------------------------------------------------

_SUBSCRIBED_TOPIC_REGEX_SINCE = 1


def subscribed_topic_regex(req: KioConsumerGroupHeartbeatRequest, version: int) -> str | None:
    """ConsumerGroupHeartbeat's regex subscription (v1+, KIP-848); None before."""
    if version >= _SUBSCRIBED_TOPIC_REGEX_SINCE:
        return cast("_KioConsumerGroupHeartbeatRequestV1", req).subscribed_topic_regex
    return None
