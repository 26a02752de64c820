"""Metadata (3) and DescribeCluster (60).

Alone, this broker leads every partition. In a cluster (``zookeeper.connect``) the answer comes from
the metadata cache the controller's UpdateMetadata requests fill: every broker gives the same leaders,
replicas and ISRs. Before the first UpdateMetadata, the brokers are those registered under
/brokers/ids (the membership's cached view); no ZooKeeper call is made here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import KafkaError, TopicAlreadyExistsError
from tieredlog.protocol.api import DESCRIBE_CLUSTER, METADATA
from tieredlog.security.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tieredlog.server.authorization import (
    AuthorizerServer,
    authorize,
    authorize_cluster,
    authorized_names,
    authorized_operations,
)
from tieredlog.server.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.metadata_requests import endpoint_type, metadata_request
from tieredlog.server.topic_store import INTERNAL_TOPICS, TopicMetadata

if TYPE_CHECKING:
    import uuid

    from tieredlog.cluster.membership import ZkClusterMembership
    from tieredlog.config import BrokerConfig
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.metadata_requests import KioDescribeClusterRequest, KioMetadataRequest


class MetadataServer(AuthorizerServer, Protocol):
    """What Metadata and DescribeCluster need of the broker."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def cluster(self) -> ZkClusterMembership | None: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str] | None = None,
                     assignment: dict[int, list[int]] | None = None) -> TopicMetadata: ...

    async def topics_durable(self, wait_s: float = 10.0) -> None: ...


def _broker_entry(broker: MetadataServer, listener: str) -> dict:
    adv = broker.config.advertised_listener(listener) or broker.config.advertised_listeners[0]
    return {"node_id": broker.node_id, "host": adv.host or "127.0.0.1", "port": adv.port,
            "rack": broker.config["broker.rack"]}


def _broker_entries(broker: MetadataServer, listener: str) -> list[dict]:
    """This broker, and in a cluster every other registered broker, by their endpoints on the listener
    the request came in on (Kafka's rule: a client is handed the addresses of the listener it uses; a
    broker without that listener is left out)."""
    own = _broker_entry(broker, listener)
    cluster = broker.cluster
    if cluster is None:
        return [own]
    if broker.config.advertised_listener(listener) is None:
        listener = broker.config.advertised_listeners[0].name
    node = broker.cluster_node
    if node is not None and node.metadata.brokers:
        return [{"node_id": b.broker_id, "host": hp[0], "port": hp[1], "rack": b.rack}
                for b in sorted(node.metadata.brokers.values(), key=lambda b: b.broker_id)
                if (hp := b.endpoints.get(listener)) is not None]
    out = [own]  # listed even while its own registration is not in the view (a new session, say)
    for broker_id, info in sorted(cluster.brokers.items()):
        if broker_id == broker.node_id:
            continue
        ep = next((e for e in info.endpoints if e.listener_name == listener), None)
        if ep is not None:
            out.append({"node_id": broker_id, "host": ep.host, "port": ep.port, "rack": info.rack})
    return sorted(out, key=lambda b: b["node_id"])


def _controller_id(broker: MetadataServer) -> int:
    """The elected controller in a cluster (-1 while none is known, as Kafka answers); alone, this broker."""
    if broker.cluster is None:
        return broker.node_id
    cid = broker.cluster.controller_id
    return -1 if cid is None else cid


def _cluster_topic_entry(broker: MetadataServer, name: str) -> dict | None:
    node = broker.cluster_node
    assert node is not None
    entry = node.metadata.topics.get(name)
    if entry is None:
        return None
    live = node.metadata.brokers
    partitions = []
    for index, pm in sorted(entry.partitions.items()):
        partitions.append({
            "error_code": ErrorCode.none if pm.leader >= 0 and pm.leader in live else ErrorCode.leader_not_available,
            "partition_index": index,
            "leader_id": pm.leader if pm.leader in live else -1,
            "leader_epoch": pm.leader_epoch,
            "replica_nodes": list(pm.replicas),
            "isr_nodes": list(pm.isr),
            "offline_replicas": [r for r in pm.replicas if r not in live],
        })
    return {
        "error_code": 0,
        "name": name,
        "topic_id": entry.topic_id,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
    }


def topic_entry(broker: MetadataServer, t: TopicMetadata) -> dict:
    if broker.cluster_node is not None:
        found = _cluster_topic_entry(broker, t.name)
        if found is not None:
            return found
        # created a moment ago: the controller has not announced it yet (Kafka's answer too)
        return _error_topic(t.name, ErrorCode.leader_not_available, t.topic_id)
    node = broker.node_id
    return {
        "error_code": 0,
        "name": t.name,
        "topic_id": t.topic_id,
        "is_internal": t.internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for p in range(t.partitions)
        ],
    }


def _error_topic(name: str | None, code: int, topic_id: Any = None) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False, "partitions": []}


