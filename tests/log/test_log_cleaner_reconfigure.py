"""The log cleaner reconfigured live, as Kafka's LogCleaner is: log.cleaner.threads and the cleaner's buffer
sizes through IncrementalAlterConfigs on the BROKER resource of a running broker (confluent-kafka's
AdminClient). The thread count moves at most by half or double of the one running (Kafka's bounds, with its
messages), which also shows the running cleaner took each change; compaction goes on with the new threads."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from helpers import wait_for

pytestmark = pytest.mark.integration

BROKER = ConfigResource.Type.BROKER


def _set(admin: AdminClient, name: str, **configs: str) -> None:
    res = ConfigResource(BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def _refused(admin: AdminClient, name: str, **configs: str) -> str:
    with pytest.raises(KafkaException) as info:
        _set(admin, name, **configs)
    return str(info.value.args[0])


def _compacted_values(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cleaner-check", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, bytes]] = []
    while True:
        m = c.poll(10)
        assert m is not None, "no end of partition"
        if m.error() is not None:
            break
        out.append((m.key(), m.value()))
    c.close()
    return out


def test_cleaner_threads_and_buffers_change_live(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"log.cleaner.backoff.ms": "200"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert "cannot be increased to more than double the current value 1" in _refused(
        admin, "0", **{"log.cleaner.threads": "3"})
    _set(admin, "0", **{"log.cleaner.threads": "2"})
    # 4 is double the 2 now running (it would be refused against the 1 of before)
    _set(admin, "0", **{"log.cleaner.threads": "4", "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
                       "log.cleaner.io.buffer.size": "65536", "log.cleaner.io.buffer.load.factor": "0.75"})
    assert "cannot be reduced to less than half the current value 4" in _refused(
        admin, "0", **{"log.cleaner.threads": "1"})
    assert "should be at least 1" in _refused(admin, "0", **{"log.cleaner.threads": "0"})
    res = ConfigResource(BROKER, "0")
    described = admin.describe_configs([res])[res].result(30)
    threads = described["log.cleaner.threads"]
    assert threads.value == "4" and threads.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert described["log.cleaner.io.buffer.load.factor"].value == "0.75"

    # the new threads compact: 20 keys written 25 times, the older records of each key removed
    topic = "reconfigured-compaction"
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"})])[topic].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for round_ in range(25):
        for k in range(20):
            p.produce(topic, key=b"k%d" % k, value=b"v%d" % round_, partition=0)
        p.flush(30)
    latest = {b"k%d" % k: b"v24" for k in range(20)}

    def compacted() -> bool:
        records = _compacted_values(b.bootstrap, topic)
        # the active segment is never cleaned; the older ones come back with one record per key
        return len(records) < 500 and dict(records) == latest

    wait_for(compacted, "the reconfigured cleaner compacting the topic", timeout_s=60)
    assert "cannot be increased to more than double the current value 4" in _refused(
        admin, "0", **{"log.cleaner.threads": "9"})
