"""DescribeProducers (61): the active producers of partitions, from each replica's producer state
(KIP-664, what `kafka-transactions.sh describe-producers` and `find-hanging` read).

As Kafka (KafkaApis.handleDescribeProducersRequest, ReplicaManager.activeProducerState): an invalid
topic name is INVALID_TOPIC_EXCEPTION and a topic the metadata does not know UNKNOWN_TOPIC_OR_PARTITION,
for every partition asked of it; a partition is answered by any broker hosting a replica of it, leader
or follower (the admin client asks the leader unless told a broker id), NOT_LEADER_OR_FOLLOWER when
the partition exists but has no replica here, UNKNOWN_TOPIC_OR_PARTITION when it does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import InvalidTopicError
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import DESCRIBE_PRODUCERS
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import AuthorizerServer, authorize
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.topic_store import validate_topic_name

if TYPE_CHECKING:
    from kio.schema.describe_producers.v0 import DescribeProducersRequest

    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.topic_store import TopicMetadata

class ProducerStateServer(AuthorizerServer, Protocol):
    """What DescribeProducers needs of the broker."""

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...


NO_TXN_START_OFFSET = -1


def _topic_known(broker: ProducerStateServer, topic: str) -> bool:
    """Kafka's metadataCache.contains(topic): in a cluster what the controller announced, alone the
    topics this broker created."""
    node = broker.cluster_node
    if node is not None:
        return topic in node.metadata.topics
    return broker.get_topic(topic) is not None


def _partition_known(broker: ProducerStateServer, tp: TopicPartition) -> bool:
    node = broker.cluster_node
    if node is not None:
        entry = node.metadata.topics.get(tp.topic)
        return entry is not None and tp.partition in entry.partitions
    t = broker.get_topic(tp.topic)
    return t is not None and 0 <= tp.partition < t.partitions


def active_producers(plog: UnifiedLog) -> list[dict[str, Any]]:
    """Kafka's UnifiedLog.activeProducers: one entry per producer the partition's state holds, read
    under the log's lock so no append changes an entry half-way through (an append updates the
    producer state under that lock, from the event loop or a follower's fetcher)."""
    with plog.local_log.lock:
        return [
            {
                "producer_id": e.producer_id,
                "producer_epoch": e.producer_epoch,
                "last_sequence": e.last_seq,
                "last_timestamp": e.last_timestamp,
                "coordinator_epoch": e.coordinator_epoch,
                "current_txn_start_offset": (
                    NO_TXN_START_OFFSET if e.current_txn_first_offset is None else e.current_txn_first_offset
                ),
            }
            for _, e in sorted(plog.producer_state.active_producers.items())
        ]


def _partition_answer(broker: ProducerStateServer, tp: TopicPartition) -> dict[str, Any]:
    out: dict[str, Any] = {"partition_index": tp.partition, "error_code": ErrorCode.none, "error_message": None,
                           "active_producers": []}
    rm = broker.replica_manager
    hosted = rm.get_partition(tp) if rm is not None else None
    if hosted is None:
        # as Kafka's getPartitionOrError: a partition that exists elsewhere sends the client to look again
        out["error_code"] = (ErrorCode.not_leader_or_follower if _partition_known(broker, tp)
                             else ErrorCode.unknown_topic_or_partition)
        return out
    out["active_producers"] = active_producers(hosted.log)
    return out


async def handle_describe_producers(ctx: RequestContext[ProducerStateServer], req: DescribeProducersRequest) -> dict:
    broker = ctx.broker
    topics = []
    for t in req.topics:
        topic_error: tuple[ErrorCode, str | None] | None = None
        try:
            validate_topic_name(t.name)
        except InvalidTopicError as exc:
            topic_error = (exc.code, str(exc))
        else:
            if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, t.name):
                topic_error = (ErrorCode.topic_authorization_failed, "Topic authorization failed.")
            elif not _topic_known(broker, t.name):
                topic_error = (ErrorCode.unknown_topic_or_partition, None)
        partitions: list[dict[str, Any]] = []
        for index in t.partition_indexes:
            if topic_error is not None:
                code, message = topic_error
                partitions.append({"partition_index": index, "error_code": code, "error_message": message,
                                   "active_producers": []})
            else:
                partitions.append(_partition_answer(broker, TopicPartition(t.name, index)))
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def handlers() -> dict[int, Handler[ProducerStateServer]]:
    return {DESCRIBE_PRODUCERS: handle_describe_producers}
