"""Dynamic broker configs (Kafka's DynamicBrokerConfig): values set with AlterConfigs /
IncrementalAlterConfigs on a BROKER resource, without a restart.

Two levels above ``server.properties``: the cluster-wide default (resource name ``""``, stored as
``<default>``) and this broker's own (resource name = its id). Precedence: per-broker, cluster default,
static, built-in default. In a cluster both levels live in ZooKeeper at ``/config/brokers/<entity>``
(``{"version":1,"config":{...}}``, a ``brokers/<entity>`` change notification tells every broker);
alone, in ``dynamic-broker-configs.json`` in the first log dir.

The blocking helpers here (file and ZooKeeper I/O) are called on executor threads by the Broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol, Sequence

from tieredlog.atomic_file import atomic_write
from tieredlog.cluster import znodes
from tieredlog.config import (
    BROKER_CONFIG_DEFS,
    BROKER_SYNONYMS,
    LISTENER_PREFIX,
    BrokerConfig,
    BrokerConfigError,
    is_sensitive_config,
)
from tieredlog.errors import InvalidConfigError, InvalidRequestError, KafkaError
from tieredlog.log.cleaner.log_cleaner import LogCleaner
from tieredlog.log.types import TopicPartition
from tieredlog.security.password_encoder import PasswordEncoder, PasswordEncoderError
from tieredlog.server.config_synonyms import broker_synonym_names
from tieredlog.server.dynamic_threads import THREAD_DYNAMIC, ThreadPoolServer, check_thread_counts, resize_thread_pools
from tieredlog.server.dynamic_tls import RECONFIGURABLE_SSL_CONFIGS
from tieredlog.server.kafka_broker_configs import (
    KAFKA_BROKER_CONFIGS,
    KAFKA_BROKER_QUOTA_CONFIGS,
    KAFKA_DYNAMIC_BROKER_CONFIGS,
    KAFKA_PASSWORD_CONFIGS,
    KAFKA_PER_BROKER_CONFIGS,
)
from tieredlog.server.log_cleaner_config import cleaner_config_of

if TYPE_CHECKING:
    from tieredlog.cluster.membership import ZkClusterMembership
    from tieredlog.cluster.zk import ZkClient
    from tieredlog.log.config import LogConfig
    from tieredlog.log.log_manager import LogManager
    from tieredlog.server.topic_store import TopicMetadata

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"
CONFIG_BROKERS_PATH = "/config/brokers"
FILE_NAME = "dynamic-broker-configs.json"

# Kafka's reconfigurable broker configs that this broker applies live. Kafka's other dynamic ones that
# this broker reads only at start (network and I/O thread counts, listeners) are refused rather than
# accepted and ignored, so an operator never believes a change took effect when it did not. Those it
# does not implement at all, and custom names, are stored as Kafka stores them (plugins read them),
# with one warning each.
_LOG_DYNAMIC = frozenset(BROKER_SYNONYMS) | {
    "log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours",
}
# Kafka's LogCleaner.ReconfigurableConfigs (a new thread count or buffer size restarts the cleaner threads)
_CLEANER_DYNAMIC = frozenset({"log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms", "log.cleaner.threads",
                              "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
                              "log.cleaner.io.buffer.load.factor"})
_REMOTE_DYNAMIC = frozenset({"remote.log.manager.copy.max.bytes.per.second",
                             "remote.log.manager.fetch.max.bytes.per.second",
                             "remote.log.index.file.cache.total.size.bytes",
                             "remote.log.reader.read.ahead.max.bytes"}) | THREAD_DYNAMIC
_CONNECTION_DYNAMIC = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})
# KIP-73: kafka-reassign-partitions.sh --throttle sets them on the brokers of a move
_REPLICATION_DYNAMIC = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})
DYNAMIC_CONFIGS: frozenset[str] = frozenset(_REPLICATION_DYNAMIC | _LOG_DYNAMIC | _CLEANER_DYNAMIC | _REMOTE_DYNAMIC | _CONNECTION_DYNAMIC)


def listener_config(name: str) -> tuple[str, str] | None:
    """(listener, config) of a ``listener.name.<listener>.<config>`` name (listener in lower case, as
    Kafka reads them), else None."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, base = name[len(LISTENER_PREFIX):].partition(".")
    return (listener, base) if listener and base and listener == listener.lower() else None


