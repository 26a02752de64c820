"""Compacted topics may be tiered (unlike Kafka, which refuses them with INVALID_CONFIG; see
docs/compaction.md), through a real broker with its remote tier on and confluent-kafka's AdminClient:
creating a topic with remote.storage.enable=true and a cleanup.policy containing compact, turning tiering
on for a compacted topic (IncrementalAlterConfigs and the legacy AlterConfigs) and turning compaction on
for a tiered topic all succeed and read back. A compacted topic (compact,delete too) refuses a record
without a key with INVALID_RECORD (the plain compact case is in test_produce_record_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")]


@pytest.fixture
def tiered_broker(broker_factory, tmp_path: Path):
    return broker_factory({
        "remote.log.storage.system.enable": "true",
        "rsm.config.dir": str(tmp_path / "remote"),
        "remote.log.manager.task.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
    })


def _admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _create(admin: AdminClient, topic: str, **configs: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def _configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, bool]]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: (e.value, e.is_default) for k, e in admin.describe_configs([res])[res].result(30).items()}


def _incremental(admin: AdminClient, topic: str, name: str, value: str,
                 op: AlterConfigOpType = AlterConfigOpType.SET):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic,
                         incremental_configs=[ConfigEntry(name, value, incremental_operation=op)])
    return admin.incremental_alter_configs([res])[res]


def _legacy(admin: AdminClient, topic: str, **configs: str):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={k.replace("_", "."): v for k, v in configs.items()})
    return admin.alter_configs([res])[res]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_tiered_compacted_topic_is_created(tiered_broker, policy):
    admin = _admin(tiered_broker)
    topic = "tiered-" + policy.replace(",", "-")
    _create(admin, topic, **{"remote.storage.enable": "true", "cleanup.policy": policy})
    got = _configs(admin, topic)
    assert got["cleanup.policy"] == (policy, False) and got["remote.storage.enable"] == ("true", False)


def test_tiering_a_compacted_topic_and_compacting_a_tiered_topic(tiered_broker):
    admin = _admin(tiered_broker)
    _create(admin, "compacted", **{"cleanup.policy": "compact"})
    _incremental(admin, "compacted", "remote.storage.enable", "true").result(30)
    assert _configs(admin, "compacted")["remote.storage.enable"] == ("true", False)
    _create(admin, "legacy", **{"cleanup.policy": "compact"})
    _legacy(admin, "legacy", cleanup_policy="compact,delete", remote_storage_enable="true").result(30)
    assert _configs(admin, "legacy")["cleanup.policy"] == ("compact,delete", False)
    _create(admin, "tiered", **{"remote.storage.enable": "true", "local.retention.ms": "60000"})
    # APPEND to the list-valued cleanup.policy gives delete,compact
    _incremental(admin, "tiered", "cleanup.policy", "compact", AlterConfigOpType.APPEND).result(30)
    after = _configs(admin, "tiered")
    assert after["cleanup.policy"] == ("delete,compact", False) and after["local.retention.ms"] == ("60000", False)


def test_null_key_to_compact_delete_topic_is_invalid_record(broker):
    admin = _admin(broker)
    topic = "compact-delete-null-key"
    _create(admin, topic, **{"cleanup.policy": "compact,delete"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    results: list = []
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0
    # flushed apart: in one batch the keyed record would be refused with it
    p.produce(topic, key=b"k", value=b"keyed", partition=0, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0
    err, ok = results
    assert err is not None and err.code() == KafkaError.INVALID_RECORD and not err.retriable(), err
    assert ok is None
