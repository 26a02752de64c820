"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27),
TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66); InitProducerId with a
transactional id comes here from produce_api.

Each handler reads a typed request (tieredlog.server.txn_requests), asks the transaction coordinator
(or, for TxnOffsetCommit, the group coordinator; for WriteTxnMarkers, the partitions' logs) and
answers with a dict of response fields. PRODUCER_FENCED (KIP-588) is sent as INVALID_PRODUCER_EPOCH
to the request versions older than it, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol, cast

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.schema import partition_for
from tieredlog.coordinator.storage import OFFSETS_TOPIC, Producer
from tieredlog.coordinator.transaction.coordinator import TransactionCoordinator
from tieredlog.log.types import AppendOrigin, TopicPartition
from tieredlog.protocol.api import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
)
from tieredlog.records.record import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from tieredlog.replication.data_path import error_code_of
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import AuthorizerServer, authorize, authorized_names
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.topic_store import INTERNAL_TOPICS
from tieredlog.server.txn_requests import FIRST_BROKER_VERSION, list_transactions_request, txn_offset_commit_request

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.coordinator.group_coordinator import GroupCoordinator
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.replication.delayed_fetch import PartitionWatchers
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.server.topic_store import TopicMetadata
    from tieredlog.server.txn_requests import (
        InitProducerIdRequest,
        KioAddOffsetsToTxnRequest,
        KioAddPartitionsToTxnRequest,
        KioAddPartitionsToTxnRequestV0To3,
        KioAddPartitionsToTxnRequestV4,
        KioAddPartitionsToTxnTransaction,
        KioDescribeTransactionsRequest,
        KioEndTxnRequest,
        KioListTransactionsRequest,
        KioTxnOffsetCommitRequest,
        KioWriteTxnMarkersRequest,
    )

log = logging.getLogger(__name__)

# The first version of each API that knows PRODUCER_FENCED (KIP-588).
_PRODUCER_FENCED_SINCE = {ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2, TXN_OFFSET_COMMIT: 3}
INIT_PRODUCER_ID_FENCED_SINCE = 4
# AddPartitionsToTxn v5 knows TRANSACTION_ABORTABLE (KIP-890).
TRANSACTION_ABORTABLE_SINCE = 5


class TxnCoordinatorServer(Protocol):
    """What InitProducerId with a transactional id needs of the broker."""

    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None: ...


class MarkerGuards(Protocol):
    """The produce verifications a marker voids (tieredlog.server.txn_verification.VerificationGuards)."""

    def marker_written(self, tp: TopicPartition, producer_id: int) -> None: ...


