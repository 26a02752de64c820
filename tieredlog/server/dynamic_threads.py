"""Thread pools resized by dynamic broker configs, as Kafka's DynamicThreadPool and
DynamicRemoteLogConfig: ``num.replica.fetchers`` and the remote tier's reader, copier and expiration
pools. A change is refused, with Kafka's message, unless the new count is at least 1 and within half
to double of the current one; accepted, it applies at once (tieredlog.rlm.pool, the fetcher manager).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tieredlog.config import BrokerConfig
from tieredlog.errors import InvalidConfigError
from tieredlog.rlm.config import RemoteLogManagerConfig

if TYPE_CHECKING:
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.rlm.manager import RemoteLogManager

THREAD_DYNAMIC = frozenset({
    "num.replica.fetchers",
    "remote.log.reader.threads",
    "remote.log.manager.thread.pool.size",
    "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size",
})
# -1 (or 0) stands for remote.log.manager.thread.pool.size: no count of its own to compare
_FALLBACK = frozenset({"remote.log.manager.copier.thread.pool.size", "remote.log.manager.expiration.thread.pool.size"})


class ThreadPoolServer(Protocol):
    """The broker's parts whose pools these configs size."""

    @property
    def remote_log_manager(self) -> RemoteLogManager | None: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...


def check_thread_counts(current: BrokerConfig, new: BrokerConfig) -> None:
    """InvalidConfigError, in Kafka's words, for a thread count that is not within half to double
    of the one in force (a pool jumps by at most a factor of two per change, as in Kafka)."""
    for name in sorted(THREAD_DYNAMIC):
        old, value = int(current[name]), int(new[name])
        if value == old or (name in _FALLBACK and (value < 1 or old < 1)):
            continue
        why = f"Dynamic thread count update validation failed for {name}={value}"
        if value <= 0:
            raise InvalidConfigError(f"{why}, value should be at least 1")
        if value < old // 2:
            raise InvalidConfigError(f"{why}, value should be at least half the current value {old}")
        if value > old * 2:
            raise InvalidConfigError(f"{why}, value should not be greater than double the current value {old}")


def resize_thread_pools(broker: ThreadPoolServer, cfg: BrokerConfig) -> None:
    """Apply the thread counts of ``cfg`` (on the event loop: resizing only starts threads or queues
    stop signals, and moves partitions between fetcher tasks)."""
    rlm = broker.remote_log_manager
    if rlm is not None:
        rlm.resize_thread_pools(RemoteLogManagerConfig.from_broker_config(cfg))
    rm = broker.replica_manager
    if rm is not None:
        rm.fetchers.resize_thread_pool(int(cfg["num.replica.fetchers"]))
