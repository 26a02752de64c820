"""Assembles the group coordinator (called once at broker start-up; the only place its parts are
built and handed to each other).

- Settings: the broker config's group.* / offsets.* keys (`GroupConfig.from_properties`).
- Store: alone, `__consumer_offsets` in this broker's own logs (`LogGroupStore.open`: created with
  Kafka's configs when missing, an existing topic keeps its partition count). The Broker is what the
  coordinator's `CoordinatorBroker` protocol asks for. In a cluster, `ReplicatedGroupStore`: appends
  through the ReplicaManager (`OffsetsTopicReplicas`) at the partition's leader epoch, answers after
  the ISR has them (offsets.commit.timeout.ms).
- Leadership (a cluster): the ReplicaManager's leadership listener tells the coordinator which
  `__consumer_offsets` partitions this broker leads (`on_elected` / `on_resigned`).
- FindCoordinator (a cluster): `GroupCoordinatorLocator` answers with the leader of the group's
  partition from the metadata cache, and creates `__consumer_offsets` through ZooKeeper on first use.
- Timers: the asyncio loop (`LoopScheduler`), no threads.
- Consumer-protocol subscriptions: `consumer_protocol.subscribed_topics` (kio's schemas behind the
  request guard).
The Broker then awaits `start()` (alone: loads the store) and, on stop, `shutdown()`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.schema import partition_for
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore, ReplicatedGroupStore, offsets_topic_configs
from tieredlog.coordinator.timer import LoopScheduler
from tieredlog.errors import TopicAlreadyExistsError
from tieredlog.log.types import TopicPartition
from tieredlog.server.consumer_protocol import subscribed_topics

if TYPE_CHECKING:
    from tieredlog.server.broker import Broker

log = logging.getLogger(__name__)

# A creation written to ZooKeeper shows in the metadata within a moment; one that has not after this
# long (a controller failover lost it, say) may be tried again.
_CREATE_RETRY_S = 10.0


def create_group_coordinator(broker: Broker) -> GroupCoordinator:
    config = GroupConfig.from_properties(broker.config)
    return GroupCoordinator(config, LoopScheduler(), LogGroupStore.open(broker, config), subscriptions=subscribed_topics)


def create_cluster_group_coordinator(broker: Broker) -> GroupCoordinator:
    """The coordinator of a cluster member: it serves the groups of the `__consumer_offsets` partitions
    this broker leads, following the ReplicaManager's leadership changes."""
    config = GroupConfig.from_properties(broker.config)
    rm = broker.replica_manager
    assert rm is not None, "the replica manager is made before the coordinator"
    store = ReplicatedGroupStore(
        lambda p: broker.get_partition_log(OFFSETS_TOPIC, p), config.offsets_topic_num_partitions, rm,
        commit_timeout_ms=broker.config["offsets.commit.timeout.ms"], on_appended=broker.append_watchers.notify)
    coordinator = GroupCoordinator.for_cluster(config, LoopScheduler(), store, subscriptions=subscribed_topics)

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


class GroupCoordinatorLocator:
    """FindCoordinator for groups in a cluster, as Kafka's ZooKeeper-mode KafkaApis: the coordinator of
    a group is the leader of its `__consumer_offsets` partition in this broker's metadata cache. A
    missing topic is created through ZooKeeper (Broker.create_topic, then the controller) with
    offsets.topic.num.partitions partitions and offsets.topic.replication.factor replicas, never with
    fewer replicas: until enough brokers are registered, and until the partition has a leader, the
    answer is COORDINATOR_NOT_AVAILABLE."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._create_started: float | None = None  # time.monotonic() of the last creation attempt
        self._warned_live: int | None = None  # the broker count last warned about (clients ask every second)

    async def find(self, group_id: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the group's coordinator."""
        broker = self._broker
        node = broker.cluster_node
        assert node is not None
        topic = broker.get_topic(OFFSETS_TOPIC)
        entry = node.metadata.topics.get(OFFSETS_TOPIC)
        if topic is None or entry is None:
            await self._create()
            return ErrorCode.coordinator_not_available, -1, "", -1
        pm = node.metadata.partition(OFFSETS_TOPIC, partition_for(group_id, topic.partitions))
        if pm is None or pm.leader < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1
        # the listener this broker advertises first, as its Metadata answers name the brokers
        endpoint = node.metadata.endpoint(pm.leader, broker.config.advertised_listeners[0].name)
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
        config = GroupConfig.from_properties(broker.config)
        rf = broker.config["offsets.topic.replication.factor"]
        live = len(node.membership.brokers)
        if live < rf:
            if live == self._warned_live:
                return
            self._warned_live = live
            log.warning("Number of alive brokers '%d' does not meet the required replication factor '%d' for the "
                        "offsets topic (configured via 'offsets.topic.replication.factor'). This error can be "
                        "ignored if the cluster is starting up and not all brokers are up yet.", live, rf)
            return
        self._create_started = time.monotonic()
        try:
            # staged and written back to back, with no await between: no other handler's topic change
            # rides along (Broker.topics_durable writes every staged change)
            broker.create_topic(OFFSETS_TOPIC, config.offsets_topic_num_partitions, rf, offsets_topic_configs(config))
            # Kafka answers COORDINATOR_NOT_AVAILABLE at once; the client asks again
            await broker.topics_durable(wait_s=0)
        except TopicAlreadyExistsError:
            pass  # another broker created it first: the controller announces it
        except Exception as exc:  # noqa: BLE001 - ZooKeeper down, say: the next FindCoordinator tries again
            self._create_started = None
            log.warning("could not create %s: %s", OFFSETS_TOPIC, exc)
