"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Protocol, Sequence, cast

from kio.schema.errors import ErrorCode

from tieredlog.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    PolicyViolationError,
)
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
)
from tieredlog.replication.data_path import error_code_of
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.admin_requests import TOPICS_BY_ID_SINCE
from tieredlog.server.authorization import AuthorizerServer, authorize, authorize_cluster, authorized_names
from tieredlog.server.config_apis import TopicConfigServer, topic_config_entries
from tieredlog.server.context import Handler, RequestContext

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.log.config import LogConfig
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.server.admin_requests import (
        KioCreatePartitionsRequest,
        KioCreateTopicsRequest,
        KioDeleteRecordsRequest,
        KioDeleteTopicsRequest,
        KioDeleteTopicsRequestV1To5,
        KioDeleteTopicsRequestV6,
    )
    from tieredlog.server.topic_store import TopicMetadata

log = logging.getLogger(__name__)


# Kafka's controller refuses a request that would create more partitions than this in one go
# (KAFKA-17870 for CreateTopics, KAFKA-19673 for CreatePartitions): without it one small request
# could ask for 2^31 partitions.
MAX_PARTITIONS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


class AdminServer(TopicConfigServer, AuthorizerServer, Protocol):
    """What the topic and records admin APIs need of the broker."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def registered_broker_ids(self) -> set[int]: ...

    def check_new_topic(self, name: str, partitions: int, replication_factor: int,
                        configs: dict[str, str]) -> LogConfig: ...

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str] | None = None,
                     assignment: dict[int, list[int]] | None = None) -> TopicMetadata: ...

    def delete_topic(self, name: str) -> None: ...

    def create_partitions(self, name: str, count: int, validate_only: bool = False,
                          assignment: list[list[int]] | None = None) -> None: ...

    async def topics_durable(self, wait_s: float = 10.0) -> None: ...


class _Assignment(Protocol):
    """A CreateTopics or CreatePartitions manual assignment: the partition's replicas."""

    @property
    def broker_ids(self) -> Sequence[int]: ...


def _check_assignments(broker: AdminServer, assignments: Iterable[_Assignment]) -> list[list[int]]:
    """Manual assignments name replicas: registered brokers (alone: this node), no duplicates, the
    same number for every partition."""
    registered = broker.registered_broker_ids()
    out: list[list[int]] = []
    for a in assignments:
        ids = list(a.broker_ids)
        if not ids or any(b not in registered for b in ids):
            raise InvalidReplicaAssignmentError(f"Replica assignment {ids} names brokers that are not registered")
        if len(set(ids)) != len(ids):
            raise InvalidReplicaAssignmentError(f"Duplicate brokers in replica assignment {ids}")
        if out and len(ids) != len(out[0]):
            raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
        out.append(ids)
    return out


async def handle_create_topics(ctx: RequestContext[AdminServer], req: KioCreateTopicsRequest) -> dict:
    broker = ctx.broker
    out = []
    seen: set[str] = set()
    default = broker.config["num.partitions"]
    total = sum(
        len(t.assignments) if t.assignments else (default if t.num_partitions == -1 else max(t.num_partitions, 0))
        for t in req.topics
    )
    created: list[dict[str, Any]] = []
    names = [t.name for t in req.topics]
    # CREATE on the cluster covers every topic; else CREATE on each
    creatable = set(names) if authorize_cluster(ctx, AclOperation.CREATE, log_denied=False) \
        else authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, names)
    # what a topic was created with is told to those who may describe its configs
    describable = authorized_names(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    for t in req.topics:
        entry: dict[str, Any] = {"name": t.name, "topic_id": None, "error_code": 0, "error_message": None,
                                 "num_partitions": -1, "replication_factor": -1, "configs": None}
        if t.name not in describable:
            entry["topic_config_error_code"] = ErrorCode.topic_authorization_failed
        try:
            if t.name in seen:
                raise InvalidRequestError(f"Create topics request from client contains duplicate topic {t.name}")
            seen.add(t.name)
            if t.name not in creatable:
                entry.update(error_code=ErrorCode.topic_authorization_failed, error_message="Authorization failed.")
                out.append(entry)
                continue
            if total > MAX_PARTITIONS_PER_REQUEST:
                raise PolicyViolationError(TOO_MANY_PARTITIONS)
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            manual: dict[int, list[int]] | None = None
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments were set.")
                replicas = _check_assignments(broker, t.assignments)
                manual = dict(zip([a.partition_index for a in t.assignments], replicas))
                if sorted(manual) != list(range(len(manual))):
                    raise InvalidReplicaAssignmentError(
                        f"Unexpected existing partition indexes in the assignment: {sorted(manual)}")
                partitions, rf = len(replicas), len(replicas[0])
            else:
                partitions = broker.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
                rf = broker.config["default.replication.factor"] if t.replication_factor == -1 else t.replication_factor
            broker.check_new_topic(t.name, partitions, rf, configs)
            if req.validate_only:
                meta = None
            else:
                meta = broker.create_topic(t.name, partitions, rf, configs, assignment=manual)
                entry["topic_id"] = meta.topic_id
                created.append(entry)
            if t.name not in describable:
                out.append(entry)
                continue
            entry.update(num_partitions=partitions, replication_factor=rf)
            entry["configs"] = [
                {"name": e["name"], "value": e["value"], "read_only": e["read_only"], "config_source": e["config_source"],
                 "is_sensitive": False}
                for e in topic_config_entries(broker, configs)
            ]
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=str(exc))
        except Exception as exc:  # noqa: BLE001
            log.exception("CreateTopics %s failed", t.name)
            entry.update(error_code=error_code_of(exc), error_message=str(exc))
        out.append(entry)
    if created:
        try:
            await broker.topics_durable()
        except Exception as exc:  # noqa: BLE001 - the topics exist, but a restart may not know them
            log.error("CreateTopics: the topics file could not be written: %s", exc)
            for entry in created:
                entry.update(error_code=error_code_of(exc), error_message=str(exc))
    return {"throttle_time": 0, "topics": out}


