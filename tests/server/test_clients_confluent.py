"""confluent-kafka (librdkafka) against a real broker process: idempotent produce with every codec,
byte-identical consume by assignment, and AdminClient topic management."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")]


def _consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout_polls: int = 200) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    try:
        for _ in range(timeout_polls):
            if len(out) >= expected:
                break
            for m in c.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy", "none"])
def test_idempotent_produce_then_consume_byte_identical(broker, codec):
    topic = f"codec-{codec}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "compression.type": codec,
                  "linger.ms": 5, "acks": "all"})
    sent = {}
    errors = []
    produced = {}

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            sent[(msg.partition(), msg.offset())] = msg.key()

    for i in range(600):
        value = (f"value-{i}-" * (i % 13 + 1)).encode() + bytes([i % 256]) * (i % 7)
        key, headers, ts = f"k{i}".encode(), [("h", f"{i}".encode()), ("n", None)], 1_700_000_000_000 + i
        produced[key] = (value, headers, ts)
        p.produce(topic, key=key, value=value, partition=i % 2, headers=headers, timestamp=ts, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert not errors
    assert len(sent) == 600
    # offsets are dense per partition
    for part in (0, 1):
        assert sorted(o for (pp, o) in sent if pp == part) == list(range(300))
    got = _consume(broker.bootstrap, topic, 2, 600)
    assert len(got) == 600
    for m in got:
        key = (m.partition(), m.offset())
        assert key in sent
        k = sent.pop(key)
        v, h, ts = produced[k]
        assert (m.key(), m.value(), m.headers(), m.timestamp()[1]) == (k, v, h, ts)
    assert not sent


def test_admin_create_describe_alter_delete(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([NewTopic("adm-a", 3, 1, config={"retention.ms": "3600000"})])
    fs["adm-a"].result(30)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["adm-a"].partitions) == 3

    res = ConfigResource(ConfigResource.Type.TOPIC, "adm-a")
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default

    res2 = ConfigResource(ConfigResource.Type.TOPIC, "adm-a", set_config={"cleanup.policy": "compact"})
    admin.alter_configs([res2])[res2].result(30)  # legacy API on purpose
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["cleanup.policy"].value == "compact"
    # legacy AlterConfigs replaces the set: retention.ms is back to its default
    assert configs["retention.ms"].is_default

    admin.create_partitions([NewPartitions("adm-a", 5)])["adm-a"].result(30)
    assert len(admin.list_topics(timeout=10).topics["adm-a"].partitions) == 5

    admin.delete_topics(["adm-a"])["adm-a"].result(30)
    assert "adm-a" not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize(
    "topic, expected",
    [
        (NewTopic("rf-too-high", 1, 3), "INVALID_REPLICATION_FACTOR"),
        (NewTopic("bad/name", 1, 1), "TOPIC_EXCEPTION"),
        (NewTopic("bad-config", 1, 1, config={"segment.bytes": "nope"}), "INVALID_CONFIG"),
        (NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}), "INVALID_CONFIG"),
        (NewTopic("zero-parts", 0, 1), "INVALID_PARTITIONS"),
    ],
)
def test_admin_create_errors(broker, topic, expected):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([topic])[topic.topic].result(30)
    assert ei.value.args[0].name() == expected
    assert topic.topic not in admin.list_topics(timeout=10).topics


def test_admin_existing_topic_and_collision(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("dup.topic", 1, 1)])["dup.topic"].result(30)
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("dup.topic", 1, 1)])["dup.topic"].result(30)
    assert ei.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("dup_topic", 1, 1)])["dup_topic"].result(30)
    assert ei.value.args[0].name() == "TOPIC_EXCEPTION"


def test_validate_only_creates_nothing(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("only-validated", 2, 1)], validate_only=True)["only-validated"].result(30)
    assert "only-validated" not in admin.list_topics(timeout=10).topics


def test_altered_config_survives_restart(broker_factory):
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("persist-cfg", 1, 1)])["persist-cfg"].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, "persist-cfg", set_config={"retention.bytes": "123456"})
    admin.alter_configs([res])[res].result(30)
    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "persist-cfg")])
    cfg = list(configs.values())[0].result(30)
    assert cfg["retention.bytes"].value == "123456"
    assert cfg["retention.bytes"].source == 1


def test_admin_reports_every_supported_operation_without_an_authorizer(broker):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    topic, group = "ops-topic", "ops-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    # an Empty group with a committed offset is enough to describe
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    c.close()

    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}
    groups = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
    assert set(groups.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    # not asked: none reported
    assert not admin.describe_cluster().result(30).authorized_operations
