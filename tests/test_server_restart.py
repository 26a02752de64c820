"""Data and topic ids survive a clean restart; acknowledged, flushed data survives kill -9; SIGTERM exits 0."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

# one-partition internal topics: recovery after kill -9 scans every partition, and these tests are
# about the user topic
SMALL_INTERNAL = {"offsets.topic.num.partitions": "1", "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    offsets: list[int] = []
    p_errors: list = []

    def cb(err, msg):
        (p_errors.append(err) if err else offsets.append(msg.offset()))

    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=cb)
    assert p.flush(30) == 0
    assert not p_errors
    return offsets


def _consume_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "none", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    for _ in range(100):
        if len(out) >= n:
            break
        for m in c.consume(1000, 0.5):
            assert m.error() is None, m.error()
            out.append(m.value())
    c.close()
    return out


def _topic_id(bootstrap: str, topic: str):
    from tieredlog.protocol.api import METADATA
    from tieredlog.protocol.client import KafkaClient

    with KafkaClient(bootstrap) as c:
        return c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, version=12).topics[0].topic_id


def test_clean_restart_keeps_data_and_topic_id(broker_factory):
    b = broker_factory(SMALL_INTERNAL)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # must outlive the future
    admin.create_topics([NewTopic("keep", 1, 1)])["keep"].result(30)
    values = [b"v%d" % i for i in range(500)]
    _produce(b.bootstrap, "keep", values)
    tid = _topic_id(b.bootstrap, "keep")
    assert b.stop() == 0  # SIGTERM: clean exit
    assert "shut down cleanly" in b.log_text()
    b.start()
    assert _topic_id(b.bootstrap, "keep") == tid
    assert _consume_all(b.bootstrap, "keep", 500) == values
    # appends continue after the recovered end
    assert _produce(b.bootstrap, "keep", [b"after"]) == [500]


def test_kill9_recovers_acknowledged_flushed_data(broker_factory):
    b = broker_factory({**SMALL_INTERNAL, "log.flush.interval.messages": "1"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("durable", 1, 1)])["durable"].result(30)
    values = [b"d%d" % i for i in range(300)]
    offsets = _produce(b.bootstrap, "durable", values)
    assert sorted(offsets) == list(range(300))
    b.kill9()
    b.start()
    assert _consume_all(b.bootstrap, "durable", 300) == values
