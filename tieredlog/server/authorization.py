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
from typing import TYPE_CHECKING, Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from tieredlog.protocol import api
from tieredlog.security.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tieredlog.server.authorized_operations import authorized_operations as bit_field
from tieredlog.server.context import CLOSE_CONNECTION, RequestContext

if TYPE_CHECKING:
    from tieredlog.security.authorizer import AclAuthorizer

audit = logging.getLogger("kafka.authorizer.logger")


def _authorizer(ctx: RequestContext) -> "AclAuthorizer | None":
    return ctx.broker.authorizer


def _decide(authorizer: "AclAuthorizer", ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
            name: str, log_denied: bool) -> bool:
    allowed = authorizer.authorize(str(ctx.principal), ctx.client_host, operation, resource_type, name)
    if not allowed and log_denied:
        # Kafka's audit line for a resource the request asked for by name
        audit.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s "
                   "for request = %s", ctx.principal, operation.pascal_name, ctx.client_host,
                   resource_type.pascal_name, name, api.api_name(ctx.api_key))
    return allowed


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str, *,
              log_denied: bool = True) -> bool:
    authorizer = _authorizer(ctx)
    return authorizer is None or _decide(authorizer, ctx, operation, resource_type, name, log_denied)


def authorize_cluster(ctx: RequestContext, operation: AclOperation, *, log_denied: bool = True) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def authorized_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[str], *, log_denied: bool = True) -> set[str]:
    """The names among ``names`` the request's principal may ``operation`` (each decided once)."""
    wanted = set(names)
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return wanted
    return {n for n in wanted if _decide(authorizer, ctx, operation, resource_type, n, log_denied)}


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = _authorizer(ctx)
    return authorizer is None or authorizer.authorize_by_resource_type(
        str(ctx.principal), ctx.client_host, operation, resource_type)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str, requested: bool) -> int:
    """KIP-430's bit field of what the principal may do on the resource (the omitted marker when not
    requested)."""
    return bit_field(resource_type, requested,
                     lambda operation: authorize(ctx, operation, resource_type, name, log_denied=False))


# ---- per-request rules ------------------------------------------------------------------------------

Check = Callable[[RequestContext, Any], "ErrorCode | None"]
Deny = Callable[[RequestContext, Any, ErrorCode], Any]


@dataclass(frozen=True)
class Rule:
    check: Check  # None: allowed; else the error the request is refused with
    deny: Deny  # the API's response carrying that error


def check_request(ctx: RequestContext, body: Any) -> Any:
    """The denial response of a request its API's rule refuses, or None to run the handler."""
    if _authorizer(ctx) is None:
        return None
    rule = REQUEST_RULES.get(ctx.api_key)
    if rule is None:
        return None
    code = rule.check(ctx, body)
    return None if code is None else rule.deny(ctx, body, code)


def _cluster(operation: AclOperation) -> Check:
    def check(ctx: RequestContext, req: Any) -> ErrorCode | None:
        return None if authorize_cluster(ctx, operation) else ErrorCode.cluster_authorization_failed
    return check


def _group(operation: AclOperation) -> Check:
    def check(ctx: RequestContext, req: Any) -> ErrorCode | None:
        return None if authorize(ctx, operation, ResourceType.GROUP, req.group_id) \
            else ErrorCode.group_authorization_failed
    return check


def _write_txn_id(transactional_id: Callable[[Any], str], then_read_group: bool = False) -> Check:
    def check(ctx: RequestContext, req: Any) -> ErrorCode | None:
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id(req)):
            return ErrorCode.transactional_id_authorization_failed
        if then_read_group and not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
            return ErrorCode.group_authorization_failed
        return None
    return check


def _add_partitions_to_txn(ctx: RequestContext, req: Any) -> ErrorCode | None:
    # v4+ come from brokers (KIP-890 verification): CLUSTER_ACTION, as the other inter-broker APIs
    if ctx.api_version >= 4:
        return _cluster_action(ctx, req)
    return _write_txn_id(lambda r: r.v3_and_below_transactional_id)(ctx, req)


