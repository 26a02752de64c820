"""DeleteRecords answered as Kafka's brokers answer it, on a three-broker cluster (broker processes on a
real ZooKeeper) with partition 0 of each topic on brokers 1 (leader) and 2:

- the follower (2) and a broker with no replica (3) answer NOT_LEADER_OR_FOLLOWER, so a client
  refreshes its metadata and retries on the leader; the follower's log start offset stays where it was;
- a topic not in the metadata answers UNKNOWN_TOPIC_OR_PARTITION; a compacted topic POLICY_VIOLATION;
- the leader answers only once the follower's log start offset has reached the requested offset (the
  follower takes it from its fetches), so the follower's own Fetch answer shows it right after; with
  the follower stopped (SIGSTOP: still registered), REQUEST_TIMED_OUT after the request's timeout;
- confluent-kafka's AdminClient.delete_records through the bootstrap list succeeds.

A follower's log start offset is read from its own answer to a consumer's Fetch v12 (KIP-392 lets a
consumer read from a follower; every Fetch answer carries the log start offset).
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from zk_harness import ZooKeeperServer, wait_until, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.protocol.api import DELETE_RECORDS, FETCH, METADATA

pytestmark = pytest.mark.integration

NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, POLICY_VIOLATION = \
    0, 1, 3, 6, 7, 44


class Cluster:
    def __init__(self, connect: str, brokers: dict[int, BrokerProcess]) -> None:
        self.connect = connect
        self.brokers = brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # noqa: F811
    connect = f"{zookeeper.connect}/delete_records"
    base: Path = tmp_path_factory.mktemp("cluster")
    brokers: dict[int, BrokerProcess] = {}
    try:
        for i in (1, 2, 3):
            brokers[i] = BrokerProcess(base / f"data{i}", {
                "zookeeper.connect": connect, "broker.id": str(i), "zookeeper.session.timeout.ms": "6000",
                "replica.lag.time.max.ms": "10000", "replica.fetch.backoff.ms": "200",
                "remote.log.storage.system.enable": "false", "auto.leader.rebalance.enable": "false",
                "controlled.shutdown.enable": "false"}).start()
        with ZkClient(connect) as zk:
            wait_until(lambda: zk.get_all_broker_ids() == [1, 2, 3], timeout=30, message="every broker registered")
            wait_until(lambda: zk.get_controller_id() is not None, timeout=30, message="a controller elected")
        yield Cluster(connect, brokers)
    finally:
        for b in brokers.values():
            b.stop()


def leader_and_isr_everywhere(c: Cluster, topic: str) -> tuple[int, list[int]] | None:
    """(leader, ISR) of partition 0 when every broker answers the same, else None."""
    seen = set()
    for b in c.brokers.values():
        with KafkaClient(b.bootstrap, timeout=10) as kc:
            (t,) = kc.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}).topics
        if t.error_code != 0 or not t.partitions:
            return None
        seen.add((t.partitions[0].leader_id, tuple(sorted(t.partitions[0].isr_nodes))))
    if len(seen) != 1:
        return None
    leader, isr = seen.pop()
    return leader, list(isr)


def create_on_1_and_2(c: Cluster, topic: str, configs: dict[str, str] | None = None, records: int = 100) -> None:
    with ZkClient(c.connect) as zk:
        zk.set_topic_config(topic, configs or {})
        zk.create_topic_assignment(topic, TopicAssignment.of({0: [1, 2]}, uuid.uuid4()))
    wait_until(lambda: leader_and_isr_everywhere(c, topic) == (1, [1, 2]), timeout=60,
               message=f"{topic} led by 1 with ISR [1, 2] on every broker")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(records):
        p.produce(topic, key=b"k%d" % (i % 10), value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0


def delete_records(b: BrokerProcess, topic: str, offset: int, timeout_ms: int = 30_000) -> tuple[int, int]:
    """(error code, low watermark) of partition 0."""
    with KafkaClient(b.bootstrap, timeout=60) as kc:
        r = kc.request(DELETE_RECORDS, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "offset": offset}]}], "timeout": timeout_ms})
    p = r.topics[0].partitions[0]
    return int(p.error_code), p.low_watermark


def log_start(b: BrokerProcess, topic: str) -> int:
    """The log start offset in broker ``b``'s own answer to a consumer's Fetch (served by a follower too)."""
    body: dict[str, Any] = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 1 << 40, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    with KafkaClient(b.bootstrap, timeout=10) as kc:
        p = kc.request(FETCH, body, version=12).responses[0].partitions[0]
    assert int(p.error_code) == OFFSET_OUT_OF_RANGE, p
    return p.log_start_offset


def test_only_the_leader_deletes_records_and_answers_once_the_follower_has_moved(cluster: Cluster) -> None:
    leader, follower, outsider = (cluster.brokers[i] for i in (1, 2, 3))
    create_on_1_and_2(cluster, "dr")
    assert (log_start(leader, "dr"), log_start(follower, "dr")) == (0, 0)

    # a follower and a broker without a replica send the client back to its metadata
    assert delete_records(follower, "dr", 10) == (NOT_LEADER_OR_FOLLOWER, -1)
    assert delete_records(outsider, "dr", 10) == (NOT_LEADER_OR_FOLLOWER, -1)
    assert delete_records(outsider, "no-such-topic", 10) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert (log_start(leader, "dr"), log_start(follower, "dr")) == (0, 0)

    # the leader answers once the follower's log start offset is there too
    assert delete_records(leader, "dr", 10) == (NONE, 10)
    assert log_start(follower, "dr") == 10
    assert log_start(leader, "dr") == 10
    # -1: up to the high watermark
    assert delete_records(leader, "dr", -1) == (NONE, 100)
    assert log_start(follower, "dr") == 100
    assert delete_records(leader, "dr", 101)[0] == OFFSET_OUT_OF_RANGE

    # a live follower that does not fetch: the answer waits for the request's timeout, then
    # REQUEST_TIMED_OUT with the low watermark it started from; the follower catches up afterwards
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(10):
        p.produce("dr", value=b"w%d" % i, partition=0)
    assert p.flush(30) == 0
    assert follower.proc is not None
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        assert delete_records(leader, "dr", 105, timeout_ms=1000) == (REQUEST_TIMED_OUT, 100)
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: log_start(follower, "dr") == 105, timeout=30, message="the follower takes the leader's log start")


def test_a_compacted_topic_refuses_delete_records(cluster: Cluster) -> None:
    create_on_1_and_2(cluster, "dr-compacted", {"cleanup.policy": "compact"}, records=10)
    assert delete_records(cluster.brokers[1], "dr-compacted", 5) == (POLICY_VIOLATION, -1)
    assert log_start(cluster.brokers[2], "dr-compacted") == 0


def test_confluent_admin_delete_records_through_the_bootstrap(cluster: Cluster) -> None:
    create_on_1_and_2(cluster, "dr-admin")
    # broker 3 first in the list: the request still ends at the leader
    servers = ",".join(cluster.brokers[i].bootstrap for i in (3, 2, 1))
    admin = AdminClient({"bootstrap.servers": servers})
    (future,) = admin.delete_records([CkTopicPartition("dr-admin", 0, 42)], request_timeout=30).values()
    assert future.result(30).low_watermark == 42
    assert log_start(cluster.brokers[2], "dr-admin") == 42
