"""The controller's requests to a broker (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6) and the
brokers' requests to the controller (ControlledShutdown 7, AlterPartition 56), in a cluster only.

Every controller request is fenced by its controller epoch (``STALE_CONTROLLER_EPOCH`` for a deposed
controller, KAFKA-6082) and by this broker's epoch (``STALE_BROKER_EPOCH`` for a request meant for
an earlier registration of this broker id, KIP-380).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import KafkaError
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import ALTER_PARTITION, CONTROLLED_SHUTDOWN, LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from tieredlog.replication.metadata_cache import BrokerNode, PartitionMetadata
from tieredlog.replication.partition import PartitionState
from tieredlog.replication.replica_manager import LeaderAndIsrPartition
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.topic_store import TopicMetadata

if TYPE_CHECKING:
    from typing import TypeAlias

    from kio.schema.alter_partition import v2 as ap2
    from kio.schema.alter_partition import v3 as ap3

    from tieredlog.cluster.membership import ZkClusterMembership
    from tieredlog.controller.controller import KafkaController
    from tieredlog.protocol.inter_broker.controlled_shutdown import ControlledShutdownRequest
    from tieredlog.protocol.inter_broker.leader_and_isr import LeaderAndIsrRequest
    from tieredlog.protocol.inter_broker.stop_replica import StopReplicaRequest
    from tieredlog.protocol.inter_broker.update_metadata import UpdateMetadataRequest
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.server.cluster_node import ClusterNode

    KioAlterPartitionRequest: TypeAlias = ap2.AlterPartitionRequest | ap3.AlterPartitionRequest

log = logging.getLogger(__name__)


class InterBrokerServer(Protocol):
    """What the controller's requests need of the broker: its registration, its topic table (a
    follower learns topics from them) and its replicas; what the brokers' requests need: the controller."""

    @property
    def cluster(self) -> ZkClusterMembership | None: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    @property
    def controller(self) -> KafkaController | None: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def topics(self) -> dict[str, TopicMetadata]: ...

    @property
    def topics_by_id(self) -> dict[uuid.UUID, TopicMetadata]: ...

    def apply_topic_configs(self, name: str, overrides: dict[str, str]) -> None: ...


def _fence(broker: InterBrokerServer, controller_id: int, controller_epoch: int, broker_epoch: int) -> ErrorCode:
    if broker.cluster is None or broker.cluster_node is None:
        return ErrorCode.not_controller  # not part of a cluster: no controller talks to us
    try:
        broker.cluster.fence.check(controller_epoch, controller_id)
    except KafkaError as exc:
        log.warning("%s", exc)
        return exc.code
    own = broker.cluster_node.broker_epoch()
    if 0 <= broker_epoch < own:
        log.warning("Received a request from controller %d for broker epoch %d, older than the current %d",
                    controller_id, broker_epoch, own)
        return ErrorCode.stale_broker_epoch
    return ErrorCode.none


async def _learn_topics(broker: InterBrokerServer, topics: dict[str, tuple[Any, int]]) -> None:
    """Topics this broker has not seen get their configs from ZooKeeper before any log of theirs is
    made (a log's segment size, retention and min.insync.replicas come from them)."""
    node = broker.cluster_node
    assert node is not None
    unknown = [t for t in topics if t not in broker.topics]
    configs = await node.topic_configs(unknown) if unknown else {}
    for name, (topic_id, partitions) in topics.items():
        t = broker.topics.get(name)
        if t is None or (topic_id is not None and t.topic_id != topic_id):
            t = TopicMetadata(name, topic_id, partitions, configs.get(name, {}))
            broker.topics[name] = t
            if topic_id is not None:
                broker.topics_by_id[topic_id] = t
            # logs loaded at start-up, before the topic was known here, ran on the broker's defaults
            broker.apply_topic_configs(name, t.configs)
        elif partitions > t.partitions:
            t.partitions = partitions


