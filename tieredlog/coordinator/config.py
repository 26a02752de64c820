"""Group coordinator settings, under Kafka's broker config names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Properties(Protocol):
    """A key -> value lookup: a dict, or the broker's BrokerConfig."""

    def get(self, key: str, default: Any = None) -> Any: ...


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024  # offsets.topic.segment.bytes
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes, as Kafka's OffsetConfig holds it
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # KIP-848 consumer groups
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer")  # group.coordinator.rebalance.protocols
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = 2**31 - 1  # group.consumer.max.size
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy

    @property
    def online_upgrade(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def online_downgrade(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "downgrade")

    @property
    def consumer_protocol_enabled(self) -> bool:
        return "consumer" in self.rebalance_protocols

    @classmethod
    def from_properties(cls, props: Properties) -> "GroupConfig":
        """Build from a key -> value mapping (values may be strings, as in server.properties)."""
        names = {
            "group.min.session.timeout.ms": "min_session_timeout_ms",
            "group.max.session.timeout.ms": "max_session_timeout_ms",
            "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
            "group.max.size": "max_size",
            "offsets.topic.num.partitions": "offsets_topic_num_partitions",
            "offset.metadata.max.bytes": "offset_metadata_max_bytes",
            "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
            "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
            "group.consumer.session.timeout.ms": "consumer_session_timeout_ms",
            "group.consumer.heartbeat.interval.ms": "consumer_heartbeat_interval_ms",
            "group.consumer.max.size": "consumer_max_size",
        }
        values: dict[str, Any] = {}
        for key, attr in names.items():
            raw = props.get(key)
            if raw is not None and raw != "":
                values[attr] = int(raw)
        for key, attr in (("group.coordinator.rebalance.protocols", "rebalance_protocols"),
                          ("group.consumer.assignors", "consumer_assignors")):
            raw = props.get(key)
            if raw is not None:
                values[attr] = tuple(p.strip().lower() for p in str(raw).split(",") if p.strip())
        policy = props.get("group.consumer.migration.policy")
        if policy is not None and policy != "":
            values["consumer_migration_policy"] = str(policy).strip().lower()
        retention_minutes = props.get("offsets.retention.minutes")
        if retention_minutes is not None and retention_minutes != "":
            values["offsets_retention_ms"] = int(retention_minutes) * 60_000
        config = cls(**values)
        if config.offsets_topic_num_partitions < 1:
            raise ValueError("offsets.topic.num.partitions must be at least 1")
        if config.min_session_timeout_ms > config.max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms exceeds group.max.session.timeout.ms")
        if config.offsets_retention_ms < 60_000:
            raise ValueError("offsets.retention.minutes must be at least 1")
        unknown = set(config.rebalance_protocols) - {"classic", "consumer"}
        if unknown or "classic" not in config.rebalance_protocols:
            raise ValueError("group.coordinator.rebalance.protocols must include classic and may add consumer")
        bad = set(config.consumer_assignors) - {"uniform", "range"}
        if bad or not config.consumer_assignors:
            raise ValueError(f"group.consumer.assignors: unknown assignor(s) {sorted(bad)}; known: uniform, range")
        if config.consumer_migration_policy not in ("bidirectional", "upgrade", "downgrade", "disabled"):
            raise ValueError("group.consumer.migration.policy must be one of bidirectional, upgrade, downgrade, disabled")
        if config.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets.retention.check.interval.ms must be at least 1")
        return config
