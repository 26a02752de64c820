"""Produce (0) and InitProducerId (22) (with a transactional id: tieredlog.server.txn_apis).

Record bytes go to the partition's leader append untouched (the log validates CRC, sizes and
sequences and patches offsets in place). acks=1 is answered once the leader has appended; acks=all
once the ISR has the data (the high watermark passed it), parked meanwhile without blocking. With
one broker the ISR is this broker, so both are satisfied at once. A transaction's first batch on a
partition waits, without blocking, for its coordinator to confirm the partition is in the transaction
(KIP-890 part 1, tieredlog.server.produce_verification). The appending and the waiting are the
ReplicaManager's (append_records); the handler translates the request and the response.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import INIT_PRODUCER_ID, PRODUCE
from tieredlog.replication.data_path import PartitionAppendResult
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import AuthorizerServer, authorized_names
from tieredlog.server.context import CLOSE_CONNECTION, NO_RESPONSE, Handler, RequestContext
from tieredlog.server.produce_verification import ProduceVerification, VerificationServer
from tieredlog.server.txn_apis import TxnCoordinatorServer, init_producer_id
from tieredlog.server.txn_requests import KioInitProducerIdRequest, init_producer_id_request

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.producer_ids import ProducerIdManager

log = logging.getLogger(__name__)

# Kafka's AdminUtils.ADMIN_CLIENT_ID: the one client id that may append to internal topics (here the
# brokers' own remote log metadata producers use it)
INTERNAL_TOPICS_CLIENT_ID = "__admin_client"
_VALID_ACKS = (0, 1, -1)


class ProducePartitionData(Protocol):
    index: int
    records: bytes | None


class TopicProduceData(Protocol):
    name: str

    @property
    def partition_data(self) -> Sequence[ProducePartitionData]: ...


class ProduceRequest(Protocol):
    """Produce v3-12, one version family: every served version has these fields."""

    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta

    @property
    def topic_data(self) -> Sequence[TopicProduceData]: ...


class ProduceServer(VerificationServer, AuthorizerServer, Protocol):
    """What the Produce handler needs of the broker."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...


async def handle_produce(ctx: RequestContext[ProduceServer], req: ProduceRequest) -> Any:
    server = ctx.broker
    rm = server.replica_manager
    assert rm is not None, "the broker serves requests only after start() made its replica manager"
    acks = req.acks
    writable = authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, (td.name for td in req.topic_data))
    entries = [(TopicPartition(td.name, pd.index), pd.records) for td in req.topic_data for pd in td.partition_data]
    appends = [(tp, records) for tp, records in entries if tp.topic in writable and acks in _VALID_ACKS]
    verification = None
    if req.transactional_id is not None and server.config["transaction.partition.verification.enable"]:
        verification = ProduceVerification(server, req.transactional_id, ctx.api_version)
    appended = iter(await rm.append_records(appends, acks, req.timeout.total_seconds(), verification=verification,
                                            internal_allowed=ctx.client_id == INTERNAL_TOPICS_CLIENT_ID))
    responses: list[dict[str, Any]] = [{"name": td.name, "partition_responses": [
        _partition_response(pd.index, next(appended)) if td.name in writable and acks in _VALID_ACKS
        else _refused(pd.index, ErrorCode.topic_authorization_failed if td.name not in writable
                      else ErrorCode.invalid_required_acks) for pd in td.partition_data]} for td in req.topic_data]
    any_error = any(p["error_code"] != ErrorCode.none for t in responses for p in t["partition_responses"])
    if acks == 0:
        # the client reads nothing back; Kafka closes the socket so it notices a failure
        return CLOSE_CONNECTION if any_error else NO_RESPONSE
    out: dict[str, Any] = {"responses": responses, "throttle_time": 0}
    if any_error:
        out["node_endpoints"] = _leader_endpoints(server, responses, ctx.listener_name)
    return out


def _refused(index: int, code: ErrorCode) -> dict[str, Any]:
    if code == ErrorCode.invalid_required_acks:
        return {"index": index, "error_code": code, "base_offset": -1}
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}


def _partition_response(index: int, r: PartitionAppendResult) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "error_code": r.error_code, "base_offset": r.base_offset,
                           "log_append_time": r.log_append_time, "log_start_offset": r.log_start_offset}
    if r.error_code != ErrorCode.none:
        out["error_message"] = r.error_message
    if r.current_leader is not None:
        out["current_leader"] = {"leader_id": r.current_leader[0], "leader_epoch": r.current_leader[1]}
    if r.record_errors:
        out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in r.record_errors]
    return out


def _leader_endpoints(server: ProduceServer, responses: list[dict[str, Any]], listener: str) -> list[dict[str, Any]]:
    """Where the leaders named in ``current_leader`` hints are (Produce v10's NodeEndpoints)."""
    node = server.cluster_node
    if node is None:
        return []
    leaders = {p["current_leader"]["leader_id"] for t in responses for p in t["partition_responses"]
               if "current_leader" in p}
    return [{"node_id": i, "host": h, "port": port, "rack": rack}
            for i in sorted(leaders) if (ep := node.client_endpoint(i, listener)) is not None
            for (_, h, port, rack) in [ep]]


class InitProducerIdServer(TxnCoordinatorServer, Protocol):
    """What InitProducerId needs of the broker."""

    @property
    def producer_ids(self) -> ProducerIdManager | None: ...


class ProduceApiServer(ProduceServer, InitProducerIdServer, Protocol):
    """What this module's handlers need of the broker."""


async def handle_init_producer_id(ctx: RequestContext[InitProducerIdServer], kio_req: KioInitProducerIdRequest) -> dict:
    req = init_producer_id_request(kio_req, ctx.api_version)
    if req.transactional_id is not None:
        return await init_producer_id(ctx, req)
    pid, epoch = req.producer_id, req.producer_epoch
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


def handlers() -> dict[int, Handler[ProduceApiServer]]:
    return {PRODUCE: handle_produce, INIT_PRODUCER_ID: handle_init_producer_id}
