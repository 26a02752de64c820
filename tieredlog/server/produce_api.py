"""Produce (0) and InitProducerId (22) (with a transactional id: tieredlog.server.txn_apis).

Record bytes go to the partition's leader append untouched (the log validates CRC, sizes and
sequences and patches offsets in place). acks=1 is answered once the leader has appended; acks=all
once the ISR has the data (the high watermark passed it), parked meanwhile without blocking. With
one broker the ISR is this broker, so both are satisfied at once. A transaction's first batch on a
partition waits, without blocking, for its coordinator to confirm the partition is in the transaction
(KIP-890 part 1, tieredlog.server.txn_verification).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tieredlog.errors import InvalidTopicError, KafkaError
from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import INIT_PRODUCER_ID, PRODUCE
from tieredlog.records.batch import HEADER_SIZE, MAGIC_OFFSET, read_header
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import authorized_names
from tieredlog.server.context import CLOSE_CONNECTION, NO_RESPONSE, Handler, RequestContext

if TYPE_CHECKING:
    from tieredlog.server.broker import Broker

log = logging.getLogger(__name__)

def error_code_of(exc: BaseException) -> ErrorCode:
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, OSError):
        # The log turns write failures into KafkaStorageError itself; anything else from the disk is
        # still a storage error (retriable), not an unknown one.
        return ErrorCode.kafka_storage_error
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.corrupt_message
    if isinstance(exc, InvalidRecordError):
        return ErrorCode.invalid_record
    return ErrorCode.unknown_server_error


# Kafka's AdminUtils.ADMIN_CLIENT_ID: the one client id that may append to internal topics (here the
# brokers' own remote log metadata producers use it)
INTERNAL_TOPICS_CLIENT_ID = "__admin_client"


def _append(broker: Broker, topic: str, partition: int, records: bytes | None, acks: int,
            internal_allowed: bool = False) -> dict:
    out: dict[str, Any] = {"index": partition, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
    plog = broker.get_partition_log(topic, partition)
    rm = broker.replica_manager
    if plog is None or rm is None:
        out["error_code"] = ErrorCode.unknown_topic_or_partition
        return out
    try:
        meta = broker.get_topic(topic)
        if meta is not None and meta.internal and not internal_allowed:
            # As Kafka's ReplicaManager: only the broker appends to its internal topics, so no client
            # forges committed offsets or feeds the coordinators' start-up loads its own bytes.
            raise InvalidTopicError(f"Cannot append to internal topic {topic}")
        if not records:
            raise InvalidRecordError("produce request without records")
        info = rm.append_to_leader(TopicPartition(topic, partition), records, acks)
    except Exception as exc:  # noqa: BLE001 - every failure becomes this partition's error code
        code = error_code_of(exc)
        if code == ErrorCode.unknown_server_error:
            log.exception("append to %s-%d failed", topic, partition)
        elif isinstance(exc, OSError):
            log.error("append to %s-%d failed: %s", topic, partition, exc)
        out["error_code"] = code
        out["error_message"] = str(exc)
        out["log_start_offset"] = plog.log_start_offset
        hint = rm.get_partition(TopicPartition(topic, partition))
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch) and hint is not None \
                and hint.leader_id >= 0:
            # KIP-951: the client goes to the new leader without a Metadata round trip
            out["current_leader"] = {"leader_id": hint.leader_id, "leader_epoch": hint.leader_epoch}
        record_errors = getattr(exc, "record_errors", None)
        if record_errors:
            # KIP-467 (v8+): every record of the refused batch that broke a per-record rule, so a
            # client can fail those records with their own message. A batch refused as a whole
            # (CRC, sizes, counts) names no record, as in Kafka.
            out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in record_errors]
        return out
    # followers' fetches parked at the log end wake for the new data
    broker.append_watchers.notify((topic, partition))
    broker.metrics.record_produce(topic, len(records), info.record_count)
    out["error_code"] = ErrorCode.none
    out["_required_offset"] = info.last_offset + 1
    out["base_offset"] = info.first_offset
    out["log_append_time"] = info.log_append_time
    out["log_start_offset"] = info.log_start_offset
    return out


async def handle_produce(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    acks = req.acks
    internal_allowed = ctx.client_id == INTERNAL_TOPICS_CLIENT_ID
    responses = []
    results: list[tuple[TopicPartition, dict]] = []
    unverified: list[tuple[TopicPartition, bytes, dict, tuple[int, int]]] = []
    verify = req.transactional_id is not None and broker.config["transaction.partition.verification.enable"]
    writable = authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, (td.name for td in req.topic_data))
    for td in req.topic_data:
        parts = []
        for pd in td.partition_data:
            tp = TopicPartition(td.name, pd.index)
            if td.name not in writable:
                res = {"index": pd.index, "error_code": ErrorCode.topic_authorization_failed, "base_offset": -1,
                       "log_append_time": -1, "log_start_offset": -1}
            elif acks not in (0, 1, -1):
                res = {"index": pd.index, "error_code": ErrorCode.invalid_required_acks, "base_offset": -1}
            elif verify and (producer := _first_transactional_batch(broker, tp, pd.records)) is not None:
                # KIP-890 part 1: appended once the coordinator says the partition is in the transaction
                res = {"index": pd.index}
                unverified.append((tp, pd.records, res, producer))
            else:
                res = _append(broker, td.name, pd.index, pd.records, acks, internal_allowed)
            parts.append(res)
            results.append((tp, res))
        responses.append({"name": td.name, "partition_responses": parts})
    if unverified:
        await _append_verified(ctx, req.transactional_id, unverified, acks, internal_allowed)
    any_error = False
    waits = []
    for tp, res in results:
        any_error = any_error or res["error_code"] != ErrorCode.none
        required = res.pop("_required_offset", None)
        if acks == -1 and required is not None:
            waits.append((tp, required, res))
    if waits:
        await _wait_for_isr(broker, waits, req.timeout.total_seconds())
    if acks == 0:
        # the client reads nothing back; Kafka closes the socket so it notices a failure
        return CLOSE_CONNECTION if any_error else NO_RESPONSE
    out: dict[str, Any] = {"responses": responses, "throttle_time": 0}
    node = broker.cluster_node
    if node is not None and any_error:
        leaders = {p["current_leader"]["leader_id"] for t in responses for p in t["partition_responses"]
                   if "current_leader" in p}
        out["node_endpoints"] = [{"node_id": i, "host": h, "port": port, "rack": rack}
                                 for i in sorted(leaders) if (ep := node.client_endpoint(i, ctx.listener_name)) is not None
                                 for (_, h, port, rack) in [ep]]
    return out


# -- KIP-890 part 1: transaction verification -----------------------------------------------------------

# Produce v11 knows TRANSACTION_ABORTABLE; older versions get INVALID_TXN_STATE with Kafka's message.
TRANSACTION_ABORTABLE_SINCE = 11
NOT_ADDED = "Partition was not added to the transaction"
# retriable coordinator answers older clients may not retry: NOT_ENOUGH_REPLICAS (no metadata refresh)
_RETRY_AS_NOT_ENOUGH_REPLICAS = {ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
                                 ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                 ErrorCode.concurrent_transactions}


def _first_transactional_batch(broker: Broker, tp: TopicPartition, records: bytes | None) -> tuple[int, int] | None:
    """(producer id, epoch) when ``records`` starts a transaction on ``tp``, a partition led here (its
    first batch is transactional and the producer has no transaction open there at that epoch);
    None when the append needs no verification (or will be refused for another reason)."""
    if not records or len(records) < HEADER_SIZE or records[MAGIC_OFFSET] != 2:
        return None
    header = read_header(records)
    if not header.is_transactional or header.producer_id < 0:
        return None
    rm = broker.replica_manager
    partition = rm.get_partition(tp) if rm is not None else None
    meta = broker.get_topic(tp.topic)
    if partition is None or not partition.is_leader or meta is None or meta.internal:
        return None
    if _in_transaction(broker, tp, header.producer_id, header.producer_epoch):
        return None
    return header.producer_id, header.producer_epoch


def _in_transaction(broker: Broker, tp: TopicPartition, producer_id: int, producer_epoch: int) -> bool:
    plog = broker.get_partition_log(tp.topic, tp.partition)
    entry = plog.producer_state.last_entry(producer_id) if plog is not None else None
    return entry is not None and entry.current_txn_first_offset is not None and entry.producer_epoch == producer_epoch


async def _append_verified(ctx: RequestContext, transactional_id: str,
                           unverified: list[tuple[TopicPartition, bytes, dict, tuple[int, int]]], acks: int,
                           internal_allowed: bool) -> None:
    """Verify the partitions with the coordinator, then append those in the transaction; each
    partition's answer is written into its response dict. The loop serves other requests meanwhile;
    the produces of one producer to one partition still append in the order they came."""
    broker = ctx.broker
    producers = {producer for *_, producer in unverified}
    if len(producers) > 1:
        for _tp, _records, res, _producer in unverified:
            res.update(_refused(broker, _tp, ErrorCode.invalid_producer_id_mapping,
                                "Transactional records contained more than one producer ID"))
        return
    ((producer_id, epoch),) = producers
    guards = broker.txn_guards
    places = {tp: guards.enter((tp.topic, tp.partition), producer_id) for tp, *_ in unverified}
    try:
        before = [prev for prev, _ in places.values() if prev is not None]
        if before:
            await asyncio.wait(before)  # never cancels the earlier produces' futures
        need = {tp for tp, *_ in unverified if not _in_transaction(broker, tp, producer_id, epoch)}
        guard_of = {tp: guards.guard((tp.topic, tp.partition), producer_id) for tp in need}
        errors = {}
        if need:
            answer = await broker.txn_verification.verify(transactional_id, producer_id, epoch,
                                                          {(tp.topic, tp.partition) for tp in need})
            errors = {TopicPartition(*k): code for k, code in answer.items()}
        for tp, records, res, _producer in unverified:
            if tp in errors:
                code, message = _verification_error(errors[tp], ctx.api_version)
                log.debug("produce of transactional id %s to %s-%d not verified: %s", transactional_id, *tp,
                          errors[tp].name)
                res.update(_refused(broker, tp, code, message))
            elif tp in need and not _in_transaction(broker, tp, producer_id, epoch) \
                    and guards.guard((tp.topic, tp.partition), producer_id) is not guard_of[tp]:
                # a marker of this producer landed while the coordinator answered: that transaction is over
                res.update(_refused(broker, tp, ErrorCode.invalid_txn_state,
                                    "Record was not part of an ongoing transaction"))
            else:
                res.update(_append(broker, tp.topic, tp.partition, records, acks, internal_allowed))
    finally:
        for tp, (_, mine) in places.items():
            guards.leave((tp.topic, tp.partition), producer_id, mine)


def _verification_error(code: ErrorCode, version: int) -> tuple[ErrorCode, str | None]:
    """Kafka's translation of a coordinator's answer into the produce's error (ReplicaManager)."""
    if code == ErrorCode.transaction_abortable and version < TRANSACTION_ABORTABLE_SINCE:
        code = ErrorCode.invalid_txn_state
    if code == ErrorCode.invalid_txn_state:
        return code, NOT_ADDED
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return (ErrorCode.not_enough_replicas,
                f"Unable to verify the partition has been added to the transaction. Underlying error: {code.name.upper()}")
    return code, None


