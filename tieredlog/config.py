"""Broker configs under Apache Kafka's own property names.

A ``BrokerConfig`` is built from a ``server.properties`` file and ``--override key=value`` pairs. Every
known key has a type and a default; unknown keys are kept (and reported by name so the operator sees a
typo) and ``rsm.config.*`` / ``rlmm.config.*`` prefixes are passed through to the plugins untouched.
Invalid values raise ``BrokerConfigError`` so start-up can stop with one line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from tieredlog.log.config import LONG_MAX, TOPIC_CONFIGS, ConfigError, LogConfig

log = logging.getLogger(__name__)


class BrokerConfigError(ValueError):
    """An invalid broker config value; start-up stops with this message."""


@dataclass(frozen=True)
class BrokerConfigDef:
    name: str
    kind: str  # "int" | "bool" | "str" | "float" | "list"
    default: Any
    doc: str = ""
    minimum: float | None = None
    sensitive: bool = False


def _d(name: str, kind: str, default: Any, doc: str = "", minimum: float | None = None) -> BrokerConfigDef:
    return BrokerConfigDef(name, kind, default, doc, minimum)


# Broker-only settings. Broker synonyms of topic configs (log.segment.bytes, ...) come from TOPIC_CONFIGS.
_BROKER_DEFS: tuple[BrokerConfigDef, ...] = (
    _d("node.id", "int", -1, "broker id of this node (broker.id is its synonym)", -1),
    _d("broker.id", "int", -1, "synonym of node.id", -1),
    _d("listeners", "str", "PLAINTEXT://127.0.0.1:9092", "listener URIs"),
    _d("advertised.listeners", "str", None, "listener URIs handed to clients (defaults to listeners)"),
    _d("listener.security.protocol.map", "str", "PLAINTEXT:PLAINTEXT"),
    _d("inter.broker.listener.name", "str", None),
    _d("log.dirs", "str", None, "comma-separated data directories (overrides log.dir)"),
    _d("log.dir", "str", "./data", "data directory used when log.dirs is not set"),
    _d("num.partitions", "int", 1, "partitions of auto-created topics", 1),
    _d("default.replication.factor", "int", 1, "replication factor of auto-created topics", 1),
    _d("auto.create.topics.enable", "bool", True),
    _d("delete.topic.enable", "bool", True),
    _d("num.network.threads", "int", 3, "accepted for compatibility; one event loop serves all sockets", 1),
    _d("num.io.threads", "int", 8, "accepted for compatibility", 1),
    _d("num.recovery.threads.per.data.dir", "int", 1, "", 1),
    _d("num.replica.fetchers", "int", 1, "", 1),
    _d("socket.send.buffer.bytes", "int", 102400),
    _d("socket.receive.buffer.bytes", "int", 102400),
    _d("socket.request.max.bytes", "int", 104857600, "largest request frame accepted", 1),
    _d("queued.max.requests", "int", 500, "in-flight requests per connection before reading pauses", 1),
    _d("log.retention.hours", "int", 168, "", -1),
    _d("log.retention.minutes", "int", None, "", -1),
    _d("log.retention.check.interval.ms", "int", 300000, "", 1),
    _d("log.roll.hours", "int", 168, "", 1),
    _d("log.roll.jitter.hours", "int", 0, "", 0),
    _d("log.flush.scheduler.interval.ms", "int", LONG_MAX, "", 0),
    _d("log.flush.offset.checkpoint.interval.ms", "int", 60000, "", 0),
    _d("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, "", 0),
    _d("background.threads", "int", 10, "threads of the log's background work: retention, flushes, checkpoints, deletes", 1),
    # compaction (tieredlog.log.cleaner): Kafka's names and defaults. The topic-level ones
    # (log.cleaner.min.cleanable.ratio, .min/.max.compaction.lag.ms, .delete.retention.ms) are
    # synonyms of topic configs.
    _d("log.cleaner.enable", "bool", True, "run the log cleaner, which compacts cleanup.policy=compact topics"),
    _d("log.cleaner.threads", "int", 1, "cleaner threads", 0),
    _d("log.cleaner.dedupe.buffer.size", "int", 134217728,
       "memory of the cleaners' key maps, all threads together (24 bytes per key)", 0),
    _d("log.cleaner.io.buffer.size", "int", 524288, "the cleaners' I/O buffers, all threads together", 0),
    _d("log.cleaner.io.buffer.load.factor", "float", 0.9, "how full a cleaner's key map may get", 0),
    _d("log.cleaner.io.max.bytes.per.second", "float", 1.7976931348623157e308,
       "read plus write rate of the cleaners, all threads together", 0),
    _d("log.cleaner.backoff.ms", "int", 15000, "sleep of a cleaner that found nothing to clean", 0),
    # in a cluster: replicas of __consumer_offsets when the first FindCoordinator creates it (Kafka's
    # default); a broker alone ignores it
    _d("offsets.topic.replication.factor", "int", 3, "replicas of __consumer_offsets, created in a cluster", 1),
    _d("offsets.topic.num.partitions", "int", 50, "", 1),
    # the transaction coordinator (tieredlog.coordinator.transaction): Kafka's names and defaults
    _d("transaction.state.log.replication.factor", "int", 3,
       "replicas of __transaction_state, created in a cluster (fewer when fewer brokers are registered)", 1),
    _d("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state", 1),
    _d("transaction.state.log.num.partitions", "int", 50, "", 1),
    _d("transaction.state.log.segment.bytes", "int", 104857600, "segment.bytes of __transaction_state when created", 1),
    _d("transaction.max.timeout.ms", "int", 900000, "longest transaction.timeout.ms a producer may ask for", 1),
    _d("transactional.id.expiration.ms", "int", 604800000,
       "an idle transactional id's state is removed after this long", 1),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
       "how often the coordinator aborts transactions open past their timeout", 1),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, "", 1),
    _d("group.initial.rebalance.delay.ms", "int", 3000, "", 0),
    _d("group.min.session.timeout.ms", "int", 6000, "", 0),
    _d("group.max.session.timeout.ms", "int", 1800000, "", 0),
    # read by the group coordinator (tieredlog.coordinator.GroupConfig); Kafka's defaults and minimums
    _d("group.max.size", "int", 2**31 - 1, "most members a consumer group may have", 1),
    # KIP-848 consumer groups (tieredlog.coordinator.consumer_group)
    _d("group.coordinator.rebalance.protocols", "str", "classic,consumer",
       "group protocols served: classic (JoinGroup/SyncGroup) and consumer (ConsumerGroupHeartbeat)"),
    _d("group.consumer.assignors", "str", "uniform,range", "server-side assignors; the first is the default"),
    _d("group.consumer.session.timeout.ms", "int", 45000, "a consumer-protocol member without a heartbeat this long is removed", 1),
    _d("group.consumer.heartbeat.interval.ms", "int", 5000, "heartbeat interval handed to consumer-protocol members", 1),
    _d("group.consumer.max.size", "int", 2**31 - 1, "most members a consumer-protocol group may have", 1),
    _d("offset.metadata.max.bytes", "int", 4096, "largest metadata string of a committed offset", 0),
    _d("offsets.topic.segment.bytes", "int", 104857600, "segment.bytes of __consumer_offsets when created", 1),
    _d("offsets.retention.minutes", "int", 10080,
       "committed offsets of an Empty group (or a standalone consumer's) are removed this long after it emptied", 1),
    _d("offsets.retention.check.interval.ms", "int", 600000, "how often the group coordinator removes expired offsets", 1),
    _d("offsets.commit.timeout.ms", "int", 5000,
       "in a cluster, how long an offset commit or a group's assignment waits for the ISR", 1),
    _d("producer.id.expiration.ms", "int", 86400000, "", 1),
    _d("replica.lag.time.max.ms", "int", 30000, "", 0),
    # replication (tieredlog.replication): Kafka's names and defaults
    _d("replica.fetch.wait.max.ms", "int", 500, "longest a follower's fetch waits at the leader", 0),
    _d("replica.fetch.min.bytes", "int", 1, "", 1),
    _d("replica.fetch.max.bytes", "int", 1048576, "bytes per partition a follower fetch asks for", 0),
    _d("replica.fetch.response.max.bytes", "int", 10485760, "", 0),
    _d("replica.fetch.backoff.ms", "int", 1000, "pause after a failed follower fetch", 0),
    _d("max.incremental.fetch.session.cache.slots", "int", 1000, "incremental fetch sessions (KIP-227) kept", 0),
    _d("replica.socket.timeout.ms", "int", 30000, "", 1),
    _d("replica.high.watermark.checkpoint.interval.ms", "int", 5000, "", 1),
    _d("request.timeout.ms", "int", 30000, "", 0),
    _d("controlled.shutdown.enable", "bool", True, "move leaderships away before stopping (SIGTERM)"),
    _d("controlled.shutdown.max.retries", "int", 3, "", 0),
    _d("controlled.shutdown.retry.backoff.ms", "int", 5000, "", 0),
    # the controller (tieredlog.controller): Kafka's names and defaults
    _d("auto.leader.rebalance.enable", "bool", True, "move leadership back to preferred replicas periodically"),
    _d("leader.imbalance.check.interval.seconds", "int", 300, "", 1),
    _d("leader.imbalance.per.broker.percentage", "int", 10, "share of a broker's preferred partitions it may not lead", 0),
    _d("security.inter.broker.protocol", "str", "PLAINTEXT", "inter-broker protocol when inter.broker.listener.name is unset"),
    _d("controller.socket.timeout.ms", "int", 30000, "socket timeout of the controller's connections to brokers", 0),
    # authorization (tieredlog.security.authorizer): Kafka's names and defaults
    _d("authorizer.class.name", "str", "",
       "empty: no authorization; kafka.security.authorizer.AclAuthorizer or "
       "org.apache.kafka.metadata.authorizer.StandardAuthorizer: the built-in ACL authorizer"),
    _d("super.users", "str", None, "principals allowed everything, separated by semicolons (User:admin;User:broker)"),
    _d("allow.everyone.if.no.acl.found", "bool", False, "allow a resource no ACL applies to"),
    _d("zookeeper.connect", "str", None),
    _d("zookeeper.session.timeout.ms", "int", 18000),
    _d("zookeeper.connection.timeout.ms", "int", None),
    _d("cluster.id", "str", None, "cluster id; generated and kept in meta.properties when unset"),
    _d("broker.rack", "str", None),
    _d("metrics.port", "int", -1, "Prometheus metrics HTTP port; -1 disables", -1),
    _d("metrics.host", "str", "127.0.0.1", "address the Prometheus metrics endpoint binds"),
    # Tiered storage (KIP-405), Kafka's names; tieredlog enables the remote tier by default.
    _d("remote.log.storage.system.enable", "bool", True, "start the RemoteLogManager"),
    _d("remote.log.storage.manager.class.name", "str", "local", "RSM short name or module:Class"),
    _d("remote.log.storage.manager.class.path", "str", None),
    _d("remote.log.storage.manager.impl.prefix", "str", "rsm.config."),
    _d("remote.log.metadata.manager.class.name", "str", "topic"),
    _d("remote.log.metadata.manager.class.path", "str", None),
    _d("remote.log.metadata.manager.impl.prefix", "str", "rlmm.config."),
    _d("remote.log.metadata.manager.listener.name", "str", None),
    _d("remote.log.metadata.custom.metadata.max.bytes", "int", 128, "", 0),
    _d("remote.log.index.file.cache.total.size.bytes", "int", 1073741824, "", 1),
    _d("remote.log.manager.thread.pool.size", "int", 10, "", 1),
    _d("remote.log.manager.copier.thread.pool.size", "int", -1, "-1 means remote.log.manager.thread.pool.size", -1),
    _d("remote.log.manager.expiration.thread.pool.size", "int", -1, "-1 means remote.log.manager.thread.pool.size", -1),
    _d("remote.log.manager.task.interval.ms", "int", 30000, "", 1),
    _d("remote.log.manager.task.retry.backoff.ms", "int", 500, "", 1),
    _d("remote.log.manager.task.retry.backoff.max.ms", "int", 30000, "", 1),
    _d("remote.log.manager.task.retry.jitter", "float", 0.2, "", 0),
    _d("remote.log.reader.threads", "int", 10, "", 1),
    _d("remote.log.reader.max.pending.tasks", "int", 100, "", 1),
    _d("remote.log.manager.copy.max.bytes.per.second", "int", LONG_MAX, "", 1),
    _d("remote.log.manager.copy.quota.window.num", "int", 11, "", 1),
    _d("remote.log.manager.copy.quota.window.size.seconds", "int", 1, "", 1),
    _d("remote.log.manager.fetch.max.bytes.per.second", "int", LONG_MAX, "", 1),
    _d("remote.log.manager.fetch.quota.window.num", "int", 11, "", 1),
    _d("remote.log.manager.fetch.quota.window.size.seconds", "int", 1, "", 1),
    _d("remote.fetch.max.wait.ms", "int", 500, "how long a Fetch waits for the remote tier", 1),
    _d("remote.list.offsets.request.timeout.ms", "int", 30000, "", 1),
)

# topic config broker synonyms (log.segment.bytes -> segment.bytes); values validated by the topic defs.
BROKER_SYNONYMS: dict[str, str] = {d.broker_synonym: d.name for d in TOPIC_CONFIGS if d.broker_synonym}
_TOPIC_DEF_BY_SYNONYM = {d.broker_synonym: d for d in TOPIC_CONFIGS if d.broker_synonym}

BROKER_CONFIG_DEFS: dict[str, BrokerConfigDef] = {d.name: d for d in _BROKER_DEFS}
for _td in TOPIC_CONFIGS:
    if _td.broker_synonym and _td.broker_synonym not in BROKER_CONFIG_DEFS:
        BROKER_CONFIG_DEFS[_td.broker_synonym] = BrokerConfigDef(
            _td.broker_synonym, _td.kind, _td.default, f"default of topic config {_td.name}", _td.minimum
        )

PASSTHROUGH_PREFIXES = ("rsm.config.", "rlmm.config.")
_PREFIX_KEYS = ("remote.log.storage.manager.impl.prefix", "remote.log.metadata.manager.impl.prefix")


def _passthrough_prefixes(props: Mapping[str, Any]) -> tuple[str, ...]:
    """The RSM and RLMM prefixes in force: Kafka hands the keys under the configured
    ``remote.log.*.impl.prefix`` to the plugins, so those (not the defaults) are pass-through.
    An empty prefix passes nothing: it would otherwise swallow every typo."""
    out = []
    for key in _PREFIX_KEYS:
        value = props.get(key)
        prefix = BROKER_CONFIG_DEFS[key].default if value is None else str(value).strip()
        if prefix:
            out.append(prefix)
    return tuple(out)


def _parse_value(d: BrokerConfigDef, raw: Any) -> Any:
    if raw is None:
        return None
    s = str(raw).strip()
    try:
        if d.kind == "int":
            v: Any = int(s)
        elif d.kind == "float":
            v = float(s)
        elif d.kind == "bool":
            if s.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            v = s.lower() == "true"
        else:
            return s
    except ValueError:
        raise BrokerConfigError(f"Invalid value {raw!r} for configuration {d.name}: expected {d.kind}") from None
    if d.minimum is not None and v < d.minimum:
        raise BrokerConfigError(f"Invalid value {raw!r} for configuration {d.name}: Value must be at least {d.minimum:g}")
    return v


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(value: str, key: str = "listeners") -> list[Listener]:
    out: list[Listener] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        if "://" not in item:
            raise BrokerConfigError(f"Invalid value {value!r} for configuration {key}: expected NAME://host:port")
        name, rest = item.split("://", 1)
        host, sep, port_s = rest.rpartition(":")
        if not sep or not port_s.isdigit() or int(port_s) > 65535:
            raise BrokerConfigError(f"Invalid value {value!r} for configuration {key}: bad port in {item!r}")
        out.append(Listener(name.upper(), host.strip("[]"), int(port_s)))
    if not out:
        raise BrokerConfigError(f"Invalid value {value!r} for configuration {key}: no listener")
    return out


def read_properties(path: str | Path) -> dict[str, str]:
    """Java .properties subset: `key=value` or `key: value`, `#`/`!` comments, blank lines."""
    props: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                props[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            props[line] = ""
    return props


@dataclass
class BrokerConfig:
    """Resolved broker configs. ``values`` holds every key by Kafka name; ``explicit`` the keys the
    operator set (DescribeConfigs reports those as STATIC_BROKER_CONFIG)."""

    values: dict[str, Any]
    explicit: frozenset[str] = frozenset()
    unknown: tuple[str, ...] = ()
    passthrough: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None, *, warn: bool = True) -> "BrokerConfig":
        props = dict(props or {})
        values: dict[str, Any] = {n: d.default for n, d in BROKER_CONFIG_DEFS.items()}
        unknown: list[str] = []
        passthrough: dict[str, str] = {}
        prefixes = _passthrough_prefixes(props)
        for key, raw in props.items():
            d = BROKER_CONFIG_DEFS.get(key)
            if d is None and key.startswith(prefixes):
                passthrough[key] = str(raw)
                continue
            if d is None:
                unknown.append(key)
                continue
            if key in _TOPIC_DEF_BY_SYNONYM:
                try:
                    values[key] = _TOPIC_DEF_BY_SYNONYM[key].parse(raw)
                except ConfigError as exc:
                    raise BrokerConfigError(str(exc).replace(_TOPIC_DEF_BY_SYNONYM[key].name, key, 1)) from None
            else:
                values[key] = _parse_value(d, raw)
        if warn:
            for key in unknown:
                log.warning("unknown broker config %s ignored", key)
        cfg = cls(values, frozenset(k for k in props if k in BROKER_CONFIG_DEFS), tuple(unknown), passthrough)
        cfg._validate()
        return cfg

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = (), *, warn: bool = True) -> "BrokerConfig":
        props: dict[str, Any] = read_properties(path) if path else {}
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise BrokerConfigError(f"Invalid override {item!r}: expected key=value")
            props[key.strip()] = value.strip()
        return cls.from_props(props, warn=warn)

    def _validate(self) -> None:
        self._validate_authorizer()
        nid, bid = self.values["node.id"], self.values["broker.id"]
        if nid >= 0 and bid >= 0 and nid != bid:
            raise BrokerConfigError(f"node.id {nid} and broker.id {bid} differ")
        parse_listeners(self.values["listeners"])
        if self.values["advertised.listeners"]:
            parse_listeners(self.values["advertised.listeners"], "advertised.listeners")
        try:
            self.default_log_config()
        except ConfigError as exc:
            raise BrokerConfigError(str(exc)) from None

    def _validate_authorizer(self) -> None:
        from tieredlog.security.authorizer import check_authorizer_class_name, parse_super_users

        try:
            check_authorizer_class_name(self.values["authorizer.class.name"])
            parse_super_users(self.values["super.users"])
        except ValueError as exc:
            raise BrokerConfigError(str(exc)) from None

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def node_id(self) -> int:
        nid = self.values["node.id"]
        if nid < 0:
            nid = self.values["broker.id"]
        return max(nid, 0)

    @property
    def log_dirs(self) -> list[Path]:
        raw = self.values["log.dirs"] or self.values["log.dir"]
        return [Path(p.strip()) for p in raw.split(",") if p.strip()]

    @property
    def listeners(self) -> list[Listener]:
        return parse_listeners(self.values["listeners"])

    @property
    def advertised_listeners(self) -> list[Listener]:
        adv = self.values["advertised.listeners"]
        return parse_listeners(adv, "advertised.listeners") if adv else self.listeners

    def plugin_configs(self, prefix: str) -> dict[str, str]:
        """Configs under a pass-through prefix with the prefix stripped (what RSM.configure gets).
        An empty prefix passes nothing, as it passes nothing through at load time."""
        if not prefix:
            return {}
        return {k[len(prefix) :]: v for k, v in self.passthrough.items() if k.startswith(prefix)}

    def _retention_ms(self) -> int:
        # Kafka: log.retention.ms > log.retention.minutes > log.retention.hours
        if "log.retention.ms" in self.explicit:
            return self.values["log.retention.ms"]
        if self.values["log.retention.minutes"] is not None:
            return self.values["log.retention.minutes"] * 60_000
        hours = self.values["log.retention.hours"]
        return -1 if hours < 0 else hours * 3_600_000

    def _roll_ms(self) -> int:
        if "log.roll.ms" in self.explicit:
            return self.values["log.roll.ms"]
        return self.values["log.roll.hours"] * 3_600_000

    def default_log_config(self) -> LogConfig:
        """The broker-wide LogConfig every topic starts from (broker synonyms applied)."""
        overrides: dict[str, Any] = {}
        for syn, d in _TOPIC_DEF_BY_SYNONYM.items():
            if syn in self.explicit:
                overrides[d.name] = self.values[syn]
        overrides["retention.ms"] = self._retention_ms()
        overrides["segment.ms"] = self._roll_ms()
        if "log.roll.jitter.ms" not in self.explicit and self.values["log.roll.jitter.hours"]:
            overrides["segment.jitter.ms"] = self.values["log.roll.jitter.hours"] * 3_600_000
        return LogConfig().with_overrides(overrides)

    def broker_value_for_topic_config(self, topic_config: str) -> tuple[Any, bool]:
        """(value, set explicitly by the operator) of the broker default behind a topic config."""
        cfg = self.default_log_config()
        from tieredlog.log.config import TOPIC_CONFIGS_BY_NAME

        d = TOPIC_CONFIGS_BY_NAME[topic_config]
        explicit = d.broker_synonym is not None and (
            d.broker_synonym in self.explicit
            or (topic_config == "retention.ms" and ({"log.retention.minutes", "log.retention.hours"} & self.explicit))
            or (topic_config == "segment.ms" and "log.roll.hours" in self.explicit)
        )
        return getattr(cfg, d.attr), bool(explicit)