def _init_producer_id(ctx: RequestContext, req: Any) -> ErrorCode | None:
    if req.transactional_id is not None:
        if authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    # an idempotent producer: IDEMPOTENT_WRITE on the cluster, or (KIP-679) WRITE on any topic
    if authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE, log_denied=False) \
            or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


_MAGIC_OFFSET, _ATTRIBUTES = 16, struct.Struct(">h")
_TRANSACTIONAL_FLAG = 0x10


def _has_transactional_records(req: Any) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of any partition is transactional."""
    for td in req.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records is not None and len(records) >= 23 and records[_MAGIC_OFFSET] == 2 \
                    and _ATTRIBUTES.unpack_from(records, 21)[0] & _TRANSACTIONAL_FLAG:
                return True
    return False


def _produce(ctx: RequestContext, req: Any) -> ErrorCode | None:
    if not _has_transactional_records(req):
        return None  # WRITE on each topic is checked per partition by the handler
    tid = req.transactional_id
    if tid is not None and authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return None
    return ErrorCode.transactional_id_authorization_failed


def _write_txn_markers(ctx: RequestContext, req: Any) -> ErrorCode | None:
    # Kafka takes ALTER on the cluster first, quietly, then CLUSTER_ACTION
    if authorize_cluster(ctx, AclOperation.ALTER, log_denied=False) or authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return None
    return ErrorCode.cluster_authorization_failed


# -- the denial responses, each as Kafka's getErrorResponse of the request builds it --------------------

# Kafka's message of CLUSTER_AUTHORIZATION_FAILED, where the response has room for one
CLUSTER_DENIED = "Cluster authorization failed."


def _error_only(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code}


def _per_partition(topics: Callable[[Any], Iterable[tuple[str, Iterable[int]]]], topics_key: str,
                   partitions_key: str = "partitions", index_key: str = "partition_index",
                   topic_key: str = "name", error_key: str = "error_code", extra: dict | None = None) -> Deny:
    def deny(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
        return {topics_key: [{topic_key: name, partitions_key: [{index_key: p, error_key: code, **(extra or {})}
                                                                 for p in parts]}
                             for name, parts in topics(req)]}
    return deny


def _produce_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> Any:
    if req.acks == 0:
        return CLOSE_CONNECTION  # the client reads no answer: Kafka closes the connection
    return _per_partition(lambda r: [(t.name, [p.index for p in t.partition_data]) for t in r.topic_data],
                          "responses", "partition_responses", "index",
                          extra={"base_offset": -1, "log_append_time": -1, "log_start_offset": -1})(ctx, req, code)


def _join_group_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_name": None if ctx.api_version >= 7 else "",
            "leader": "", "member_id": "", "members": []}


def _leader_and_isr_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code, "topics": [
        {"topic_id": ts.topic_id, "partition_errors": [{"partition_index": ps.partition_index, "error_code": code}
                                                       for ps in ts.partition_states]}
        for ts in req.topic_states]}


def _stop_replica_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code, "partition_errors": [
        {"topic_name": ts.topic_name, "partition_index": ps.partition_index, "error_code": code}
        for ts in req.topic_states for ps in ts.partition_states]}


def _elect_leaders_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code, "replica_election_results": [
        {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": None}
                                                for p in t.partitions]}
        for t in req.topic_partitions or ()]}


def _alter_reassignments_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code, "error_message": CLUSTER_DENIED, "responses": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                         "error_message": CLUSTER_DENIED} for p in t.partitions]}
        for t in req.topics]}


def _txn_markers_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"markers": [
        {"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in t.partition_indexes]}
            for t in m.topics]}
        for m in req.markers]}


def _add_partitions_to_txn_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    if ctx.api_version >= 4:
        return {"error_code": code, "results_by_transaction": []}
    return _per_partition(_partitions("v3_and_below_topics", index_attr=None), "results_by_topic_v3_and_below",
                          "results_by_partition", error_key="partition_error_code")(ctx, req, code)


def _init_producer_id_denied(ctx: RequestContext, req: Any, code: ErrorCode) -> dict:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


def _with(**fields: Any) -> Deny:
    return lambda ctx, req, code: {"error_code": code, **fields}


def _partitions(topics_attr: str, parts_attr: str = "partitions", index_attr: str | None = "partition_index"
                ) -> Callable[[Any], list[tuple[str, list[int]]]]:
    def get(req: Any) -> list[tuple[str, list[int]]]:
        return [(t.name, [getattr(p, index_attr) if index_attr else int(p) for p in getattr(t, parts_attr) or ()])
                for t in getattr(req, topics_attr) or ()]
    return get


_cluster_action = _cluster(AclOperation.CLUSTER_ACTION)

REQUEST_RULES: dict[int, Rule] = {
    # inter-broker: the controller's requests and the brokers' to the controller
    api.LEADER_AND_ISR: Rule(_cluster_action, _leader_and_isr_denied),
    api.STOP_REPLICA: Rule(_cluster_action, _stop_replica_denied),
    api.UPDATE_METADATA: Rule(_cluster_action, _error_only),
    api.CONTROLLED_SHUTDOWN: Rule(_cluster_action, _with(remaining_partitions=[])),
    api.ALTER_PARTITION: Rule(_cluster_action, _with(topics=[])),
    api.WRITE_TXN_MARKERS: Rule(_write_txn_markers, _txn_markers_denied),
    # cluster administration
    api.ELECT_LEADERS: Rule(_cluster(AclOperation.ALTER), _elect_leaders_denied),
    api.ALTER_PARTITION_REASSIGNMENTS: Rule(_cluster(AclOperation.ALTER), _alter_reassignments_denied),
    api.LIST_PARTITION_REASSIGNMENTS: Rule(_cluster(AclOperation.DESCRIBE), _with(error_message=CLUSTER_DENIED, topics=[])),
    api.CREATE_ACLS: Rule(_cluster(AclOperation.ALTER), lambda ctx, req, code: {
        "results": [{"error_code": code, "error_message": CLUSTER_DENIED} for _ in req.creations]}),
    api.DELETE_ACLS: Rule(_cluster(AclOperation.ALTER), lambda ctx, req, code: {
        "filter_results": [{"error_code": code, "error_message": CLUSTER_DENIED, "matching_acls": []}
                           for _ in req.filters]}),
    api.DESCRIBE_ACLS: Rule(_cluster(AclOperation.DESCRIBE), _with(error_message=CLUSTER_DENIED, resources=[])),
    api.DESCRIBE_LOG_DIRS: Rule(_cluster(AclOperation.DESCRIBE), _with(results=[])),
    # a group's members
    api.JOIN_GROUP: Rule(_group(AclOperation.READ), _join_group_denied),
    api.SYNC_GROUP: Rule(_group(AclOperation.READ), _with(assignment=b"")),
    api.HEARTBEAT: Rule(_group(AclOperation.READ), _error_only),
    api.LEAVE_GROUP: Rule(_group(AclOperation.READ), _with(members=[])),
    api.CONSUMER_GROUP_HEARTBEAT: Rule(_group(AclOperation.READ), _error_only),
    api.OFFSET_COMMIT: Rule(_group(AclOperation.READ), _per_partition(_partitions("topics"), "topics")),
    api.OFFSET_DELETE: Rule(_group(AclOperation.DELETE), _with(topics=[])),
    # transactions and idempotence
    api.PRODUCE: Rule(_produce, _produce_denied),
    api.INIT_PRODUCER_ID: Rule(_init_producer_id, _init_producer_id_denied),
    api.ADD_PARTITIONS_TO_TXN: Rule(_add_partitions_to_txn, _add_partitions_to_txn_denied),
    api.ADD_OFFSETS_TO_TXN: Rule(_write_txn_id(lambda r: r.transactional_id, then_read_group=True), _error_only),
    api.END_TXN: Rule(_write_txn_id(lambda r: r.transactional_id), _error_only),
    api.TXN_OFFSET_COMMIT: Rule(_write_txn_id(lambda r: r.transactional_id, then_read_group=True),
                                _per_partition(_partitions("topics"), "topics")),
}
