"""Broker-level configs of the RemoteLogManager, under Kafka's own names (RemoteLogManagerConfig).

Defaults are Kafka's, with one deliberate difference: ``remote.log.storage.system.enable``
defaults to **true** in tieredlog (tiered storage is the point of the project), and when
``remote.log.storage.manager.class.name`` is unset the RSM is ``LocalTieredStorage`` rooted at
``<first log dir>/remote-storage``.

The broker's config object is read through :func:`config_get` so that this module works with a
plain ``dict`` of Kafka names as well as with the broker's own config class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

LONG_MAX = (1 << 63) - 1

# (Kafka name, attribute, kind, default)
_DEFS: tuple[tuple[str, str, str, Any], ...] = (
    ("remote.log.storage.system.enable", "system_enable", "bool", True),
    ("remote.log.storage.manager.class.name", "rsm_class_name", "str?", None),
    ("remote.log.storage.manager.class.path", "rsm_class_path", "str?", None),
    ("remote.log.storage.manager.impl.prefix", "rsm_prefix", "str", "rsm.config."),
    ("remote.log.metadata.manager.class.name", "rlmm_class_name", "str?", None),
    ("remote.log.metadata.manager.impl.prefix", "rlmm_prefix", "str", "rlmm.config."),
    ("remote.log.metadata.custom.metadata.max.bytes", "custom_metadata_max_bytes", "int", 128),
    ("remote.log.index.file.cache.total.size.bytes", "index_cache_total_size_bytes", "int", 1 << 30),
    ("remote.log.manager.thread.pool.size", "thread_pool_size", "int", 10),
    ("remote.log.manager.copier.thread.pool.size", "copier_thread_pool_size", "int", -1),
    ("remote.log.manager.expiration.thread.pool.size", "expiration_thread_pool_size", "int", -1),
    ("remote.log.manager.task.interval.ms", "task_interval_ms", "int", 30_000),
    ("remote.log.manager.task.retry.backoff.ms", "task_retry_backoff_ms", "int", 500),
    ("remote.log.manager.task.retry.backoff.max.ms", "task_retry_backoff_max_ms", "int", 30_000),
    ("remote.log.manager.task.retry.jitter", "task_retry_jitter", "float", 0.2),
    ("remote.log.reader.threads", "reader_threads", "int", 10),
    ("remote.log.reader.max.pending.tasks", "reader_max_pending_tasks", "int", 100),
    ("remote.log.manager.copy.max.bytes.per.second", "copy_max_bytes_per_second", "int", LONG_MAX),
    ("remote.log.manager.copy.quota.window.num", "copy_quota_window_num", "int", 11),
    ("remote.log.manager.copy.quota.window.size.seconds", "copy_quota_window_size_seconds", "int", 1),
    ("remote.log.manager.fetch.max.bytes.per.second", "fetch_max_bytes_per_second", "int", LONG_MAX),
    ("remote.log.manager.fetch.quota.window.num", "fetch_quota_window_num", "int", 11),
    ("remote.log.manager.fetch.quota.window.size.seconds", "fetch_quota_window_size_seconds", "int", 1),
    ("remote.fetch.max.wait.ms", "remote_fetch_max_wait_ms", "int", 500),
    ("remote.list.offsets.request.timeout.ms", "remote_list_offsets_request_timeout_ms", "int", 30_000),
    ("metrics.port", "metrics_port", "int?", None),
    ("broker.id", "broker_id", "int", 0),
)

DEFAULTS: dict[str, Any] = {name: default for name, _, _, default in _DEFS}


def _items(cfg: Any) -> list[tuple[str, Any]]:
    """Every (name, value) the broker config knows, for prefix scans (rsm.config.*)."""
    if cfg is None:
        return []
    for attr in ("originals", "props", "values"):
        v = getattr(cfg, attr, None)
        if callable(v):
            try:
                v = v()
            except TypeError:
                v = None
        if isinstance(v, Mapping):
            return list(v.items())
    if isinstance(cfg, Mapping):
        return list(cfg.items())
    if hasattr(cfg, "items"):
        try:
            return list(cfg.items())
        except TypeError:
            pass
    return []


_MISSING = object()


def config_get(cfg: Any, name: str, default: Any = None) -> Any:
    """Read one Kafka-named property from a dict or from the broker's config object."""
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        v = cfg.get(name, _MISSING)
        return default if v is _MISSING or v is None else v
    getter = getattr(cfg, "get", None)
    if callable(getter):
        try:
            v = getter(name)
        except (KeyError, LookupError):
            v = None
        except Exception:  # a strict config class may reject names it does not define
            v = None
        if v is not None:
            return v
    v = getattr(cfg, name.replace(".", "_").replace("-", "_"), None)
    if v is not None and not callable(v):
        return v
    for k, val in _items(cfg):
        if k == name and val is not None:
            return val
    return default


def _convert(kind: str, name: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() == "true"
    if kind in ("int", "int?"):
        return int(str(value).strip())
    if kind == "float":
        return float(str(value).strip())
    s = str(value).strip()
    return s if s or kind == "str" else None


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    system_enable: bool = True
    rsm_class_name: str | None = None
    rsm_class_path: str | None = None
    rsm_prefix: str = "rsm.config."
    rlmm_class_name: str | None = None
    rlmm_prefix: str = "rlmm.config."
    custom_metadata_max_bytes: int = 128
    index_cache_total_size_bytes: int = 1 << 30
    thread_pool_size: int = 10
    copier_thread_pool_size: int = -1
    expiration_thread_pool_size: int = -1
    task_interval_ms: int = 30_000
    task_retry_backoff_ms: int = 500
    task_retry_backoff_max_ms: int = 30_000
    task_retry_jitter: float = 0.2
    reader_threads: int = 10
    reader_max_pending_tasks: int = 100
    copy_max_bytes_per_second: int = LONG_MAX
    copy_quota_window_num: int = 11
    copy_quota_window_size_seconds: int = 1
    fetch_max_bytes_per_second: int = LONG_MAX
    fetch_quota_window_num: int = 11
    fetch_quota_window_size_seconds: int = 1
    remote_fetch_max_wait_ms: int = 500
    remote_list_offsets_request_timeout_ms: int = 30_000
    metrics_port: int | None = None
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
    def from_broker_config(cfg: Any, **overrides: Any) -> "RemoteLogManagerConfig":
        values: dict[str, Any] = {}
        for name, attr, kind, default in _DEFS:
            values[attr] = _convert(kind, name, config_get(cfg, name, default))
        dirs = config_get(cfg, "log.dirs", None) or config_get(cfg, "log.dir", None) or "./data"
        if isinstance(dirs, str):
            dirs = [d.strip() for d in dirs.split(",") if d.strip()]
        values["log_dirs"] = tuple(str(d) for d in dirs)
        items = _items(cfg) + list((getattr(cfg, "passthrough", None) or {}).items())
        rsm_prefix, rlmm_prefix = values["rsm_prefix"], values["rlmm_prefix"]
        values["rsm_configs"] = {k[len(rsm_prefix):]: v for k, v in items if k.startswith(rsm_prefix)}
        values["rlmm_configs"] = {k[len(rlmm_prefix):]: v for k, v in items if k.startswith(rlmm_prefix)}
        node_id = getattr(cfg, "node_id", None)
        if isinstance(node_id, int):
            values["broker_id"] = node_id
        if values["metrics_port"] is not None and values["metrics_port"] < 0:
            values["metrics_port"] = None  # -1 disables the metrics endpoint
        values.update(overrides)
        return RemoteLogManagerConfig(**values)
