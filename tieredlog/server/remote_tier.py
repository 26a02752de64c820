"""Assembles the remote tier: the RSM, the RLMM and the RemoteLogManager over the broker's logs
(called once at broker start-up; the only place these parts are built and handed to each other).

Defaults (Kafka's names):
- ``remote.log.storage.system.enable`` = **true** in tieredlog (Kafka: false). False: no RLM, None
  is returned and tiered topics behave as local-only ones.
- ``remote.log.storage.manager.class.name`` unset or ``local``: ``LocalTieredStorage`` rooted at
  ``<first log dir>/remote-storage`` unless ``rsm.config.dir`` says otherwise. Otherwise a short
  name from the ``tieredlog.remote_storage`` entry points (``s3``, ``fsspec``, plugins) or
  ``module:Class``, with ``remote.log.storage.manager.class.path`` folders put on the import path.
  ``configure()`` receives every ``rsm.config.*`` property (prefix stripped) plus ``broker.id``.
- RLMM: ``remote.log.metadata.manager.class.name`` (``tieredlog.rlmm.registry``); by default the
  ``TopicBasedRemoteLogMetadataManager`` over ``__remote_log_metadata`` stored in this broker's own
  logs. It receives what Kafka hands it: the metadata listener's endpoint as
  ``remote.log.metadata.common.client.*``, ``rlmm.config.*``, ``broker.id``, ``log.dir``, ``cluster.id``.
- The RLM leads every hosted tiered partition (one broker) via ``watch_log_manager``.

In a ZooKeeper cluster (``create_cluster_remote_log_manager``):
- ``__remote_log_metadata`` is an ordinary replicated topic, created through the controller with
  ``remote.log.metadata.topic.replication.factor`` replicas (fewer, with a warning, when fewer brokers
  are registered) the first time a broker needs it; the RLMM reads and writes it as a Kafka client
  of each partition's leader (``ReplicatedMetadataTopic``), so it follows leadership like any client.
- The RLM follows the replica manager: copy and expiration tasks for the partitions this broker
  leads, follower tasks for the others, a follower rebuilding from the remote tier reads through it.
- StopReplica stops a partition's tasks. A deleted topic's remote data is removed by the
  ``RemotePartitionRemover``: the controller marks each partition DELETE_PARTITION_MARKED once every
  replica has stopped, and the leader of the matching ``__remote_log_metadata`` partition deletes it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from tieredlog.clients.node_clients import ListenerSecurity
from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.errors import TopicAlreadyExistsError
from tieredlog.log.types import TopicPartition
from tieredlog.replication.metadata_topic_client import ReplicatedMetadataTopic
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlm.partition_remover import RemotePartitionRemover
from tieredlog.rlmm.api import RemoteLogMetadataManager
from tieredlog.rlmm.registry import CLASS_NAME_CONFIG as RLMM_CLASS_NAME_CONFIG
from tieredlog.rlmm.registry import CLASS_PATH_CONFIG as RLMM_CLASS_PATH_CONFIG
from tieredlog.rlmm.registry import client_configs, is_topic_based, load_remote_log_metadata_manager, rlmm_configs
from tieredlog.rlmm.topic import LogMetadataTopic
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager, TopicBasedRlmmConfig
from tieredlog.rsm.api import RemoteStorageManager
from tieredlog.rsm.registry import load_remote_storage_manager
from tieredlog.server.produce_api import INTERNAL_TOPICS_CLIENT_ID

if TYPE_CHECKING:
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.rlm.contracts import LogProvider
    from tieredlog.rlm.partition_remover import RemotePartitionRemover
    from tieredlog.security.sasl.client import SaslClientCredentials
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.topic_store import TopicMetadata

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"


class RemoteTierServer(Protocol):
    """What assembling the remote tier needs of the broker: its config and identity, its logs and
    replicas, its topic table (the metadata topic is one of them), and the hooks it registers."""

    remote_partition_remover: RemotePartitionRemover | None

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    @property
    def log_manager(self) -> LogProvider | None: ...  # None until the broker's logs are loaded

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def topic_config_listeners(self) -> list[Callable[[str], None]]: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str] | None = None,
                     assignment: dict[int, list[int]] | None = None) -> TopicMetadata: ...

    def create_internal_topic(self, name: str, partitions: int,
                              configs: dict[str, str] | None = None) -> TopicMetadata: ...

    async def topics_durable(self, wait_s: float = 10.0) -> None: ...


def build_rsm(cfg: RemoteLogManagerConfig) -> RemoteStorageManager:
    name = cfg.rsm_class_name
    configs: dict[str, Any] = dict(cfg.rsm_configs)
    configs["broker.id"] = cfg.broker_id
    if not name or name == "local":
        configs.setdefault("dir", str(Path(cfg.first_log_dir) / "remote-storage"))
    return load_remote_storage_manager(name or "local", cfg.rsm_class_path, configs)


def rlmm_configs_for(broker: RemoteTierServer, cfg: RemoteLogManagerConfig) -> dict[str, Any]:
    """What the RLMM's ``configure()`` receives, as Kafka hands it (``tieredlog.rlmm.registry.rlmm_configs``):
    the metadata clients' listener as ``remote.log.metadata.common.client.bootstrap.servers`` and
    ``.security.protocol``, the ``rlmm.config.*`` properties, ``broker.id``, ``log.dir``, ``cluster.id``."""
    name, _ = metadata_client_listener(broker.config, tls=False)
    endpoint = next(l for l in broker.config.advertised_listeners if l.name == name)
    return rlmm_configs(cfg.rlmm_configs, broker_id=cfg.broker_id, log_dir=cfg.first_log_dir,
                        cluster_id=broker.cluster_id or "",
                        bootstrap_servers=f"{endpoint.host or '127.0.0.1'}:{endpoint.port}",
                        security_protocol=endpoint.security_protocol)


def plugin_rlmm(broker: RemoteTierServer, configs: dict[str, Any]) -> RemoteLogMetadataManager | None:
    """The configured RLMM when it is not the topic-based one (which needs the broker's metadata topic
    and is built by the callers); PluginLoadError, one line, when it cannot be loaded or configured."""
    name = str(broker.config.get(RLMM_CLASS_NAME_CONFIG) or "")
    if is_topic_based(name):
        return None
    class_path = broker.config.get(RLMM_CLASS_PATH_CONFIG)
    rlmm = load_remote_log_metadata_manager(name, str(class_path) if class_path else None, configs)
    log.info("remote log metadata manager: %s", type(rlmm).__name__)
    return rlmm


def _loaded_logs(broker: RemoteTierServer) -> LogProvider:
    # the remote tier is built on the broker's start-up path, after its logs load
    logs = broker.log_manager
    assert logs is not None
    return logs


def stage_metadata_topic(broker: RemoteTierServer, cfg: RemoteLogManagerConfig | None = None) -> None:
    """Alone, with the topic-based RLMM: create ``__remote_log_metadata`` when missing. Its logs exist
    once the caller awaited ``broker.topics_durable()``."""
    cfg = cfg or RemoteLogManagerConfig.from_broker_config(broker.config)
    if not cfg.system_enable or not is_topic_based(str(broker.config.get(RLMM_CLASS_NAME_CONFIG) or "")):
        return
    rcfg = TopicBasedRlmmConfig.from_configs(rlmm_configs_for(broker, cfg))
    topic_configs = {"retention.ms": str(rcfg.retention_ms), "cleanup.policy": "delete", "remote.storage.enable": "false"}
    broker.create_internal_topic(METADATA_TOPIC, rcfg.num_partitions, topic_configs)


def build_rlmm(broker: RemoteTierServer, cfg: RemoteLogManagerConfig) -> RemoteLogMetadataManager:
    configs = rlmm_configs_for(broker, cfg)
    plugin = plugin_rlmm(broker, configs)
    if plugin is not None:
        return plugin
    rcfg = TopicBasedRlmmConfig.from_configs(configs)
    # created by stage_metadata_topic on the broker's start-up path (its logs made off the loop), so the
    # RLMM's loader thread never has to mutate the broker's topic table; it only reads the partition count
    stage_metadata_topic(broker, cfg)

    def create_topic(name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> int:
        t = broker.get_topic(name)
        return t.partitions if t is not None else broker.create_internal_topic(name, partitions, configs).partitions

    topic = LogMetadataTopic(_loaded_logs(broker), create_topic, replication_factor=1, retention_ms=rcfg.retention_ms)
    return TopicBasedRemoteLogMetadataManager(topic, configs)


def create_remote_log_manager(broker: RemoteTierServer) -> RemoteLogManager | None:
    """The broker's RLM, started and leading its tiered partitions; None if tiering is disabled."""
    cfg = RemoteLogManagerConfig.from_broker_config(broker.config)
    if not cfg.system_enable:
        log.info("remote.log.storage.system.enable=false: no remote tier")
        return None
    rsm = build_rsm(cfg)
    rlmm = build_rlmm(broker, cfg)
    rlm = RemoteLogManager(cfg, _loaded_logs(broker), rsm, rlmm)
    rlm.start()
    rlm.watch_log_manager()
    log.info(
        "remote log manager started: rsm=%s, task interval %d ms, %d copier / %d reader threads",
        type(rsm).__name__, cfg.task_interval_ms, cfg.effective_copier_threads, cfg.reader_threads,
    )
    return rlm


