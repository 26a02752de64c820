"""Produce's per-record errors (KIP-467) against a real broker: a compacted topic refuses records
without a key with INVALID_RECORD, names each of them (batch_index and Kafka's message) and appends
nothing; a timestamp out of bounds names every record out of range. Through confluent-kafka and
through our own protocol client (Produce v8+, the versions with record_errors)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CREATE_TOPICS, LIST_OFFSETS, PRODUCE
from tieredlog.records.record import build_batch

pytestmark = pytest.mark.integration


def _create(c: KafkaClient, name: str, **configs: str) -> None:
    r = c.request(CREATE_TOPICS, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1,
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]}], "timeout": 10000})
    assert r.topics[0].error_code.value == 0, r


def _end(c: KafkaClient, topic: str) -> int:
    r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code.value == 0, p
    return int(p.offset)


def _produce(c: KafkaClient, topic: str, records: bytes, version: int):
    r = c.request(PRODUCE, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}, version=version)
    return r.responses[0].partition_responses[0]


def test_confluent_null_key_to_compacted_topic_fails_delivery_and_keyed_records_land(broker):
    topic = "compacted-confluent"
    with KafkaClient(broker.bootstrap) as c:
        _create(c, topic, cleanup_policy="compact")
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        results: list = []

        def on_delivery(err, msg):
            results.append((err, msg.key(), msg.offset()))

        p.produce(topic, value=b"no key", partition=0, on_delivery=on_delivery)
        assert p.flush(30) == 0
        [(err, key, _)] = results
        assert key is None and err is not None
        assert err.code() == KafkaError.INVALID_RECORD and not err.retriable(), err
        assert _end(c, topic) == 0, "a refused record was appended"

        results.clear()
        for i in range(3):
            p.produce(topic, key=b"k%d" % i, value=b"v", partition=0, on_delivery=on_delivery)
        assert p.flush(30) == 0
        assert [(e, k, o) for e, k, o in results] == [(None, b"k0", 0), (None, b"k1", 1), (None, b"k2", 2)]
        assert _end(c, topic) == 3


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_record_errors_name_every_record_without_a_key(broker, codec):
    topic = f"compacted-raw-{codec}"
    now = int(time.time() * 1000)
    keys = [b"k0", None, b"k2", None, b"k4"]
    with KafkaClient(broker.bootstrap) as c:
        _create(c, topic, cleanup_policy="compact")
        message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
        for version in (8, 9, 11):
            part = _produce(c, topic, build_batch([(k, b"v", [], now) for k in keys], codec=codec), version)
            assert part.error_code.value == 87, part
            assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
                (1, message), (3, message)]
            assert part.error_message.startswith("One or more records have been rejected due to 2 record errors")
            assert message in part.error_message
            assert part.base_offset == -1
        assert _end(c, topic) == 0, "nothing of a refused batch is appended"
        ok = _produce(c, topic, build_batch([(b"k%d" % i, b"v", [], now) for i in range(5)], codec=codec), 9)
        assert (ok.error_code.value, ok.base_offset, list(ok.record_errors)) == (0, 0, [])
        assert _end(c, topic) == 5


def test_record_errors_name_every_record_with_a_timestamp_out_of_range(broker):
    topic = "timestamps-raw"
    after = 60_000
    now = int(time.time() * 1000)
    with KafkaClient(broker.bootstrap) as c:
        _create(c, topic, message_timestamp_after_max_ms=str(after))
        stamps = [now, now + 10 * after, now, now + 20 * after, now]
        part = _produce(c, topic, build_batch([(b"k", b"v", [], ts) for ts in stamps]), 9)
        assert part.error_code.value == 32, part  # INVALID_TIMESTAMP
        assert part.error_message == "One or more records have been rejected due to invalid timestamp"
        got = [(e.batch_index, e.batch_index_error_message) for e in part.record_errors]
        assert [i for i, _ in got] == [1, 3]
        for i, m in got:
            assert m.startswith(f"Timestamp {stamps[i]} of message with offset {i} is out of range. "
                                "The timestamp should be within ["), m
        assert _end(c, topic) == 0


def test_a_batch_refused_as_a_whole_names_no_record(broker):
    # a CRC that does not hold is the batch's fault, not a record's: no record_errors, as in Kafka
    topic = "whole-batch"
    with KafkaClient(broker.bootstrap) as c:
        _create(c, topic)
        bad = bytearray(build_batch([(b"k", b"v")]))
        bad[-1] ^= 0xFF
        part = _produce(c, topic, bytes(bad), 9)
        assert part.error_code.value == 2 and list(part.record_errors) == [], part
