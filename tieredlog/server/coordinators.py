"""Assembles the group and transaction coordinators (called once at broker start-up; the only place
their parts are built and handed to each other).

- Settings: the broker config's group.* / offsets.* keys (`GroupConfig.from_properties`).
- Store: alone, `__consumer_offsets` in this broker's own logs (`LogGroupStore.open`: created with
  Kafka's configs when missing, an existing topic keeps its partition count). The Broker is what the
  coordinator's `CoordinatorBroker` protocol asks for. In a cluster, `ReplicatedGroupStore`: appends
  through the ReplicaManager (`OffsetsTopicReplicas`) at the partition's leader epoch, answers after
  the ISR has them (offsets.commit.timeout.ms).
- Leadership (a cluster): the ReplicaManager's leadership listener tells the coordinator which
  `__consumer_offsets` partitions this broker leads (`on_elected` / `on_resigned`).
- FindCoordinator (a cluster): `CoordinatorLocator` answers with the leader of the key's partition
  from the metadata cache, and creates `__consumer_offsets` / `__transaction_state` through ZooKeeper
  on first use.
- The transaction coordinator: its store is `__transaction_state` (the same log store, another
  topic), producer ids come from the broker's ProducerIdManager, markers go to the partitions'
  leaders (alone: appended here).
- Timers: the asyncio loop (`LoopScheduler`), no threads.
- Consumer-protocol subscriptions: `consumer_protocol.subscribed_topics` (kio's schemas behind the
  request guard).
The Broker then awaits `start()` (alone: loads the store) and, on stop, `shutdown()`.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.schema import partition_for
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore, ReplicatedGroupStore, offsets_topic_configs
from tieredlog.coordinator.timer import LoopScheduler
from tieredlog.coordinator.transaction.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TransactionConfig,
    TransactionCoordinator,
)
from tieredlog.errors import TopicAlreadyExistsError
from tieredlog.log.types import TopicPartition
from tieredlog.server.consumer_protocol import ConsumerProtocolCodec, subscribed_topics
from tieredlog.server.txn_markers import ClusterMarkerServer, ClusterMarkerWriter, LocalMarkerWriter

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.producer_ids import ProducerIdManager
    from tieredlog.server.topic_store import TopicMetadata

log = logging.getLogger(__name__)

# A creation written to ZooKeeper shows in the metadata within a moment; one that has not after this
# long (a controller failover lost it, say) may be tried again.
_CREATE_RETRY_S = 10.0


class TopicSpecServer(Protocol):
    """What an internal topic's settings need of the broker: its config."""

    @property
    def config(self) -> BrokerConfig: ...


class LocatorServer(TopicSpecServer, Protocol):
    """What finding (or, in a cluster, creating) a coordinator's topic needs of the broker."""

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str] | None = None,
                     assignment: dict[int, list[int]] | None = None) -> TopicMetadata: ...

    async def topics_durable(self, wait_s: float = 10.0) -> None: ...


class CoordinatorsServer(LocatorServer, ClusterMarkerServer, Protocol):
    """What assembling the coordinators needs of the broker: the host of their topics (the group
    coordinator's CoordinatorBroker), the producer ids, and the markers' way to the partitions."""

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...

    @property
    def producer_ids(self) -> ProducerIdManager | None: ...

    def create_internal_topic(self, name: str, partitions: int,
                              configs: dict[str, str] | None = None) -> TopicMetadata: ...


def _topics_view(broker: CoordinatorsServer) -> Callable[[], dict[str, tuple[uuid.UUID, int]]]:
    """What KIP-848 assignment needs of the broker's topics: id and partition count by name."""
    return lambda: {name: (t.topic_id, t.partitions) for name, t in broker.topics.items() if t.topic_id is not None}


def create_group_coordinator(broker: CoordinatorsServer) -> GroupCoordinator:
    config = GroupConfig.from_properties(broker.config)
    coordinator = GroupCoordinator(config, LoopScheduler(), LogGroupStore.open(broker, config),
                                   subscriptions=subscribed_topics, protocol=ConsumerProtocolCodec())
    coordinator.consumer.topics = _topics_view(broker)
    return coordinator


