"""Fetch from followers (KIP-392) and replication throttles (KIP-73) on one two-broker cluster (broker
processes on a real ZooKeeper), broker 1 on rack "a", broker 2 on rack "b", with Kafka's
RackAwareReplicaSelector.

- A consumer on rack "b" (confluent-kafka's client.rack) is sent by the leader (broker 1) to the
  follower (broker 2) and reads every record there once: the consumer bytes of the topic come out of
  broker 2 only (BytesOutPerSec on each broker's Prometheus endpoint). The wire answers behind it:
  preferred_read_replica from the leader, the follower's high watermark, OFFSET_OUT_OF_RANGE past
  the follower's log, NOT_LEADER_OR_FOLLOWER for a Fetch older than v11, ListOffsets on the leader only.
- `tieredlog reassign --execute --throttle` sets the throttled-replica lists and the rates, the move's
  replication stays under the rate (the leader's ReplicationBytesOutPerSec over an interval, with a
  generous margin: an upper bound a slow machine cannot break), the move is still running when an
  unthrottled one would long be done, and `--verify` clears every throttle once it completes.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from prometheus_client.parser import text_string_to_metric_families
from zk_harness import ZooKeeperServer, free_port, wait_until, zookeeper  # noqa: F401

from tieredlog import cli
from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.protocol.api import DESCRIBE_CONFIGS, FETCH, LIST_OFFSETS, METADATA

pytestmark = pytest.mark.integration

RACKS = {1: "a", 2: "b"}
FETCH_MAX_BYTES = 32768  # replica.fetch.max.bytes: one follower fetch is at most this much over the rate
THROTTLE = 100_000  # B/s
BT = "kafka_server_brokertopicmetrics_"


class Cluster:
    def __init__(self, connect: str, brokers: dict[int, BrokerProcess], metrics_ports: dict[int, int]) -> None:
        self.connect = connect
        self.brokers = brokers
        self.metrics_ports = metrics_ports

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def metric(self, broker_id: int, name: str, **labels: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_ports[broker_id]}/metrics", timeout=10).read()
        for family in text_string_to_metric_families(text.decode()):
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return float(s.value)
        return 0.0


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # noqa: F811
    connect = f"{zookeeper.connect}/kip392"
    base = tmp_path_factory.mktemp("cluster")
    brokers: dict[int, BrokerProcess] = {}
    ports = {i: free_port() for i in RACKS}
    try:
        for i, rack in RACKS.items():
            brokers[i] = BrokerProcess(base / f"data{i}", {
                "zookeeper.connect": connect, "broker.id": str(i), "broker.rack": rack,
                "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
                "zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "10000",
                "replica.fetch.backoff.ms": "200", "replica.fetch.max.bytes": str(FETCH_MAX_BYTES),
                "remote.log.storage.system.enable": "false", "auto.leader.rebalance.enable": "false",
                "controlled.shutdown.enable": "false",
                "metrics.port": str(ports[i])}).start()
        with ZkClient(connect) as zk:
            wait_until(lambda: zk.get_all_broker_ids() == list(RACKS), timeout=30, message="both brokers registered")
            wait_until(lambda: zk.get_controller_id() is not None, timeout=30, message="a controller elected")
        yield Cluster(connect, brokers, ports)
    finally:
        for b in brokers.values():
            b.stop()


def isr_everywhere(c: Cluster, topic: str) -> list[tuple[int, list[int]]]:
    """(leader, ISR) of partition 0 as every broker answers it; [] until they agree."""
    seen = set()
    for b in c.brokers.values():
        with KafkaClient(b.bootstrap, timeout=10) as kc:
            (t,) = kc.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}).topics
        if t.error_code != 0 or not t.partitions:
            return []
        p = t.partitions[0]
        seen.add((p.leader_id, tuple(sorted(p.isr_nodes))))
    return [(leader, list(isr)) for leader, isr in seen] if len(seen) == 1 else []


def create_with_assignment(c: Cluster, topic: str, replicas: list[int]) -> None:
    """Partition 0 on ``replicas`` (the first leads), written as a broker writes a new topic."""
    with ZkClient(c.connect) as zk:
        zk.set_topic_config(topic, {})
        zk.create_topic_assignment(topic, TopicAssignment.of({0: replicas}, uuid.uuid4()))
    wait_until(lambda: isr_everywhere(c, topic) == [(replicas[0], sorted(replicas))], timeout=60,
               message=f"{topic} led by {replicas[0]} with ISR {replicas} on every broker")


def produce(c: Cluster, topic: str, values: list[bytes]) -> None:
    # batches of 16 KiB: a fetch returns at least one whole batch, so a batch is the throttle's step
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none",
                  "batch.size": 16384})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(60) == 0


def fetch(b: BrokerProcess, topic: str, offset: int, version: int = 12, rack: str = "") -> Any:
    """A consumer's Fetch of partition 0 at ``offset`` -> the partition's answer."""
    body: dict[str, Any] = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": rack,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    if version < 11:
        del body["rack_id"]
    with KafkaClient(b.bootstrap, timeout=10) as kc:
        r = kc.request(FETCH, body, version=version)
    return r.responses[0].partitions[0]


def test_a_consumer_on_the_followers_rack_reads_every_record_from_the_follower(cluster: Cluster) -> None:
    create_with_assignment(cluster, "racked", [1, 2])
    values = [b"r%05d" % i for i in range(3000)]
    produce(cluster, "racked", values)
    leader, follower = cluster.brokers[1], cluster.brokers[2]

    # the leader sends a consumer on rack "b" to broker 2, with no records; one on its own rack, or
    # naming none, reads here
    answer = fetch(leader, "racked", 0, rack="b")
    assert (answer.error_code, answer.preferred_read_replica, answer.records or b"") == (0, 2, b"")
    assert answer.high_watermark == len(values)
    for rack in ("a", "", "c"):
        answer = fetch(leader, "racked", 0, rack=rack)
        assert (answer.error_code, answer.preferred_read_replica) == (0, -1) and answer.records, rack
    # the follower learns the high watermark from the leader's fetch answers, and serves up to it
    wait_until(lambda: fetch(follower, "racked", 0).high_watermark == len(values), timeout=30,
               message="the follower's high watermark caught up with the leader's")
    answer = fetch(follower, "racked", 0)
    assert (answer.error_code, answer.preferred_read_replica) == (0, -1) and answer.records
    assert fetch(follower, "racked", len(values) + 1000).error_code == 1  # OFFSET_OUT_OF_RANGE
    assert fetch(follower, "racked", 0, version=10).error_code == 6  # NOT_LEADER_OR_FOLLOWER: leader only
    with KafkaClient(follower.bootstrap, timeout=10) as kc:
        lo = kc.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "racked", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}, version=7)
    assert lo.topics[0].partitions[0].error_code == 6  # ListOffsets stays on the leader

    out_before = {i: cluster.metric(i, BT + "bytesout_total", topic="racked") for i in RACKS}
    fetches_before = cluster.metric(2, "kafka_network_requestmetrics_requests_total", request="Fetch")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "kip392", "client.rack": "b",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([CkTopicPartition("racked", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    assert got == values  # every record once, in order

    # every consumer byte came from the follower: the leader answered with the preferred replica only
    data = sum(f.stat().st_size for f in (follower.data_dir / "racked-0").glob("*.log"))
    wait_until(lambda: cluster.metric(2, BT + "bytesout_total", topic="racked") - out_before[2] >= data, timeout=10,
               message="broker 2's BytesOut counted the consumer's reads")
    assert cluster.metric(1, BT + "bytesout_total", topic="racked") == out_before[1]
    assert cluster.metric(2, "kafka_network_requestmetrics_requests_total", request="Fetch") > fetches_before


def tool(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    capsys.readouterr()
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def configs(b: BrokerProcess, resource_type: int, name: str, keys: list[str]) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs of ``keys`` -> name -> (value, config source)."""
    with KafkaClient(b.bootstrap, timeout=10) as kc:
        r = kc.request(DESCRIBE_CONFIGS, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                         "configuration_keys": keys}],
                                          "include_synonyms": False, "include_documentation": False}).results[0]
    assert r.error_code == 0, r.error_message
    return {e.name: (e.value, e.config_source) for e in r.configs}