def is_dynamic(name: str) -> bool:
    # the key and trust stores change per listener only (Kafka's DynamicSecurityConfigs)
    prefixed = listener_config(name)
    return name in DYNAMIC_CONFIGS or (prefixed is not None and prefixed[1] in RECONFIGURABLE_SSL_CONFIGS)


def entity_path(entity: str) -> str:
    return f"{CONFIG_BROKERS_PATH}/{entity}"


# Kafka's listener configs that may be set cluster-wide under a listener prefix
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})


def is_stored_only(name: str) -> bool:
    """A name this broker accepts and stores without using it, as Kafka stores what it does not know:
    a Kafka dynamic config not implemented here, or a custom one (plugins read them)."""
    if name in BROKER_CONFIG_DEFS:
        return False
    if listener_config(name) is not None:
        # a listener's own value of such a config (a SASL mechanism's prefix stripped)
        base = broker_synonym_names(name)[1]
        return not is_dynamic(name) and base not in BROKER_CONFIG_DEFS and is_stored_only(base)
    return name not in KAFKA_BROKER_CONFIGS or name in KAFKA_DYNAMIC_BROKER_CONFIGS \
        or name in KAFKA_BROKER_QUOTA_CONFIGS


def is_password(name: str) -> bool:
    """Hidden in DescribeConfigs and encrypted when stored. A stored-only name is a password when it is
    one of Kafka's; a custom one is stored as sent but never shown (Kafka cannot know its type)."""
    if is_stored_only(name):
        return name in KAFKA_PASSWORD_CONFIGS
    return is_sensitive_config(name)


def check_per_broker(entity: str, names: Any) -> None:
    """Kafka refuses the listeners' security and SASL configs at the cluster-wide default level."""
    def per_broker(n: str) -> bool:
        prefixed = listener_config(n)
        if prefixed is not None:
            return (is_dynamic(n) or is_stored_only(n)) and prefixed[1] not in _CLUSTER_LEVEL_LISTENER_CONFIGS
        return n in KAFKA_PER_BROKER_CONFIGS and n not in DYNAMIC_CONFIGS and n not in RECONFIGURABLE_SSL_CONFIGS

    refused = sorted(n for n in names if per_broker(n))
    if entity == DEFAULT_ENTITY and refused:
        raise InvalidRequestError("Cannot update these configs at default cluster level, broker id must be "
                                  f"specified: Set({', '.join(refused)})")


def check_names(names: Any) -> None:
    """Refuse names that cannot be set dynamically, with Kafka's words: its known configs that are
    not dynamic (here: not dynamic in this broker either), and its SSL configs without a listener."""
    unprefixed = sorted(n for n in names if n in RECONFIGURABLE_SSL_CONFIGS)
    static = sorted(n for n in names if not is_dynamic(n) and not is_stored_only(n) and n not in unprefixed)
    if static:
        raise InvalidRequestError(f"Cannot update these configs dynamically: Set({', '.join(static)})")
    if unprefixed:
        raise InvalidRequestError("These security configs can be dynamically updated only per-listener using "
                                  f"the listener prefix: Set({', '.join(unprefixed)})")


