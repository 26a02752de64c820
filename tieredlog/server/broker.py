"""The Broker: one node's state shared by every request handler.

Owns the LogManager, the topic metadata, producer-id allocation, and the optional group coordinator
and RemoteLogManager. Handlers reach it through ``RequestContext.broker``, each as the ``Protocol`` of
what it uses; no module but the wiring (main, dispatcher) imports this one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable

from kio.schema.errors import ErrorCode

from tieredlog.atomic_file import atomic_write
from tieredlog.clients.node_clients import PLAINTEXT
from tieredlog.cluster.config_changes import ConfigChangeListener
from tieredlog.cluster.membership import ZkClusterConfig, ZkClusterMembership
from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.controller.config import ControllerConfig
from tieredlog.controller.controller import KafkaController
from tieredlog.controller.topic_deletion import DeletedTopic
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.transaction.coordinator import TransactionCoordinator
from tieredlog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.log.config import ConfigError, LogConfig, validate_topic_config_change
from tieredlog.log.log_manager import LogManager, topics_in_log_dirs
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.replication.controller_channel import AlterPartitionManager, ControllerChannel
from tieredlog.replication.delayed_fetch import PartitionWatchers
from tieredlog.replication.fetcher import FetcherConfig
from tieredlog.replication.replica_manager import ReplicaManager
from tieredlog.replication.replica_selector import replica_selector
from tieredlog.security.authorizer import AclAuthorizer, create_authorizer
from tieredlog.security.authorizer.file_store import AclFileError
from tieredlog.server import dynamic_config
from tieredlog.server.broker_metrics import BrokerMetrics, MetricsEndpoint, start_metrics_endpoint
from tieredlog.server.cluster_node import ClusterNode, attach_state_change_log, detach_state_change_log
from tieredlog.server.coordinators import (
    create_cluster_group_coordinator,
    create_cluster_transaction_coordinator,
    create_group_coordinator,
    create_transaction_coordinator,
)
from tieredlog.server.dynamic_config import DynamicBrokerConfig
from tieredlog.server.fetch_session import FetchSessionCache
from tieredlog.server.log_cleaner_config import cleaner_config_of
from tieredlog.server.producer_ids import ProducerIdManager
from tieredlog.server.topic_store import TopicMetadata, TopicStore, collision_key, validate_topic_name
from tieredlog.server.txn_verification import AddPartitionsToTxnManager, VerificationGuards

if TYPE_CHECKING:
    from tieredlog.replication.metadata_cache import MetadataCache
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.partition_remover import RemotePartitionRemover
    from tieredlog.security.sasl.config import ListenerSasl
    from tieredlog.security.scram_store import ScramCredentialStore

log = logging.getLogger(__name__)

def _load_cluster_id(log_dir: Path, node_id: int, configured: str | None) -> str:
    """Kafka keeps cluster.id in meta.properties in every log dir; we do the same."""
    meta = log_dir / "meta.properties"
    if meta.exists():
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()

    cid = configured or uuid_to_kafka_str(uuid.uuid4())
    atomic_write(meta, f"version=1\ncluster.id={cid}\nnode.id={node_id}\n".encode())
    return cid


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        adv = config.advertised_listeners[0]
        self.advertised_host = adv.host or "127.0.0.1"
        self.advertised_port = adv.port
        self.log_dirs = [Path(p) for p in config.log_dirs]
        self.default_log_config: LogConfig = config.default_log_config()
        # server.properties stays in dynamic_config.static; self.config is it with the dynamic levels on top
        self.dynamic_config = DynamicBrokerConfig(config, self.node_id)
        self.topics: dict[str, TopicMetadata] = {}
        self.topics_by_id: dict[uuid.UUID, TopicMetadata] = {}
        self.log_manager: LogManager | None = None  # made by start(), from the topics' configs
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        # KIP-890 part 1: partition leaders verify a transaction's first batch with its coordinator
        self.txn_guards = VerificationGuards()
        self.txn_verification = AddPartitionsToTxnManager(self)
        self.remote_log_manager: RemoteLogManager | None = None  # None = no remote tier
        # in a cluster: deletes the remote data of deleted topics (set with the cluster's RLM)
        self.remote_partition_remover: RemotePartitionRemover | None = None
        self.append_watchers = PartitionWatchers()
        # told (on the event loop) after a topic's logs took new configs: the remote tier in a cluster
        self.topic_config_listeners: list[Callable[[str], None]] = []
        self.cluster_id = ""
        # set when zookeeper.connect is: registration, controller election, the live brokers
        self.cluster: ZkClusterMembership | None = None
        self.cluster_node: ClusterNode | None = None  # the replication side of a cluster member
        # in a cluster, the configs of the topics found on disk, read before their logs load (start-up only)
        self._disk_topic_configs: dict[str, dict[str, str]] = {}
        self.replica_manager: ReplicaManager | None = None
        self.controller: KafkaController | None = None  # in a cluster: acts once elected
        self._state_change_log: logging.Handler | None = None
        self._config_changes: ConfigChangeListener | None = None
        self._alter_partition: AlterPartitionManager | None = None
        # SASL (tieredlog.server.sasl_apis): each SASL listener's settings by name, the SCRAM credentials
        self.sasl_listeners: dict[str, ListenerSasl] = {}
        self.scram_credentials: ScramCredentialStore | None = None
        # cluster mode: topic changes to write to ZooKeeper at the next topics_durable()
        self._zk_pending: list[tuple[Callable[[], Awaitable[None]], Callable[[MetadataCache], bool]]] = []
        # alone: partitions of created topics whose logs the next topics_durable() creates off the loop
        self._logs_to_create: list[tuple[TopicMetadata, int]] = []
        self.producer_ids: ProducerIdManager | None = None
        self._store = TopicStore(self.log_dirs[0])
        self.stopping = False  # set on SIGTERM; parked fetches return at once
        self.metrics = BrokerMetrics(self)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self._metrics_endpoint: MetricsEndpoint | None = None
        self.authorizer: AclAuthorizer | None = None  # None: authorizer.class.name is empty, all is allowed

    # ---- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        from tieredlog.server.sasl_apis import configure_sasl, open_scram_store

        configure_sasl(self)  # a wrong SASL setting stops the start before anything else is touched
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        # first, alone or in a cluster: the endpoint shows start-up (partition counts as logs load)
        self._metrics_endpoint = start_metrics_endpoint(self.metrics, self.config)
        first = self.log_dirs[0]
        cluster_config = ZkClusterConfig.from_broker_config(self.config)  # InvalidZkConnectError, BrokerConfigError
        if cluster_config is None:
            self.cluster_id = _load_cluster_id(first, self.node_id, self.config["cluster.id"])
        else:
            # the cluster id comes from ZooKeeper and every log dir's meta.properties is checked against
            # it before any log loads (ClusterError: wrong cluster, wrong broker id, ZooKeeper unreachable)
            loop = asyncio.get_running_loop()
            # the elector's thread calls these; the controller only queues an event for its own thread
            self.cluster = ZkClusterMembership(cluster_config, on_become_controller=self._on_become_controller,
                                               on_resign=self._on_resign)
            self.cluster_id = await loop.run_in_executor(None, self.cluster.connect)
            self.cluster_node = ClusterNode(self.config, self.cluster)
            self._state_change_log = attach_state_change_log(first)
            controller_config = ControllerConfig.from_broker_config(self.config, self.cluster_node.inter_broker_security)
            controller = KafkaController(self.cluster.zk, self.node_id, controller_config,
                                         on_topic_deleted=self._on_topic_deleted_by_controller)
            controller.start()
            self.controller = controller
            self._config_changes = ConfigChangeListener(
                self.cluster.zk, functools.partial(self._topic_config_changed, loop), name=str(self.node_id))
            self._config_changes.on_broker_config = functools.partial(dynamic_config.on_change, self, loop)
            self._config_changes.start()
        self.authorizer = await self._start_authorizer(first)
        self.producer_ids = (ProducerIdManager.in_log_dir(first) if self.cluster is None
                             else ProducerIdManager.in_zookeeper(self.cluster.zk, self.node_id))
        if self.cluster_node is None:
            self.topics = self._store.load()  # before the logs load, so they get their topic configs
        if not self.remote_storage_system_enabled:
            for t in self.topics.values():
                if str(t.configs.get("remote.storage.enable", "")).strip().lower() == "true":
                    log.warning("topic %s has remote.storage.enable=true but remote.log.storage.system.enable=false: "
                                "it is served as a local-only topic (retention.ms/retention.bytes apply locally)", t.name)
        await dynamic_config.load(self)
        if self.cluster is not None:
            # as Kafka's LogManager: a log loads with its topic's configs, so a tiered log whose start offset
            # was not checkpointed before a crash keeps the history below its first local segment
            self._disk_topic_configs = await asyncio.get_running_loop().run_in_executor(None, self._read_disk_topic_configs)
        self.log_manager = self._make_log_manager()
        self._disk_topic_configs = {}
        self.replica_manager = self._make_replica_manager()
        if self.cluster_node is None:
            self._reconcile_with_logs()
            self.topics_by_id = {t.topic_id: t for t in self.topics.values()}
            for t in list(self.topics.values()):
                for p in range(t.partitions):
                    self._logs_to_create.append((t, p))
            await self._create_staged_logs()
            for plog in self.log_manager.all_logs():
                # sole replica, so the ISR is {this broker}: everything recovered is committed
                plog.update_high_watermark(plog.log_end_offset)
                self.replica_manager.add_sole_replica(plog.topic_partition, plog)
        self.replica_manager.start()
        if self.cluster_node is None:
            await self._start_coordinator()
            await self._start_remote_log_manager()
        else:
            # the logs on disk wait for the controller's LeaderAndIsr, which says what each one is now
            self._alter_partition = AlterPartitionManager(
                ControllerChannel(self.node_id, self.cluster_node, timeout_s=self.config["request.timeout.ms"] / 1000),
                self.cluster_node, on_answered=self.replica_manager.isr_change_answered)
            self.replica_manager.isr_sender = self._alter_partition
            self._alter_partition.start()
            # serves the groups of the __consumer_offsets partitions the controller makes this broker lead
            self.group_coordinator = create_cluster_group_coordinator(self)
            await self.group_coordinator.start()
            self.transaction_coordinator = create_cluster_transaction_coordinator(self)
            await self.transaction_coordinator.start()
            from tieredlog.server.remote_tier import create_cluster_remote_log_manager

            self.remote_log_manager = create_cluster_remote_log_manager(self)
        await open_scram_store(self, self._config_changes)
        # Retention, flushes and checkpoints run on the LogManager's own scheduler threads: not on the
        # event loop, and on no pool remote-storage work shares, so a slow object store cannot starve them.
        flush_ms = self.config["log.flush.scheduler.interval.ms"]
        self.log_manager.startup(
            retention_check_ms=max(self.config["log.retention.check.interval.ms"], 10),
            flush_check_ms=max(flush_ms, 10) if flush_ms < 2**62 else None,
            checkpoint_ms=max(self.config["log.flush.offset.checkpoint.interval.ms"], 10),
            high_watermark_checkpoint_ms=max(self.config["replica.high.watermark.checkpoint.interval.ms"], 10),
        )

    async def _start_authorizer(self, first: Path) -> AclAuthorizer | None:
        """The ACL authorizer with every ACL loaded (alone from a file in the first log dir, in a
        cluster from ZooKeeper), before any request is served."""
        c = self.config
        authorizer = create_authorizer(c["authorizer.class.name"], c["super.users"], c["allow.everyone.if.no.acl.found"],
                                       first, self.cluster.zk if self.cluster is not None else None, str(self.node_id))
        if authorizer is None:
            return None
        try:
            await asyncio.get_running_loop().run_in_executor(None, authorizer.start)
        except AclFileError as exc:
            raise BrokerConfigError(str(exc)) from None
        return authorizer

    def _topic_config_changed(self, loop: asyncio.AbstractEventLoop, topic: str, configs: dict[str, str]) -> None:
        # the listener's thread: the topic table and the logs belong to the event loop
        if not loop.is_closed():
            loop.call_soon_threadsafe(self.apply_topic_configs, topic, configs)

    def apply_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        """A topic's configs changed in ZooKeeper (any broker's AlterConfigs): its logs here take them."""
        t = self.topics.get(name)
        if t is None:
            return
        try:
            cfg = self.effective_log_config(overrides)
        except InvalidConfigError as exc:
            log.warning("ignoring the new configs of topic %s: %s", name, exc)
            return
        changed = t.configs != overrides
        t.configs = dict(overrides)
        for p in range(t.partitions):
            plog = self._logs.get_log(TopicPartition(name, p))
            if plog is not None:
                plog.config = cfg
        for listener in self.topic_config_listeners:
            listener(name)
        if changed:
            log.info("topic %s configs are now %s", name, overrides)

    def _on_become_controller(self, epoch: int) -> None:
        if self.controller is not None:
            self.controller.on_become_controller(epoch)

    def _on_resign(self) -> None:
        if self.controller is not None:
            self.controller.on_resign()

    def _on_topic_deleted_by_controller(self, topic: DeletedTopic) -> None:
        """The controller's event thread: every replica of ``topic`` has stopped and deleted its log;
        a tiered topic's remote data is marked for the remote partition remover."""
        remover = self.remote_partition_remover
        tiered = str(topic.configs.get("remote.storage.enable", "")).strip().lower() == "true"
        if remover is None or not tiered:
            return
        if topic.topic_id is None:
            log.warning("topic %s was deleted without a topic id: its remote data is left in place", topic.name)
            return
        from tieredlog.rsm.api import TopicIdPartition

        remover.mark(TopicIdPartition(topic.topic_id, topic.name, p) for p in topic.partitions)

    def _make_replica_manager(self) -> ReplicaManager:
        c = self.config
        fetcher = FetcherConfig(
            num_fetchers=c["num.replica.fetchers"], wait_max_ms=c["replica.fetch.wait.max.ms"],
            min_bytes=c["replica.fetch.min.bytes"], max_bytes=c["replica.fetch.max.bytes"],
            response_max_bytes=c["replica.fetch.response.max.bytes"], backoff_ms=c["replica.fetch.backoff.ms"],
            socket_timeout_ms=c["replica.socket.timeout.ms"],
            security=self.cluster_node.inter_broker_security if self.cluster_node is not None else PLAINTEXT,
        )
        try:
            selector = replica_selector(c["replica.selector.class"])
        except ValueError as exc:
            raise BrokerConfigError(str(exc)) from None
        return ReplicaManager(self.node_id, self._logs, log_config_for=self._topic_config_for,
                              fetcher_config=fetcher, replica_lag_time_max_ms=c["replica.lag.time.max.ms"],
                              on_high_watermark_moved=self.append_watchers.notify, replica_selector=selector,
                              leader_throttled_rate=c["leader.replication.throttled.rate"],
                              follower_throttled_rate=c["follower.replication.throttled.rate"],
                              quota_window_s=c["replication.quota.window.size.seconds"],
                              is_broker_alive=self._is_broker_alive, topics=self, metrics=self.metrics,
                              fetch_purgatory=self.append_watchers, remote_reader=lambda: self.remote_log_manager,
                              remote_fetch_max_wait_ms=lambda: self.config["remote.fetch.max.wait.ms"],
                              live_racks=self._live_racks if self.cluster_node is not None else None,
                              is_shutting_down=lambda: self.stopping)

    def _live_racks(self) -> dict[int, str | None]:
        node = self.cluster_node
        return {} if node is None else {b: n.rack for b, n in node.metadata.brokers.items()}

    def _is_broker_alive(self, broker_id: int) -> bool:
        node = self.cluster_node
        return node is None or broker_id in node.metadata.brokers

    async def _start_remote_log_manager(self) -> None:
        # tiered storage (tieredlog.rlm; None when disabled): its metrics join the broker's endpoint
        from tieredlog.server.remote_tier import create_remote_log_manager, stage_metadata_topic

        stage_metadata_topic(self)
        await self.topics_durable()  # the metadata topic's logs, before the RLMM reads them
        self.remote_log_manager = create_remote_log_manager(self)

    @property
    def _logs(self) -> LogManager:
        # start() makes the LogManager before anything that reads or changes the logs can run
        if self.log_manager is None:
            raise RuntimeError("the broker has not started: its logs are not loaded")
        return self.log_manager

    def _make_log_manager(self) -> LogManager:
        return LogManager(
            self.log_dirs,
            self.default_log_config,
            topic_configs=self._topic_config_for,
            producer_id_expiration_ms=self.config["producer.id.expiration.ms"],
            num_recovery_threads_per_data_dir=self.config["num.recovery.threads.per.data.dir"],
            background_threads=self.config["background.threads"],
            cleaner_config=cleaner_config_of(self.config),
        )

    def _topic_config_for(self, topic: str) -> LogConfig:
        t = self.topics.get(topic)
        if t is not None:
            return self.effective_log_config(t.configs)
        stored = self._disk_topic_configs.get(topic)
        if stored is not None:
            try:
                return self.effective_log_config(stored)
            except InvalidConfigError as exc:
                log.warning("topic %s loads with the broker's defaults: its stored configs are invalid: %s", topic, exc)
        return self.default_log_config

    def _read_disk_topic_configs(self) -> dict[str, dict[str, str]]:
        """Executor thread: the ZooKeeper configs of every topic with a partition directory here."""
        assert self.cluster is not None
        return {name: self.cluster.zk.get_topic_config(name) for name in sorted(topics_in_log_dirs(self.log_dirs))}

    @property
    def remote_storage_system_enabled(self) -> bool:
        return bool(self.config.get("remote.log.storage.system.enable", False))

    def effective_log_config(self, overrides: dict[str, str]) -> LogConfig:
        """The config the logs run with. A topic stored with remote.storage.enable=true on a broker whose
        remote tier is off (created while it was on) is local-only here: nothing tiers it, so local
        retention waiting for copies would never delete; total retention applies instead. (Kafka refuses
        to start in this state; keeping the broker up is kinder, and the topic's own setting is kept.)"""
        cfg = self.log_config_for(overrides)
        if cfg.remote_storage_enable and not self.remote_storage_system_enabled:
            cfg = dataclasses.replace(cfg, remote_storage_enable=False)
        return cfg

    def _validate_topic_configs(self, cfg: LogConfig, was_remote_enabled: bool) -> None:
        try:
            validate_topic_config_change(cfg, was_remote_enabled, self.remote_storage_system_enabled)
        except ConfigError as exc:
            raise InvalidConfigError(str(exc)) from None

    def _reconcile_with_logs(self) -> None:
        """Topics whose partition dirs exist but are missing from the store (store lost or written
        by an older run) are rebuilt from the logs' partition.metadata."""
        counts: dict[str, int] = {}
        ids: dict[str, uuid.UUID] = {}
        for plog in self._logs.all_logs():
            tp = plog.topic_partition
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
            if plog.topic_id is not None:
                ids[tp.topic] = plog.topic_id
        changed = False
        for name, n in counts.items():
            t = self.topics.get(name)
            if t is None:
                self.topics[name] = TopicMetadata(name, ids.get(name) or uuid.uuid4(), n)
                changed = True
            elif n > t.partitions:
                t.partitions = n
                changed = True
        if changed:
            self._store.save(self.topics)

    async def _start_coordinator(self) -> None:
        self.group_coordinator = create_group_coordinator(self)
        await self.topics_durable()  # __consumer_offsets' logs, when it was just created
        await self.group_coordinator.start()
        self.transaction_coordinator = create_transaction_coordinator(self)
        await self.topics_durable()
        await self.transaction_coordinator.start()

    async def controlled_shutdown(self) -> bool:
        """Kafka's controlled shutdown: ask the controller to move this broker's leaderships away (and
        take it out of the ISRs) before it stops, retrying ``controlled.shutdown.max.retries`` times.
        True when the controller says nothing is led here any more."""
        if self.cluster_node is None or not self.config["controlled.shutdown.enable"]:
            return False
        channel = ControllerChannel(self.node_id, self.cluster_node, timeout_s=self.config["request.timeout.ms"] / 1000)
        try:
            for attempt in range(self.config["controlled.shutdown.max.retries"] + 1):
                try:
                    code, remaining = await channel.controlled_shutdown()
                except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
                    log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
                else:
                    if code == ErrorCode.none and not remaining:
                        log.info("controlled shutdown succeeded")
                        return True
                    log.warning("controlled shutdown attempt %d: error %s, %d partition(s) still led here",
                                attempt + 1, code.name, len(remaining))
                await asyncio.sleep(self.config["controlled.shutdown.retry.backoff.ms"] / 1000)
        finally:
            await channel.close()
        log.warning("controlled shutdown did not complete; shutting down anyway")
        return False

    async def shutdown(self) -> None:
        if self._alter_partition is not None:
            await self._alter_partition.shutdown()
        if self.replica_manager is not None:
            await self.replica_manager.shutdown()
        await self.txn_verification.close()
        if self.transaction_coordinator is not None:
            try:
                await self.transaction_coordinator.shutdown()
            except Exception:
                log.exception("transaction coordinator shutdown failed")
        if self.group_coordinator is not None:
            try:
                await self.group_coordinator.shutdown()
            except Exception:
                log.exception("group coordinator shutdown failed")
        rlm = self.remote_log_manager
        if rlm is not None:
            try:
                rlm.close()
            except Exception:
                log.exception("remote log manager close failed")
        if self.log_manager is not None:
            # LogManager.shutdown flushes, writes checkpoints and the clean-shutdown marker: fsyncs, so
            # off the loop like every other disk wait
            await asyncio.to_thread(self.log_manager.shutdown)
        if self._config_changes is not None:
            self._config_changes.close()
        if self.authorizer is not None:
            self.authorizer.close()
        if self.controller is not None:
            try:
                await asyncio.to_thread(self.controller.close)
            except Exception:
                log.exception("controller shutdown failed")
        if self._state_change_log is not None:
            detach_state_change_log(self._state_change_log)
        if self.cluster is not None:
            # last, as Kafka closes ZooKeeper last: the session's end deletes /brokers/ids/<id> (and
            # /controller, which a controller deletes itself first)
            try:
                await self.cluster.close_async()
            except Exception:
                log.exception("closing the ZooKeeper session failed")
        if self._metrics_endpoint is not None:
            await asyncio.to_thread(self._metrics_endpoint.close)

    # ---- topics -------------------------------------------------------------------------------------

    def log_config_for(self, overrides: dict[str, str]) -> LogConfig:
        try:
            return self.default_log_config.with_overrides(overrides)
        except ConfigError as exc:
            raise InvalidConfigError(str(exc)) from None

    async def _create_staged_logs(self) -> None:
        """Alone: create the logs of the partitions staged by create_topic / create_partitions. The
        directory creation and its fsync run on an executor thread; the partitions become servable (sole
        replica) on the loop afterwards, so a produce or fetch never finds a topic without its log."""
        staged, self._logs_to_create = self._logs_to_create, []
        if not staged:
            return
        wanted = [(TopicPartition(t.name, p), t.topic_id, self.effective_log_config(t.configs)) for t, p in staged]
        logs = self._logs
        created = await asyncio.get_running_loop().run_in_executor(
            None, lambda: [logs.get_or_create_log(tp, tid, cfg) for tp, tid, cfg in wanted])
        rm = self.replica_manager
        for (t, _), (tp, _, _), plog in zip(staged, wanted, created):
            if self.topics.get(t.name) is not t:
                # deleted while its log was being made: the log goes too
                if self._logs.get_log(tp) is plog:
                    self._logs.delete_log(tp)
            elif rm is not None and rm.get_partition(tp) is None:
                rm.add_sole_replica(tp, plog)


    def get_topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def get_partition_log(self, topic: str, partition: int) -> UnifiedLog | None:
        """The UnifiedLog or None when the topic or partition does not exist."""
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < t.partitions:
            return None
        return self._logs.get_log(TopicPartition(topic, partition))

    def check_new_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> LogConfig:
        """Kafka's CreateTopics validation order: name, existence, partitions, RF, configs."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = collision_key(name)
        for other in self.topics:
            if collision_key(other) == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        if partitions <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        if self.cluster_node is not None:
            live = len(self.cluster_node.membership.brokers)
            if replication_factor > live:
                raise InvalidReplicationFactorError(
                    f"Replication factor: {replication_factor} larger than available brokers: {live}.")
        elif replication_factor > 1:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only 1 broker(s) are registered."
            )
        cfg = self.log_config_for(configs)
        self._validate_topic_configs(cfg, was_remote_enabled=False)
        return cfg

    # create_topic, delete_topic, create_partitions and alter_topic_configs apply a change at once (topic
    # table, logs) and stage the topics file; `await topics_durable()` writes it. A request handler makes
    # all of its changes before its first await, so the connection's next request sees them, and answers
    # only after topics_durable: the fsyncs run on an executor thread, never on the event loop.

    async def topics_durable(self, wait_s: float = 10.0) -> None:
        """Return once every topic change made so far is on disk; in a cluster, once it is in ZooKeeper
        and (for up to ``wait_s``) in this broker's metadata."""
        if self.cluster_node is None:
            version = self._store.staged_version
            await self._create_staged_logs()
            await asyncio.get_running_loop().run_in_executor(None, self._store.sync, version)
            return
        pending, self._zk_pending = self._zk_pending, []
        for write, _ in pending:
            await write()
        if pending:
            await self.cluster_node.wait_for_metadata(lambda md: all(done(md) for _, done in pending), wait_s)

    def registered_broker_ids(self) -> set[int]:
        """Brokers a replica assignment may name: every registered one in a cluster, else this one."""
        if self.cluster is None:
            return {self.node_id}
        return set(self.cluster.brokers) | {self.node_id}

    def create_topic(
        self, name: str, partitions: int, replication_factor: int = 1, configs: dict[str, str] | None = None,
        assignment: dict[int, list[int]] | None = None,
    ) -> TopicMetadata:
        """``assignment``: replicas per partition chosen by the client (CreateTopics' manual assignment);
        otherwise Kafka's placement over the registered brokers."""
        configs = {k: str(v) for k, v in (configs or {}).items()}
        self.check_new_topic(name, partitions, replication_factor, configs)
        t = TopicMetadata(name, uuid.uuid4(), partitions, configs)
        node = self.cluster_node
        if node is not None:
            if assignment is None:
                assignment = node.assign(partitions, replication_factor)
            self._zk_pending.append((
                functools.partial(node.create_topic, name, assignment, t.topic_id, configs),
                lambda md: name in md.topics and all(p.leader >= 0 for p in md.topics[name].partitions.values()),
            ))
            log.info("creating topic %s with %d partition(s), replication factor %d", name, partitions, replication_factor)
            return t
        self.topics[name] = t
        self.topics_by_id[t.topic_id] = t
        self._store.stage(self.topics)
        self._logs_to_create.extend((t, p) for p in range(partitions))
        log.info("created topic %s with %d partition(s), id %s", name, partitions, t.topic_id)
        return t

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicMetadata:
        """Create ``name`` if missing (idempotent); used at start-up by the coordinator and the RLMM, before
        any request is served. As every topic change, it is durable and its logs exist once the caller
        awaited ``topics_durable()``."""
        t = self.topics.get(name)
        if t is not None:
            return t
        return self.create_topic(name, partitions, 1, configs)

    def delete_topic(self, name: str) -> None:
        t = self.topics.get(name)
        if t is None:
            raise UnknownTopicOrPartitionError(f"Topic {name} not found")
        node = self.cluster_node
        if node is not None:
            self._zk_pending.append((functools.partial(node.delete_topic, name), lambda md: name not in md.topics))
            return
        if self.remote_log_manager is not None:
            # before the local logs go: the RLM needs their topic id to delete the remote copies
            self.remote_log_manager.on_topic_deleted([TopicPartition(name, p) for p in range(t.partitions)])
        del self.topics[name]
        self.topics_by_id.pop(t.topic_id, None)
        self._logs_to_create = [(x, p) for x, p in self._logs_to_create if x is not t]
        self._store.stage(self.topics)
        for p in range(t.partitions):
            tp = TopicPartition(name, p)
            if self.replica_manager is not None:
                self.replica_manager.remove_partition(tp)
            self.append_watchers.notify(tp)
            if self._logs.get_log(tp) is not None:
                self._logs.delete_log(tp)
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, count: int, validate_only: bool = False,
                          assignment: list[list[int]] | None = None) -> None:
        t = self.topics.get(name)
        if t is None:
            raise UnknownTopicOrPartitionError(f"Topic {name} not found")
        if count < t.partitions:
            raise InvalidPartitionsError(f"Topic currently has {t.partitions} partitions, which is higher than the requested {count}.")
        if count == t.partitions:
            raise InvalidPartitionsError(f"Topic already has {t.partitions} partitions.")
        if validate_only:
            return
        old = t.partitions
        node = self.cluster_node
        if node is not None:
            if assignment is not None:
                if len(assignment) != count - old:
                    raise InvalidReplicaAssignmentError(
                        f"Increasing the number of partitions by {count - old} but {len(assignment)} assignments provided.")
                new = {old + i: r for i, r in enumerate(assignment)}
            else:
                first = node.metadata.partition(name, 0)
                rf = len(first.replicas) if first is not None and first.replicas else 1
                new = node.assign(count - old, rf, start_partition_id=old)
            self._zk_pending.append((functools.partial(node.add_partitions, name, new),
                                     lambda md: name in md.topics and len(md.topics[name].partitions) >= count))
            return
        t.partitions = count
        self._store.stage(self.topics)
        self._logs_to_create.extend((t, p) for p in range(old, count))

    def alter_topic_configs(self, name: str, overrides: dict[str, str], validate_only: bool = False) -> None:
        """Replace the topic's overrides; validated as a whole, staged for the topics file, then pushed to
        its logs."""
        t = self.topics.get(name)
        if t is None:
            raise UnknownTopicOrPartitionError(f"Topic {name} not found")
        cfg = self.log_config_for(overrides)
        was_remote_enabled = self.log_config_for(t.configs).remote_storage_enable
        self._validate_topic_configs(cfg, was_remote_enabled)
        if validate_only:
            return
        t.configs = dict(overrides)
        if self.cluster_node is not None:
            self._zk_pending.append((functools.partial(self.cluster_node.set_topic_config, name, dict(overrides)),
                                     lambda md: True))
        else:
            self._store.stage(self.topics)
        cfg = self.effective_log_config(overrides)
        logs = []
        for p in range(t.partitions):
            plog = self._logs.get_log(TopicPartition(name, p))
            if plog is None:
                continue
            logs.append(plog)
            plog.config = cfg
        if was_remote_enabled and not cfg.remote_storage_enable and cfg.remote_log_delete_on_disable:
            self._remote_storage_disabled(name, logs)

    def _remote_storage_disabled(self, name: str, logs: list) -> None:
        """KIP-950 with remote.log.delete.on.disable=true: the remote copies go, so (as Kafka does) the
        log start moves up to the local log start: offsets only the remote tier held are no longer
        readable, and ListOffsets -2 / DeleteRecords agree with what is left."""
        rlm = self.remote_log_manager
        if rlm is not None:
            rlm.on_remote_storage_disabled([TopicPartition(name, plog.topic_partition[1]) for plog in logs])
        for plog in logs:
            try:
                plog.maybe_increment_log_start_offset(plog.local_log_start_offset, "remote storage disabled")
            except Exception:  # noqa: BLE001 - a log start above the HW waits for the next retention run
                log.warning("%s-%d: could not move the log start offset", *plog.topic_partition, exc_info=True)
        log.info("topic %s: remote storage disabled, its remote data will be deleted", name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.topics_by_id.get(topic_id)