def create_cluster_group_coordinator(broker: CoordinatorsServer) -> GroupCoordinator:
    """The coordinator of a cluster member: it serves the groups of the `__consumer_offsets` partitions
    this broker leads, following the ReplicaManager's leadership changes."""
    config = GroupConfig.from_properties(broker.config)
    rm = broker.replica_manager
    assert rm is not None, "the replica manager is made before the coordinator"
    store = ReplicatedGroupStore(
        lambda p: broker.get_partition_log(OFFSETS_TOPIC, p), config.offsets_topic_num_partitions, rm,
        commit_timeout_ms=broker.config["offsets.commit.timeout.ms"], on_appended=broker.append_watchers.notify)
    coordinator = GroupCoordinator.for_cluster(config, LoopScheduler(), store, subscriptions=subscribed_topics,
                                               protocol=ConsumerProtocolCodec())
    coordinator.consumer.topics = _topics_view(broker)

    def on_leadership(tp: TopicPartition, is_leader: bool, leader_epoch: int) -> None:
        if tp.topic != OFFSETS_TOPIC:
            return
        topic = broker.get_topic(OFFSETS_TOPIC)
        if topic is not None:
            # the group -> partition mapping follows the topic as it exists, not the config
            store.num_partitions = topic.partitions
        if is_leader:
            coordinator.on_elected(tp.partition, leader_epoch)
        else:
            coordinator.on_resigned(tp.partition, leader_epoch)

    rm.leadership_listeners.append(on_leadership)
    return coordinator


@dataclass(frozen=True)
class InternalTopicSpec:
    """How a coordinator's internal topic is created on first use in a cluster."""

    topic: str
    num_partitions: int
    replication_factor: int
    replication_factor_config: str  # named in the warning while too few brokers are registered
    configs: dict[str, str]


def offsets_topic_spec(broker: TopicSpecServer) -> InternalTopicSpec:
    config = GroupConfig.from_properties(broker.config)
    return InternalTopicSpec(OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                             broker.config["offsets.topic.replication.factor"], "offsets.topic.replication.factor",
                             offsets_topic_configs(config))


def transaction_state_topic_spec(broker: TopicSpecServer) -> InternalTopicSpec:
    c = broker.config
    return InternalTopicSpec(TRANSACTION_STATE_TOPIC, c["transaction.state.log.num.partitions"],
                             c["transaction.state.log.replication.factor"], "transaction.state.log.replication.factor",
                             transaction_state_topic_configs(broker))


def transaction_state_topic_configs(broker: TopicSpecServer) -> dict[str, str]:
    """Kafka's configs for the transaction log: compacted, unclean election off, its own min ISR."""
    c = broker.config
    return {"cleanup.policy": "compact", "segment.bytes": str(c["transaction.state.log.segment.bytes"]),
            "min.insync.replicas": str(c["transaction.state.log.min.isr"]), "unclean.leader.election.enable": "false"}


