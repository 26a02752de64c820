"""Broker configs under Apache Kafka's own property names.

A ``BrokerConfig`` is built from a ``server.properties`` file and ``--override key=value`` pairs. Every
known key has a type and a default; unknown keys are kept (and reported by name so the operator sees a
typo) and ``rsm.config.*`` / ``rlmm.config.*`` prefixes are passed through to the plugins untouched.
Invalid values raise ``BrokerConfigError`` so start-up can stop with one line.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from tieredlog.log.config import LONG_MAX, TOPIC_CONFIGS, ConfigError, LogConfig
from tieredlog.security.principal import parse_super_users
from tieredlog.security.ssl_principal import InvalidMappingRule, SslPrincipalMapper

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
    # a "password" config is sensitive: held as a Password, never shown (Kafka's Type.PASSWORD)
    return BrokerConfigDef(name, kind, default, doc, minimum, sensitive=kind == "password")


class Password:
    """A secret config value (Kafka's ``Password``): its text is ``value``; printed, logged or put in
    an error message it reads ``[hidden]``, so a config dump or a traceback never shows it."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default map: every protocol is also a listener name of its own
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
LISTENER_PREFIX = "listener.name."
SSL_CLIENT_AUTH_VALUES = ("required", "requested", "none")
# Kafka's built-in authorizers (ZooKeeper mode, KRaft): both name the one ACL authorizer of this broker
AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
})


def check_authorizer_class_name(value: str | None) -> bool:
    """True when an authorizer is configured; ValueError for a class this broker does not have."""
    name = (value or "").strip()
    if not name:
        return False
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"authorizer.class.name {name!r} is not available; use one of "
                         f"{', '.join(sorted(AUTHORIZER_CLASS_NAMES))} (the built-in ACL authorizer) or leave it empty")
    return True


