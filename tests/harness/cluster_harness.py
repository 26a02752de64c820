"""Helpers of the ZooKeeper-cluster tests: a member's broker configs, a cluster of broker processes
started and registered, its bootstrap list, and what one broker says of it (a partition's leader, epoch,
replicas and ISR; the controller); ``ClientRouting`` reaches the metadata topic as an admin client does."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from broker_harness import BrokerProcess
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from zk_harness import wait_until

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import CREATE_TOPICS, METADATA
from tieredlog.rlmm.topic import METADATA_TOPIC


def member(connect: str, broker_id: int, overrides: dict[str, str] | None = None) -> dict[str, str]:
    return {**_member(connect, broker_id), **(overrides or {})}


def _member(connect: str, broker_id: int) -> dict[str, str]:
    return {"zookeeper.connect": connect, "broker.id": str(broker_id), "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "4000", "replica.fetch.backoff.ms": "200",
            "leader.imbalance.check.interval.seconds": "5",
            "remote.log.storage.system.enable": "false"}


def partition_state(b: BrokerProcess, topic: str) -> list[tuple[int, int, list[int], list[int]]]:
    """(leader, leader epoch, replicas, isr) per partition, from one broker's Metadata."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = r.topics
    if t.error_code != 0:
        return []
    return [(p.leader_id, p.leader_epoch, sorted(p.replica_nodes), sorted(p.isr_nodes))
            for p in sorted(t.partitions, key=lambda p: p.partition_index)]


def start_cluster(broker_factory: Callable[..., BrokerProcess], connect: str, n: int = 3,
                  overrides: dict[str, str] | None = None) -> dict[int, BrokerProcess]:
    brokers = {i: broker_factory(member(connect, i, overrides)) for i in range(1, n + 1)}
    with ZkClient(connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == list(brokers), message="every broker registered")
        wait_until(lambda: zk.get_controller_id() is not None, message="a controller elected")
    return brokers


def bootstrap(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values() if b.alive())


def consume_all(servers: str, topic: str, expected: int, timeout_s: float = 60) -> list[Any]:
    c = Consumer({"bootstrap.servers": servers, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([CkTopicPartition(topic, 0, 0)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    out.append(m)
    finally:
        c.close()
    return out


def controller_of(b: BrokerProcess) -> int:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        return int(c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False}).controller_id)


TOPIC_ALREADY_EXISTS = 36

NOT_CONTROLLER = 41


class ClientRouting:
    """``MetadataTopicRouting`` as an admin client does it: leaders from Metadata requests (refreshed
    by a thread every 100 ms, so ``leader_endpoint`` never blocks), the topic made with CreateTopics
    sent to the controller."""

    def __init__(self, brokers: dict[int, BrokerProcess], replication_factor: int = 3) -> None:
        self._brokers = brokers
        self._replication_factor = replication_factor
        self._leaders: dict[int, tuple[str, int]] = {}
        self.leader_ids: dict[int, int] = {}
        self.partition_count = 0
        self._controller: tuple[str, int] | None = None
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="test-routing", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.refresh()

    def refresh(self) -> None:
        for b in list(self._brokers.values()):
            if not b.alive():
                continue
            try:
                with KafkaClient(b.bootstrap, timeout=5) as c:
                    r = c.request(METADATA, {"topics": [{"name": METADATA_TOPIC}], "allow_auto_topic_creation": False})
            except OSError:
                continue
            endpoints = {n.node_id: (n.host, n.port) for n in r.brokers}
            leaders: dict[int, tuple[str, int]] = {}
            leader_ids: dict[int, int] = {}
            count = 0
            for t in r.topics:
                if t.name == METADATA_TOPIC and t.error_code == 0:
                    count = len(t.partitions)
                    for p in t.partitions:
                        if p.leader_id in endpoints:
                            leaders[p.partition_index] = endpoints[p.leader_id]
                            leader_ids[p.partition_index] = p.leader_id
            self._leaders, self.leader_ids, self.partition_count = leaders, leader_ids, count
            self._controller = endpoints.get(r.controller_id)
            return

    def leader_endpoint(self, partition: int) -> tuple[str, int] | None:
        return self._leaders.get(partition)

    def create_topic(self, num_partitions: int, configs: dict[str, str]) -> int:
        deadline = time.monotonic() + 30
        while True:
            self.refresh()
            if self._controller is not None:
                host, port = self._controller
                with KafkaClient(f"{host}:{port}", timeout=10) as c:
                    r = c.request(CREATE_TOPICS, {"topics": [{
                        "name": METADATA_TOPIC, "num_partitions": num_partitions,
                        "replication_factor": self._replication_factor,
                        "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout": 10000},
                        version=5)
                code = r.topics[0].error_code.value
                if code in (0, TOPIC_ALREADY_EXISTS):
                    break
                assert code == NOT_CONTROLLER, r.topics[0]
            assert time.monotonic() < deadline, "no controller took CreateTopics"
            time.sleep(0.1)

        def led() -> bool:
            self.refresh()
            return self.partition_count > 0 and len(self._leaders) == self.partition_count

        wait_until(led, timeout=30, message=f"a leader for every partition of {METADATA_TOPIC}")
        return self.partition_count
