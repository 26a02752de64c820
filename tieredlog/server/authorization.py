"""How each API is authorized (Kafka's KafkaApis rules), over the broker's ACL authorizer.

Without an authorizer (``authorizer.class.name`` empty) every check allows, as in Kafka.

Two kinds of checks:
- Per request (``REQUEST_RULES``, consulted by the dispatcher before the handler runs): the cluster
  operation of an inter-broker or administrative API, the group a member request acts on, the
  transactional id a transactional request writes for. A denial is answered with the API's own
  error response, built here from the request, and the handler never runs.
- Per resource, inside the handlers, where Kafka answers each topic, partition or group on its own
  (Produce, Fetch, Metadata, OffsetCommit, CreateTopics, DescribeConfigs, ...): they call
  ``authorize`` / ``authorized_names`` below.

Decisions read the authorizer's in-memory snapshot only: no I/O on the event loop.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Protocol, Sequence, TypeVar, cast

from kio.schema.errors import ErrorCode

from tieredlog.protocol import api
from tieredlog.security.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tieredlog.server.authorized_operations import authorized_operations as bit_field
from tieredlog.server.context import CLOSE_CONNECTION, RequestContext
from tieredlog.server.txn_requests import FIRST_BROKER_VERSION

if TYPE_CHECKING:
    from tieredlog.protocol.inter_broker.leader_and_isr import LeaderAndIsrRequest
    from tieredlog.protocol.inter_broker.stop_replica import StopReplicaRequest
    from tieredlog.security.authorizer import AclAuthorizer
    from tieredlog.server import admin_requests, group_requests, txn_requests

audit = logging.getLogger("kafka.authorizer.logger")


class AuthorizerServer(Protocol):
    """What authorizing a request needs of the broker: every handler's broker Protocol extends it."""

    @property
    def authorizer(self) -> AclAuthorizer | None: ...


# the context every rule here reads; a handler's own context is one (RequestContext is covariant)
AuthContext = RequestContext[AuthorizerServer]


def _authorizer(ctx: AuthContext) -> AclAuthorizer | None:
    return ctx.broker.authorizer


def _decide(authorizer: "AclAuthorizer", ctx: AuthContext, operation: AclOperation, resource_type: ResourceType,
            name: str, log_denied: bool) -> bool:
    allowed = authorizer.authorize(str(ctx.principal), ctx.client_host, operation, resource_type, name)
    if not allowed and log_denied:
        # Kafka's audit line for a resource the request asked for by name
        audit.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s "
                   "for request = %s", ctx.principal, operation.pascal_name, ctx.client_host,
                   resource_type.pascal_name, name, api.api_name(ctx.api_key))
    return allowed


def authorize(ctx: AuthContext, operation: AclOperation, resource_type: ResourceType, name: str, *,
              log_denied: bool = True) -> bool:
    authorizer = _authorizer(ctx)
    return authorizer is None or _decide(authorizer, ctx, operation, resource_type, name, log_denied)


def authorize_cluster(ctx: AuthContext, operation: AclOperation, *, log_denied: bool = True) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def authorized_names(ctx: AuthContext, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[str], *, log_denied: bool = True) -> set[str]:
    """The names among ``names`` the request's principal may ``operation`` (each decided once)."""
    wanted = set(names)
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return wanted
    return {n for n in wanted if _decide(authorizer, ctx, operation, resource_type, n, log_denied)}