class MarkerServer(Protocol):
    """What writing transaction markers here needs of the broker."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def group_coordinator(self) -> GroupCoordinator | None: ...

    @property
    def append_watchers(self) -> PartitionWatchers: ...

    @property
    def txn_guards(self) -> MarkerGuards: ...

    def get_partition_log(self, topic: str, partition: int) -> UnifiedLog | None: ...


class TxnServer(TxnCoordinatorServer, MarkerServer, AuthorizerServer, Protocol):
    """What the transaction APIs need of the broker."""

    def get_topic(self, name: str) -> TopicMetadata | None: ...


def for_version(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
    if code == ErrorCode.producer_fenced and version < _PRODUCER_FENCED_SINCE.get(api_key, INIT_PRODUCER_ID_FENCED_SINCE):
        return ErrorCode.invalid_producer_epoch
    return code


def _coordinator(broker: TxnCoordinatorServer) -> TransactionCoordinator | None:
    return broker.transaction_coordinator


def _partition_exists(broker: TxnServer, topic: str, partition: int) -> bool:
    meta = broker.get_topic(topic)
    return meta is not None and 0 <= partition < meta.partitions


async def init_producer_id(ctx: RequestContext[TxnCoordinatorServer], req: InitProducerIdRequest) -> dict:
    """InitProducerId with a transactional id."""
    out = {"producer_id": -1, "producer_epoch": -1, "throttle_time": 0}
    coordinator = _coordinator(ctx.broker)
    if coordinator is None or req.transactional_id is None:
        return {**out, "error_code": ErrorCode.coordinator_not_available}
    timeout_ms = round(req.transaction_timeout.total_seconds() * 1000)
    code, pid, epoch = await coordinator.init_producer_id(
        req.transactional_id, timeout_ms, req.producer_id, req.producer_epoch)
    return {**out, "error_code": for_version(code, 22, ctx.api_version), "producer_id": pid, "producer_epoch": epoch}


async def add_partitions_to_txn(ctx: RequestContext[TxnServer], kio_req: KioAddPartitionsToTxnRequest) -> dict:
    if ctx.api_version >= FIRST_BROKER_VERSION:
        return await _add_partitions_batched(ctx, cast("KioAddPartitionsToTxnRequestV4", kio_req))
    req = cast("KioAddPartitionsToTxnRequestV0To3", kio_req)
    broker = ctx.broker
    topics: list[tuple[str, list[int]]] = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    wanted = [(name, p) for name, parts in topics for p in parts]
    # WRITE on each topic (on the transactional id: checked before the handler); no client writes to
    # an internal topic, whatever its ACLs
    writable = authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                                {name for name, _ in wanted if name not in INTERNAL_TOPICS})
    unauthorized = {tp for tp in wanted if tp[0] not in writable}
    # as Kafka: one refused or unknown partition fails the request; the others are not attempted
    unknown = {tp for tp in wanted if tp not in unauthorized and not _partition_exists(broker, *tp)}
    coordinator = _coordinator(broker)
    if unauthorized or unknown:
        result = {tp: ErrorCode.topic_authorization_failed if tp in unauthorized
                  else ErrorCode.unknown_topic_or_partition if tp in unknown
                  else ErrorCode.operation_not_attempted
                  for tp in wanted}
    elif coordinator is None:
        result = {tp: ErrorCode.coordinator_not_available for tp in wanted}
    else:
        code = await coordinator.add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                                req.v3_and_below_producer_epoch, wanted)
        code = for_version(code, ADD_PARTITIONS_TO_TXN, ctx.api_version)
        result = {tp: code for tp in wanted}
    return {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": name, "results_by_partition": [{"partition_index": p, "partition_error_code": result[(name, p)]}
                                                for p in parts]}
        for name, parts in topics]}


async def _add_partitions_batched(ctx: RequestContext[TxnServer], req: KioAddPartitionsToTxnRequestV4) -> dict:
    """v4+: brokers' form, several transactions at once (CLUSTER_ACTION, checked before the handler,
    stands for the WRITE checks a client's request gets); `verify_only` asks whether the partitions
    are in the transaction (KIP-890 part 1) without adding them."""
    broker = ctx.broker
    coordinator = _coordinator(broker)

    async def one(t: KioAddPartitionsToTxnTransaction) -> dict:
        wanted: list[tuple[str, int]] = [(topic.name, p) for topic in t.topics for p in topic.partitions]
        unknown = {tp for tp in wanted if not _partition_exists(broker, *tp)}
        if unknown:
            result = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                      for tp in wanted}
        elif coordinator is None:
            result = {tp: ErrorCode.coordinator_not_available for tp in wanted}
        elif t.verify_only:
            result = coordinator.verify_partitions(t.transactional_id, t.producer_id, t.producer_epoch, wanted)
        else:
            code = await coordinator.add_partitions(t.transactional_id, t.producer_id, t.producer_epoch, wanted)
            result = {tp: code for tp in wanted}
        if ctx.api_version < TRANSACTION_ABORTABLE_SINCE:
            result = {tp: ErrorCode.invalid_txn_state if code == ErrorCode.transaction_abortable else code
                      for tp, code in result.items()}
        by_topic: dict[str, list[dict]] = {}
        for (name, p), code in result.items():
            by_topic.setdefault(name, []).append({"partition_index": p, "partition_error_code": code})
        return {"transactional_id": t.transactional_id,
                "topic_results": [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]}

    results = await asyncio.gather(*(one(t) for t in req.transactions))
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": list(results)}


async def add_offsets_to_txn(ctx: RequestContext[TxnServer], req: KioAddOffsetsToTxnRequest) -> dict:
    broker = ctx.broker
    coordinator = _coordinator(broker)
    offsets = broker.get_topic(OFFSETS_TOPIC)
    if coordinator is None or offsets is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available}
    tp = (OFFSETS_TOPIC, partition_for(req.group_id, offsets.partitions))
    code = await coordinator.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, [tp])
    return {"throttle_time": 0, "error_code": for_version(code, ADD_OFFSETS_TO_TXN, ctx.api_version)}


async def end_txn(ctx: RequestContext[TxnServer], req: KioEndTxnRequest) -> dict:
    coordinator = _coordinator(ctx.broker)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available}
    code = await coordinator.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed)
    return {"throttle_time": 0, "error_code": for_version(code, END_TXN, ctx.api_version)}


async def txn_offset_commit(ctx: RequestContext[TxnServer], kio_req: KioTxnOffsetCommitRequest) -> dict:
    req = txn_offset_commit_request(kio_req, ctx.api_version)
    broker = ctx.broker
    order: list[tuple[str, int]] = []
    requested: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    result: dict[tuple[str, int], ErrorCode] = {}
    readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if t.name not in readable:
                result[tp] = ErrorCode.topic_authorization_failed
            elif not _partition_exists(broker, *tp):
                result[tp] = ErrorCode.unknown_topic_or_partition
            else:
                requested[tp] = (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
    groups = broker.group_coordinator
    if groups is None:
        result.update({tp: ErrorCode.coordinator_not_available for tp in requested})
    elif requested:
        answers = await groups.txn_commit_offsets(
            req.group_id, Producer(req.producer_id, req.producer_epoch), req.member_id, req.group_instance_id,
            req.generation_id, requested)
        result.update({tp: for_version(code, TXN_OFFSET_COMMIT, ctx.api_version) for tp, code in answers.items()})
    topics: dict[str, list[dict]] = {}
    for name, index in order:
        topics.setdefault(name, []).append({"partition_index": index, "error_code": result[(name, index)]})
    return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


async def write_markers_locally(broker: MarkerServer, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                committed: bool, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Append a marker to each partition this broker leads and wait until its ISR has it (Kafka's
    appendRecords with acks=-1 from the coordinator); the group coordinator then settles the
    transaction's offsets on `__consumer_offsets` partitions."""
    rm = broker.replica_manager
    result: dict[tuple[str, int], ErrorCode] = {}
    waits = []
    now = int(time.time() * 1000)
    control = CONTROL_COMMIT if committed else CONTROL_ABORT
    for tp in sorted(partitions):
        if rm is None or broker.get_partition_log(*tp) is None:
            result[tp] = ErrorCode.unknown_topic_or_partition
            continue
        batch = build_control_batch(control, producer_id, producer_epoch, 0, now, coordinator_epoch)
        try:
            info = rm.append_to_leader(TopicPartition(*tp), batch, -1, AppendOrigin.COORDINATOR)
        except Exception as exc:  # noqa: BLE001 - this partition's answer
            result[tp] = error_code_of(exc)
            if result[tp] == ErrorCode.unknown_server_error:
                log.exception("writing a transaction marker to %s-%d failed", *tp)
            continue
        broker.append_watchers.notify(tp)
        broker.txn_guards.marker_written(TopicPartition(*tp), producer_id)
        waits.append((tp, info.last_offset + 1))
    if waits:
        assert rm is not None
        timeout_s = broker.config["request.timeout.ms"] / 1000
        errors = await asyncio.gather(*(rm.wait_for_acks(TopicPartition(*tp), end, timeout_s) for tp, end in waits))
        for (tp, _), error in zip(waits, errors):
            result[tp] = ErrorCode.none if error is None else error.code  # type: ignore[attr-defined]
    groups = broker.group_coordinator
    if groups is not None:
        for tp, code in result.items():
            if tp[0] == OFFSETS_TOPIC and code == ErrorCode.none:
                groups.complete_txn(producer_id, committed, tp[1])
    return result


