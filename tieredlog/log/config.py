"""Topic-level log configs under Kafka's own names, their broker-level synonyms and defaults.

``LogConfig`` is what a partition log reads; it is built from the broker defaults overlaid with
the topic's own overrides (``TopicConfigs``), exactly as Kafka resolves them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

LONG_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    """An unknown config name or an invalid value. Kafka: INVALID_CONFIG (40)."""


def _to_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"Invalid value {value!r} for configuration {name}: not a number")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {value!r} for configuration {name}: not a number") from None


def _to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ConfigError(f"Invalid value {value!r} for configuration {name}: expected true or false")


def _to_float(name: str, value: Any) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {value!r} for configuration {name}: not a number") from None


def _to_str(name: str, value: Any) -> str:
    return str(value).strip()


THROTTLED_REPLICAS_CONFIGS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
ALL_REPLICAS = "*"


def parse_throttled_replicas(name: str, value: str) -> frozenset[tuple[int, int]] | str:
    """A KIP-73 ``*.replication.throttled.replicas`` value: ``ALL_REPLICAS`` or the (partition, broker)
    pairs of ``p:b,p:b``; ConfigError with Kafka's words otherwise."""
    items = [i.strip() for i in value.split(",")]
    if "".join(items) == ALL_REPLICAS:
        return ALL_REPLICAS
    pairs = set()
    for item in items:
        p, sep, b = item.partition(":")
        if item and not (sep and p.isdigit() and b.isdigit()):
            raise ConfigError(f"Invalid value {value} for configuration {name}: {name} must be the literal '*' or a "
                              "list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
        if item:
            pairs.add((int(p), int(b)))
    return frozenset(pairs)


@dataclass(frozen=True)
class TopicConfigDef:
    name: str  # topic-level name, e.g. "segment.bytes"
    attr: str  # LogConfig attribute
    kind: str  # "int" | "bool" | "str" | "float"
    default: Any
    broker_synonym: str | None  # e.g. "log.segment.bytes"
    minimum: float | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, value: Any) -> Any:
        conv: Callable[[str, Any], Any] = {"int": _to_int, "bool": _to_bool, "str": _to_str, "float": _to_float}[
            self.kind
        ]
        v = conv(self.name, value)
        if self.name in THROTTLED_REPLICAS_CONFIGS:
            parse_throttled_replicas(self.name, v)
        if self.minimum is not None and v < self.minimum:
            raise ConfigError(f"Invalid value {value} for configuration {self.name}: Value must be at least {self.minimum:g}")
        if self.choices is not None:
            items = [s.strip() for s in str(v).split(",")] if self.name == "cleanup.policy" else [v]
            for item in items:
                if item not in self.choices:
                    raise ConfigError(
                        f"Invalid value {value} for configuration {self.name}: String must be one of: {', '.join(self.choices)}"
                    )
        return v


TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef("cleanup.policy", "cleanup_policy", "str", "delete", "log.cleanup.policy", choices=("delete", "compact")),
    TopicConfigDef(
        "compression.type",
        "compression_type",
        "str",
        "producer",
        "compression.type",
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    TopicConfigDef("delete.retention.ms", "delete_retention_ms", "int", 86_400_000, "log.cleaner.delete.retention.ms", 0),
    TopicConfigDef("file.delete.delay.ms", "file_delete_delay_ms", "int", 60_000, "log.segment.delete.delay.ms", 0),
    TopicConfigDef("flush.messages", "flush_messages", "int", LONG_MAX, "log.flush.interval.messages", 1),
    TopicConfigDef("flush.ms", "flush_ms", "int", LONG_MAX, "log.flush.interval.ms", 0),
    TopicConfigDef("index.interval.bytes", "index_interval_bytes", "int", 4096, "log.index.interval.bytes", 0),
    TopicConfigDef("max.message.bytes", "max_message_bytes", "int", 1_048_588, "message.max.bytes", 0),
    TopicConfigDef(
        "message.timestamp.type",
        "message_timestamp_type",
        "str",
        "CreateTime",
        "log.message.timestamp.type",
        choices=("CreateTime", "LogAppendTime"),
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "int", LONG_MAX,
        "log.message.timestamp.before.max.ms", 0,
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "int", 3_600_000,
        "log.message.timestamp.after.max.ms", 0,
    ),
    TopicConfigDef("min.insync.replicas", "min_insync_replicas", "int", 1, "min.insync.replicas", 1),
    TopicConfigDef("preallocate", "preallocate", "bool", False, "log.preallocate"),
    TopicConfigDef("retention.bytes", "retention_bytes", "int", -1, "log.retention.bytes"),
    TopicConfigDef("retention.ms", "retention_ms", "int", 604_800_000, "log.retention.ms", -1),
    TopicConfigDef("segment.bytes", "segment_bytes", "int", 1_073_741_824, "log.segment.bytes", 14),
    TopicConfigDef("segment.index.bytes", "segment_index_bytes", "int", 10_485_760, "log.index.size.max.bytes", 4),
    TopicConfigDef("segment.jitter.ms", "segment_jitter_ms", "int", 0, "log.roll.jitter.ms", 0),
    TopicConfigDef("segment.ms", "segment_ms", "int", 604_800_000, "log.roll.ms", 1),
    TopicConfigDef("unclean.leader.election.enable", "unclean_leader_election_enable", "bool", False,
                   "unclean.leader.election.enable"),
    TopicConfigDef("remote.storage.enable", "remote_storage_enable", "bool", False, None),
    TopicConfigDef("local.retention.ms", "local_retention_ms", "int", -2, "log.local.retention.ms", -2),
    TopicConfigDef("local.retention.bytes", "local_retention_bytes", "int", -2, "log.local.retention.bytes", -2),
    TopicConfigDef("remote.log.copy.disable", "remote_log_copy_disable", "bool", False, None),
    TopicConfigDef("remote.log.delete.on.disable", "remote_log_delete_on_disable", "bool", False, None),
    TopicConfigDef("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "float", 0.5, "log.cleaner.min.cleanable.ratio", 0),
    TopicConfigDef("min.compaction.lag.ms", "min_compaction_lag_ms", "int", 0, "log.cleaner.min.compaction.lag.ms", 0),
    TopicConfigDef("max.compaction.lag.ms", "max_compaction_lag_ms", "int", LONG_MAX, "log.cleaner.max.compaction.lag.ms", 1),
    TopicConfigDef("follower.replication.throttled.replicas", "follower_replication_throttled_replicas", "str", "", None),
    TopicConfigDef("leader.replication.throttled.replicas", "leader_replication_throttled_replicas", "str", "", None),
)

TOPIC_CONFIGS_BY_NAME: dict[str, TopicConfigDef] = {d.name: d for d in TOPIC_CONFIGS}


@dataclass(frozen=True)
class LogConfig:
    cleanup_policy: str = "delete"
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    follower_replication_throttled_replicas: str = ""
    leader_replication_throttled_replicas: str = ""

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def effective_local_retention_ms(self) -> int:
        """-2 means "same as retention.ms" (KIP-405)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    def with_overrides(self, overrides: Mapping[str, Any]) -> "LogConfig":
        """A copy with topic-level overrides (Kafka names) applied; raises ConfigError on bad input."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in parse_topic_configs(overrides).items():
            values[TOPIC_CONFIGS_BY_NAME[name].attr] = value
        cfg = LogConfig(**values)
        validate_log_config(cfg)
        return cfg


def parse_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Parse topic-level configs by Kafka name; unknown names and bad values raise ConfigError."""
    out: dict[str, Any] = {}
    for name, value in configs.items():
        d = TOPIC_CONFIGS_BY_NAME.get(name)
        if d is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        out[name] = d.parse(value)
    return out


def validate_log_config(cfg: LogConfig) -> None:
    """Cross-field checks Kafka makes in LogConfig.validate."""
    if cfg.local_retention_ms != -2 and cfg.retention_ms != -1 and cfg.local_retention_ms > cfg.retention_ms:
        raise ConfigError(
            f"Value must not be more than retention.ms property value: local.retention.ms={cfg.local_retention_ms}"
        )
    if cfg.local_retention_bytes != -2 and cfg.retention_bytes != -1 and cfg.local_retention_bytes > cfg.retention_bytes:
        raise ConfigError(
            f"Value must not be more than retention.bytes property value: local.retention.bytes={cfg.local_retention_bytes}"
        )


def validate_topic_config_change(cfg: LogConfig, was_remote_enabled: bool, remote_system_enabled: bool) -> None:
    """The checks Kafka makes when a client creates a topic or alters its configs (LogConfig.validate
    with the broker's settings), on the combined config (defaults, broker synonyms, topic overrides).
    Not made when stored topic configs are loaded at start-up: a broker must still start with a topic
    that an older version, or a broker with tiering on, accepted."""
    if cfg.remote_storage_enable:
        if not remote_system_enabled:
            raise ConfigError(
                "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
            )
        # local retention of -1 (keep forever) would outlive a finite total retention
        if cfg.retention_bytes > -1 and cfg.local_retention_bytes == -1:
            raise ConfigError(
                f"Invalid value -1 for configuration local.retention.bytes: "
                f"Value must not be -1 as retention.bytes value is set as {cfg.retention_bytes}."
            )
        if cfg.retention_ms != -1 and cfg.local_retention_ms == -1:
            raise ConfigError(
                f"Invalid value -1 for configuration local.retention.ms: "
                f"Value must not be -1 as retention.ms value is set as {cfg.retention_ms}."
            )
        if cfg.remote_log_copy_disable:
            # KIP-950: nothing more is copied, so only the total retention may delete local data
            if cfg.local_retention_bytes != -2 and cfg.local_retention_bytes != cfg.retention_bytes:
                raise ConfigError(
                    "When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and `retention.bytes` "
                    "must be set to the identical value because there will be no more logs copied to the remote storage."
                )
            if cfg.local_retention_ms != -2 and cfg.local_retention_ms != cfg.retention_ms:
                raise ConfigError(
                    "When `remote.log.copy.disable` is set to true, the `local.retention.ms` and `retention.ms` "
                    "must be set to the identical value because there will be no more logs copied to the remote storage."
                )
    elif was_remote_enabled and not cfg.remote_log_delete_on_disable:
        raise ConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data "
            "and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
            "disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )
