"""``ReplicatedMetadataTopic`` against one broker process: the read loop's edge cases (a start inside
a batch, null values, every codec, a log start above the asked offset, a corrupt batch on disk), the
high watermark cache, the partition count check, the time limit, and a connection reopened after the
broker restarts. The cluster behaviour (leaders on other brokers, failover) is in
test_cluster_metadata_topic.py."""

from __future__ import annotations

import logging
import time
from typing import Iterator

import pytest
from broker_harness import BrokerProcess
from cluster_harness import ClientRouting
from helpers import free_port

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import DELETE_RECORDS, PRODUCE
from tieredlog.records.batch import HEADER_SIZE
from tieredlog.records.record import build_batch
from tieredlog.replication.metadata_topic_client import ReplicatedMetadataTopic
from tieredlog.rlmm.api import RemoteLogMetadataManagerFatalError
from tieredlog.rlmm.topic import METADATA_TOPIC
from tieredlog.server.produce_api import INTERNAL_TOPICS_CLIENT_ID

PARTITIONS = 4
CLIENT_LOG = "tieredlog.replication.metadata_topic_client"


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, ClientRouting]]:
    """One broker without a remote tier (so it does not make the topic itself), the topic created
    through the client's routing with 4 partitions."""
    b = BrokerProcess(tmp_path_factory.mktemp("mtc") / "data", {"remote.log.storage.system.enable": "false"}).start()
    routing = ClientRouting({0: b}, replication_factor=1)
    try:
        assert routing.create_topic(PARTITIONS, {"cleanup.policy": "delete"}) == PARTITIONS
        yield b, routing
    finally:
        routing.close()
        b.stop()


@pytest.fixture
def topic(single: tuple[BrokerProcess, ClientRouting]) -> Iterator[ReplicatedMetadataTopic]:
    t = ReplicatedMetadataTopic(single[1], client_id=INTERNAL_TOPICS_CLIENT_ID, request_timeout_s=10)
    yield t
    t.close()


