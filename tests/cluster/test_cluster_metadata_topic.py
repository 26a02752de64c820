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
from cluster_harness import ClientRouting, bootstrap, start_cluster
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.replication.metadata_topic_client import ReplicatedMetadataTopic
from tieredlog.rlmm.partitioner import metadata_partition
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
