"""DescribeConfigs' config sources and synonyms, computed as Kafka's broker computes them.

A config's synonyms are the broker configs that could give it its value, level by level: this
broker's dynamic configs (DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default
(DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties (STATIC_BROKER_CONFIG), then the built-in defaults
(DEFAULT_CONFIG); within a level in the order of the config's synonym names (``log.retention.ms``,
``.minutes``, ``.hours``). Kafka then drops every entry before the first one named like the config
itself, so ``log.retention.ms`` with nothing set has no synonym at all (it has no default: the 7 days
are ``log.retention.hours``'), and neither has a topic's ``retention.ms``. A topic config's list is
its own override (DYNAMIC_TOPIC_CONFIG), then the synonyms of its first broker config. The config's
source is the first synonym's, or DEFAULT_CONFIG when there is none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from tieredlog.config import BROKER_CONFIG_DEFS, LISTENER_PREFIX

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.log.config import TopicConfigDef

# ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's broker configs defined without a default value: they have no DEFAULT_CONFIG synonym
NO_DEFAULT = frozenset({"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms",
                        "log.flush.interval.ms"})
# names that stand for one another, most specific first (Kafka's brokerConfigSynonyms)
_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
# set per listener and SASL mechanism: listener.name.<l>.<mechanism>.<config>
_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                      "sasl.server.callback.handler.class", "connections.max.reauth.ms")

Synonym = dict[str, Any]


def fmt(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def broker_synonym_names(name: str) -> list[str]:
    """The broker config names behind ``name``, most specific first."""
    if name == "log.flush.interval.ms":
        return [name, "log.flush.scheduler.interval.ms"]  # the scheduler interval is its default
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    if name.startswith(LISTENER_PREFIX):
        base = name[len(LISTENER_PREFIX):].partition(".")[2]
        if base:
            return [name, next((m for m in _MECHANISM_CONFIGS if base.endswith(m)), base)]
    return [name]


class _Levels:
    """The four levels a broker config is looked up in, as (ConfigSource, name -> value) lookups."""

    def __init__(self, static: BrokerConfig, default: Mapping[str, str], per_broker: Mapping[str, str]) -> None:
        self.static = static
        self.default = default
        self.per_broker = per_broker

    def _static(self, name: str) -> tuple[bool, str | None]:
        if name.startswith(LISTENER_PREFIX):
            listener, _, base = name[len(LISTENER_PREFIX):].partition(".")
            values = self.static.listener_overrides.get(listener, {})
            return (True, fmt(values[base])) if base in values else (False, None)
        if name in self.static.explicit:
            return True, fmt(self.static.values.get(name))
        if name in self.static.passthrough:
            return True, self.static.passthrough[name]
        return False, None

    @staticmethod
    def _default(name: str) -> tuple[bool, str | None]:
        d = BROKER_CONFIG_DEFS.get(name)
        if d is None or d.default is None or name in NO_DEFAULT:
            return False, None
        return True, fmt(d.default)

    def lookup(self, source: int, name: str) -> tuple[bool, str | None]:
        if source == DYNAMIC_BROKER_CONFIG:
            return (True, self.per_broker[name]) if name in self.per_broker else (False, None)
        if source == DYNAMIC_DEFAULT_BROKER_CONFIG:
            return (True, self.default[name]) if name in self.default else (False, None)
        if source == STATIC_BROKER_CONFIG:
            return self._static(name)
        return self._default(name)


def config_synonyms(static: BrokerConfig, default: Mapping[str, str], per_broker: Mapping[str, str],
                    name: str, sensitive: bool = False) -> list[Synonym]:
    """Kafka's synonyms of broker config ``name`` (values hidden when ``sensitive``)."""
    levels = _Levels(static, default, per_broker)
    names = broker_synonym_names(name)
    out: list[Synonym] = []
    for source in (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG):
        for n in names:
            found, value = levels.lookup(source, n)
            if found:
                out.append({"name": n, "value": None if sensitive else value, "source": source})
    # e.g. a listener's override is no synonym of the base config, nor log.retention.ms of .hours
    first = next((i for i, s in enumerate(out) if s["name"] == name), len(out))
    return out[first:]


def topic_config_synonyms(static: BrokerConfig, default: Mapping[str, str], per_broker: Mapping[str, str],
                          d: TopicConfigDef, overrides: Mapping[str, str], value: str | None) -> list[Synonym]:
    """Kafka's synonyms of topic config ``d``: the topic's override, then its first broker config's."""
    out = config_synonyms(static, default, per_broker, d.broker_synonym) if d.broker_synonym else []
    if d.name in overrides:
        out.insert(0, {"name": d.name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
    return out


def source_of(synonyms: list[Synonym]) -> int:
    return synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
