"""A broker's part in a ZooKeeper cluster: the wiring of ``cluster/`` (ZooKeeper, membership),
``controller/`` (when this broker is elected) and ``replication/`` (partitions, fetchers, metadata).

Topic changes a client asks for (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, a
Metadata auto-creation) are written to ZooKeeper in Kafka's layout, as Kafka's AdminZkClient does,
on an executor thread; the controller's watches pick them up and its LeaderAndIsr / UpdateMetadata
requests bring them back to every broker. ``wait_for_metadata`` lets a handler answer once this
broker's metadata shows the change.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tieredlog.clients.node_clients import ListenerSecurity
from tieredlog.clients.routing import inter_broker_endpoint
from tieredlog.cluster import znodes
from tieredlog.cluster.config_changes import notify_topic_config_change
from tieredlog.cluster.membership import ZkClusterMembership
from tieredlog.cluster.znodes import ReplicaAssignment, TopicAssignment
from tieredlog.config import BrokerConfig
from tieredlog.errors import InvalidReplicationFactorError, TopicAlreadyExistsError
from tieredlog.replication.metadata_cache import MetadataCache
from tieredlog.security.sasl.config import inter_broker_credentials
from tieredlog.security.tls_config import inter_broker_client_context

if TYPE_CHECKING:
    from tieredlog.replication.partition import PartitionState  # noqa: F401

log = logging.getLogger(__name__)


STATE_CHANGE_LOG = "state-change.log"


def attach_state_change_log(log_dir: Path) -> logging.Handler:
    """Kafka's state-change.log: every partition and replica state change this broker's controller and
    replica manager make, one line each (the ``state.change.logger`` logger), in the first log dir."""
    handler = logging.FileHandler(log_dir / STATE_CHANGE_LOG, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s"))
    logging.getLogger("state.change.logger").addHandler(handler)
    return handler


def detach_state_change_log(handler: logging.Handler) -> None:
    logging.getLogger("state.change.logger").removeHandler(handler)
    handler.close()


class ClusterNode:
    """Implements ``ControllerLocator`` for the replication layer."""

    def __init__(self, config: BrokerConfig, membership: ZkClusterMembership) -> None:
        self.config = config
        self.membership = membership
        self.broker_id = config.node_id
        self._listener_name: str | None = config.get("inter.broker.listener.name")
        self._security_protocol = str(config.get("security.inter.broker.protocol") or "PLAINTEXT")
        # TLS of this broker's connections to the others (fetchers, controller requests, transaction
        # markers) when the inter-broker listener is SSL or SASL_SSL (BrokerConfigError when its stores
        # cannot be used), and their SASL login when it is SASL_PLAINTEXT or SASL_SSL
        self.inter_broker_security = ListenerSecurity(inter_broker_client_context(config),
                                                      inter_broker_credentials(config))
        self.metadata = MetadataCache()
        self._metadata_changed = asyncio.Event()

    # ---- ControllerLocator ------------------------------------------------------------------------

    def controller_endpoint(self) -> tuple[int, str, int] | None:
        cid = self.membership.controller_id
        if cid is None:
            return None
        info = self.membership.brokers.get(cid)
        if info is None:
            return None
        # the same choice the controller makes to reach brokers
        ep = inter_broker_endpoint(info, self._listener_name, self._security_protocol)
        if ep is None:
            return None
        return cid, ep.host or "127.0.0.1", ep.port

    def inter_broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) this broker uses to send requests to another broker (from its registration)."""
        info = self.membership.brokers.get(broker_id)
        if info is None:
            return None
        ep = inter_broker_endpoint(info, self._listener_name, self._security_protocol)
        return None if ep is None else (ep.host or "127.0.0.1", ep.port)

    def broker_epoch(self) -> int:
        epoch = self.membership.broker_epoch
        return -1 if epoch is None else epoch

    # ---- metadata -----------------------------------------------------------------------------------

    def client_endpoint(self, broker_id: int, listener: str | None = None) -> tuple[int, str, int, str | None] | None:
        """(id, host, port, rack) of a broker on ``listener`` (the one a request came in on: KIP-951
        hints name the leader as that client reaches it), by default the first advertised one."""
        node = self.metadata.brokers.get(broker_id)
        if node is None:
            return None
        hp = node.endpoints.get(listener or self.config.advertised_listeners[0].name)
        return None if hp is None else (broker_id, hp[0], hp[1], node.rack)

    def metadata_updated(self) -> None:
        self._metadata_changed.set()

    async def wait_for_metadata(self, predicate: Callable[[MetadataCache], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(self.metadata)`` holds (True) or ``timeout_s`` passes (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate(self.metadata):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._metadata_changed.clear()
            try:
                await asyncio.wait_for(self._metadata_changed.wait(), remaining)
            except asyncio.TimeoutError:
                return predicate(self.metadata)
        return True

    # ---- ZooKeeper (executor threads only) --------------------------------------------------------

    async def _zk(self, fn: Callable, *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        zk = self.membership.zk

        def read() -> dict[str, dict[str, str]]:
            return {t: zk.get_topic_config(t) for t in topics}

        return await asyncio.get_running_loop().run_in_executor(None, read)

    def assign(self, partitions: int, replication_factor: int, start_partition_id: int = 0) -> dict[int, list[int]]:
        """Replicas for new partitions over the registered brokers (Kafka's assignReplicasToBrokers)."""
        from tieredlog.controller.placement import assign_replicas

        brokers: Mapping[int, str | None] = {b: info.rack for b, info in self.membership.brokers.items()}
        try:
            out = assign_replicas(brokers, partitions, replication_factor)
        except ValueError as exc:
            raise InvalidReplicationFactorError(str(exc)) from None
        return {start_partition_id + p: list(r) for p, r in sorted(out.items())}

    async def create_topic(self, name: str, assignment: dict[int, list[int]], topic_id: uuid.UUID,
                           configs: dict[str, str]) -> None:
        zk = self.membership.zk

        def write() -> None:
            # Kafka's check before the config write: a topic created meanwhile through another broker (an
            # auto-creating Metadata racing a CreateTopics) must not have its configs overwritten
            if zk.exists(znodes.topic_path(name)) is not None:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            # configs first: the brokers read them when the controller announces the topic
            zk.set_topic_config(name, configs)
            zk.create_topic_assignment(name, TopicAssignment.of(assignment, topic_id))

        await asyncio.get_running_loop().run_in_executor(None, write)
        log.info("topic %s written to ZooKeeper: %d partition(s), assignment %s", name, len(assignment), assignment)

    async def delete_topic(self, name: str) -> None:
        await self._zk(self.membership.zk.mark_topic_for_deletion, name)

    async def add_partitions(self, name: str, new_assignment: dict[int, list[int]]) -> None:
        zk = self.membership.zk

        def write() -> None:
            got = zk.get_topic_assignment(name)
            if got is None:
                return
            current, version = got
            parts = dict(current.partitions)
            for p, replicas in new_assignment.items():
                parts.setdefault(p, ReplicaAssignment(tuple(replicas)))
            zk.update_topic_assignment(name, TopicAssignment(parts, current.topic_id), version)

        await asyncio.get_running_loop().run_in_executor(None, write)

    async def set_topic_config(self, name: str, configs: dict[str, str]) -> None:
        zk = self.membership.zk

        def write() -> None:
            zk.set_topic_config(name, configs)
            notify_topic_config_change(zk, name)  # every broker (this one too) applies it to its logs

        await asyncio.get_running_loop().run_in_executor(None, write)