# Broker-only settings. Broker synonyms of topic configs (log.segment.bytes, ...) come from TOPIC_CONFIGS.
_BROKER_DEFS: tuple[BrokerConfigDef, ...] = (
    _d("node.id", "int", -1, "broker id of this node (broker.id is its synonym)", -1),
    _d("broker.id", "int", -1, "synonym of node.id", -1),
    _d("listeners", "str", "PLAINTEXT://127.0.0.1:9092", "listener URIs"),
    _d("advertised.listeners", "str", None, "listener URIs handed to clients (defaults to listeners)"),
    _d("listener.security.protocol.map", "str", DEFAULT_SECURITY_PROTOCOL_MAP,
       "NAME:PROTOCOL pairs; a listener named after a protocol needs no entry"),
    _d("inter.broker.listener.name", "str", None, "listener brokers and the controller use to reach each other"),
    # TLS (tieredlog.security.tls_config), Kafka's names and defaults; each may be set for one listener as
    # listener.name.<listener in lower case>.<config>, which takes precedence. Key stores are PEM only.
    _d("ssl.keystore.type", "str", "JKS", "PEM is the only type read; Kafka's default JKS is refused"),
    _d("ssl.keystore.location", "str", None, "PEM file with the private key and the certificate chain"),
    _d("ssl.keystore.password", "password", None, "not used with PEM (refused, as Kafka)"),
    _d("ssl.key.password", "password", None, "password of an encrypted private key"),
    _d("ssl.keystore.key", "password", None, "the private key inline, PEM"),
    _d("ssl.keystore.certificate.chain", "password", None, "the certificate chain inline, PEM"),
    _d("ssl.truststore.type", "str", "JKS", "PEM is the only type read; Kafka's default JKS is refused"),
    _d("ssl.truststore.location", "str", None, "PEM file of trusted certificates"),
    _d("ssl.truststore.password", "password", None, "not used with PEM (refused, as Kafka)"),
    _d("ssl.truststore.certificates", "password", None, "trusted certificates inline, PEM"),
    _d("ssl.client.auth", "str", "none", "required | requested | none: client certificates on SSL listeners"),
    _d("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions a connection may use"),
    _d("ssl.protocol", "str", "TLSv1.3", "highest TLS version of the broker's own connections"),
    _d("ssl.cipher.suites", "list", "", "cipher suites (IANA or OpenSSL names); empty: OpenSSL's defaults"),
    _d("ssl.endpoint.identification.algorithm", "str", "https",
       "https: the broker's own connections check the peer's host name; empty: they do not"),
    _d("ssl.principal.mapping.rules", "str", "DEFAULT", "client certificate subject to principal name rules"),
    _d("ssl.allow.dn.changes", "bool", False, "a key store changed live may change its certificate's subject"),
    _d("ssl.allow.san.changes", "bool", False, "a key store changed live may drop subject alternative names"),
    # Kafka's encoder of the password configs stored as dynamic broker configs
    _d("password.encoder.secret", "password", None, "secret the stored dynamic passwords are encrypted with"),
    _d("password.encoder.old.secret", "password", None, "the previous secret, to read passwords stored with it"),
    _d("password.encoder.keyfactory.algorithm", "str", None, "PBKDF2 algorithm (PBKDF2WithHmacSHA512 when unset)"),
    _d("password.encoder.cipher.algorithm", "str", "AES/CBC/PKCS5Padding", "cipher of the stored passwords"),
    _d("password.encoder.key.length", "int", 128, "key length of the stored passwords' cipher, bits", 8),
    _d("password.encoder.iterations", "int", 4096, "PBKDF2 iterations", 1024),
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
    # connection limits (tieredlog.server.connection_quotas), Kafka's names and defaults; max.connections
    # also per listener as listener.name.<l>.max.connections
    _d("max.connections", "int", 2147483647, "connections the broker accepts, all listeners but the inter-broker one", 0),
    _d("max.connections.per.ip", "int", 2147483647, "connections from one IP address", 0),
    _d("max.connections.per.ip.overrides", "str", "", "host:count,host:count: per-IP limits of some addresses"),
    _d("connections.max.idle.ms", "int", 600000, "a connection that sends no request for this long is closed", 1),
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
    _d("transaction.partition.verification.enable", "bool", True,
       "a partition leader asks the coordinator before appending a producer's first transactional batch (KIP-890)"),
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
    _d("group.consumer.migration.policy", "str", "bidirectional",
       "KIP-848 online migration between classic and consumer groups: bidirectional, upgrade, downgrade or disabled"),
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
    _d("replica.selector.class", "str", None,
       "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector sends consumers with a client.rack "
       "to an in-sync replica on their rack; unset: consumers read from leaders"),
    # KIP-73 replication throttles (dynamic), bytes/s for the replicas the topics' *.replication.throttled.replicas name
    _d("leader.replication.throttled.rate", "int", LONG_MAX, "", 0),
    _d("follower.replication.throttled.rate", "int", LONG_MAX, "", 0),
    _d("replication.quota.window.num", "int", 11, "", 1),
    _d("replication.quota.window.size.seconds", "int", 1, "the throttles allow a burst of this many seconds' bytes", 1),
    _d("request.timeout.ms", "int", 30000, "", 0),
    _d("controlled.shutdown.enable", "bool", True, "move leaderships away before stopping (SIGTERM)"),
    _d("controlled.shutdown.max.retries", "int", 3, "", 0),
    _d("controlled.shutdown.retry.backoff.ms", "int", 5000, "", 0),
    # the controller (tieredlog.controller): Kafka's names and defaults
    _d("auto.leader.rebalance.enable", "bool", True, "move leadership back to preferred replicas periodically"),
    _d("leader.imbalance.check.interval.seconds", "int", 300, "", 1),
    _d("leader.imbalance.per.broker.percentage", "int", 10, "share of a broker's preferred partitions it may not lead", 0),
    _d("security.inter.broker.protocol", "str", "PLAINTEXT",
       "inter-broker listener (the one of this name) when inter.broker.listener.name is unset"),
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
    _d("metrics.port", "int", 9404, "Prometheus metrics HTTP port; -1 disables", -1),
    _d("metrics.host", "str", "127.0.0.1", "address the Prometheus metrics endpoint binds"),
    # SASL (tieredlog.security.sasl), Kafka's names and defaults. Per listener: listener.name.<l>.<config>,
    # and a mechanism's JAAS as listener.name.<l>.<mechanism in lower case>.sasl.jaas.config.
    _d("sasl.enabled.mechanisms", "list", "GSSAPI",
       "mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and OAUTHBEARER are refused)"),
    _d("sasl.mechanism.inter.broker.protocol", "str", "GSSAPI", "mechanism of the broker's own SASL connections"),
    _d("sasl.jaas.config", "password", None,
       "JAAS login module of every SASL listener and mechanism without a listener.name.<l>.<mechanism>.sasl.jaas.config"),
    _d("connections.max.reauth.ms", "int", 0,
       "KIP-368: a SASL session lasts this long, then the client re-authenticates or is disconnected; 0: forever", 0),
    _d("sasl.server.max.receive.size", "int", 524288, "largest request a connection may send before it authenticated", 1),
    _d("connection.failed.authentication.delay.ms", "int", 100,
       "a failed authentication's answer and close wait this long (slows password guessing)", 0),
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
    # tieredlog only: Kafka's remote reads do not read ahead
    _d("remote.log.reader.read.ahead.max.bytes", "int", 134217728,
       "memory all catch-up readers of the remote tier may hold read ahead of them; 0: no read-ahead", 0),
    _d("remote.log.manager.copy.max.bytes.per.second", "int", LONG_MAX, "", 1),
    _d("remote.log.manager.copy.quota.window.num", "int", 11, "", 1),
    _d("remote.log.manager.copy.quota.window.size.seconds", "int", 1, "", 1),
    _d("remote.log.manager.fetch.max.bytes.per.second", "int", LONG_MAX, "", 1),
    _d("remote.log.manager.fetch.quota.window.num", "int", 11, "", 1),
    _d("remote.log.manager.fetch.quota.window.size.seconds", "int", 1, "", 1),
    # tieredlog only: the object-store prices the console's monthly cost estimate uses (USD); the
    # defaults are S3 Standard's in US East (N. Virginia), first 50 TB (docs/console.md gives the date)
    _d("remote.log.cost.storage.per.gb.month", "float", 0.023, "object-store price of a GB stored for a month", 0),
    _d("remote.log.cost.put.per.1000.requests", "float", 0.005, "price of 1,000 PUT, COPY, POST or LIST requests", 0),
    _d("remote.log.cost.get.per.1000.requests", "float", 0.0004, "price of 1,000 GET and other requests", 0),
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


def _parse_value(d: BrokerConfigDef, raw: Any, key: str | None = None) -> Any:
    if raw is None:
        return None
    if d.kind == "password":
        # kept whole: a PEM block or a password may end in spaces that matter
        return raw if isinstance(raw, Password) else Password(str(raw))
    s = str(raw).strip()
    name = key or d.name
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
        raise BrokerConfigError(f"Invalid value {raw!r} for configuration {name}: expected {d.kind}") from None
    if d.minimum is not None and v < d.minimum:
        raise BrokerConfigError(f"Invalid value {raw!r} for configuration {name}: Value must be at least {d.minimum:g}")
    return v


def parse_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` (a host name or an IP address;
    an IPv6 address before its last colon) -> host -> count."""
    out: dict[str, int] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        try:
            n = int(count)
        except ValueError:
            n = -1
        if not sep or not host.strip() or n < 0:
            raise BrokerConfigError(f"Invalid value {value} for configuration max.connections.per.ip.overrides: "
                                    f"expected host:count,host:count, found {item.strip()!r}")
        out[host.strip()] = n
    return out


def is_sensitive_config(name: str) -> bool:
    """Whether a broker config's value must never be shown (DescribeConfigs answers it as null with
    is_sensitive, as Kafka). A listener-prefixed name is as sensitive as the config it overrides; a name
    of no known type is sensitive, as Kafka treats it (a SASL mechanism's ``<mechanism>.sasl.jaas.config``,
    a plugin's password)."""
    if name.startswith(LISTENER_PREFIX):
        name = name[len(LISTENER_PREFIX):].partition(".")[2]
    d = BROKER_CONFIG_DEFS.get(name)
    if d is not None:
        return d.sensitive
    return True


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def config_prefix(self) -> str:
        """Kafka's prefix of this listener's own configs: ``listener.name.<name in lower case>.``."""
        return f"{LISTENER_PREFIX}{self.name.lower()}."


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
        out.append(Listener(name.strip().upper(), host.strip("[]"), int(port_s)))
    if not out:
        raise BrokerConfigError(f"Invalid value {value!r} for configuration {key}: no listener")
    return out


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map``, Kafka's ``NAME:PROTOCOL,...``: listener name (upper case, as
    Kafka normalises it) to security protocol."""
    out: dict[str, str] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        if not sep or not name.strip():
            raise BrokerConfigError(f"Error parsing configuration property 'listener.security.protocol.map': "
                                    f"expected NAME:PROTOCOL, not {item!r}")
        protocol = proto.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise BrokerConfigError(f"Invalid security protocol `{proto.strip()}` defined in listener.security.protocol.map")
        out[name.strip().upper()] = protocol
    return out


def _with_protocols(listeners: list[Listener], protocols: Mapping[str, str], key: str, value: str) -> list[Listener]:
    out = []
    for l in listeners:
        protocol = protocols.get(l.name)
        if protocol is None:
            raise BrokerConfigError(f"Error creating broker listeners from '{value}': "
                                    f"No security protocol defined for listener {l.name}")
        out.append(Listener(l.name, l.host, l.port, protocol))
    if len({l.name for l in out}) != len(out):
        raise BrokerConfigError(f"Each listener must have a different name, {key}: {value}")
    ports = [l.port for l in out if l.port != 0]
    if key == "listeners" and len(set(ports)) != len(ports):
        raise BrokerConfigError(f"Each listener must have a different port, listeners: {value}")
    return out


@functools.lru_cache(maxsize=16)
def _protocol_map(value: str) -> tuple[tuple[str, str], ...]:
    return tuple(parse_security_protocol_map(value).items())


@functools.lru_cache(maxsize=16)
def _listeners(value: str, protocol_map: str, key: str) -> tuple[Listener, ...]:
    # handlers read the listeners on every request: parsed once per distinct value
    return tuple(_with_protocols(parse_listeners(value, key), dict(_protocol_map(protocol_map)), key, value))


def read_properties(path: str | Path) -> dict[str, str]:
    r"""A Java .properties file as Kafka reads server.properties: ``key=value``, ``key: value`` or
    ``key value``; ``#``/``!`` comment lines; a line ending in an odd number of backslashes goes on on
    the next one (its leading blanks dropped); backslash escapes (``\\`` is one backslash, ``\t``,
    ``\n``, ``\uXXXX``). Regular expressions (``ssl.principal.mapping.rules``) and PEM blocks written
    for Kafka therefore read the same here."""
    props: dict[str, str] = {}
    lines = iter(Path(path).read_text().splitlines())
    for raw in lines:
        line = raw.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1] + next(lines, "").lstrip(" \t\f")
        key, value = _split_property(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    while i < n and line[i] in " \t\f":
        i += 1
    if i < n and line[i] in "=:":
        i += 1
        while i < n and line[i] in " \t\f":
            i += 1
    return key, line[i:]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= n:
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                raise BrokerConfigError(f"Malformed \\uxxxx encoding in {text[i : i + 6]!r}") from None
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


@dataclass
class BrokerConfig:
    """Resolved broker configs. ``values`` holds every key by Kafka name; ``explicit`` the keys the
    operator set (DescribeConfigs reports those as STATIC_BROKER_CONFIG)."""

    values: dict[str, Any]
    explicit: frozenset[str] = frozenset()
    unknown: tuple[str, ...] = ()
    passthrough: dict[str, str] = field(default_factory=dict)
    # Kafka's per-listener configs, ``listener.name.<listener>.<config>``: listener name (lower case, as
    # in the key) -> config -> value; the config's own type when it is a known one, else its text
    listener_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None, *, warn: bool = True) -> "BrokerConfig":
        props = dict(props or {})
        values: dict[str, Any] = {n: d.default for n, d in BROKER_CONFIG_DEFS.items()}
        unknown: list[str] = []
        passthrough: dict[str, str] = {}
        listener_overrides: dict[str, dict[str, Any]] = {}
        prefixes = _passthrough_prefixes(props)
        for key, raw in props.items():
            d = BROKER_CONFIG_DEFS.get(key)
            if d is None and key.startswith(prefixes):
                passthrough[key] = str(raw)
                continue
            if d is None and key.startswith(LISTENER_PREFIX):
                listener, _, name = key[len(LISTENER_PREFIX):].partition(".")
                # Kafka reads a listener's configs under its name in lower case only
                if listener and name and listener == listener.lower():
                    inner = BROKER_CONFIG_DEFS.get(name)
                    listener_overrides.setdefault(listener, {})[name] = (
                        _parse_value(inner, raw, key) if inner is not None else str(raw))
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
        cfg = cls(values, frozenset(k for k in props if k in BROKER_CONFIG_DEFS), tuple(unknown), passthrough,
                  listener_overrides)
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
        self._validate_listeners()
        parse_ip_overrides(self.values["max.connections.per.ip.overrides"])
        if self.values["max.connections.per.ip"] == 0 and not self.values["max.connections.per.ip.overrides"]:
            raise BrokerConfigError("max.connections.per.ip can be set to zero only if "
                                    "max.connections.per.ip.overrides property is set.")
        try:
            self.default_log_config()
        except ConfigError as exc:
            raise BrokerConfigError(str(exc)) from None

    def _validate_listeners(self) -> None:
        """Kafka's checks of listeners, their protocols and the inter-broker listener, with its messages."""
        listener_names = [l.name for l in self.listeners]
        advertised = self.advertised_listeners
        advertised_names = [l.name for l in advertised]
        if not set(advertised_names) <= set(listener_names):
            raise BrokerConfigError(
                "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
                f"Found {','.join(advertised_names)}. The valid options based on the current configuration are "
                f"{','.join(listener_names)}")
        if any(l.host == "0.0.0.0" for l in advertised):
            raise BrokerConfigError(
                "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address.")
        inter_broker, _ = self.inter_broker_listener
        if inter_broker not in advertised_names:
            raise BrokerConfigError(
                "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options "
                f"based on currently configured listeners are {','.join(advertised_names)}")
        scopes: list[tuple[str, Mapping[str, Any]]] = [("", self.values)]
        scopes += [(f"{LISTENER_PREFIX}{name}.", configs) for name, configs in self.listener_overrides.items()]
        for prefix, configs in scopes:
            auth = configs.get("ssl.client.auth")
            if auth is not None and auth not in SSL_CLIENT_AUTH_VALUES:
                raise BrokerConfigError(f"Invalid value {auth} for configuration {prefix}ssl.client.auth: "
                                        f"String must be one of: {', '.join(SSL_CLIENT_AUTH_VALUES)}")
            rules = configs.get("ssl.principal.mapping.rules")
            if rules is not None:
                try:
                    SslPrincipalMapper(rules)
                except InvalidMappingRule as exc:
                    raise BrokerConfigError(f"Invalid value {rules} for configuration "
                                            f"{prefix}ssl.principal.mapping.rules: {exc}") from None

    def _validate_authorizer(self) -> None:
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
    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map``: listener name -> security protocol."""
        return dict(_protocol_map(self.values["listener.security.protocol.map"]))

    @property
    def listeners(self) -> list[Listener]:
        """The listeners to bind, each with its security protocol."""
        return list(_listeners(self.values["listeners"], self.values["listener.security.protocol.map"], "listeners"))

    @property
    def advertised_listeners(self) -> list[Listener]:
        adv = self.values["advertised.listeners"]
        if not adv:
            return self.listeners
        return list(_listeners(adv, self.values["listener.security.protocol.map"], "advertised.listeners"))

    def advertised_listener(self, name: str) -> Listener | None:
        """The advertised endpoint of listener ``name``: what a Metadata request arriving on that
        listener answers for this broker (Kafka's rule: each listener hands out its own endpoints)."""
        return next((l for l in self.advertised_listeners if l.name == name.upper()), None)

    @property
    def inter_broker_listener(self) -> tuple[str, str]:
        """(name, security protocol) of the listener brokers reach each other on: Kafka's rule,
        ``inter.broker.listener.name``, else the listener named ``security.inter.broker.protocol``."""
        name = self.values["inter.broker.listener.name"]
        if name:
            if "security.inter.broker.protocol" in self.explicit:
                raise BrokerConfigError(
                    "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
            listener = name.strip().upper()
            protocol = self.security_protocol_map.get(listener)
            if protocol is None:
                raise BrokerConfigError(f"Listener with name {listener} defined in inter.broker.listener.name "
                                        "not found in listener.security.protocol.map.")
            return listener, protocol
        protocol = str(self.values["security.inter.broker.protocol"]).strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise BrokerConfigError(f"Invalid security protocol `{self.values['security.inter.broker.protocol']}` "
                                    "defined in security.inter.broker.protocol")
        return protocol, protocol

    def listener_value(self, listener: str, name: str) -> Any:
        """A config as one listener sees it: ``listener.name.<listener>.<name>`` when set, else ``name``."""
        own = self.listener_overrides.get(listener.lower())
        if own is not None and name in own:
            return own[name]
        return self.values.get(name)

    def listener_key(self, listener: str, name: str) -> str:
        """The key ``listener_value`` took its value from (for messages naming the config at fault)."""
        own = self.listener_overrides.get(listener.lower())
        return f"{LISTENER_PREFIX}{listener.lower()}.{name}" if own is not None and name in own else name

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