async def handle_leader_and_isr(ctx: RequestContext[InterBrokerServer], req: LeaderAndIsrRequest) -> dict:
    broker = ctx.broker
    code = _fence(broker, req.controller_id, req.controller_epoch, req.broker_epoch)
    if code != ErrorCode.none:
        return {"error_code": code, "topics": []}
    rm = broker.replica_manager
    assert rm is not None
    seen: dict[str, tuple[Any, int]] = {}
    partitions: list[LeaderAndIsrPartition] = []
    for ts in req.topic_states:
        top = max((ps.partition_index for ps in ts.partition_states), default=-1) + 1
        prev = seen.get(ts.topic_name)
        seen[ts.topic_name] = (ts.topic_id, max(top, prev[1] if prev else 0))
        for ps in ts.partition_states:
            partitions.append(LeaderAndIsrPartition(
                TopicPartition(ts.topic_name, ps.partition_index), ts.topic_id,
                PartitionState(leader=ps.leader, leader_epoch=ps.leader_epoch, isr=tuple(ps.isr),
                               replicas=tuple(ps.replicas), partition_epoch=ps.partition_epoch,
                               controller_epoch=ps.controller_epoch, adding_replicas=tuple(ps.adding_replicas),
                               removing_replicas=tuple(ps.removing_replicas), is_new=ps.is_new)))
    await _learn_topics(broker, seen)
    live: dict[int, tuple[str, int]] = {ll.broker_id: (ll.host_name, ll.port) for ll in req.live_leaders}
    errors = await rm.become_leader_or_follower(req.controller_id, req.controller_epoch, partitions, live)
    by_topic: dict[Any, list[dict]] = {}
    for lp in partitions:
        by_topic.setdefault(lp.topic_id, []).append(
            {"partition_index": lp.tp.partition, "error_code": errors.get(lp.tp, ErrorCode.none)})
    return {"error_code": ErrorCode.none,
            "topics": [{"topic_id": tid, "partition_errors": errs} for tid, errs in by_topic.items()]}


async def handle_update_metadata(ctx: RequestContext[InterBrokerServer], req: UpdateMetadataRequest) -> dict:
    broker = ctx.broker
    code = _fence(broker, req.controller_id, req.controller_epoch, req.broker_epoch)
    if code != ErrorCode.none:
        return {"error_code": code}
    node = broker.cluster_node
    assert node is not None
    brokers = [BrokerNode(b.id_, {e.listener: (e.host, e.port) for e in b.endpoints}, b.rack) for b in req.live_brokers]
    parts: list[tuple[str, uuid.UUID | None, int, PartitionMetadata]] = []
    counts: dict[str, tuple[Any, int]] = {}
    for ts in req.topic_states:
        for ps in ts.partition_states:
            parts.append((ts.topic_name, ts.topic_id, ps.partition_index, PartitionMetadata(
                leader=ps.leader, leader_epoch=ps.leader_epoch, isr=tuple(ps.isr), replicas=tuple(ps.replicas),
                offline_replicas=tuple(ps.offline_replicas), zk_version=ps.zk_version)))
    delta = node.metadata.update(req.controller_id, req.controller_epoch, brokers, parts)
    for name in delta.new_topics + delta.grown_topics:
        entry = node.metadata.topics.get(name)
        if entry is not None:
            counts[name] = (entry.topic_id, max(entry.partitions) + 1)
    if counts:
        await _learn_topics(broker, counts)
    for name in delta.deleted_topics:
        t = broker.topics.pop(name, None)
        if t is not None:
            broker.topics_by_id.pop(t.topic_id, None)
    node.metadata_updated()
    return {"error_code": ErrorCode.none}


async def handle_stop_replica(ctx: RequestContext[InterBrokerServer], req: StopReplicaRequest) -> dict:
    broker = ctx.broker
    code = _fence(broker, req.controller_id, req.controller_epoch, req.broker_epoch)
    if code != ErrorCode.none:
        return {"error_code": code, "partition_errors": []}
    rm = broker.replica_manager
    assert rm is not None
    partitions: dict[TopicPartition, tuple[int, bool]] = {
        TopicPartition(ts.topic_name, ps.partition_index): (ps.leader_epoch, ps.delete_partition)
        for ts in req.topic_states for ps in ts.partition_states}
    errors = await rm.stop_replicas(req.controller_id, req.controller_epoch, partitions)
    return {"error_code": ErrorCode.none, "partition_errors": [
        {"topic_name": tp.topic, "partition_index": tp.partition, "error_code": err} for tp, err in errors.items()]}


async def handle_alter_partition(ctx: RequestContext[InterBrokerServer], req: KioAlterPartitionRequest) -> dict:
    controller = ctx.broker.controller
    if controller is None:
        return {"error_code": ErrorCode.not_controller, "topics": []}
    return await asyncio.wrap_future(controller.alter_partition(req))


async def handle_controlled_shutdown(ctx: RequestContext[InterBrokerServer], req: ControlledShutdownRequest) -> dict:
    controller = ctx.broker.controller
    if controller is None:
        return {"error_code": ErrorCode.not_controller, "remaining_partitions": []}
    code, remaining = await asyncio.wrap_future(controller.controlled_shutdown(req.broker_id, req.broker_epoch))
    return {"error_code": code, "remaining_partitions": [
        {"topic_name": tp[0], "partition_index": tp[1]} for tp in remaining]}


def handlers() -> dict[int, Handler[InterBrokerServer]]:
    return {
        LEADER_AND_ISR: handle_leader_and_isr,
        UPDATE_METADATA: handle_update_metadata,
        STOP_REPLICA: handle_stop_replica,
        ALTER_PARTITION: handle_alter_partition,
        CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
    }
