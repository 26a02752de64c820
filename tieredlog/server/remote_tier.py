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
- RLMM: ``TopicBasedRemoteLogMetadataManager`` over ``__remote_log_metadata`` stored in this
  broker's own logs; it receives ``rlmm.config.*`` plus ``broker.id``, ``log.dir``, ``cluster.id``.
- The RLM leads every hosted tiered partition (one broker) via ``watch_log_manager``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlmm.topic import LogMetadataTopic
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager, TopicBasedRlmmConfig
from tieredlog.rsm.api import RemoteStorageManager
from tieredlog.rsm.registry import load_remote_storage_manager

if TYPE_CHECKING:
    from tieredlog.server.broker import Broker

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"


def build_rsm(cfg: RemoteLogManagerConfig) -> RemoteStorageManager:
    name = cfg.rsm_class_name
    configs: dict[str, Any] = dict(cfg.rsm_configs)
    configs["broker.id"] = cfg.broker_id
    if not name or name == "local":
        configs.setdefault("dir", str(Path(cfg.first_log_dir) / "remote-storage"))
    return load_remote_storage_manager(name or "local", cfg.rsm_class_path, configs)


def build_rlmm(broker: Broker, cfg: RemoteLogManagerConfig) -> TopicBasedRemoteLogMetadataManager:
    configs: dict[str, Any] = dict(cfg.rlmm_configs)
    configs.update({"broker.id": cfg.broker_id, "log.dir": cfg.first_log_dir,
                    "cluster.id": broker.cluster_id or ""})
    rcfg = TopicBasedRlmmConfig.from_configs(configs)
    topic_configs = {"retention.ms": str(rcfg.retention_ms), "cleanup.policy": "delete", "remote.storage.enable": "false"}
    # Create the topic now, on the broker's own start-up path, so the RLMM's loader thread never
    # has to mutate the broker's topic table; afterwards it only reads the partition count.
    broker.create_internal_topic(METADATA_TOPIC, rcfg.num_partitions, topic_configs)

    def create_topic(name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> int:
        t = broker.get_topic(name)
        return t.partitions if t is not None else broker.create_internal_topic(name, partitions, configs).partitions

    topic = LogMetadataTopic(broker.log_manager, create_topic, replication_factor=1, retention_ms=rcfg.retention_ms)
    return TopicBasedRemoteLogMetadataManager(topic, configs)


def create_remote_log_manager(broker: Broker) -> RemoteLogManager | None:
    """The broker's RLM, started and leading its tiered partitions; None if tiering is disabled."""
    cfg = RemoteLogManagerConfig.from_broker_config(broker.config)
    if not cfg.system_enable:
        log.info("remote.log.storage.system.enable=false: no remote tier")
        return None
    rsm = build_rsm(cfg)
    rlmm = build_rlmm(broker, cfg)
    rlm = RemoteLogManager(cfg, broker.log_manager, rsm, rlmm)
    rlm.start()
    rlm.watch_log_manager()
    log.info(
        "remote log manager started: rsm=%s, task interval %d ms, %d copier / %d reader threads",
        type(rsm).__name__, cfg.task_interval_ms, cfg.effective_copier_threads, cfg.reader_threads,
    )
    return rlm