@dataclasses.dataclass
class DynamicBrokerConfig:
    static: BrokerConfig
    node_id: int
    default: dict[str, str] = dataclasses.field(default_factory=dict)
    per_broker: dict[str, str] = dataclasses.field(default_factory=dict)
    # told the new effective config after each change, on the event loop (Kafka's Reconfigurable):
    # what holds a copy of a dynamic value, such as the network layer's connection limits
    reconfigurables: list[Callable[[BrokerConfig], None]] = dataclasses.field(default_factory=list)
    # awaited with the would-be config and the level set before a change is stored (a new TLS key store is built and
    # checked off the loop); a KafkaError refuses the change
    validators: list[Callable[[BrokerConfig, Mapping[str, str]], Awaitable[None]]] = dataclasses.field(
        default_factory=list)
    # the stored-only names already logged
    warned_stored_only: set[str] = dataclasses.field(default_factory=set)

    def level(self, entity: str) -> dict[str, str]:
        return self.default if entity == DEFAULT_ENTITY else self.per_broker

    def effective(self, default: Mapping[str, str] | None = None,
                  per_broker: Mapping[str, str] | None = None) -> BrokerConfig:
        """The static config with the dynamic levels on top (the current ones unless given).
        BrokerConfigError for a value that does not parse or validate."""
        merged = {**(self.default if default is None else default),
                  **(self.per_broker if per_broker is None else per_broker)}
        merged = {k: v for k, v in merged.items() if is_dynamic(k)}
        if not merged:
            return self.static
        parsed = BrokerConfig.from_props(merged, warn=False)
        listener_overrides = {name: dict(c) for name, c in self.static.listener_overrides.items()}
        for name, c in parsed.listener_overrides.items():
            listener_overrides.setdefault(name, {}).update(c)
        named = [k for k in merged if k in BROKER_CONFIG_DEFS]
        cfg = dataclasses.replace(self.static, values={**self.static.values, **{k: parsed.values[k] for k in named}},
                                  explicit=self.static.explicit | frozenset(named),
                                  listener_overrides=listener_overrides)
        cfg.default_log_config()  # cross-config checks (retention.bytes vs local.retention.bytes...)
        return cfg

    def warn_stored_only(self, configs: Mapping[str, str]) -> None:
        """One line per name, the first time a stored-only config is seen."""
        for name in sorted(configs):
            if name not in self.warned_stored_only and is_stored_only(name):
                self.warned_stored_only.add(name)
                log.warning("dynamic broker config %s is stored but not used by this broker", name)


# ---- persistence (blocking: executor threads only) --------------------------------------------------

def encode_passwords(encoder: PasswordEncoder, configs: Mapping[str, str]) -> dict[str, str]:
    """The level as stored: its password configs encrypted (Kafka's toPersistentProps)."""
    try:
        return {k: encoder.encode(v) if is_password(k) else v for k, v in configs.items()}
    except PasswordEncoderError as exc:
        raise InvalidRequestError(str(exc)) from None


def decode_passwords(encoder: PasswordEncoder, entity: str, configs: Mapping[str, str]) -> dict[str, str]:
    """The level as stored, its passwords decrypted; one that cannot be is left out with one line, as Kafka."""
    out = {}
    for k, v in configs.items():
        if is_password(k):
            try:
                v = encoder.decode(v)
            except PasswordEncoderError as exc:
                log.error("dynamic password config %s of %s could not be decoded, ignoring: %s", k, entity, exc)
                continue
        out[k] = v
    return out


def load_file(log_dir: Path) -> dict[str, dict[str, str]]:
    path = log_dir / FILE_NAME
    if not path.exists():
        return {}
    js = json.loads(path.read_text("utf-8"))
    return {str(e): {str(k): str(v) for k, v in (c or {}).items()} for e, c in (js.get("brokers") or {}).items()}


def save_file(log_dir: Path, levels: Mapping[str, Mapping[str, str]]) -> None:
    data = {"version": 1, "brokers": {e: dict(c) for e, c in levels.items() if c}}
    atomic_write(log_dir / FILE_NAME, json.dumps(data, sort_keys=True, indent=1).encode())


def read_zk(zk: ZkClient, entity: str) -> dict[str, str]:
    got = zk.get_data(entity_path(entity))
    return znodes.decode_topic_config(got[0]) if got else {}


