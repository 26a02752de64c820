"""Dynamic broker configs on a real broker process, through confluent-kafka's AdminClient:
cluster-wide and per-broker levels, what topics without an override pick up, refusals, validate_only,
persistence across a restart, DELETE reverting to the static value."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from dynamic_config_harness import alter_cluster_default, describe_synonyms

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import ALTER_CONFIGS, DESCRIBE_CONFIGS

BROKER = ConfigResource.Type.BROKER
TOPIC = ConfigResource.Type.TOPIC


def _describe_default(bootstrap: str) -> dict[str, tuple[str | None, int]]:
    with KafkaClient(bootstrap) as c:
        resp = c.request(DESCRIBE_CONFIGS, {"resources": [{"resource_type": 4, "resource_name": "",
                                                           "configuration_keys": None}],
                                            "include_synonyms": True, "include_documentation": False}, version=4)
    return {e.name: (e.value, e.config_source) for e in resp.results[0].configs}


def _incremental(admin: AdminClient, name: str, validate_only: bool = False, **ops: tuple[str, str | None]) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=getattr(AlterConfigOpType, op))
               for k, (op, v) in ops.items()]
    res = ConfigResource(BROKER, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)


def _describe(admin: AdminClient, rtype: ConfigResource.Type, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(30)


def _error(admin: AdminClient, name: str, config: str, value: str) -> KafkaException:
    res = ConfigResource(BROKER, name, incremental_configs=[
        ConfigEntry(config, value, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(30)
    return info.value


def _log_start(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dyn-wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        c.close()


def test_dynamic_broker_configs(broker_factory) -> None:
    b = broker_factory({"log.retention.ms": "86400000", "log.retention.check.interval.ms": "200"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("dyn-t", 1, 1, config={"segment.bytes": "2000"}),
                         NewTopic("dyn-own", 1, 1, config={"retention.bytes": "-1", "segment.bytes": "2000"})])[
        "dyn-t"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for topic in ("dyn-t", "dyn-own"):
        for i in range(60):
            p.produce(topic, b"x" * 200, key=str(i).encode())
            p.flush(30)  # one batch each: many small segments

    # cluster-wide: a topic without an override picks it up, and retention acts on it
    assert alter_cluster_default(b.bootstrap, log_retention_bytes=("SET", "3000")) == ("none", None)
    entry = _describe(admin, TOPIC, "dyn-t")["retention.bytes"]
    assert (entry.value, entry.source) == ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert describe_synonyms(b.bootstrap, 2, "dyn-t", "retention.bytes") == [
        ("log.retention.bytes", "3000", 3), ("log.retention.bytes", "-1", 5)]
    own = _describe(admin, TOPIC, "dyn-own")["retention.bytes"]
    assert (own.value, own.source) == ("-1", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    deadline = time.monotonic() + 20
    while _log_start(b.bootstrap, "dyn-t") == 0:
        assert time.monotonic() < deadline, b.log_text()
        time.sleep(0.2)
    assert _log_start(b.bootstrap, "dyn-own") == 0

    # per-broker overrides the cluster default, which overrides server.properties
    assert alter_cluster_default(b.bootstrap, log_retention_ms=("SET", "7200000"))[0] == "none"
    _incremental(admin, "0", log_retention_ms=("SET", "3600000"))
    cfg = _describe(admin, BROKER, "0")
    assert (cfg["log.retention.ms"].value, cfg["log.retention.ms"].source) == \
        ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not cfg["log.retention.ms"].is_read_only and cfg["num.io.threads"].is_read_only
    assert _describe_default(b.bootstrap) == {"log.retention.bytes": ("3000", 3), "log.retention.ms": ("7200000", 3)}
    entry = _describe(admin, TOPIC, "dyn-t")["retention.ms"]
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # precedence order, as Kafka lists them (log.retention.ms has no default: the hours' is its last synonym)
    assert describe_synonyms(b.bootstrap, 4, "0", "log.retention.ms") == [
        ("log.retention.ms", "3600000", 2), ("log.retention.ms", "7200000", 3),
        ("log.retention.ms", "86400000", 4), ("log.retention.hours", "168", 5)]

    # refusals, with Kafka's words; validate_only changes nothing
    err = _error(admin, "0", "num.io.threads", "4").args[0]
    assert err.name() == "INVALID_REQUEST"
    assert "Cannot update these configs dynamically: Set(num.io.threads)" in err.str()
    assert alter_cluster_default(b.bootstrap, inter_broker_protocol_version=("SET", "3.9"))[0] == "invalid_request"
    assert alter_cluster_default(b.bootstrap, log_segment_bytes=("SET", "nope"))[0] == "invalid_config"
    assert alter_cluster_default(b.bootstrap, name="7", log_retention_ms=("SET", "1"))[0] == "invalid_request"
    assert alter_cluster_default(b.bootstrap, validate_only=True, log_roll_ms=("SET", "1000"))[0] == "none"
    assert _describe(admin, BROKER, "0")["log.roll.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # the remote tier's quotas, index cache size and read-ahead bound change live too
    _incremental(admin, "0", remote_log_manager_copy_max_bytes_per_second=("SET", "1048576"),
                 remote_log_index_file_cache_total_size_bytes=("SET", "10485760"),
                 remote_log_reader_read_ahead_max_bytes=("SET", "268435456"))
    cfg = _describe(admin, BROKER, "0")
    assert (cfg["remote.log.manager.copy.max.bytes.per.second"].value,
            cfg["remote.log.index.file.cache.total.size.bytes"].source) == \
        ("1048576", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    read_ahead = cfg["remote.log.reader.read.ahead.max.bytes"]
    assert (read_ahead.value, read_ahead.source, read_ahead.is_read_only) == \
        ("268435456", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)

    # the levels survive a restart
    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    cfg = _describe(admin, BROKER, "0")
    assert cfg["log.retention.ms"].value == "3600000"
    assert (cfg["log.retention.bytes"].value, cfg["log.retention.bytes"].source) == \
        ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # DELETE reverts level by level: to the cluster default, then to server.properties
    _incremental(admin, "0", log_retention_ms=("DELETE", None))
    assert _describe(admin, TOPIC, "dyn-t")["retention.ms"].value == "7200000"
    assert alter_cluster_default(b.bootstrap, log_retention_ms=("DELETE", None))[0] == "none"
    entry = _describe(admin, TOPIC, "dyn-t")["retention.ms"]
    assert (entry.value, entry.source) == ("86400000", ConfigSource.STATIC_BROKER_CONFIG.value)
    entry = _describe(admin, BROKER, "0")["log.retention.ms"]
    assert (entry.value, entry.source) == ("86400000", ConfigSource.STATIC_BROKER_CONFIG.value)

    # legacy AlterConfigs replaces the whole level
    with KafkaClient(b.bootstrap) as c:
        resp = c.request(ALTER_CONFIGS, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.cleaner.backoff.ms", "value": "500"}]}], "validate_only": False}, version=1)
    assert resp.responses[0].error_code.value == 0
    assert _describe_default(b.bootstrap) == {"log.cleaner.backoff.ms": ("500", 3)}
    assert _describe(admin, TOPIC, "dyn-t")["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