def _may_create(ctx: RequestContext[MetadataServer], name: str) -> bool:
    return authorize_cluster(ctx, AclOperation.CREATE, log_denied=False) \
        or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)


async def handle_metadata(ctx: RequestContext[MetadataServer], kio_req: KioMetadataRequest) -> dict:
    broker = ctx.broker
    req = metadata_request(kio_req, ctx.api_version)
    allow_auto = req.allow_auto_topic_creation and broker.config["auto.create.topics.enable"]
    topics_out = []
    # as Kafka, refused topics follow the others: those that could not be auto-created, then those
    # the principal may not describe (named only when the request named them)
    create_denied: list[dict] = []
    describe_denied: list[dict] = []
    auto_created: list[TopicMetadata] = []
    if req.topics is None:
        # topics the principal may not describe are left out, without a word
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, broker.topics, log_denied=False)
        topics_out = [topic_entry(broker, t) for t in sorted(broker.topics.values(), key=lambda t: t.name)
                      if t.name in visible]
    else:
        describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                       (rt.name for rt in req.topics if rt.name is not None))
        for rt in req.topics:
            name = rt.name
            tid = rt.topic_id
            if name is None:
                if ctx.api_version < 12:
                    # as Kafka: names cannot be null and ids are not looked up before v12
                    topics_out.append(_error_topic("", ErrorCode.invalid_request))  # name is not nullable here
                    continue
                t = broker.topic_by_id(tid) if tid is not None else None
                if t is not None and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
                    # a topic id is not a secret: Kafka says it is refused, without the name
                    describe_denied.append(_error_topic(None, ErrorCode.topic_authorization_failed, tid))
                    continue
                topics_out.append(topic_entry(broker, t) if t else _error_topic(None, ErrorCode.unknown_topic_id, tid))
                continue
            if name not in describable:
                # whether it exists is not disclosed
                describe_denied.append(_error_topic(name, ErrorCode.topic_authorization_failed))
                continue
            t = broker.get_topic(name)
            if t is None and allow_auto and not _may_create(ctx, name):
                create_denied.append({**_error_topic(name, ErrorCode.topic_authorization_failed),
                                      "is_internal": name in INTERNAL_TOPICS})
                continue
            if t is None and allow_auto:
                try:
                    t = broker.create_topic(
                        name, broker.config["num.partitions"], broker.config["default.replication.factor"]
                    )
                    auto_created.append(t)
                except KafkaError as exc:
                    topics_out.append(_error_topic(name, exc.code))
                    continue
            topics_out.append(topic_entry(broker, t) if t else _error_topic(name, ErrorCode.unknown_topic_or_partition))
    if auto_created:
        try:
            await broker.topics_durable()
        except TopicAlreadyExistsError:
            # created meanwhile through another broker: until this broker's metadata has it, Kafka's answer
            # for a topic being created, which the client retries
            created_names = {t.name for t in auto_created}
            topics_out = [_error_topic(e["name"], ErrorCode.leader_not_available) if e["name"] in created_names
                          else e for e in topics_out]
    # v8+ (the cluster's only up to v10): Kafka sets it on every topic of the answer, errors included,
    # except the refused ones
    topic_ops = req.include_topic_authorized_operations
    for entry in topics_out:
        entry["topic_authorized_operations"] = authorized_operations(ctx, ResourceType.TOPIC, entry["name"] or "",
                                                                     topic_ops)
    for entry in create_denied + describe_denied:
        entry["topic_authorized_operations"] = AUTHORIZED_OPERATIONS_OMITTED
    return {
        "throttle_time": 0,
        "brokers": _broker_entries(broker, ctx.listener_name),
        "cluster_id": broker.cluster_id,
        "controller_id": _controller_id(broker),
        "topics": topics_out + create_denied + describe_denied,
        "cluster_authorized_operations": _cluster_operations(
            ctx, req.include_cluster_authorized_operations),
    }


def _cluster_operations(ctx: RequestContext[MetadataServer], requested: bool) -> int:
    """Kafka answers 0 to a principal that may not describe the cluster."""
    if requested and not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, requested)


async def handle_describe_cluster(ctx: RequestContext[MetadataServer], req: KioDescribeClusterRequest) -> dict:
    broker = ctx.broker
    return {
        "throttle_time": 0,
        "error_code": 0,
        "endpoint_type": endpoint_type(req, ctx.api_version),
        "cluster_id": broker.cluster_id,
        "controller_id": _controller_id(broker),
        "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                    for b in _broker_entries(broker, ctx.listener_name)],
        "cluster_authorized_operations": _cluster_operations(ctx, req.include_cluster_authorized_operations),
    }


def handlers() -> dict[int, Handler[MetadataServer]]:
    return {METADATA: handle_metadata, DESCRIBE_CLUSTER: handle_describe_cluster}