TOPIC_LISTS = ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"]
BROKER_RATES = ["leader.replication.throttled.rate", "follower.replication.throttled.rate"]
DYNAMIC_BROKER_CONFIG, TOPIC_CONFIG = 2, 1  # Kafka's ConfigSource


def test_a_throttled_reassignment_replicates_under_the_rate_and_verify_clears_the_throttles(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    create_with_assignment(cluster, "throttled", [1])
    produce(cluster, "throttled", [os.urandom(1000) for _ in range(1500)])  # 1.5 MB: 15 s at the rate
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"throttled","partition":0,"replicas":[1,2]}]}')
    server = cluster.bootstrap

    sent_before = cluster.metric(1, BT + "replicationbytesout_total", topic="throttled")
    rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--execute", "--reassignment-json-file",
                        str(plan), "--throttle", str(THROTTLE))
    start = time.monotonic()
    assert (rc, err) == (0, ""), err
    assert out[-3:] == [
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed.",
        f"The inter-broker throttle limit was set to {THROTTLE} B/s",
        "Successfully started partition reassignment for throttled-0"]
    # as kafka-reassign-partitions.sh: the leader side throttles the current replica, the follower
    # side the one being added, and both brokers of the move get the rate
    b1 = cluster.brokers[1]
    assert configs(b1, 2, "throttled", TOPIC_LISTS) == {
        "leader.replication.throttled.replicas": ("0:1", TOPIC_CONFIG),
        "follower.replication.throttled.replicas": ("0:2", TOPIC_CONFIG)}
    for i, b in cluster.brokers.items():
        assert configs(b, 4, str(i), BROKER_RATES) == {n: (str(THROTTLE), DYNAMIC_BROKER_CONFIG) for n in BROKER_RATES}

    time.sleep(3)
    sent = cluster.metric(1, BT + "replicationbytesout_total", topic="throttled") - sent_before
    elapsed = time.monotonic() - start
    # at most the rate over the interval, a one-second burst and a fetch's overshoot on each side,
    # with half the rate again as margin; a broken throttle sends the whole 1.5 MB at once
    assert sent <= 1.5 * THROTTLE * elapsed + THROTTLE + 2 * FETCH_MAX_BYTES, (sent, elapsed)
    rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--verify", "--reassignment-json-file", str(plan))
    assert (rc, out) == (0, ["Status of partition reassignment:",
                             "Reassignment of partition throttled-0 is still in progress."]), err
    assert configs(b1, 2, "throttled", TOPIC_LISTS)["follower.replication.throttled.replicas"][0] == "0:2"

    # resubmitted with --additional, the throttle is raised and the move completes
    rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--execute", "--additional",
                        "--reassignment-json-file", str(plan), "--throttle", "1000000000")
    assert rc == 0 and "The inter-broker throttle limit was set to 1000000000 B/s" in out, (out, err)
    done: list[str] = []

    def verified() -> bool:
        rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--verify",
                            "--reassignment-json-file", str(plan))
        assert rc == 0, err
        done[:] = out
        return out[1].endswith("completed.")

    wait_until(verified, timeout=60, message="the reassignment completed")
    assert done == ["Status of partition reassignment:", "Reassignment of partition throttled-0 is completed.", "",
                    "Clearing broker-level throttles on brokers 1,2", "Clearing topic-level throttles on topic throttled"]
    assert all(v in ("", None) and source != TOPIC_CONFIG
               for v, source in configs(b1, 2, "throttled", TOPIC_LISTS).values())
    for i, b in cluster.brokers.items():
        assert all(source != DYNAMIC_BROKER_CONFIG for _, source in configs(b, 4, str(i), BROKER_RATES).values())
    wait_until(lambda: isr_everywhere(cluster, "throttled") == [(1, [1, 2])], timeout=30, message="ISR 1,2")