class CoordinatorLocator:
    """FindCoordinator in a cluster, as Kafka's ZooKeeper-mode KafkaApis: the coordinator of a group
    (or a transactional id) is the leader of its partition of `__consumer_offsets` (or
    `__transaction_state`) in this broker's metadata cache. A missing topic is created through
    ZooKeeper (Broker.create_topic, then the controller) with the configured partitions and
    replicas, never with fewer replicas: until enough brokers are registered, and until the
    partition has a leader, the answer is COORDINATOR_NOT_AVAILABLE."""

    def __init__(self, broker: LocatorServer, spec: InternalTopicSpec) -> None:
        self._broker = broker
        self._spec = spec
        self._create_started: float | None = None  # time.monotonic() of the last creation attempt
        self._warned_live: int | None = None  # the broker count last warned about (clients ask every second)

    async def find(self, key: str, listener: str | None = None) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the key's coordinator, on ``listener`` (the request's)."""
        broker = self._broker
        node = broker.cluster_node
        assert node is not None
        name = self._spec.topic
        topic = broker.get_topic(name)
        entry = node.metadata.topics.get(name)
        if topic is None or entry is None:
            await self._create()
            return ErrorCode.coordinator_not_available, -1, "", -1
        pm = node.metadata.partition(name, partition_for(key, topic.partitions))
        if pm is None or pm.leader < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1
        # the request's listener, as Metadata answers name the brokers
        endpoint = node.metadata.endpoint(pm.leader, listener or broker.config.advertised_listeners[0].name)
        if endpoint is None:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return ErrorCode.none, pm.leader, endpoint[0], endpoint[1]

    async def _create(self) -> None:
        started = self._create_started
        if started is not None and time.monotonic() - started < _CREATE_RETRY_S:
            return  # written already (here): waiting for the controller to announce it
        broker = self._broker
        node = broker.cluster_node
        assert node is not None
        spec = self._spec
        rf = spec.replication_factor
        live = len(node.membership.brokers)
        if live < rf:
            if live == self._warned_live:
                return
            self._warned_live = live
            log.warning("Number of alive brokers '%d' does not meet the required replication factor '%d' for the "
                        "%s topic (configured via '%s'). This error can be ignored if the cluster is starting up "
                        "and not all brokers are up yet.", live, rf, spec.topic, spec.replication_factor_config)
            return
        self._create_started = time.monotonic()
        try:
            # staged and written back to back, with no await between: no other handler's topic change
            # rides along (Broker.topics_durable writes every staged change)
            broker.create_topic(spec.topic, spec.num_partitions, rf, spec.configs)
            # Kafka answers COORDINATOR_NOT_AVAILABLE at once; the client asks again
            await broker.topics_durable(wait_s=0)
        except TopicAlreadyExistsError:
            pass  # another broker created it first: the controller announces it
        except Exception as exc:  # noqa: BLE001 - ZooKeeper down, say: the next FindCoordinator tries again
            self._create_started = None
            log.warning("could not create %s: %s", spec.topic, exc)


# -- the transaction coordinator ------------------------------------------------------------------------


def _producer_id_source(broker: CoordinatorsServer):  # noqa: ANN202 - an async () -> int
    async def next_producer_id() -> int:
        producer_ids = broker.producer_ids
        assert producer_ids is not None, "made at start-up, before any coordinator"
        return await producer_ids.next_producer_id()

    return next_producer_id


def create_transaction_coordinator(broker: CoordinatorsServer) -> TransactionCoordinator:
    """A broker alone: `__transaction_state` in its own logs (created with Kafka's configs when
    missing; an existing topic keeps its partition count), every partition loaded at start-up."""
    config = TransactionConfig.from_properties(broker.config)
    # alone the ISR is this broker: a min ISR of 2 would only count every partition under-replicated
    configs = {**transaction_state_topic_configs(broker), "min.insync.replicas": "1"}
    topic = broker.create_internal_topic(TRANSACTION_STATE_TOPIC, config.num_partitions, configs)
    store = LogGroupStore(lambda p: broker.get_partition_log(TRANSACTION_STATE_TOPIC, p), topic.partitions,
                          topic=TRANSACTION_STATE_TOPIC)
    return TransactionCoordinator(config, LoopScheduler(), store, _producer_id_source(broker), LocalMarkerWriter(broker),
                                  partition_exists=lambda tp: broker.get_partition_log(*tp) is not None)


def create_cluster_transaction_coordinator(broker: CoordinatorsServer) -> TransactionCoordinator:
    """A cluster member's coordinator: the transactional ids of the `__transaction_state` partitions
    this broker leads, at their leader epoch as coordinator epoch; markers to every partition's leader."""
    config = TransactionConfig.from_properties(broker.config)
    rm = broker.replica_manager
    assert rm is not None, "the replica manager is made before the coordinator"
    store = ReplicatedGroupStore(
        lambda p: broker.get_partition_log(TRANSACTION_STATE_TOPIC, p), config.num_partitions, rm,
        commit_timeout_ms=broker.config["request.timeout.ms"], on_appended=broker.append_watchers.notify,
        topic=TRANSACTION_STATE_TOPIC)

    def partition_exists(tp: tuple[str, int]) -> bool:
        node = broker.cluster_node
        return node is not None and node.metadata.partition(*tp) is not None

    coordinator = TransactionCoordinator(config, LoopScheduler(), store, _producer_id_source(broker),
                                         ClusterMarkerWriter(broker), cluster=True, partition_exists=partition_exists)

    def on_leadership(tp: TopicPartition, is_leader: bool, leader_epoch: int) -> None:
        if tp.topic != TRANSACTION_STATE_TOPIC:
            return
        topic = broker.get_topic(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            store.num_partitions = topic.partitions  # the id -> partition mapping follows the topic as it is
        if is_leader:
            coordinator.on_elected(tp.partition, leader_epoch)
        else:
            coordinator.on_resigned(tp.partition, leader_epoch)

    rm.leadership_listeners.append(on_leadership)
    return coordinator
