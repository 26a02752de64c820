"""What the console reads of a broker, as narrow read-only Protocols: the server hands its Broker in, and
the console imports nothing of server/ (the console sits below the wiring that builds it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.coordinator.group_coordinator import GroupCoordinator
    from tieredlog.log.config import LogConfig
    from tieredlog.log.log_manager import LogManager
    from tieredlog.replication.metadata_cache import MetadataCache
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.rlm.manager import RemoteLogManager

# a classic consumer group member's assignment bytes -> topic -> partitions (None: not the consumer protocol's)
AssignmentDecoder = Callable[[bytes], "dict[str, frozenset[int]] | None"]


class TopicState(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def configs(self) -> Mapping[str, str]: ...


class ClusterView(Protocol):
    @property
    def metadata(self) -> MetadataCache: ...


class BrokerState(Protocol):
    """Read on the event loop (take) or, for the RLM's thread-safe parts, off it (add_remote_tier)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def node_id(self) -> int: ...
    @property
    def advertised_host(self) -> str: ...
    @property
    def advertised_port(self) -> int: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def default_log_config(self) -> LogConfig: ...
    @property
    def topics(self) -> Mapping[str, TopicState]: ...
    @property
    def topics_by_id(self) -> Mapping[Any, TopicState]: ...
    @property
    def cluster_node(self) -> ClusterView | None: ...
    @property
    def replica_manager(self) -> ReplicaManager | None: ...
    @property
    def remote_log_manager(self) -> RemoteLogManager | None: ...
    @property
    def group_coordinator(self) -> GroupCoordinator | None: ...
    @property
    def log_manager(self) -> LogManager | None: ...

    def log_config_for(self, overrides: Any) -> LogConfig: ...