async def handle_delete_topics(ctx: RequestContext[AdminServer], req: KioDeleteTopicsRequest) -> dict:
    broker = ctx.broker
    out = []
    items: list[tuple[str | None, uuid.UUID | None]]
    if ctx.api_version >= TOPICS_BY_ID_SINCE:
        items = [(t.name, t.topic_id) for t in cast("KioDeleteTopicsRequestV6", req).topics]
    else:
        items = [(n, None) for n in cast("KioDeleteTopicsRequestV1To5", req).topic_names]
    if not broker.config["delete.topic.enable"]:
        # Kafka refuses the whole request before any authorization; v0-2 have no code for it
        code = ErrorCode.topic_deletion_disabled if ctx.api_version >= 3 else ErrorCode.invalid_request
        return {"throttle_time": 0, "responses": [
            {"name": name, "topic_id": tid, "error_code": code, "error_message": None} for name, tid in items]}
    for name, tid in items:
        entry: dict[str, Any] = {"name": name, "topic_id": tid, "error_code": 0, "error_message": None}
        by_id = name is None and tid is not None
        if by_id and tid is not None:
            meta = broker.topic_by_id(tid)
            if meta is None:
                entry["error_code"] = ErrorCode.unknown_topic_id
                out.append(entry)
                continue
            name = entry["name"] = meta.name
        if name is None:
            name = ""  # v6 names neither a name nor an id: no topic has that name
        if by_id and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            # the id is no secret, the name is: Kafka leaves it out
            entry.update(name=None, error_code=ErrorCode.topic_authorization_failed)
            out.append(entry)
            continue
        if not authorize(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
            entry["error_code"] = ErrorCode.topic_authorization_failed
            out.append(entry)
            continue
        meta = broker.get_topic(name)
        if meta is None:
            entry["error_code"] = ErrorCode.unknown_topic_or_partition
        elif meta.internal:
            entry.update(error_code=ErrorCode.invalid_request, error_message=f"Topic {name} is an internal topic")
        else:
            entry["topic_id"] = meta.topic_id
            try:
                broker.delete_topic(name)
            except KafkaError as exc:
                entry.update(error_code=exc.code, error_message=str(exc))
        out.append(entry)
    await broker.topics_durable()
    return {"throttle_time": 0, "responses": out}


async def handle_create_partitions(ctx: RequestContext[AdminServer], req: KioCreatePartitionsRequest) -> dict:
    broker = ctx.broker
    out = []
    added = 0
    for t in req.topics:
        meta = broker.get_topic(t.name)
        if meta is not None:
            added += max(t.count - meta.partitions, 0)
    alterable = authorized_names(ctx, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in req.topics))
    for t in req.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            if t.name not in alterable:
                entry.update(error_code=ErrorCode.topic_authorization_failed,
                             error_message="The topic authorization is failed.")
                out.append(entry)
                continue
            if added > MAX_PARTITIONS_PER_REQUEST:
                raise PolicyViolationError(TOO_MANY_PARTITIONS)
            new_replicas = _check_assignments(broker, t.assignments) if t.assignments else None
            broker.create_partitions(t.name, t.count, req.validate_only, assignment=new_replicas)
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=str(exc))
        out.append(entry)
    if not req.validate_only:
        await broker.topics_durable()
    return {"throttle_time": 0, "results": out}


async def handle_delete_records(ctx: RequestContext[AdminServer], req: KioDeleteRecordsRequest) -> dict:
    """Kafka's handleDeleteRecordsRequest: authorization and the metadata here, the rest (leadership,
    the wait for the followers' log start offsets) in the ReplicaManager."""
    broker = ctx.broker
    rm = broker.replica_manager
    deletable = authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
    timeout_s = max(req.timeout.total_seconds(), 0.0)
    waits: list[Awaitable[None]] = []
    topics = []
    for t in req.topics:
        parts = []
        meta = broker.get_topic(t.name)
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            if t.name not in deletable:
                entry["error_code"] = ErrorCode.topic_authorization_failed
            elif meta is None or not 0 <= p.partition_index < meta.partitions or rm is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                waits.append(_delete_partition(rm, TopicPartition(t.name, p.partition_index), p.offset, timeout_s, entry))
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    await asyncio.gather(*waits)
    return {"throttle_time": 0, "topics": topics}


async def _delete_partition(rm: ReplicaManager, tp: TopicPartition, offset: int, timeout_s: float,
                            entry: dict[str, Any]) -> None:
    try:
        low_watermark, error = await rm.delete_records(tp, offset, timeout_s, topic_exists=True)
    except KafkaError as exc:
        entry["error_code"] = exc.code
        return
    except Exception as exc:  # noqa: BLE001 - one partition's failure is its own answer
        log.error("DeleteRecords on %s failed: %s", tp, exc)
        entry["error_code"] = error_code_of(exc)
        return
    entry["low_watermark"] = low_watermark
    if error is not None:
        entry["error_code"] = error_code_of(error())


def handlers() -> dict[int, Handler[AdminServer]]:
    return {
        CREATE_TOPICS: handle_create_topics,
        DELETE_TOPICS: handle_delete_topics,
        CREATE_PARTITIONS: handle_create_partitions,
        DELETE_RECORDS: handle_delete_records,
    }