def metadata_client_listener(config: BrokerConfig, tls: bool = True) -> tuple[str, ssl.SSLContext | None]:
    """The listener the RLMM's clients reach the leaders of __remote_log_metadata on
    (``remote.log.metadata.manager.listener.name``, else the first advertised one, as clients see the
    brokers) and, with ``tls``, their TLS context when that listener is SSL or SASL_SSL."""
    from tieredlog.security.tls import TLS_PROTOCOLS
    from tieredlog.security.tls_config import listener_client_context

    name = str(config.get("remote.log.metadata.manager.listener.name") or "").strip().upper()
    listeners = {l.name: l.security_protocol for l in config.advertised_listeners}
    if not name:
        name = config.advertised_listeners[0].name
    elif name not in listeners:
        raise BrokerConfigError(f"remote.log.metadata.manager.listener.name {name} is not one of the advertised "
                                f"listeners {','.join(listeners)}")
    protocol = listeners[name]
    return name, listener_client_context(config, name, protocol) if tls and protocol in TLS_PROTOCOLS else None


def metadata_client_credentials(config: BrokerConfig, listener: str) -> SaslClientCredentials | None:
    """The RLMM clients' SASL login when their listener is SASL: the broker's own, as on the inter-broker
    listener (``sasl.mechanism.inter.broker.protocol`` and that mechanism's JAAS username / password)."""
    from tieredlog.security.sasl.config import listener_client_credentials

    protocol = next(l.security_protocol for l in config.advertised_listeners if l.name == listener)
    return listener_client_credentials(config, listener, protocol, "the __remote_log_metadata clients")


