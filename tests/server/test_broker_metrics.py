"""Broker metrics under Kafka's names on the Prometheus endpoint (tieredlog/server/broker_metrics.py),
scraped over HTTP from real broker processes: a broker alone (produce and consume with
confluent-kafka, the byte and message counters against the log on disk, request metrics per API),
and a 2-broker cluster on a real ZooKeeper (a follower killed: UnderReplicatedPartitions on the
leader, OfflinePartitionsCount and ActiveControllerCount across the live brokers, IsrExpandsPerSec
when it comes back). Plus the Partition's ISR-change marks over a real log."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from broker_harness import BrokerProcess
from cluster_harness import member, partition_state
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import free_port
from metrics_harness import scrape, value
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.log.config import LogConfig
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.protocol.api import METADATA
from tieredlog.replication.partition import IsrChange, Partition, PartitionState
from tieredlog.server.broker_metrics import TOTAL_TIME_BUCKETS_MS

RM = "kafka_server_replicamanager_"
KC = "kafka_controller_kafkacontroller_"
BT = "kafka_server_brokertopicmetrics_"
RQ = "kafka_network_requestmetrics_"


def log_bytes(data_dir: Path, topic: str, partition: int = 0) -> int:
    """The partition's record bytes on disk: produce appends the request's batches unchanged."""
    return sum(f.stat().st_size for f in (data_dir / f"{topic}-{partition}").glob("*.log"))


def metadata_requests(bootstrap: str, n: int) -> None:
    with KafkaClient(bootstrap, timeout=10) as c:
        for _ in range(n):
            c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})


# ---- a broker alone ----------------------------------------------------------------------------------


def test_alone_counters_move_by_what_was_produced_and_fetched(broker_factory: Callable[..., BrokerProcess]) -> None:
    port = free_port()
    b = broker_factory({"metrics.port": str(port), "remote.log.storage.system.enable": "false"})
    before = scrape(port)
    assert value(before, KC + "activecontrollercount") == 1  # alone, the broker is its own controller
    assert value(before, KC + "offlinepartitionscount") == 0
    partitions_before = value(before, RM + "partitioncount")
    assert partitions_before is not None

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("m", 1, 1)])["m"].result(30)
    wait_until(lambda: value(scrape(port), RM + "partitioncount") == partitions_before + 1,
               message="the new partition counted")

    n = 300
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce("m", key=b"k%d" % i, value=b"v" * (100 + i % 7), partition=0)
    assert p.flush(30) == 0
    on_disk = log_bytes(b.data_dir, "m")
    assert on_disk > n * 100

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([CkTopicPartition("m", 0, 0)])
    got: list[Any] = []
    wait_until(lambda: got.extend(m for m in c.consume(num_messages=1000, timeout=0.2) if m.error() is None)
               or len(got) >= n, timeout=30, message="every record consumed")
    c.close()
    assert len(got) == n

    # the response is written before the request is counted: wait for the scrape to agree
    wait_until(lambda: value(scrape(port), BT + "bytesout_total", topic="m") == on_disk, timeout=10,
               message=f"BytesOutPerSec == {on_disk} (the consumer read the whole log once)")
    after = scrape(port)
    assert value(after, BT + "messagesin_total", topic="m") == n
    assert value(after, BT + "bytesin_total", topic="m") == on_disk
    assert value(after, BT + "replicationbytesout_total", topic="m") is None  # no follower fetched
    # alone, every partition is led here with an ISR of one
    assert value(after, RM + "leadercount") == value(after, RM + "partitioncount") == partitions_before + 1
    assert value(after, RM + "underreplicatedpartitions") == 0
    assert value(after, RM + "underminisrpartitioncount") == 0

    for api in ("Produce", "Fetch", "Metadata", "ApiVersions"):
        count = value(after, RQ + "requests_total", request=api)
        assert count is not None and count >= 1, api
        # the histogram saw every answered request once, and its buckets are cumulative to +Inf
        assert value(after, RQ + "totaltimems_count", request=api) == count, api
        assert value(after, RQ + "totaltimems_bucket", request=api, le="+Inf") == count, api
        bounds = [value(after, RQ + "totaltimems_bucket", request=api, le=repr(float(ms)))
                  for ms in TOTAL_TIME_BUCKETS_MS]
        assert bounds == sorted(bounds), api  # type: ignore[type-var]
        total_ms = value(after, RQ + "totaltimems_sum", request=api)
        assert total_ms is not None and total_ms > 0, api

    # exactly three more Metadata requests: RequestsPerSec moves by three
    metadata_before = value(after, RQ + "requests_total", request="Metadata")
    assert metadata_before is not None
    metadata_requests(b.bootstrap, 3)
    wait_until(lambda: value(scrape(port), RQ + "requests_total", request="Metadata") == metadata_before + 3,
               timeout=10, message="three more Metadata requests counted")


# ---- a 2-broker cluster ------------------------------------------------------------------------------


def test_cluster_follower_killed_under_replicated_on_the_leader_and_one_active_controller(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    ports = {i: free_port() for i in (1, 2)}
    brokers = {i: broker_factory({**member(zk_connect, i), "metrics.port": str(ports[i])}) for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], message="both brokers registered")
        wait_until(lambda: zk.get_controller_id() is not None, message="a controller elected")

    def active_controllers(ids: list[int]) -> float:
        return sum(value(scrape(ports[i]), KC + "activecontrollercount") or 0 for i in ids)

    def offline_partitions(ids: list[int]) -> float:
        return sum(value(scrape(ports[i]), KC + "offlinepartitionscount") or 0 for i in ids)

    wait_until(lambda: active_controllers([1, 2]) == 1, timeout=30, message="one active controller")

    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values())})
    futures = admin.create_topics([NewTopic("urp", 1, 2), NewTopic("solo", 4, 1)])
    for f in futures.values():
        f.result(30)
    wait_until(lambda: (s := partition_state(brokers[1], "urp")) and len(s[0][3]) == 2, timeout=30,
               message="a full ISR")
    wait_until(lambda: len(partition_state(brokers[1], "solo")) == 4 and
               all(s[0] in (1, 2) for s in partition_state(brokers[1], "solo")), timeout=30,
               message="every RF 1 partition led")
    ((leader, _, _, _),) = partition_state(brokers[1], "urp")
    follower = 2 if leader == 1 else 1
    on_follower = sum(1 for s in partition_state(brokers[1], "solo") if s[2] == [follower])

    # each broker hosts the RF 2 partition and its RF 1 ones, once their LeaderAndIsr arrived
    wait_until(lambda: value(scrape(ports[leader]), RM + "leadercount") == 1 + (4 - on_follower), timeout=30,
               message="the leader counts what it leads")
    wait_until(lambda: value(scrape(ports[follower]), RM + "partitioncount") == 1 + on_follower, timeout=30,
               message="the follower counts what it hosts")
    s = scrape(ports[leader])
    assert value(s, RM + "partitioncount") == 1 + (4 - on_follower)
    assert value(s, RM + "underreplicatedpartitions") == 0
    f = scrape(ports[follower])
    assert value(f, RM + "leadercount") == on_follower
    assert value(f, RM + "underreplicatedpartitions") == 0  # a follower never counts it
    assert offline_partitions([1, 2]) == 0
    expands_before = value(s, RM + "isrexpands_total")
    assert expands_before is not None

    brokers[follower].kill9()
    wait_until(lambda: value(scrape(ports[leader]), RM + "underreplicatedpartitions") == 1, timeout=60,
               message="UnderReplicatedPartitions 1 on the leader")
    # if the follower was the controller, the survivor takes over once the dead session expires
    wait_until(lambda: active_controllers([leader]) == 1, timeout=60, message="the survivor is the active controller")
    # the RF 1 partitions on the dead broker have no live replica to lead them
    wait_until(lambda: offline_partitions([leader]) == on_follower, timeout=60,
               message=f"OfflinePartitionsCount {on_follower}")

    brokers[follower].start()
    wait_until(lambda: (s := scrape(ports[leader]))
               and value(s, RM + "underreplicatedpartitions") == 0
               and value(s, RM + "isrexpands_total") == expands_before + 1, timeout=60,
               message="the follower back in the ISR: one ISR expansion")
    wait_until(lambda: active_controllers([1, 2]) == 1 and offline_partitions([1, 2]) == 0, timeout=60,
               message="one active controller, nothing offline")


# ---- the Partition's ISR-change marks -----------------------------------------------------------------


class CountingListener:
    def __init__(self) -> None:
        self.expands = 0
        self.shrinks = 0

    def mark_expand(self) -> None:
        self.expands += 1

    def mark_shrink(self) -> None:
        self.shrinks += 1


class Proposals:
    def __init__(self) -> None:
        self.sent: list[IsrChange] = []

    def submit(self, partition: Partition, change: IsrChange) -> None:
        self.sent.append(change)


def test_isr_changes_are_marked_once_the_controller_accepts_them(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    clock = lambda: now[0]  # noqa: E731
    listener, proposals = CountingListener(), Proposals()
    plog = UnifiedLog(tmp_path / "t-0", LogConfig(), clock=clock)
    p = Partition(TopicPartition("t", 0), plog, 1, clock_ms=clock, isr_sender=proposals, isr_listener=listener)
    p.make_leader(PartitionState(leader=1, leader_epoch=3, isr=(1, 2), replicas=(1, 2), partition_epoch=4))
    now[0] += 10_000
    p.maybe_shrink_isr(max_lag_ms=4_000)
    (shrink,) = proposals.sent
    assert (listener.shrinks, listener.expands) == (0, 0)  # proposed, not yet accepted
    p.on_isr_change_answered(shrink, None)  # the controller could not be reached: nothing changed
    assert (listener.shrinks, listener.expands) == (0, 0)
    p.maybe_shrink_isr(max_lag_ms=4_000)
    p.on_isr_change_answered(proposals.sent[-1], PartitionState(1, 3, (1,), (1, 2), partition_epoch=5))
    assert (listener.shrinks, listener.expands) == (1, 0)
    p.update_follower_fetch_state(2, 0, 0, leader_end_offset=0)  # caught up: expansion proposed
    p.on_isr_change_answered(proposals.sent[-1], PartitionState(1, 3, (1, 2), (1, 2), partition_epoch=6))
    assert (listener.shrinks, listener.expands) == (1, 1)


def test_alone_the_log_cleaner_reports_kafkas_figures_after_a_round(broker_factory: Callable[..., BrokerProcess]) -> None:
    port = free_port()
    b = broker_factory({"metrics.port": str(port), "log.cleaner.backoff.ms": "100"})
    lc, lcm = "kafka_log_logcleaner_", "kafka_log_logcleanermanager_"
    assert value(scrape(port), lc + "deadthreadcount") == 0
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("compacted", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"})])["compacted"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(400):  # 4 keys, 100 values each, 20 records a batch: segments of a few batches roll
        p.produce("compacted", key=b"k%d" % (i % 4), value=b"v%d" % i + bytes(100))
        if i % 20 == 19:
            p.flush(30)
    wait_until(lambda: "Cleaner 0: cleaned compacted-0" in b.log_text(), timeout=60, message="a cleaning round")
    samples = scrape(port)
    recopy = value(samples, lc + "cleaner_recopy_percent")
    assert recopy is not None and 0 < recopy < 50
    assert value(samples, lc + "max_buffer_utilization_percent") is not None
    assert value(samples, lcm + "uncleanable_partitions_count") == 0
    assert value(samples, lc + "deadthreadcount") == 0
    since = value(samples, lcm + "time_since_last_run_ms")
    assert since is not None and since >= 0