def produce_raw(b: BrokerProcess, partition: int, batch: bytes) -> int:
    with KafkaClient(b.bootstrap, client_id=INTERNAL_TOPICS_CLIENT_ID) as c:
        r = c.request(PRODUCE, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": METADATA_TOPIC, "partition_data": [{"index": partition, "records": batch}]}]}, version=9)
    p = r.responses[0].partition_responses[0]
    assert p.error_code.value == 0, p
    return p.base_offset


def test_read_starts_inside_a_batch_skips_null_values_and_decodes_every_codec(single, topic) -> None:
    b, _ = single
    p = 0
    assert topic.append(p, b"v0") == 0
    for codec in range(5):  # none, gzip, snappy, lz4, zstd
        base = produce_raw(b, p, build_batch([(None, b"c%d-0" % codec), (b"k", None), (None, b"c%d-2" % codec)],
                                             codec=codec))
        assert base == 1 + 3 * codec
    every = [(0, b"v0")] + [(1 + 3 * c + i, b"c%d-%d" % (c, i)) for c in range(5) for i in (0, 2)]
    assert list(topic.read(p, 0)) == every
    # from the middle of a batch: the records below the offset asked for are not returned
    assert list(topic.read(p, 3)) == [r for r in every if r[0] >= 3]
    assert list(topic.read(p, 2)) == [r for r in every if r[0] >= 3]
    assert list(topic.read(p, 16)) == [] and list(topic.read(p, 99)) == []
    assert topic.end_offset(p) == 16


def test_read_below_the_log_start_goes_on_from_there_and_says_so_once(single, topic, caplog) -> None:
    b, _ = single
    p = 1
    for i in range(6):
        assert topic.append(p, b"r%d" % i) == i
    with KafkaClient(b.bootstrap) as c:
        r = c.request(DELETE_RECORDS, {"topics": [{"name": METADATA_TOPIC, "partitions": [
            {"partition_index": p, "offset": 4}]}], "timeout": 5000})
    assert r.topics[0].partitions[0].error_code.value == 0
    with caplog.at_level(logging.WARNING, logger=CLIENT_LOG):
        assert list(topic.read(p, 0)) == [(4, b"r4"), (5, b"r5")]
        assert list(topic.read(p, 2)) == [(4, b"r4"), (5, b"r5")]
    assert [r.getMessage() for r in caplog.records if "below the leader's log start" in r.getMessage()] == [
        f"{METADATA_TOPIC}-{p}: offset 0 is below the leader's log start offset 4; reading from there"]


def test_a_corrupt_batch_ends_the_read_with_one_line(single, topic, caplog) -> None:
    b, _ = single
    p = 2
    for i in range(3):
        topic.append(p, b"good%d" % i)
    topic.append(p, b"damaged-value")
    topic.append(p, b"after")
    segment = b.data_dir / f"{METADATA_TOPIC}-{p}" / ("0" * 20 + ".log")
    data = bytearray(segment.read_bytes())
    at = data.rfind(b"damaged-value")
    assert at > 3 * HEADER_SIZE
    data[at] ^= 0xFF  # inside the CRC-covered records of the fourth batch
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(bytes(data[at:at + 1]))
    with caplog.at_level(logging.ERROR, logger=CLIENT_LOG):
        assert list(topic.read(p, 0)) == [(0, b"good0"), (1, b"good1"), (2, b"good2")]
        assert list(topic.read(p, 1)) == [(1, b"good1"), (2, b"good2")]
        assert list(topic.read(p, 4)) == [(4, b"after")]  # past the damage, reading goes on
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(f"{METADATA_TOPIC}-{p}: corrupt batch at offset 3:"), errors


def test_end_offset_is_cached_for_its_max_age(single) -> None:
    routing = single[1]
    p = 3
    writer = ReplicatedMetadataTopic(routing, client_id=INTERNAL_TOPICS_CLIENT_ID)
    cached = ReplicatedMetadataTopic(routing, client_id=INTERNAL_TOPICS_CLIENT_ID, end_offset_max_age_s=3600)
    fresh = ReplicatedMetadataTopic(routing, client_id=INTERNAL_TOPICS_CLIENT_ID, end_offset_max_age_s=0)
    try:
        start = cached.end_offset(p)
        writer.append(p, b"x")
        assert cached.end_offset(p) == start  # within its max age: no request
        assert fresh.end_offset(p) == start + 1  # a ListOffsets each time
        assert list(cached.read(p, start)) == [(start, b"x")]
        assert cached.end_offset(p) == start + 1  # the fetch told it
    finally:
        for t in (writer, cached, fresh):
            t.close()


def test_partition_count_mismatch_is_fatal(topic) -> None:
    topic.ensure_created(PARTITIONS)
    with pytest.raises(RemoteLogMetadataManagerFatalError,
                       match=f"{METADATA_TOPIC} has {PARTITIONS} partitions, "
                             f"remote.log.metadata.topic.num.partitions is {PARTITIONS + 1}"):
        topic.ensure_created(PARTITIONS + 1)


class _FixedRouting:
    def __init__(self, endpoint: tuple[str, int] | None) -> None:
        self.endpoint = endpoint

    def leader_endpoint(self, partition: int) -> tuple[str, int] | None:
        return self.endpoint

    def create_topic(self, num_partitions: int, configs: dict[str, str]) -> int:
        return num_partitions


@pytest.mark.parametrize("endpoint", [None, ("127.0.0.1", free_port())], ids=["no-leader", "nobody-listening"])
def test_every_call_gives_up_after_the_request_timeout(endpoint) -> None:
    t = ReplicatedMetadataTopic(_FixedRouting(endpoint), client_id="nowhere", request_timeout_s=0.5,
                                retry_backoff_s=0.05)
    try:
        for call in (lambda: t.append(0, b"x"), lambda: list(t.read(0, 0)), lambda: t.end_offset(0)):
            t0 = time.monotonic()
            with pytest.raises(TimeoutError, match="gave up after 0.5 s"):
                call()
            assert 0.45 <= time.monotonic() - t0 < 3
    finally:
        t.close()
    with pytest.raises(RuntimeError, match="closed"):
        t.append(0, b"x")


def test_the_connection_is_reopened_after_the_broker_restarts(single, topic) -> None:
    b, _ = single
    p = 3
    topic.append(p, b"before")
    end = topic.end_offset(p)
    b.restart()  # same port, same data: the client's socket is dead
    assert topic.append(p, b"after") == end
    assert [v for _, v in topic.read(p, end - 1)] == [b"before", b"after"]
