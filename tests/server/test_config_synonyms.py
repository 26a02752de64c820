"""DescribeConfigs with synonyms, against the answers Kafka's broker computes (ConfigHelper): a real broker
process with ``log.retention.hours=72`` and ``log.message.timestamp.type=LogAppendTime`` in its
server.properties, asked through the project's client (which keeps the order and the levels of one
name) and confluent-kafka's AdminClient.

Kafka lists a config's synonyms level by level (this broker's dynamic configs, the cluster-wide
default, server.properties, the built-in defaults), within a level in the order of the synonym names
(log.retention.ms, .minutes, .hours), then drops everything before the first entry named like the
config itself: ``log.retention.ms`` has no default (the 7 days are ``log.retention.hours``'), so a
topic's ``retention.ms`` with nothing set dynamically has no synonym at all, even when its value comes
from the static ``log.retention.hours``.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from dynamic_config_harness import alter_cluster_default, describe_synonyms

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import DESCRIBE_CONFIGS

pytestmark = pytest.mark.integration

TOPIC_CONFIG, BROKER, DEFAULT_BROKER, STATIC, DEFAULT = 1, 2, 3, 4, 5
HOURS_72 = str(72 * 3_600_000)

# topic "plain" (nothing set) and "override" (retention.ms, segment.bytes set): (config, value, source, synonyms)
BEFORE = [
    ("plain", "retention.ms", HOURS_72, DEFAULT, []),
    ("plain", "segment.ms", "604800000", DEFAULT, []),
    ("plain", "flush.ms", "9223372036854775807", DEFAULT, []),
    ("plain", "segment.bytes", "1073741824", DEFAULT, [("log.segment.bytes", "1073741824", DEFAULT)]),
    ("plain", "cleanup.policy", "delete", DEFAULT, [("log.cleanup.policy", "delete", DEFAULT)]),
    ("plain", "min.insync.replicas", "1", DEFAULT, [("min.insync.replicas", "1", DEFAULT)]),
    ("plain", "message.timestamp.type", "LogAppendTime", STATIC, [
        ("log.message.timestamp.type", "LogAppendTime", STATIC), ("log.message.timestamp.type", "CreateTime", DEFAULT)]),
    ("plain", "message.timestamp.after.max.ms", "3600000", DEFAULT, [
        ("log.message.timestamp.after.max.ms", "3600000", DEFAULT)]),
    ("plain", "remote.storage.enable", "false", DEFAULT, []),
    ("override", "retention.ms", "1000", TOPIC_CONFIG, [("retention.ms", "1000", TOPIC_CONFIG)]),
    ("override", "segment.bytes", "1048576", TOPIC_CONFIG, [
        ("segment.bytes", "1048576", TOPIC_CONFIG), ("log.segment.bytes", "1073741824", DEFAULT)]),
]
BROKER_BEFORE = [
    ("log.retention.ms", []),
    ("log.retention.hours", [("log.retention.hours", "72", STATIC), ("log.retention.hours", "168", DEFAULT)]),
    ("log.segment.bytes", [("log.segment.bytes", "1073741824", DEFAULT)]),
]

# after the cluster-wide default log.retention.ms=7200000, log.segment.bytes=2097152 and this broker's
# log.retention.minutes=180 (log.retention.ms wins over the minutes, whatever their levels)
RETENTION_LEVELS = [("log.retention.ms", "7200000", DEFAULT_BROKER), ("log.retention.hours", "72", STATIC),
                    ("log.retention.hours", "168", DEFAULT)]
AFTER = [
    ("plain", "retention.ms", "7200000", DEFAULT_BROKER, RETENTION_LEVELS),
    ("plain", "segment.bytes", "2097152", DEFAULT_BROKER, [
        ("log.segment.bytes", "2097152", DEFAULT_BROKER), ("log.segment.bytes", "1073741824", DEFAULT)]),
    ("override", "retention.ms", "1000", TOPIC_CONFIG, [("retention.ms", "1000", TOPIC_CONFIG), *RETENTION_LEVELS]),
    ("plain", "cleanup.policy", "delete", DEFAULT, [("log.cleanup.policy", "delete", DEFAULT)]),
]
BROKER_AFTER = [
    ("0", "log.retention.ms", RETENTION_LEVELS),
    ("0", "log.retention.minutes", [("log.retention.minutes", "180", BROKER), *RETENTION_LEVELS]),
    ("0", "log.retention.hours", [("log.retention.hours", "72", STATIC), ("log.retention.hours", "168", DEFAULT)]),
    ("0", "log.segment.bytes", [("log.segment.bytes", "2097152", DEFAULT_BROKER),
                                ("log.segment.bytes", "1073741824", DEFAULT)]),
    # the cluster-wide default resource: that level alone
    ("", "log.retention.ms", [("log.retention.ms", "7200000", DEFAULT_BROKER)]),
]


def _entry(bootstrap: str, rtype: int, name: str, config: str) -> tuple[str | None, int]:
    with KafkaClient(bootstrap) as c:
        resp = c.request(DESCRIBE_CONFIGS, {"resources": [{"resource_type": rtype, "resource_name": name,
                                                           "configuration_keys": [config]}],
                                            "include_synonyms": True, "include_documentation": False}, version=4)
    (entry,) = resp.results[0].configs
    return entry.value, entry.config_source


def _check_topics(bootstrap: str, table: list[tuple[str, str, str, int, list[Any]]]) -> None:
    for topic, config, value, source, synonyms in table:
        assert _entry(bootstrap, 2, topic, config) == (value, source), (topic, config)
        assert describe_synonyms(bootstrap, 2, topic, config) == synonyms, (topic, config)


def test_describe_configs_synonyms_as_kafka_computes_them(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({"log.retention.hours": "72", "log.message.timestamp.type": "LogAppendTime"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("plain", 1, 1), NewTopic(
            "override", 1, 1, config={"retention.ms": "1000", "segment.bytes": "1048576"})]).values():
        f.result(30)

    _check_topics(b.bootstrap, BEFORE)
    for config, synonyms in BROKER_BEFORE:
        assert describe_synonyms(b.bootstrap, 4, "0", config) == synonyms, config
    assert _entry(b.bootstrap, 4, "0", "log.retention.ms")[1] == DEFAULT

    # the same through librdkafka (it always asks for synonyms, and keys them by name)
    (future,) = admin.describe_configs([ConfigResource("TOPIC", "plain")]).values()
    described = future.result(30)
    retention, segment = described["retention.ms"], described["segment.bytes"]
    assert (retention.source, dict(retention.synonyms)) == (ConfigSource.DEFAULT_CONFIG.value, {})
    assert segment.source == ConfigSource.DEFAULT_CONFIG.value
    assert [(s.name, s.value, s.source) for s in segment.synonyms.values()] == [
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG.value)]

    assert alter_cluster_default(b.bootstrap, log_retention_ms=("SET", "7200000"),
                          log_segment_bytes=("SET", "2097152")) == ("none", None)
    assert alter_cluster_default(b.bootstrap, name="0", log_retention_minutes=("SET", "180")) == ("none", None)
    _check_topics(b.bootstrap, AFTER)
    for resource, config, synonyms in BROKER_AFTER:
        assert describe_synonyms(b.bootstrap, 4, resource, config) == synonyms, (resource, config)