def write_zk(zk: ZkClient, entity: str, configs: Mapping[str, str]) -> None:
    """Write the entity's configs, then tell every broker (Kafka's change notification)."""
    from kazoo.exceptions import NodeExistsError, NoNodeError

    from tieredlog.cluster.config_changes import notify_config_change

    path, data = entity_path(entity), znodes.encode_topic_config(configs)
    try:
        zk.kazoo.set(path, data)
    except NoNodeError:
        try:
            zk.kazoo.create(path, data, makepath=True)
        except NodeExistsError:
            zk.kazoo.set(path, data)
    notify_config_change(zk, f"brokers/{entity}")


def validate_values(dyn: DynamicBrokerConfig, entity: str, configs: Mapping[str, str]) -> BrokerConfig:
    """The effective config were ``entity``'s level ``configs``; InvalidConfigError when it is not valid."""
    try:
        if entity == DEFAULT_ENTITY:
            return dyn.effective(default=configs)
        return dyn.effective(per_broker=configs)
    except BrokerConfigError as exc:
        raise InvalidConfigError(str(exc)) from None


# ---- the Broker's side (event loop) ------------------------------------------------------------------

class DynamicConfigServer(ThreadPoolServer, Protocol):
    """What loading, altering and applying dynamic configs needs of the broker: the two configs it
    replaces, and the parts that take a new config at once."""

    config: BrokerConfig
    default_log_config: LogConfig

    @property
    def node_id(self) -> int: ...

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    @property
    def dynamic_config(self) -> DynamicBrokerConfig: ...

    @property
    def cluster(self) -> ZkClusterMembership | None: ...

    @property
    def log_manager(self) -> LogManager | None: ...

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...

    def effective_log_config(self, overrides: dict[str, str]) -> LogConfig: ...


def apply(broker: DynamicConfigServer, default: Mapping[str, str], per_broker: Mapping[str, str]) -> None:
    """Make ``default`` and ``per_broker`` the dynamic levels in force: the broker's config, the log
    default, every log whose topic does not override a changed config, and the cleaner's throttle."""
    dyn = broker.dynamic_config
    cfg = dyn.effective(default, per_broker)
    dyn.default, dyn.per_broker = dict(default), dict(per_broker)
    dyn.warn_stored_only({**default, **per_broker})
    broker.config = cfg
    broker.default_log_config = cfg.default_log_config()
    for reconfigure in dyn.reconfigurables:
        reconfigure(cfg)
    lm = broker.log_manager
    if lm is None:
        return  # start-up: the logs load with these
    lm.default_config = broker.default_log_config
    # straight to the logs: no broker synonym turns tiering on or off, so the topic config listeners
    # (the remote tier's leadership bookkeeping) have nothing to learn
    for t in list(broker.topics.values()):
        try:
            log_config = broker.effective_log_config(t.configs)
        except KafkaError as exc:
            log.warning("topic %s keeps its configs: %s", t.name, exc)
            continue
        for p in range(t.partitions):
            plog = lm.get_log(TopicPartition(t.name, p))
            if plog is not None:
                plog.config = log_config
    if lm.cleaner is not None:
        lm.cleaner.reconfigure(cleaner_config_of(cfg))
    if broker.replica_manager is not None:
        broker.replica_manager.update_replication_throttles(int(cfg["leader.replication.throttled.rate"]),
                                                            int(cfg["follower.replication.throttled.rate"]))
    rlm = broker.remote_log_manager
    if rlm is not None:
        rlm.copy_quota.update_quota(int(cfg["remote.log.manager.copy.max.bytes.per.second"]))
        rlm.fetch_quota.update_quota(int(cfg["remote.log.manager.fetch.max.bytes.per.second"]))
        rlm.remote_cleaner.update_io_rate(float(cfg["log.cleaner.io.max.bytes.per.second"]))
        # a smaller bound takes effect as readers release what they hold
        rlm.read_path.prefetch.max_bytes = int(cfg["remote.log.reader.read.ahead.max.bytes"])
        size = int(cfg["remote.log.index.file.cache.total.size.bytes"])
        if size != rlm.index_cache.max_size_bytes:
            # shrinking deletes evicted index files: not on the event loop
            asyncio.get_running_loop().run_in_executor(None, rlm.index_cache.resize, size)
    resize_thread_pools(broker, cfg)