class BrokerMetadataTopicRouting:
    """``MetadataTopicRouting`` over a cluster member: leaders from its metadata cache, the topic
    created through ZooKeeper on the broker's event loop."""

    def __init__(self, broker: RemoteTierServer, loop: asyncio.AbstractEventLoop, replication_factor: int,
                 timeout_s: float, listener: str | None = None) -> None:
        self._broker = broker
        self._loop = loop
        self._replication_factor = replication_factor
        self._timeout_s = timeout_s
        self._listener = listener or broker.config.advertised_listeners[0].name

    def leader_endpoint(self, partition: int) -> tuple[str, int] | None:
        node = self._broker.cluster_node
        assert node is not None
        pm = node.metadata.partition(METADATA_TOPIC, partition)
        if pm is None or pm.leader < 0:
            return None
        return node.metadata.endpoint(pm.leader, self._listener)

    def create_topic(self, num_partitions: int, configs: dict[str, str]) -> int:
        # the RLMM's loader thread: the topic table and ZooKeeper writes belong to the event loop
        return asyncio.run_coroutine_threadsafe(self._create(num_partitions, configs), self._loop).result(
            self._timeout_s + 5)

    async def _create(self, num_partitions: int, configs: dict[str, str]) -> int:
        broker = self._broker
        node = broker.cluster_node
        assert node is not None
        if broker.get_topic(METADATA_TOPIC) is None:
            live = len(node.membership.brokers)
            rf = min(self._replication_factor, max(live, 1))
            try:
                broker.create_topic(METADATA_TOPIC, num_partitions, rf, configs)
                await broker.topics_durable(wait_s=0)
                if rf < self._replication_factor:
                    log.warning("%s is created with replication factor %d: only %d broker(s) are registered "
                                "(remote.log.metadata.topic.replication.factor=%d); the controller raises it "
                                "once enough brokers are", METADATA_TOPIC, rf, live, self._replication_factor)
            except TopicAlreadyExistsError:
                pass  # another broker created it first

        def led(md: Any) -> bool:
            entry = md.topics.get(METADATA_TOPIC)
            return entry is not None and bool(entry.partitions) and all(
                pm.leader >= 0 for pm in entry.partitions.values())

        if not await node.wait_for_metadata(led, self._timeout_s):
            raise TimeoutError(f"{METADATA_TOPIC} has partitions without a leader")
        return len(node.metadata.topics[METADATA_TOPIC].partitions)


