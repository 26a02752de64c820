"""The RemoteLogManager's view of the broker configs (Kafka's RemoteLogManagerConfig).

Names, types, defaults and validation live in one registry, ``tieredlog.config``; this is a typed
snapshot of the keys the RLM reads, built from the ``BrokerConfig`` the server hands in (typed here
by the little of it the RLM reads, so the RLM does not import the broker's registry). Its field
defaults are the registry's (``tests/server/test_config.py`` holds them equal), so an RLM built in a test
without a broker config behaves as a default broker.

One deliberate difference from Kafka: ``remote.log.storage.system.enable`` defaults to **true**,
and with ``remote.log.storage.manager.class.name`` unset or ``local`` the RSM is
``LocalTieredStorage`` rooted at ``<first log dir>/remote-storage``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from tieredlog.log.config import LONG_MAX
from tieredlog.rlm.prefetch import READ_AHEAD_MAX_BYTES

__all__ = ["LONG_MAX", "RemoteLogManagerConfig"]

# Kafka name -> field of RemoteLogManagerConfig
_FIELDS: dict[str, str] = {
    "remote.log.storage.system.enable": "system_enable",
    "remote.log.storage.manager.class.name": "rsm_class_name",
    "remote.log.storage.manager.class.path": "rsm_class_path",
    "remote.log.metadata.custom.metadata.max.bytes": "custom_metadata_max_bytes",
    "remote.log.index.file.cache.total.size.bytes": "index_cache_total_size_bytes",
    "remote.log.manager.thread.pool.size": "thread_pool_size",
    "remote.log.manager.copier.thread.pool.size": "copier_thread_pool_size",
    "remote.log.manager.expiration.thread.pool.size": "expiration_thread_pool_size",
    "remote.log.manager.task.interval.ms": "task_interval_ms",
    "remote.log.manager.task.retry.backoff.ms": "task_retry_backoff_ms",
    "remote.log.manager.task.retry.backoff.max.ms": "task_retry_backoff_max_ms",
    "remote.log.manager.task.retry.jitter": "task_retry_jitter",
    "remote.log.reader.threads": "reader_threads",
    "remote.log.reader.max.pending.tasks": "reader_max_pending_tasks",
    "remote.log.reader.read.ahead.max.bytes": "read_ahead_max_bytes",
    "remote.log.manager.copy.max.bytes.per.second": "copy_max_bytes_per_second",
    "remote.log.manager.copy.quota.window.size.seconds": "copy_quota_window_size_seconds",
    "remote.log.manager.fetch.max.bytes.per.second": "fetch_max_bytes_per_second",
    "remote.log.manager.fetch.quota.window.size.seconds": "fetch_quota_window_size_seconds",
    "remote.fetch.max.wait.ms": "remote_fetch_max_wait_ms",
    "remote.list.offsets.request.timeout.ms": "remote_list_offsets_request_timeout_ms",
    # remote cleaning of compacted topics uses the local cleaner's map size and throttle rate
    "log.cleaner.dedupe.buffer.size": "cleaner_dedupe_buffer_size",
    "log.cleaner.io.max.bytes.per.second": "cleaner_io_max_bytes_per_second",
}


class BrokerConfigView(Protocol):
    """What of the broker's config registry the RLM reads; the server hands its ``BrokerConfig`` in."""

    @property
    def node_id(self) -> int: ...

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    def __getitem__(self, key: str) -> Any: ...

    def plugin_configs(self, prefix: str) -> dict[str, str]: ...


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    system_enable: bool = True
    rsm_class_name: str = "local"
    rsm_class_path: str | None = None
    custom_metadata_max_bytes: int = 128
    index_cache_total_size_bytes: int = 1073741824
    thread_pool_size: int = 10
    copier_thread_pool_size: int = -1
    expiration_thread_pool_size: int = -1
    task_interval_ms: int = 30000
    task_retry_backoff_ms: int = 500
    task_retry_backoff_max_ms: int = 30000
    task_retry_jitter: float = 0.2
    reader_threads: int = 10
    reader_max_pending_tasks: int = 100
    read_ahead_max_bytes: int = READ_AHEAD_MAX_BYTES
    copy_max_bytes_per_second: int = LONG_MAX
    copy_quota_window_size_seconds: int = 1
    fetch_max_bytes_per_second: int = LONG_MAX
    fetch_quota_window_size_seconds: int = 1
    remote_fetch_max_wait_ms: int = 500
    remote_list_offsets_request_timeout_ms: int = 30000
    cleaner_dedupe_buffer_size: int = 134217728
    cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308  # Double.MAX_VALUE: no throttle
    broker_id: int = 0
    log_dirs: tuple[str, ...] = ()
    rsm_configs: dict[str, Any] = field(default_factory=dict)
    rlmm_configs: dict[str, Any] = field(default_factory=dict)

    @property
    def effective_copier_threads(self) -> int:
        # -1 means "use remote.log.manager.thread.pool.size", as in Kafka.
        return self.thread_pool_size if self.copier_thread_pool_size < 1 else self.copier_thread_pool_size

    @property
    def effective_expiration_threads(self) -> int:
        return self.thread_pool_size if self.expiration_thread_pool_size < 1 else self.expiration_thread_pool_size

    @property
    def first_log_dir(self) -> str:
        return self.log_dirs[0] if self.log_dirs else "./data"

    @staticmethod
    def from_broker_config(cfg: BrokerConfigView, **overrides: Any) -> RemoteLogManagerConfig:
        values: dict[str, Any] = {attr: cfg[name] for name, attr in _FIELDS.items()}
        values["broker_id"] = cfg.node_id
        values["log_dirs"] = tuple(str(d) for d in cfg.log_dirs)
        # the plugins get the keys under the configured impl prefixes, prefix stripped (as Kafka)
        values["rsm_configs"] = cfg.plugin_configs(cfg["remote.log.storage.manager.impl.prefix"])
        values["rlmm_configs"] = cfg.plugin_configs(cfg["remote.log.metadata.manager.impl.prefix"])
        values.update(overrides)
        return RemoteLogManagerConfig(**values)
