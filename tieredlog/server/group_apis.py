"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, and KIP-848's ConsumerGroupHeartbeat and
ConsumerGroupDescribe (registered, hence advertised, only when group.coordinator.rebalance.protocols
includes consumer).

Each handler reads a typed request (tieredlog.server.group_requests: kio's classes where every served
version has the fields, else a view with Kafka's default where a version has none), asks the
coordinator, and answers with a dict of response fields; the dispatcher builds the kio response class
of `ctx.api_version` from it, ignoring the fields that version lacks. The few fields whose type
changes between versions (nullable only in newer ones) are filled per version here.
"""

from __future__ import annotations

import datetime
import enum
import logging
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.consumer_group import HeartbeatRequest
from tieredlog.protocol.api import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import (
    AuthContext,
    AuthorizerServer,
    authorize,
    authorize_cluster,
    authorized_names,
    authorized_operations,
)
from tieredlog.server.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED
from tieredlog.server.context import Handler
from tieredlog.server.coordinators import (
    CoordinatorLocator,
    LocatorServer,
    offsets_topic_spec,
    transaction_state_topic_spec,
)
from tieredlog.server.group_requests import (
    GROUPS_SINCE,
    MEMBERS_SINCE,
    OffsetFetchGroup,
    describe_groups_request,
    find_coordinator_request,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    list_groups_request,
    offset_commit_request,
    offset_fetch_request,
    subscribed_topic_regex,
    sync_group_request,
)

if TYPE_CHECKING:
    from tieredlog.coordinator.group_coordinator import GroupCoordinator
    from tieredlog.coordinator.transaction.coordinator import TransactionCoordinator
    from tieredlog.server.group_requests import (
        KioConsumerGroupDescribeRequest,
        KioConsumerGroupHeartbeatRequest,
        KioDeleteGroupsRequest,
        KioDescribeGroupsRequest,
        KioFindCoordinatorRequest,
        KioHeartbeatRequest,
        KioJoinGroupRequest,
        KioLeaveGroupRequest,
        KioListGroupsRequest,
        KioOffsetCommitRequest,
        KioOffsetDeleteRequest,
        KioOffsetFetchRequest,
        KioSyncGroupRequest,
    )

log = logging.getLogger(__name__)


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's key_type (Kafka's FindCoordinatorRequest.CoordinatorType)."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


class GroupServer(LocatorServer, Protocol):
    """What the group APIs need of the broker (FindCoordinator also answers for transactions)."""

    @property
    def node_id(self) -> int: ...

    @property
    def group_coordinator(self) -> GroupCoordinator | None: ...

    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None: ...


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _partition_exists(broker: GroupServer, topic: str, partition: int) -> bool:
    meta = broker.get_topic(topic)
    return meta is not None and 0 <= partition < meta.partitions


def group_handlers(broker: GroupServer) -> dict[int, Handler[AuthorizerServer]]:
    locators: dict[CoordinatorType, CoordinatorLocator] = {}  # in a cluster, made on first use

    # -- FindCoordinator ---------------------------------------------------------------------------------
    async def coordinator_entry(ctx: AuthContext, key: str, key_type: int) -> dict:
        entry = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.none, "error_message": None}
        if key_type == CoordinatorType.GROUP and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            entry.update(error_code=ErrorCode.group_authorization_failed, error_message="Group authorization failed.")
            return entry
        if key_type == CoordinatorType.TRANSACTION \
                and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            entry.update(error_code=ErrorCode.transactional_id_authorization_failed,
                         error_message="Transactional Id authorization failed.")
            return entry
        if key_type == CoordinatorType.TRANSACTION:
            active = broker.transaction_coordinator is not None and broker.transaction_coordinator.active
            if key == "":
                entry["error_code"] = ErrorCode.invalid_request
                entry["error_message"] = "empty transactional id"
                return entry
        elif key_type == CoordinatorType.GROUP:
            active = broker.group_coordinator is not None and broker.group_coordinator.active
        else:
            entry["error_code"] = ErrorCode.invalid_request
            entry["error_message"] = f"unsupported coordinator key type {key_type}"
            return entry
        kind = CoordinatorType(key_type)
        if not active:
            entry["error_code"] = ErrorCode.coordinator_not_available
        elif broker.cluster_node is not None:
            # the leader of the key's __consumer_offsets / __transaction_state partition, wherever it is
            locator = locators.get(kind)
            if locator is None:
                spec = offsets_topic_spec(broker) if kind is CoordinatorType.GROUP else transaction_state_topic_spec(broker)
                locator = locators[kind] = CoordinatorLocator(broker, spec)
            code, node_id, host, port = await locator.find(key, ctx.listener_name)
            entry.update(error_code=code, node_id=node_id, host=host, port=port)
        else:
            # One broker coordinates every group and transaction (it leads every partition), reached
            # on the listener the request came in on
            adv = broker.config.advertised_listener(ctx.listener_name) or broker.config.advertised_listeners[0]
            entry.update(node_id=broker.node_id, host=adv.host or "127.0.0.1", port=adv.port)
        return entry

    async def find_coordinator(ctx: AuthContext, kio_req: KioFindCoordinatorRequest) -> dict:
        req = find_coordinator_request(kio_req, ctx.api_version)
        if ctx.api_version >= 4:
            return {"throttle_time": 0, "coordinators": [await coordinator_entry(ctx, k, req.key_type)
                                                         for k in req.coordinator_keys]}
        entry = await coordinator_entry(ctx, req.key, req.key_type)
        entry.pop("key")
        entry["throttle_time"] = 0
        return entry

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------------
    async def join_group(ctx: AuthContext, kio_req: KioJoinGroupRequest) -> dict:
        v = ctx.api_version
        req = join_group_request(kio_req, v)
        coordinator = broker.group_coordinator
        if coordinator is None:
            result = None
        else:
            result = await coordinator.join_group(
                req.group_id,
                req.member_id,
                req.group_instance_id,
                ctx.client_id or "",
                "/" + ctx.client_host,
                _ms(req.session_timeout),
                _ms(req.rebalance_timeout),
                req.protocol_type,
                req.protocols,
                require_known_member_id=v >= 4,
                supports_skip_assignment=v >= 9,
            )
        if result is None:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "generation_id": -1,
                    "protocol_name": "" if v < 7 else None, "leader": "", "member_id": req.member_id,
                    "members": []}
        protocol_name = result.protocol_name
        if protocol_name is None and v < 7:
            protocol_name = ""  # nullable only from v7
        return {
            "throttle_time": 0,
            "error_code": result.error,
            "generation_id": result.generation_id,
            "protocol_type": result.protocol_type,
            "protocol_name": protocol_name,
            "leader": result.leader_id,
            "skip_assignment": result.skip_assignment,
            "member_id": result.member_id,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "metadata": meta} for mid, iid, meta in result.members
            ],
        }

    async def sync_group(ctx: AuthContext, kio_req: KioSyncGroupRequest) -> dict:
        coordinator = broker.group_coordinator
        if coordinator is None:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "assignment": b""}
        req = sync_group_request(kio_req, ctx.api_version)
        result = await coordinator.sync_group(
            req.group_id,
            req.generation_id,
            req.member_id,
            req.group_instance_id,
            req.protocol_type,
            req.protocol_name,
            req.assignments,
        )
        return {
            "throttle_time": 0,
            "error_code": result.error,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name,
            "assignment": result.assignment,
        }

    async def heartbeat(ctx: AuthContext, kio_req: KioHeartbeatRequest) -> dict:
        coordinator = broker.group_coordinator
        if coordinator is None:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available}
        req = heartbeat_request(kio_req, ctx.api_version)
        code = coordinator.heartbeat(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
        return {"throttle_time": 0, "error_code": code}

    async def leave_group(ctx: AuthContext, kio_req: KioLeaveGroupRequest) -> dict:
        coordinator = broker.group_coordinator
        req = leave_group_request(kio_req, ctx.api_version)
        if coordinator is None:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "members": []}
        code, results = coordinator.leave_group(req.group_id, req.members)
        if ctx.api_version < MEMBERS_SINCE:
            # One member: its own error is the response's error.
            if code == ErrorCode.none and results:
                code = results[0][2]
            return {"throttle_time": 0, "error_code": code}
        return {
            "throttle_time": 0,
            "error_code": code,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": err} for mid, iid, err in results
            ],
        }

    # -- offsets -------------------------------------------------------------------------------------------
    async def offset_commit(ctx: AuthContext, kio_req: KioOffsetCommitRequest) -> dict:
        req = offset_commit_request(kio_req, ctx.api_version)
        coordinator = broker.group_coordinator
        requested: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        errors_by_tp: dict[tuple[str, int], int] = {}
        order: list[tuple[str, int]] = []
        readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
        for topic in req.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                order.append(tp)
                if topic.name not in readable:
                    errors_by_tp[tp] = ErrorCode.topic_authorization_failed
                    continue
                if not _partition_exists(broker, *tp):
                    errors_by_tp[tp] = ErrorCode.unknown_topic_or_partition
                    continue
                requested[tp] = (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
        if coordinator is None:
            errors_by_tp.update({tp: ErrorCode.coordinator_not_available for tp in requested})
        elif requested:
            # alone answered at once; in a cluster once the ISR has the commit
            errors_by_tp.update(await coordinator.handle_commit_offsets(
                req.group_id,
                req.member_id,
                req.group_instance_id,
                req.generation_id_or_member_epoch,
                requested,
                api_version=ctx.api_version,
            ))
        return {"throttle_time": 0, "topics": _by_topic(order, lambda tp: {"error_code": errors_by_tp[tp]})}

    def fetch_group(ctx: AuthContext, group: OffsetFetchGroup, require_stable: bool) -> tuple[int, list[dict]]:
        group_id, topics = group.group_id, group.topics
        coordinator = broker.group_coordinator
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return ErrorCode.group_authorization_failed, []
        wanted = None
        denied: set[tuple[str, int]] = set()
        if topics is not None:
            wanted = [(name, int(p)) for name, indexes in topics for p in indexes]
            describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (name for name, _ in topics))
            denied = {tp for tp in wanted if tp[0] not in describable}
        if coordinator is None:
            return ErrorCode.coordinator_not_available, []
        code, committed = coordinator.fetch_offsets(group_id, None if wanted is None else
                                                    [tp for tp in wanted if tp not in denied])
        if code != ErrorCode.none:
            return code, []
        if wanted is None:
            # offsets of topics the principal may not describe are left out, without a word
            describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                           {t for t, _ in committed}, log_denied=False)
            committed = {tp: o for tp, o in committed.items() if tp[0] in describable}
        order = wanted if wanted is not None else sorted(committed)
        # a consumer that takes over must not start from an offset an open transaction may roll back
        unstable = coordinator.unstable_offsets(group_id, order) if require_stable else set()

        def partition(tp: tuple[str, int]) -> dict:
            if tp in denied:
                return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                        "error_code": ErrorCode.topic_authorization_failed}
            if tp in unstable:
                return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                        "error_code": ErrorCode.unstable_offset_commit}
            found = committed.get(tp)
            if found is None:
                return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": ErrorCode.none}
            return {"committed_offset": found.offset, "committed_leader_epoch": found.leader_epoch,
                    "metadata": found.metadata, "error_code": ErrorCode.none}

        return ErrorCode.none, _by_topic(order, partition)

    async def offset_fetch(ctx: AuthContext, kio_req: KioOffsetFetchRequest) -> dict:
        req = offset_fetch_request(kio_req, ctx.api_version)
        if ctx.api_version >= GROUPS_SINCE:
            groups = []
            for g in req.groups:
                code, topics = fetch_group(ctx, g, req.require_stable)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
            return {"throttle_time": 0, "groups": groups}
        (group,) = req.groups
        code, topics = fetch_group(ctx, group, req.require_stable)
        if code != ErrorCode.none and ctx.api_version < 2:
            # v1 has no group-level error: report it on every requested partition.
            topics = [
                {"name": name, "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                    for p in indexes]}
                for name, indexes in group.topics or ()
            ]
        return {"throttle_time": 0, "topics": topics, "error_code": code}

    async def offset_delete(ctx: AuthContext, req: KioOffsetDeleteRequest) -> dict:
        coordinator = broker.group_coordinator
        order: list[tuple[str, int]] = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
        errors_by_tp = {tp: ErrorCode.topic_authorization_failed if tp[0] not in readable
                        else ErrorCode.unknown_topic_or_partition
                        for tp in order if tp[0] not in readable or not _partition_exists(broker, *tp)}
        if coordinator is None:
            return {"error_code": ErrorCode.coordinator_not_available, "throttle_time": 0, "topics": []}
        code, result = coordinator.delete_offsets(req.group_id, [tp for tp in order if tp not in errors_by_tp])
        if code != ErrorCode.none:
            return {"error_code": code, "throttle_time": 0, "topics": []}
        errors_by_tp.update(result)
        return {"error_code": ErrorCode.none, "throttle_time": 0,
                "topics": _by_topic(order, lambda tp: {"error_code": errors_by_tp.get(tp, ErrorCode.none)})}

    # -- admin ---------------------------------------------------------------------------------------------
    async def describe_groups(ctx: AuthContext, kio_req: KioDescribeGroupsRequest) -> dict:
        coordinator = broker.group_coordinator
        req = describe_groups_request(kio_req, ctx.api_version)
        requested = req.include_authorized_operations
        groups = []
        for group_id in req.groups:
            if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                groups.append({"error_code": ErrorCode.group_authorization_failed, "group_id": group_id,
                               "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                               "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
                continue
            operations = authorized_operations(ctx, ResourceType.GROUP, group_id, requested)
            if coordinator is None:
                groups.append({"error_code": ErrorCode.coordinator_not_available, "group_id": group_id, "group_state": "",
                               "protocol_type": "", "protocol_data": "", "members": [],
                               "authorized_operations": operations})
                continue
            s = coordinator.describe_group(group_id)
            groups.append({
                "error_code": s.error,
                "group_id": s.group_id,
                "group_state": s.state,
                "protocol_type": s.protocol_type,
                "protocol_data": s.protocol,
                "members": [
                    {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                     "client_host": m.client_host, "member_metadata": m.metadata, "member_assignment": m.assignment}
                    for m in s.members
                ],
                "authorized_operations": operations,
            })
        return {"throttle_time": 0, "groups": groups}

    async def list_groups(ctx: AuthContext, kio_req: KioListGroupsRequest) -> dict:
        coordinator = broker.group_coordinator
        if coordinator is None:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "groups": []}
        req = list_groups_request(kio_req, ctx.api_version)
        types = {t.lower() for t in req.types_filter}
        states = {s.lower() for s in req.states_filter}
        code, listed = coordinator.list_groups(())
        if not authorize_cluster(ctx, AclOperation.DESCRIBE, log_denied=False):
            # without DESCRIBE on the cluster, the groups the principal may describe
            visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g for g, _, _ in listed),
                                       log_denied=False)
            listed = [g for g in listed if g[0] in visible]
        groups = []
        for gid, ptype, state in listed:
            kind = "classic"
            consumer_state = coordinator.consumer.list_state(gid)
            if consumer_state is not None:
                kind, state = "consumer", consumer_state.value  # KIP-848 group: its own states
            if (types and kind not in types) or (states and state.lower() not in states):
                continue
            groups.append({"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": kind})
        return {"throttle_time": 0, "error_code": code, "groups": groups}

    # -- KIP-848 -------------------------------------------------------------------------------------------
    async def consumer_group_heartbeat(ctx: AuthContext, req: KioConsumerGroupHeartbeatRequest) -> dict:
        coordinator = broker.group_coordinator
        if coordinator is None:
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "member_epoch": -1,
                    "heartbeat_interval": 0}
        owned = None
        if req.topic_partitions is not None:
            owned = {}
            for tp in req.topic_partitions:
                if tp.topic_id is not None:
                    owned[tp.topic_id] = frozenset(int(p) for p in tp.partitions)
        names = req.subscribed_topic_names
        result = await coordinator.consumer_group_heartbeat(HeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=_ms(req.rebalance_timeout),
            subscribed_topic_names=tuple(names) if names is not None else None,
            subscribed_topic_regex=subscribed_topic_regex(req, ctx.api_version),
            server_assignor=req.server_assignor, owned=owned, client_id=ctx.client_id or "",
            client_host="/" + ctx.client_host, api_version=ctx.api_version))
        assignment = None
        if result.assignment is not None:
            assignment = {"topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)}
                for t, ps in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))]}
        return {"throttle_time": 0, "error_code": result.error, "error_message": result.message,
                "member_id": result.member_id, "member_epoch": result.member_epoch,
                "heartbeat_interval": result.heartbeat_interval_ms, "assignment": assignment}

    async def consumer_group_describe(ctx: AuthContext, req: KioConsumerGroupDescribeRequest) -> dict:
        coordinator = broker.group_coordinator
        out = []
        for group_id in req.group_ids:
            if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                out.append({"error_code": ErrorCode.group_authorization_failed, "group_id": group_id,
                            "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                            "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
                continue
            operations = authorized_operations(ctx, ResourceType.GROUP, group_id, req.include_authorized_operations)
            if coordinator is None:
                out.append({"error_code": ErrorCode.coordinator_not_available, "group_id": group_id,
                            "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                            "members": [], "authorized_operations": operations})
                continue
            d = coordinator.consumer_group_describe(group_id)

            def assignment(parts: Any, names: dict = d.topic_names) -> dict:
                return {"topic_partitions": [
                    {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                    for t, ps in sorted(parts.items(), key=lambda kv: names.get(kv[0], ""))]}

            out.append({
                "error_code": d.error, "error_message": d.message, "group_id": group_id, "group_state": d.state,
                "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor,
                "members": [{
                    "member_id": m.member.member_id, "instance_id": m.member.instance_id,
                    "rack_id": m.member.rack_id, "member_epoch": m.member.member_epoch,
                    "client_id": m.member.client_id, "client_host": m.member.client_host,
                    "subscribed_topic_names": list(m.member.subscribed_topic_names),
                    "subscribed_topic_regex": m.member.subscribed_topic_regex,
                    "assignment": assignment(m.member.assigned), "target_assignment": assignment(m.target),
                    # v1: 0 = a classic member (online migration), 1 = a consumer-protocol member
                    "member_type": 0 if m.member.classic is not None else 1,
                } for m in d.members],
                "authorized_operations": operations,
            })
        return {"throttle_time": 0, "groups": out}

    async def delete_groups(ctx: AuthContext, req: KioDeleteGroupsRequest) -> dict:
        coordinator = broker.group_coordinator
        names: list[str] = list(req.groups_names)
        deletable = authorized_names(ctx, AclOperation.DELETE, ResourceType.GROUP, names)
        allowed = [n for n in names if n in deletable]
        if coordinator is None:
            results = {name: ErrorCode.coordinator_not_available for name in allowed}
        else:
            results = coordinator.delete_groups(allowed)
        results.update({name: ErrorCode.group_authorization_failed for name in names if name not in deletable})
        return {"throttle_time": 0,
                "results": [{"group_id": name, "error_code": results[name]} for name in dict.fromkeys(names)]}

    kip848: dict[int, Handler[AuthorizerServer]] = {}
    if "consumer" in str(broker.config.get("group.coordinator.rebalance.protocols", "classic,consumer")).lower():
        kip848 = {CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat, CONSUMER_GROUP_DESCRIBE: consumer_group_describe}
    return {
        **kip848,
        FIND_COORDINATOR: find_coordinator,
        JOIN_GROUP: join_group,
        SYNC_GROUP: sync_group,
        HEARTBEAT: heartbeat,
        LEAVE_GROUP: leave_group,
        OFFSET_COMMIT: offset_commit,
        OFFSET_FETCH: offset_fetch,
        DESCRIBE_GROUPS: describe_groups,
        LIST_GROUPS: list_groups,
        DELETE_GROUPS: delete_groups,
        OFFSET_DELETE: offset_delete,
    }


def _by_topic(order: list[tuple[str, int]], fill: Any) -> list[dict]:
    """Group (topic, partition) pairs by topic, keeping first-seen order, as Kafka's responses do."""
    topics: dict[str, list[dict]] = {}
    for topic, partition in dict.fromkeys(order):
        topics.setdefault(topic, []).append({"partition_index": partition, **fill((topic, partition))})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]