def cluster_topic_based_rlmm(broker: RemoteTierServer, configs: dict[str, Any]) -> TopicBasedRemoteLogMetadataManager:
    """The topic-based RLMM of a cluster member: a Kafka client of the leaders of __remote_log_metadata
    on the metadata listener, with that listener's TLS / SASL; ``request.timeout.ms`` of the merged
    ``remote.log.metadata.common.client.*`` / ``.producer.*`` properties, else the broker's."""
    rcfg = TopicBasedRlmmConfig.from_configs(configs)
    producer_configs, _ = client_configs(configs)
    timeout_s = int(str(producer_configs.get("request.timeout.ms") or broker.config["request.timeout.ms"])) / 1000
    listener, ssl_context = metadata_client_listener(broker.config)
    routing = BrokerMetadataTopicRouting(broker, asyncio.get_running_loop(), rcfg.replication_factor, timeout_s,
                                         listener)
    # the one client id Kafka lets append to internal topics
    topic = ReplicatedMetadataTopic(routing, client_id=INTERNAL_TOPICS_CLIENT_ID, request_timeout_s=timeout_s,
                                    retention_ms=rcfg.retention_ms, security=ListenerSecurity(
                                        ssl_context, metadata_client_credentials(broker.config, listener)))
    return TopicBasedRemoteLogMetadataManager(topic, configs)


def create_cluster_remote_log_manager(broker: RemoteTierServer) -> RemoteLogManager | None:
    """The RLM of a cluster member, following its replica manager; None if tiering is disabled."""
    cfg = RemoteLogManagerConfig.from_broker_config(broker.config)
    if not cfg.system_enable:
        log.info("remote.log.storage.system.enable=false: no remote tier")
        return None
    rm = broker.replica_manager
    assert rm is not None
    configs = rlmm_configs_for(broker, cfg)
    rlmm = plugin_rlmm(broker, configs) or cluster_topic_based_rlmm(broker, configs)
    rlm = RemoteLogManager(cfg, _loaded_logs(broker), build_rsm(cfg), rlmm)
    rlm.start()
    # a deleted topic's remote data: the topic-based manager's, from __remote_log_metadata; a plugin
    # manager keeps its metadata elsewhere and deletes it as it sees fit
    remover = (RemotePartitionRemover(rlmm, rlm.lifecycle, rlm.expirer, cfg.task_interval_ms)
               if isinstance(rlmm, TopicBasedRemoteLogMetadataManager) else None)

    def on_leadership(tp: TopicPartition, is_leader: bool, _leader_epoch: int) -> None:
        if tp.topic == METADATA_TOPIC:
            if remover is not None:
                remover.on_metadata_leadership(tp.partition, is_leader)
        elif is_leader:
            rlm.on_leadership_change([tp], ())
        else:
            rlm.on_leadership_change((), [tp])

    def on_stop(tp: TopicPartition, _replicas: tuple[int, ...], _delete: bool) -> None:
        # a deleted topic's remote data is the remover's, once the controller has seen every replica stop
        if tp.topic != METADATA_TOPIC:
            rlm.stop_partitions([tp])
        elif remover is not None:
            remover.on_metadata_leadership(tp.partition, False)

    def on_topic_configs(topic: str) -> None:
        # remote.storage.enable may have just become known (a log loaded before its topic) or set
        for p in list(rm.partitions.values()):
            if p.tp.topic == topic:
                on_leadership(p.tp, p.is_leader, p.leader_epoch)

    rm.leadership_listeners.append(on_leadership)
    broker.topic_config_listeners.append(on_topic_configs)
    rm.stop_listeners.append(on_stop)
    rm.remote_aux = rlm
    broker.remote_partition_remover = remover
    # partitions the controller assigned before the RLM existed (the replica manager starts first)
    for p in list(rm.partitions.values()):
        on_leadership(p.tp, p.is_leader, p.leader_epoch)
    log.info("remote log manager started (cluster): rsm=%s, task interval %d ms", type(rlm.rsm).__name__,
             cfg.task_interval_ms)
    return rlm