async def write_txn_markers(ctx: RequestContext[TxnServer], req: KioWriteTxnMarkersRequest) -> dict:
    out = []
    for m in req.markers:
        partitions: set[tuple[str, int]] = {(t.name, p) for t in m.topics for p in t.partition_indexes}
        result = await write_markers_locally(ctx.broker, m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                             m.transaction_result, partitions)
        topics: dict[str, list[dict]] = {}
        for (name, p), code in sorted(result.items()):
            topics.setdefault(name, []).append({"partition_index": p, "error_code": code})
        out.append({"producer_id": m.producer_id,
                    "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
    return {"markers": out}


async def describe_transactions(ctx: RequestContext[TxnServer], req: KioDescribeTransactionsRequest) -> dict:
    coordinator = _coordinator(ctx.broker)
    states = []
    for tid in req.transactional_ids:
        entry: dict[str, Any] = {"transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                                 "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            states.append({**entry, "error_code": ErrorCode.transactional_id_authorization_failed})
            continue
        if coordinator is None:
            states.append({**entry, "error_code": ErrorCode.coordinator_not_available})
            continue
        code, md = coordinator.describe_transaction(tid)
        if md is not None:
            by_topic: dict[str, list[int]] = {}
            # only the partitions of topics the principal may describe
            describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in md.partitions))
            for topic, p in sorted(md.partitions):
                if topic in describable:
                    by_topic.setdefault(topic, []).append(p)
            entry.update(transaction_state=md.state.display_name, transaction_timeout=md.timeout_ms,
                         transaction_start_time=md.start_ms, producer_id=md.producer_id,
                         producer_epoch=md.producer_epoch,
                         topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        states.append({**entry, "error_code": code})
    return {"throttle_time": 0, "transaction_states": states}


async def list_transactions(ctx: RequestContext[TxnServer], kio_req: KioListTransactionsRequest) -> dict:
    req = list_transactions_request(kio_req, ctx.api_version)
    coordinator = _coordinator(ctx.broker)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "unknown_state_filters": [],
                "transaction_states": []}
    code, found, unknown = coordinator.list_transactions(
        set(req.state_filters), set(req.producer_id_filters), req.duration_filter)
    # the transactional ids the principal may describe
    visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (t for t, _, _ in found),
                               log_denied=False)
    found = [f for f in found if f[0] in visible]
    return {"throttle_time": 0, "error_code": code, "unknown_state_filters": unknown, "transaction_states": [
        {"transactional_id": tid, "producer_id": pid, "transaction_state": state} for tid, pid, state in found]}


def handlers() -> dict[int, Handler[TxnServer]]:
    return {
        ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
        ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
        END_TXN: end_txn,
        WRITE_TXN_MARKERS: write_txn_markers,
        TXN_OFFSET_COMMIT: txn_offset_commit,
        DESCRIBE_TRANSACTIONS: describe_transactions,
        LIST_TRANSACTIONS: list_transactions,
    }