def _refused(broker: Broker, tp: TopicPartition, code: ErrorCode, message: str | None) -> dict:
    plog = broker.get_partition_log(tp.topic, tp.partition)
    return {"index": tp.partition, "error_code": code, "error_message": message, "base_offset": -1,
            "log_append_time": -1, "log_start_offset": plog.log_start_offset if plog is not None else -1}


async def _wait_for_isr(broker: Broker, waits: list[tuple[TopicPartition, int, dict]], timeout_s: float) -> None:
    """acks=all: each partition's answer waits until the ISR has its records (the produce purgatory)."""
    rm = broker.replica_manager
    assert rm is not None
    results = await asyncio.gather(*(rm.wait_for_acks(tp, required, timeout_s) for tp, required, _ in waits))
    for (_tp, _required, res), error in zip(waits, results):
        if error is not None:
            res["error_code"] = error.code  # type: ignore[attr-defined]
            res["error_message"] = None


async def handle_init_producer_id(ctx: RequestContext, req: Any) -> dict:
    if req.transactional_id is not None:
        from tieredlog.server import txn_apis  # it builds on this module's error mapping

        return await txn_apis.init_producer_id(ctx, req)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < 32766:
        # KIP-360: an idempotent producer bumps its own epoch after a fatal sequence error
        return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1, "throttle_time": 0}
    producer_ids = ctx.broker.producer_ids
    assert producer_ids is not None, "the broker serves requests only after start() made its producer id manager"
    try:
        pid = await producer_ids.next_producer_id()
    except Exception as exc:  # noqa: BLE001 - ZooKeeper or the disk failed: the client retries
        log.warning("could not reserve a block of producer ids: %s", exc)
        return {"error_code": ErrorCode.coordinator_not_available, "producer_id": -1, "producer_epoch": -1,
                "throttle_time": 0}
    return {"error_code": 0, "producer_id": pid, "producer_epoch": 0, "throttle_time": 0}


def handlers() -> dict[int, Handler]:
    return {PRODUCE: handle_produce, INIT_PRODUCER_ID: handle_init_producer_id}
