"""KIP-405's guardrail against tiering compacted topics, through a real broker with its remote tier on
and confluent-kafka's AdminClient: creating a topic with remote.storage.enable=true and a cleanup.policy
containing compact, turning tiering on for a compacted topic (IncrementalAlterConfigs and the legacy
AlterConfigs) and turning compaction on for a tiered topic all fail with INVALID_CONFIG and the reason,
and change nothing. A compacted topic (compact,delete too) refuses a record without a key with
INVALID_RECORD (the plain compact case is in test_produce_record_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")]

WHY = "Remote log storage is not supported for compacted topics"


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


def _refused(future, policy: str) -> None:
    with pytest.raises(KafkaException) as ei:
        future.result(30)
    err = ei.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert f"{WHY} (cleanup.policy={policy})" in err.str(), err.str()


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


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_create_tiered_compacted_topic_is_refused(tiered_broker, policy):
    admin = _admin(tiered_broker)
    topic = "tiered-" + policy.replace(",", "-")
    for validate_only in (True, False):
        fs = admin.create_topics([NewTopic(topic, 1, 1, config={"remote.storage.enable": "true",
                                                                "cleanup.policy": policy})],
                                 validate_only=validate_only)
        _refused(fs[topic], policy)
        assert topic not in admin.list_topics(timeout=10).topics
    # the same topic without compaction is fine: the refusal is about the combination
    _create(admin, topic, **{"remote.storage.enable": "true"})
    assert _configs(admin, topic)["cleanup.policy"] == ("delete", True)


def test_turning_tiering_on_for_a_compacted_topic_is_refused(tiered_broker):
    admin = _admin(tiered_broker)
    for policy in ("compact", "compact,delete"):
        topic = "compacted-" + policy.replace(",", "-")
        _create(admin, topic, **{"cleanup.policy": policy, "retention.ms": "3600000"})
        before = _configs(admin, topic)
        _refused(_incremental(admin, topic, "remote.storage.enable", "true"), policy)
        # legacy AlterConfigs replaces the whole set: the compacted policy comes with it
        _refused(_legacy(admin, topic, cleanup_policy=policy, remote_storage_enable="true"), policy)
        after = _configs(admin, topic)
        assert after == before
        assert after["remote.storage.enable"] == ("false", True)
        assert after["cleanup.policy"] == (policy, False)
        assert after["retention.ms"] == ("3600000", False)


def test_turning_compaction_on_for_a_tiered_topic_is_refused(tiered_broker):
    admin = _admin(tiered_broker)
    topic = "tiered-then-compacted"
    _create(admin, topic, **{"remote.storage.enable": "true", "local.retention.ms": "60000"})
    before = _configs(admin, topic)
    for policy in ("compact", "compact,delete"):
        _refused(_incremental(admin, topic, "cleanup.policy", policy), policy)
        _refused(_legacy(admin, topic, remote_storage_enable="true", local_retention_ms="60000", cleanup_policy=policy),
                 policy)
    # APPEND to the list-valued cleanup.policy gives delete,compact
    _refused(_incremental(admin, topic, "cleanup.policy", "compact", AlterConfigOpType.APPEND), "delete,compact")
    after = _configs(admin, topic)
    assert after == before
    assert after["remote.storage.enable"] == ("true", False)
    assert after["cleanup.policy"] == ("delete", True)
    assert after["local.retention.ms"] == ("60000", False)
    # and the topic is still alterable in other ways
    _incremental(admin, topic, "retention.ms", "7200000").result(30)
    assert _configs(admin, topic)["retention.ms"] == ("7200000", False)


def test_broker_default_compact_policy_refuses_a_tiered_topic(broker_factory, tmp_path):
    # the check is on the combined config: a compacting broker default counts as the topic's policy
    b = broker_factory({"remote.log.storage.system.enable": "true", "rsm.config.dir": str(tmp_path / "remote"),
                        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
                        "log.cleanup.policy": "compact"})
    admin = _admin(b)
    fs = admin.create_topics([NewTopic("tiered-on-compacting-broker", 1, 1, config={"remote.storage.enable": "true"})])
    _refused(fs["tiered-on-compacting-broker"], "compact")
    assert "tiered-on-compacting-broker" not in admin.list_topics(timeout=10).topics
    _create(admin, "tiered-delete", **{"remote.storage.enable": "true", "cleanup.policy": "delete"})


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
