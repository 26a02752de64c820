"""Which RemoteLogMetadataManager the broker runs, and the properties its ``configure()`` receives.

``remote.log.metadata.manager.class.name`` is ``topic`` (the default), Kafka's
``org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager`` (the same
manager, so a Kafka config reads unchanged), a short name registered in the entry-point group
``tieredlog.remote_log_metadata``, or ``module:Class``; ``remote.log.metadata.manager.class.path``
lists folders put on the import path first. Plugins are found and loaded by the RSM's loader.

The topic-based manager needs the broker's metadata topic, so ``server/`` builds it; every other one is
built with no arguments and configured here.
"""

from __future__ import annotations

from typing import Mapping

from tieredlog.rlmm.api import RemoteLogMetadataManager
from tieredlog.rsm.registry import PluginLoadError, load_plugin

__all__ = [
    "CLASS_NAME_CONFIG",
    "CLASS_PATH_CONFIG",
    "COMMON_CLIENT_PREFIX",
    "CONSUMER_PREFIX",
    "ENTRY_POINT_GROUP",
    "PRODUCER_PREFIX",
    "PluginLoadError",
    "client_configs",
    "is_topic_based",
    "load_remote_log_metadata_manager",
    "rlmm_configs",
]

ENTRY_POINT_GROUP = "tieredlog.remote_log_metadata"
CLASS_NAME_CONFIG = "remote.log.metadata.manager.class.name"
CLASS_PATH_CONFIG = "remote.log.metadata.manager.class.path"
TOPIC_BASED_NAMES = frozenset({
    "topic",
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
    "tieredlog.rlmm.topic_based:TopicBasedRemoteLogMetadataManager",
    "tieredlog.rlmm.topic_based.TopicBasedRemoteLogMetadataManager",
    "tieredlog.rlmm:TopicBasedRemoteLogMetadataManager",
    "tieredlog.rlmm.TopicBasedRemoteLogMetadataManager",
})
# Kafka's TopicBasedRemoteLogMetadataManagerConfig prefixes, as they arrive in configure()
COMMON_CLIENT_PREFIX = "remote.log.metadata.common.client."
PRODUCER_PREFIX = "remote.log.metadata.producer."
CONSUMER_PREFIX = "remote.log.metadata.consumer."


def is_topic_based(class_name: str | None) -> bool:
    return not class_name or class_name.strip() in TOPIC_BASED_NAMES


def rlmm_configs(impl_configs: Mapping[str, object], *, broker_id: int, log_dir: str, cluster_id: str,
                 bootstrap_servers: str | None = None, security_protocol: str | None = None) -> dict[str, object]:
    """What ``configure()`` receives, in Kafka's order (RemoteLogManager.configureRLMM): the endpoint of
    ``remote.log.metadata.manager.listener.name`` as ``remote.log.metadata.common.client.
    bootstrap.servers`` / ``.security.protocol``; then the ``rlmm.config.*`` properties (prefix already
    stripped), which may override those; then ``broker.id``, ``log.dir`` and ``cluster.id``."""
    configs: dict[str, object] = {}
    if bootstrap_servers:
        configs[COMMON_CLIENT_PREFIX + "bootstrap.servers"] = bootstrap_servers
    if security_protocol:
        configs[COMMON_CLIENT_PREFIX + "security.protocol"] = security_protocol
    configs.update(impl_configs)
    configs.update({"broker.id": broker_id, "log.dir": log_dir, "cluster.id": cluster_id})
    return configs


def client_configs(configs: Mapping[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """(producer, consumer) properties of the metadata topic's clients, as Kafka's
    TopicBasedRemoteLogMetadataManagerConfig merges them: the ``common.client`` ones, overridden by the
    ``producer`` / ``consumer`` ones, each with its prefix stripped."""
    common: dict[str, object] = {}
    producer: dict[str, object] = {}
    consumer: dict[str, object] = {}
    for key, value in configs.items():
        for prefix, into in ((COMMON_CLIENT_PREFIX, common), (PRODUCER_PREFIX, producer), (CONSUMER_PREFIX, consumer)):
            if key.startswith(prefix) and len(key) > len(prefix):
                into[key[len(prefix):]] = value
                break
    return {**common, **producer}, {**common, **consumer}


def load_remote_log_metadata_manager(class_name: str, class_path: str | None,
                                     configs: Mapping[str, object]) -> RemoteLogMetadataManager:
    """Build and configure a plugin RLMM (not the topic-based one: see ``is_topic_based``). Any failure
    raises PluginLoadError in one line naming it."""
    rlmm: RemoteLogMetadataManager = load_plugin(
        class_name.strip(), class_path, CLASS_PATH_CONFIG, ENTRY_POINT_GROUP, RemoteLogMetadataManager,
        "remote log metadata manager", lambda p: p.configure(dict(configs)), lambda p: p.close())
    return rlmm