def authorize_by_resource_type(ctx: AuthContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = _authorizer(ctx)
    return authorizer is None or authorizer.authorize_by_resource_type(
        str(ctx.principal), ctx.client_host, operation, resource_type)


def authorized_operations(ctx: AuthContext, resource_type: ResourceType, name: str, requested: bool) -> int:
    """KIP-430's bit field of what the principal may do on the resource (the omitted marker when not
    requested)."""
    return bit_field(resource_type, requested,
                     lambda operation: authorize(ctx, operation, resource_type, name, log_denied=False))


# ---- per-request rules ------------------------------------------------------------------------------

R = TypeVar("R")
Check = Callable[[AuthContext, R], "ErrorCode | None"]
Deny = Callable[[AuthContext, R, ErrorCode], Any]


@dataclass(frozen=True)
class Rule(Generic[R]):
    """An API's rule over its decoded request ``R`` (kio's classes of the served versions)."""

    check: Check[R]  # None: allowed; else the error the request is refused with
    deny: Deny[R]  # the API's response carrying that error


def check_request(ctx: AuthContext, body: Any) -> Any:
    """The denial response of a request its API's rule refuses, or None to run the handler."""
    if _authorizer(ctx) is None:
        return None
    rule = REQUEST_RULES.get(ctx.api_key)
    if rule is None:
        return None
    code = rule.check(ctx, body)
    return None if code is None else rule.deny(ctx, body, code)


# -- what the checks read of a request --------------------------------------------------------------------

class _GroupRequest(Protocol):
    @property
    def group_id(self) -> str: ...


class _TransactionalRequest(Protocol):
    @property
    def transactional_id(self) -> str: ...


class _TransactionalGroupRequest(_TransactionalRequest, _GroupRequest, Protocol):
    pass


class _InitProducerIdRequest(Protocol):
    @property
    def transactional_id(self) -> str | None: ...


class _ProducePartition(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def records(self) -> bytes | None: ...


class _ProduceTopic(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def partition_data(self) -> Sequence[_ProducePartition]: ...


class _ProduceRequest(Protocol):
    @property
    def acks(self) -> int: ...

    @property
    def transactional_id(self) -> str | None: ...

    @property
    def topic_data(self) -> Sequence[_ProduceTopic]: ...


def _cluster(operation: AclOperation) -> Check[object]:
    def check(ctx: AuthContext, req: object) -> ErrorCode | None:
        return None if authorize_cluster(ctx, operation) else ErrorCode.cluster_authorization_failed
    return check


def _group(operation: AclOperation) -> Check[_GroupRequest]:
    def check(ctx: AuthContext, req: _GroupRequest) -> ErrorCode | None:
        return None if authorize(ctx, operation, ResourceType.GROUP, req.group_id) \
            else ErrorCode.group_authorization_failed
    return check


def _write_txn_id(transactional_id: str, ctx: AuthContext) -> ErrorCode | None:
    if authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return None
    return ErrorCode.transactional_id_authorization_failed


def _transactional(ctx: AuthContext, req: _TransactionalRequest) -> ErrorCode | None:
    return _write_txn_id(req.transactional_id, ctx)


def _transactional_then_group(ctx: AuthContext, req: _TransactionalGroupRequest) -> ErrorCode | None:
    code = _write_txn_id(req.transactional_id, ctx)
    if code is None and not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ErrorCode.group_authorization_failed
    return code


def _add_partitions_to_txn(ctx: AuthContext, req: txn_requests.KioAddPartitionsToTxnRequest) -> ErrorCode | None:
    # v4+ come from brokers (KIP-890 verification): CLUSTER_ACTION, as the other inter-broker APIs
    if ctx.api_version >= FIRST_BROKER_VERSION:
        return _cluster_action(ctx, req)
    return _write_txn_id(cast("txn_requests.KioAddPartitionsToTxnRequestV0To3", req).v3_and_below_transactional_id, ctx)


def _init_producer_id(ctx: AuthContext, req: _InitProducerIdRequest) -> ErrorCode | None:
    if req.transactional_id is not None:
        return _write_txn_id(req.transactional_id, ctx)
    # an idempotent producer: IDEMPOTENT_WRITE on the cluster, or (KIP-679) WRITE on any topic
    if authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE, log_denied=False) \
            or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


_MAGIC_OFFSET, _ATTRIBUTES = 16, struct.Struct(">h")
_TRANSACTIONAL_FLAG = 0x10


def _has_transactional_records(req: _ProduceRequest) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of any partition is transactional."""
    for td in req.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records is not None and len(records) >= 23 and records[_MAGIC_OFFSET] == 2 \
                    and _ATTRIBUTES.unpack_from(records, 21)[0] & _TRANSACTIONAL_FLAG:
                return True
    return False


def _produce(ctx: AuthContext, req: _ProduceRequest) -> ErrorCode | None:
    if not _has_transactional_records(req):
        return None  # WRITE on each topic is checked per partition by the handler
    tid = req.transactional_id
    if tid is not None and authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return None
    return ErrorCode.transactional_id_authorization_failed


def _write_txn_markers(ctx: AuthContext, req: object) -> ErrorCode | None:
    # Kafka takes ALTER on the cluster first, quietly, then CLUSTER_ACTION
    if authorize_cluster(ctx, AclOperation.ALTER, log_denied=False) or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return None
    return ErrorCode.cluster_authorization_failed


# -- the denial responses, each as Kafka's getErrorResponse of the request builds it --------------------

# Kafka's message of CLUSTER_AUTHORIZATION_FAILED, where the response has room for one
CLUSTER_DENIED = "Cluster authorization failed."


def _error_only(ctx: AuthContext, req: object, code: ErrorCode) -> dict:
    return {"error_code": code}


def _per_partition(topics: Callable[[R], Iterable[tuple[str, Iterable[int]]]], topics_key: str,
                   partitions_key: str = "partitions", index_key: str = "partition_index",
                   topic_key: str = "name", error_key: str = "error_code", extra: dict | None = None) -> Deny[R]:
    def deny(ctx: AuthContext, req: R, code: ErrorCode) -> dict:
        return {topics_key: [{topic_key: name, partitions_key: [{index_key: p, error_key: code, **(extra or {})}
                                                                 for p in parts]}
                             for name, parts in topics(req)]}
    return deny


def _produce_partitions(req: _ProduceRequest) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.index for p in t.partition_data]) for t in req.topic_data]


_produce_partitions_denied = _per_partition(_produce_partitions, "responses", "partition_responses", "index",
                                            extra={"base_offset": -1, "log_append_time": -1, "log_start_offset": -1})


def _produce_denied(ctx: AuthContext, req: _ProduceRequest, code: ErrorCode) -> Any:
    if req.acks == 0:
        return CLOSE_CONNECTION  # the client reads no answer: Kafka closes the connection
    return _produce_partitions_denied(ctx, req, code)


def _join_group_denied(ctx: AuthContext, req: object, code: ErrorCode) -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_name": None if ctx.api_version >= 7 else "",
            "leader": "", "member_id": "", "members": []}


def _leader_and_isr_denied(ctx: AuthContext, req: LeaderAndIsrRequest, code: ErrorCode) -> dict:
    return {"error_code": code, "topics": [
        {"topic_id": ts.topic_id, "partition_errors": [{"partition_index": ps.partition_index, "error_code": code}
                                                       for ps in ts.partition_states]}
        for ts in req.topic_states]}


def _stop_replica_denied(ctx: AuthContext, req: StopReplicaRequest, code: ErrorCode) -> dict:
    return {"error_code": code, "partition_errors": [
        {"topic_name": ts.topic_name, "partition_index": ps.partition_index, "error_code": code}
        for ts in req.topic_states for ps in ts.partition_states]}


def _elect_leaders_denied(ctx: AuthContext, req: admin_requests.KioElectLeadersRequest, code: ErrorCode) -> dict:
    return {"error_code": code, "replica_election_results": [
        {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": None}
                                                for p in t.partitions]}
        for t in req.topic_partitions or ()]}


def _alter_reassignments_denied(ctx: AuthContext, req: admin_requests.KioAlterPartitionReassignmentsRequest,
                                code: ErrorCode) -> dict:
    return {"error_code": code, "error_message": CLUSTER_DENIED, "responses": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                         "error_message": CLUSTER_DENIED} for p in t.partitions]}
        for t in req.topics]}


def _txn_markers_denied(ctx: AuthContext, req: txn_requests.KioWriteTxnMarkersRequest, code: ErrorCode) -> dict:
    return {"markers": [
        {"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in t.partition_indexes]}
            for t in m.topics]}
        for m in req.markers]}


def _add_partitions_v3_and_below(req: txn_requests.KioAddPartitionsToTxnRequestV0To3) -> list[tuple[str, list[int]]]:
    return [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]


_add_partitions_v3_and_below_denied = _per_partition(_add_partitions_v3_and_below, "results_by_topic_v3_and_below",
                                                     "results_by_partition", error_key="partition_error_code")


def _add_partitions_to_txn_denied(ctx: AuthContext, req: txn_requests.KioAddPartitionsToTxnRequest,
                                  code: ErrorCode) -> dict:
    if ctx.api_version >= FIRST_BROKER_VERSION:
        return {"error_code": code, "results_by_transaction": []}
    return _add_partitions_v3_and_below_denied(ctx, cast("txn_requests.KioAddPartitionsToTxnRequestV0To3", req), code)


def _offset_commit_partitions(req: group_requests.KioOffsetCommitRequest) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]


def _txn_offset_commit_partitions(req: txn_requests.KioTxnOffsetCommitRequest) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]


def _init_producer_id_denied(ctx: AuthContext, req: object, code: ErrorCode) -> dict:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


def _with(**fields: Any) -> Deny[object]:
    return lambda ctx, req, code: {"error_code": code, **fields}


def _create_acls_denied(ctx: AuthContext, req: admin_requests.KioCreateAclsRequest, code: ErrorCode) -> dict:
    return {"results": [{"error_code": code, "error_message": CLUSTER_DENIED} for _ in req.creations]}


def _delete_acls_denied(ctx: AuthContext, req: admin_requests.KioDeleteAclsRequest, code: ErrorCode) -> dict:
    return {"filter_results": [{"error_code": code, "error_message": CLUSTER_DENIED, "matching_acls": []}
                               for _ in req.filters]}


_cluster_action = _cluster(AclOperation.CLUSTER_ACTION)

# Each rule names the kio classes of its API (Rule["Kio..."]), so the type checker checks its check and
# denial against every served version of the request.
REQUEST_RULES: dict[int, Rule[Any]] = {
    # inter-broker: the controller's requests and the brokers' to the controller
    api.LEADER_AND_ISR: Rule["LeaderAndIsrRequest"](_cluster_action, _leader_and_isr_denied),
    api.STOP_REPLICA: Rule["StopReplicaRequest"](_cluster_action, _stop_replica_denied),
    api.UPDATE_METADATA: Rule[object](_cluster_action, _error_only),
    api.CONTROLLED_SHUTDOWN: Rule[object](_cluster_action, _with(remaining_partitions=[])),
    api.ALTER_PARTITION: Rule[object](_cluster_action, _with(topics=[])),
    api.WRITE_TXN_MARKERS: Rule["txn_requests.KioWriteTxnMarkersRequest"](_write_txn_markers, _txn_markers_denied),
    # cluster administration
    api.ELECT_LEADERS: Rule["admin_requests.KioElectLeadersRequest"](
        _cluster(AclOperation.ALTER), _elect_leaders_denied),
    api.ALTER_PARTITION_REASSIGNMENTS: Rule["admin_requests.KioAlterPartitionReassignmentsRequest"](
        _cluster(AclOperation.ALTER), _alter_reassignments_denied),
    api.LIST_PARTITION_REASSIGNMENTS: Rule[object](
        _cluster(AclOperation.DESCRIBE), _with(error_message=CLUSTER_DENIED, topics=[])),
    api.CREATE_ACLS: Rule["admin_requests.KioCreateAclsRequest"](_cluster(AclOperation.ALTER), _create_acls_denied),
    api.DELETE_ACLS: Rule["admin_requests.KioDeleteAclsRequest"](_cluster(AclOperation.ALTER), _delete_acls_denied),
    api.DESCRIBE_ACLS: Rule[object](_cluster(AclOperation.DESCRIBE), _with(error_message=CLUSTER_DENIED, resources=[])),
    api.DESCRIBE_LOG_DIRS: Rule[object](_cluster(AclOperation.DESCRIBE), _with(results=[])),
    # a group's members
    api.JOIN_GROUP: Rule["group_requests.KioJoinGroupRequest"](_group(AclOperation.READ), _join_group_denied),
    api.SYNC_GROUP: Rule["group_requests.KioSyncGroupRequest"](_group(AclOperation.READ), _with(assignment=b"")),
    api.HEARTBEAT: Rule["group_requests.KioHeartbeatRequest"](_group(AclOperation.READ), _error_only),
    api.LEAVE_GROUP: Rule["group_requests.KioLeaveGroupRequest"](_group(AclOperation.READ), _with(members=[])),
    api.CONSUMER_GROUP_HEARTBEAT: Rule["group_requests.KioConsumerGroupHeartbeatRequest"](
        _group(AclOperation.READ), _error_only),
    api.OFFSET_COMMIT: Rule["group_requests.KioOffsetCommitRequest"](
        _group(AclOperation.READ), _per_partition(_offset_commit_partitions, "topics")),
    api.OFFSET_DELETE: Rule["group_requests.KioOffsetDeleteRequest"](_group(AclOperation.DELETE), _with(topics=[])),
    # transactions and idempotence
    api.PRODUCE: Rule["_ProduceRequest"](_produce, _produce_denied),
    api.INIT_PRODUCER_ID: Rule["_InitProducerIdRequest"](_init_producer_id, _init_producer_id_denied),
    api.ADD_PARTITIONS_TO_TXN: Rule["txn_requests.KioAddPartitionsToTxnRequest"](
        _add_partitions_to_txn, _add_partitions_to_txn_denied),
    api.ADD_OFFSETS_TO_TXN: Rule["txn_requests.KioAddOffsetsToTxnRequest"](_transactional_then_group, _error_only),
    api.END_TXN: Rule["txn_requests.KioEndTxnRequest"](_transactional, _error_only),
    api.TXN_OFFSET_COMMIT: Rule["txn_requests.KioTxnOffsetCommitRequest"](
        _transactional_then_group, _per_partition(_txn_offset_commit_partitions, "topics")),
}
