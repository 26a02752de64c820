"""Where a transaction coordinator's markers go: to each partition's leader.

Alone, a broker leads every partition and appends the markers itself (`LocalMarkerWriter`). In a
cluster (`ClusterMarkerWriter`) the partitions are grouped by their leader in the metadata cache: those
led here are appended here, the others are sent as one WriteTxnMarkers request per leader (Kafka's
TransactionMarkerChannelManager), on a connection kept per broker. A partition without a known
leader, or whose leader cannot be reached, answers a retriable error and the coordinator tries again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.clients.node_clients import ConnectSettings, NodeConnections
from tieredlog.protocol.api import WRITE_TXN_MARKERS
from tieredlog.server.txn_apis import MarkerServer, write_markers_locally

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.server.cluster_node import ClusterNode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class PeerServer(Protocol):
    """What connecting to the other brokers needs of this one."""

    @property
    def node_id(self) -> int: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...


class ClusterMarkerServer(MarkerServer, PeerServer, Protocol):
    """What writing markers in a cluster needs of the broker."""


class LocalMarkerWriter:
    def __init__(self, broker: MarkerServer) -> None:
        self._broker = broker

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                            partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        return await write_markers_locally(self._broker, producer_id, producer_epoch, coordinator_epoch,
                                           committed, partitions)

    async def close(self) -> None:
        pass


def broker_connections(broker: PeerServer, purpose: str) -> NodeConnections[int]:
    """One connection per other broker on the inter-broker listener, opened on first use and dropped
    when it fails (the coordinator's marker channel, the partition leaders' verification requests)."""

    def endpoint_of(broker_id: int) -> tuple[str, int] | None:
        node = broker.cluster_node
        assert node is not None
        return node.inter_broker_endpoint(broker_id)

    def settings() -> ConnectSettings:
        node = broker.cluster_node
        assert node is not None
        return ConnectSettings(f"broker-{broker.node_id}-{purpose}", broker.config["request.timeout.ms"] / 1000,
                               node.inter_broker_security)

    return NodeConnections(endpoint_of, settings, describe=lambda b: f"broker {b}")


class ClusterMarkerWriter:
    def __init__(self, broker: ClusterMarkerServer) -> None:
        self._broker = broker
        self._connections = broker_connections(broker, "txn-markers")

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                            partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        node = self._broker.cluster_node
        assert node is not None
        by_leader: dict[int, set[TopicPartition]] = {}
        result: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            pm = node.metadata.partition(*tp)
            if pm is None:
                result[tp] = ErrorCode.unknown_topic_or_partition
            elif pm.leader < 0:
                result[tp] = ErrorCode.not_leader_or_follower
            else:
                by_leader.setdefault(pm.leader, set()).add(tp)
        sends = []
        for leader, tps in by_leader.items():
            if leader == self._broker.node_id:
                sends.append(write_markers_locally(self._broker, producer_id, producer_epoch, coordinator_epoch,
                                                   committed, tps))
            else:
                sends.append(self._send(leader, producer_id, producer_epoch, coordinator_epoch, committed, tps))
        for answer in await asyncio.gather(*sends):
            result.update(answer)
        return result

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                    committed: bool, partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(partitions):
            by_topic.setdefault(topic, []).append(p)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": committed, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}]}
        timeout_s = self._broker.config["request.timeout.ms"] / 1000
        try:
            # a connection that fails is dropped; the next markers to this broker open another
            resp = await self._connections.request(leader, WRITE_TXN_MARKERS, body, version=1, timeout_s=timeout_s)
        except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
            log.warning("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return {tp: ErrorCode.coordinator_not_available for tp in partitions}
        result = {tp: ErrorCode.request_timed_out for tp in partitions}
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    result[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return result

    async def close(self) -> None:
        await self._connections.close()
