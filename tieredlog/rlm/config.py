"""The RemoteLogManager's view of the broker configs (Kafka's RemoteLogManagerConfig).

Names, types, defaults and validation live in one registry, ``tieredlog.config``; this is a typed
snapshot of the keys the RLM reads, built from a ``BrokerConfig``. Its field defaults are the
registry's, so an RLM built in a test without a broker config behaves as a default broker.

One deliberate difference from Kafka: ``remote.log.storage.system.enable`` defaults to **true**,
and with ``remote.log.storage.manager.class.name`` unset or ``local`` the RSM is
``LocalTieredStorage`` rooted at ``<first log dir>/remote-storage``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tieredlog.config import BROKER_CONFIG_DEFS, LONG_MAX, BrokerConfig

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


def _default(name: str) -> Any:
    return BROKER_CONFIG_DEFS[name].default


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    system_enable: bool = _default("remote.log.storage.system.enable")
    rsm_class_name: str = _default("remote.log.storage.manager.class.name")
    rsm_class_path: str | None = _default("remote.log.storage.manager.class.path")
    custom_metadata_max_bytes: int = _default("remote.log.metadata.custom.metadata.max.bytes")
    index_cache_total_size_bytes: int = _default("remote.log.index.file.cache.total.size.bytes")
    thread_pool_size: int = _default("remote.log.manager.thread.pool.size")
    copier_thread_pool_size: int = _default("remote.log.manager.copier.thread.pool.size")
    expiration_thread_pool_size: int = _default("remote.log.manager.expiration.thread.pool.size")
    task_interval_ms: int = _default("remote.log.manager.task.interval.ms")
    task_retry_backoff_ms: int = _default("remote.log.manager.task.retry.backoff.ms")
    task_retry_backoff_max_ms: int = _default("remote.log.manager.task.retry.backoff.max.ms")
    task_retry_jitter: float = _default("remote.log.manager.task.retry.jitter")
    reader_threads: int = _default("remote.log.reader.threads")
    reader_max_pending_tasks: int = _default("remote.log.reader.max.pending.tasks")
    copy_max_bytes_per_second: int = _default("remote.log.manager.copy.max.bytes.per.second")
    copy_quota_window_size_seconds: int = _default("remote.log.manager.copy.quota.window.size.seconds")
    fetch_max_bytes_per_second: int = _default("remote.log.manager.fetch.max.bytes.per.second")
    fetch_quota_window_size_seconds: int = _default("remote.log.manager.fetch.quota.window.size.seconds")
    remote_fetch_max_wait_ms: int = _default("remote.fetch.max.wait.ms")
    remote_list_offsets_request_timeout_ms: int = _default("remote.list.offsets.request.timeout.ms")
    cleaner_dedupe_buffer_size: int = _default("log.cleaner.dedupe.buffer.size")
    cleaner_io_max_bytes_per_second: float = _default("log.cleaner.io.max.bytes.per.second")
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
    def from_broker_config(cfg: BrokerConfig, **overrides: Any) -> RemoteLogManagerConfig:
        values: dict[str, Any] = {attr: cfg[name] for name, attr in _FIELDS.items()}
        values["broker_id"] = cfg.node_id
        values["log_dirs"] = tuple(str(d) for d in cfg.log_dirs)
        # the plugins get the keys under the configured impl prefixes, prefix stripped (as Kafka)
        values["rsm_configs"] = cfg.plugin_configs(cfg["remote.log.storage.manager.impl.prefix"])
        values["rlmm_configs"] = cfg.plugin_configs(cfg["remote.log.metadata.manager.impl.prefix"])
        values.update(overrides)
        return RemoteLogManagerConfig(**values)