async def load(broker: DynamicConfigServer) -> None:
    """Start-up, before the logs load: the stored dynamic levels."""
    loop = asyncio.get_running_loop()
    own = str(broker.node_id)
    if broker.cluster is not None:
        zk = broker.cluster.zk
        default = await loop.run_in_executor(None, read_zk, zk, DEFAULT_ENTITY)
        per_broker = await loop.run_in_executor(None, read_zk, zk, own)
    else:
        levels = await loop.run_in_executor(None, load_file, broker.log_dirs[0])
        default, per_broker = levels.get(DEFAULT_ENTITY, {}), levels.get(own, {})
    encoder = PasswordEncoder.of(broker.dynamic_config.static)
    default = await loop.run_in_executor(None, decode_passwords, encoder, DEFAULT_ENTITY, default)
    per_broker = await loop.run_in_executor(None, decode_passwords, encoder, own, per_broker)
    try:
        apply(broker, default, per_broker)
    except BrokerConfigError as exc:
        log.warning("stored dynamic broker configs ignored: %s", exc)


def on_change(broker: DynamicConfigServer, loop: asyncio.AbstractEventLoop, entity: str) -> None:
    """The config change listener's thread: a brokers/<entity> notification."""
    if entity not in (DEFAULT_ENTITY, str(broker.node_id)) or broker.cluster is None:
        return
    configs = decode_passwords(PasswordEncoder.of(broker.dynamic_config.static), entity,
                               read_zk(broker.cluster.zk, entity))

    def on_loop() -> None:
        dyn = broker.dynamic_config
        default = configs if entity == DEFAULT_ENTITY else dyn.default
        per_broker = dyn.per_broker if entity == DEFAULT_ENTITY else configs
        try:
            apply(broker, default, per_broker)
        except BrokerConfigError as exc:
            log.warning("dynamic broker configs of %s ignored: %s", entity, exc)
            return
        shown = {k: "[hidden]" if is_sensitive_config(k) else v for k, v in configs.items()}
        log.info("dynamic broker configs of %s are now %s", entity, shown)

    if not loop.is_closed():
        loop.call_soon_threadsafe(on_loop)


def check_cleaner(broker: DynamicConfigServer, new: BrokerConfig) -> None:
    """Kafka's LogCleaner.validateReconfiguration: INVALID_REQUEST with its message."""
    cleaner = broker.log_manager.cleaner if broker.log_manager is not None else None
    if cleaner is None:
        return
    try:
        LogCleaner.validate_reconfiguration(cleaner.config, cleaner_config_of(new))
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


async def alter_broker_configs(broker: DynamicConfigServer, entity: str, configs: Mapping[str, str], validate_only: bool) -> None:
    """Replace the level ``entity`` with ``configs`` (names already checked): stored (ZooKeeper or the
    file) before it is applied, so an answered change survives a restart."""
    dyn = broker.dynamic_config
    check_per_broker(entity, configs)
    new = validate_values(dyn, entity, configs)
    check_thread_counts(broker.config, new)
    check_cleaner(broker, new)
    for validate in dyn.validators:
        await validate(new, configs)
    if validate_only:
        return
    configs = dict(configs)
    loop = asyncio.get_running_loop()
    encoder = PasswordEncoder.of(dyn.static)
    if broker.cluster is not None:
        stored = await loop.run_in_executor(None, encode_passwords, encoder, configs)
        await loop.run_in_executor(None, write_zk, broker.cluster.zk, entity, stored)
    else:
        levels = {DEFAULT_ENTITY: dyn.default, str(broker.node_id): dyn.per_broker, entity: configs}
        stored_levels = {e: await loop.run_in_executor(None, encode_passwords, encoder, c) for e, c in levels.items()}
        await loop.run_in_executor(None, save_file, broker.log_dirs[0], stored_levels)
    if entity == DEFAULT_ENTITY:
        apply(broker, configs, dyn.per_broker)
    else:
        apply(broker, dyn.default, configs)
