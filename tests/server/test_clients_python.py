"""kafka-python and aiokafka produce and consume (plain assignment, no groups)."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.integration


def test_kafka_python_produce_consume(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kp", 2, 1)])
    admin.close()
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", acks="all")
    futures = [prod.send("kp", key=b"k%d" % i, value=b"value-%d" % i, partition=i % 2,
                         headers=[("h", b"%d" % i)]) for i in range(200)]
    prod.flush(30)
    metas = [f.get(30) for f in futures]
    assert sorted(m.offset for m in metas if m.partition == 0) == list(range(100))
    prod.close()

    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                         consumer_timeout_ms=10000)
    cons.assign([TopicPartition("kp", 0), TopicPartition("kp", 1)])
    cons.seek_to_beginning()
    got = {}
    for m in cons:
        got[m.key] = (m.value, m.partition, m.headers)
        if len(got) == 200:
            break
    cons.close()
    assert len(got) == 200
    for i in range(200):
        assert got[b"k%d" % i] == (b"value-%d" % i, i % 2, [("h", b"%d" % i)])


def test_aiokafka_produce_consume(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def run() -> list:
        prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4", acks="all")
        await prod.start()
        try:
            for i in range(100):
                await prod.send("aio", key=b"%d" % i, value=b"aio-%d" % i, partition=0)
            await prod.flush()
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
        await cons.start()
        out = []
        try:
            tp = TopicPartition("aio", 0)
            cons.assign([tp])
            await cons.seek_to_beginning(tp)
            while len(out) < 100:
                batch = await asyncio.wait_for(cons.getmany(timeout_ms=1000), 30)
                for msgs in batch.values():
                    out.extend((m.offset, m.key, m.value) for m in msgs)
        finally:
            await cons.stop()
        return out

    out = asyncio.run(run())
    assert out == [(i, b"%d" % i, b"aio-%d" % i) for i in range(100)]
