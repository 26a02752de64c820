"""``ReplicatedMetadataTopic``: the RLMM's ``__remote_log_metadata`` in a ZooKeeper cluster, read and
written as a Kafka client of each partition's leader. Three broker processes on a real ZooKeeper, the
topic created with replication factor 3; two clients (as if two brokers) append to and read one
partition, two topic-based RLMMs share a segment's metadata through it, and the leader of the
partition written to is killed with SIGKILL: the next append waits for the new leader and nothing
acknowledged before is lost."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from test_cluster_replication import bootstrap, start_cluster
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CREATE_TOPICS, METADATA
from tieredlog.replication.metadata_topic_client import ReplicatedMetadataTopic
from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rlmm.topic import METADATA_TOPIC
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager
from tieredlog.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tieredlog.server.produce_api import INTERNAL_TOPICS_CLIENT_ID

pytestmark = pytest.mark.integration

PARTITIONS = 3
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


def segment(tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), 0, 99, 1_700_000_000_000, 1,
                                    1_700_000_000_000, 4096, {0: 0})


def rlmm(topic: ReplicatedMetadataTopic, broker_id: int) -> TopicBasedRemoteLogMetadataManager:
    return TopicBasedRemoteLogMetadataManager(topic, {
        "remote.log.metadata.topic.num.partitions": PARTITIONS, "broker.id": broker_id,
        "remote.log.metadata.snapshot.enable": "false"})


def test_two_clients_share_the_replicated_metadata_topic_across_a_leader_failover(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    # the last broker standing cannot hand its leaderships to anyone: its shutdown need not wait 3 x 5 s
    brokers = start_cluster(broker_factory, zk_connect, overrides={"controlled.shutdown.retry.backoff.ms": "200"})
    routing = ClientRouting(brokers)
    a = ReplicatedMetadataTopic(routing, client_id=INTERNAL_TOPICS_CLIENT_ID, request_timeout_s=30)
    b = ReplicatedMetadataTopic(routing, client_id=INTERNAL_TOPICS_CLIENT_ID, request_timeout_s=30)
    managers: list[TopicBasedRemoteLogMetadataManager] = []
    try:
        a.ensure_created(PARTITIONS)
        b.ensure_created(PARTITIONS)
        assert set(routing.leader_ids.values()) <= set(brokers)

        tp = TopicIdPartition(uuid.UUID(int=42), "orders", 0)
        rlmm_partition = metadata_partition(tp, PARTITIONS)
        p = (rlmm_partition + 1) % PARTITIONS  # the raw records go where the managers never read

        # 1. two writers at once: every append gets its own offset, consecutive; both read the same
        written: dict[int, bytes] = {a.append(p, b"first"): b"first"}
        lock = threading.Lock()

        def write(topic: ReplicatedMetadataTopic, name: bytes) -> None:
            for i in range(15):
                value = b"%s-%d" % (name, i)
                offset = topic.append(p, value)
                with lock:
                    written[offset] = value

        writers = [threading.Thread(target=write, args=(t, n)) for t, n in ((a, b"a"), (b, b"b"))]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        assert sorted(written) == list(range(31))
        expected = sorted(written.items())
        assert list(a.read(p, 0)) == expected
        assert list(b.read(p, 0)) == expected
        assert list(b.read(p, 17)) == expected[17:]
        assert list(a.read(p, 31)) == []
        assert a.end_offset(p) == b.end_offset(p) == 31

        # 2. an RLMM publishes a segment and its copy's end; another RLMM, over the other client, sees it
        m1, m2 = rlmm(a, 1), rlmm(b, 2)
        managers += [m1, m2]
        m1.on_partition_leadership_changes([tp], [])
        m2.on_partition_leadership_changes([], [tp])
        m1.wait_until_ready([tp], timeout=60)
        m2.wait_until_ready([tp], timeout=60)
        md = segment(tp)
        m1.add_remote_log_segment_metadata(md)
        m1.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 1_700_000_000_001, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
        assert m1.remote_log_segment_metadata(tp, 0, 50).state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED

        def seen_by_m2() -> bool:
            found = m2.remote_log_segment_metadata(tp, 0, 50)
            return found is not None and found.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED

        wait_until(seen_by_m2, timeout=10, message="the second manager sees the finished segment")
        # its lag, from the end its reads learned over the network: caught up
        (state,) = [x for x in m2.metadata_partition_states() if x.partition == m2.partition_for(tp)]
        assert (state.lag, state.end_offset) == (0, state.consumed_offset) and state.consumed_offset > 0
        assert state.ready_time_s is not None
        (listed,) = list(m2.list_remote_log_segments(tp))
        assert (listed.remote_log_segment_id, listed.state) == (md.remote_log_segment_id,
                                                                RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

        # 3. the leader of the partition written to dies: the next append waits for the new leader
        leader = routing.leader_ids[p]
        brokers[leader].kill9()
        t0 = time.monotonic()
        assert a.append(p, b"after-failover") == 31
        failover_s = time.monotonic() - t0
        assert routing.leader_ids[p] != leader
        expected.append((31, b"after-failover"))
        assert list(b.read(p, 0)) == expected
        assert list(a.read(p, 0)) == expected
        assert b.end_offset(p) == 32
        # the managers' partition still answers, wherever its leader is now
        m3 = rlmm(b, 3)
        managers.append(m3)
        m3.on_partition_leadership_changes([], [tp])
        m3.wait_until_ready([tp], timeout=60)
        assert m3.remote_log_segment_metadata(tp, 0, 99).remote_log_segment_id == md.remote_log_segment_id
        print(f"append across the failover took {failover_s:.1f} s; survivors: {bootstrap(brokers)}")
    finally:
        for m in managers:
            m.close()
        a.close()
        b.close()
        routing.close()
