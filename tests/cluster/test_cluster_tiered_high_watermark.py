"""The leader never tiers beyond its high watermark (seeds digest §3.6: the largest remote offset stays
at or below the LSO, which is at or below the high watermark). A follower that stops fetching while
it is still in the ISR holds the high watermark back; segments the leader rolls above it stay local
until the follower catches up, and are tiered then. The follower, learning from the remote log
metadata what the leader tiered, deletes those segments from its own disk under local retention."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import partition_state
from tiered_cluster import (
    BATCH_SIZE,
    LATEST_TIERED,
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    create_topic_in_zk,
    list_offset,
    local_base_offsets,
    produce_values,
    segment_bytes_for,
    segment_ranges,
    tiered_member,
    value,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.protocol.api import LIST_OFFSETS

pytestmark = pytest.mark.integration

TOPIC = "held"


def high_watermark(b: BrokerProcess) -> int:
    # isolation level read_uncommitted, latest: the high watermark a consumer sees
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
            version=4)
    return r.topics[0].partitions[0].offset


def test_segments_above_the_high_watermark_wait_for_the_follower(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    # a follower paused for a few seconds stays in the ISR: neither the lag nor its session expires
    patient = {"replica.lag.time.max.ms": "60000", "zookeeper.session.timeout.ms": "30000",
               # the leader alone hosts the metadata partitions: its controlled shutdown cannot move them
               "controlled.shutdown.retry.backoff.ms": "200",
               # ... and stays there: the controller raises an internal topic to its configured factor
               "rlmm.config.remote.log.metadata.topic.replication.factor": "1"}
    leader = broker_factory(tiered_member(zk_connect, 1, remote, patient))
    follower = broker_factory(tiered_member(zk_connect, 2, remote, patient))
    # the remote log metadata on the leader alone: the paused follower must lead none of it
    with ZkClient(zk_connect) as zk:
        zk.set_topic_config(METADATA_TOPIC, {"retention.ms": "-1", "remote.storage.enable": "false"})
        zk.create_topic_assignment(METADATA_TOPIC, TopicAssignment.of(
            {p: [1] for p in range(METADATA_PARTITIONS)}, uuid.uuid4()))
    create_topic_in_zk(zk_connect, TOPIC, [1, 2], {
        "remote.storage.enable": "true", "segment.bytes": str(segment_bytes_for(2)), "min.insync.replicas": "1",
        # local retention keeps about the active segment: whatever is tiered goes from local disks
        "local.retention.bytes": str(2 * BATCH_SIZE)})
    wait_until(lambda: (s := partition_state(leader, TOPIC)) and s[0][0] == 1 and s[0][3] == [1, 2], timeout=30,
               message=f"{TOPIC} led by 1 with ISR [1, 2]")
    produce_values(leader.bootstrap, TOPIC, [value(o) for o in range(4)])  # acks=all: high watermark 4
    wait_until(lambda: high_watermark(leader) == 4, timeout=10, message="high watermark 4")

    assert follower.proc is not None
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": leader.bootstrap, "acks": "1", "linger.ms": 0,
                      "enable.idempotence": False})
        for o in range(4, 10):  # rolls 2-3 (below the high watermark), then 4-5 and 6-7 (above it)
            p.produce(TOPIC, value(o), partition=0)
            p.flush(10)
        # seg 2-3 is tiered: the copy task has run over the rolled segments, and stopped at the watermark
        wait_tiered_up_to(leader, TOPIC, 3)
        assert high_watermark(leader) == 4
        assert list_offset(leader, TOPIC, LATEST_TIERED)[1] == 3
        assert [(s, e) for s, e, _ in segment_ranges(remote, TOPIC)] == [(0, 1), (2, 3)]
        assert partition_state(leader, TOPIC)[0][3] == [1, 2]  # still in sync: the watermark is held by it
    finally:
        follower.proc.send_signal(signal.SIGCONT)

    wait_until(lambda: high_watermark(leader) == 10, timeout=30, message="the follower caught up")
    wait_tiered_up_to(leader, TOPIC, 7)
    assert [(s, e) for s, e, _ in segment_ranges(remote, TOPIC)] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    # the follower learns from the remote log metadata what the leader tiered, and deletes it locally too
    for b in (leader, follower):
        wait_until(lambda b=b: local_base_offsets(b, TOPIC) == [8], timeout=30,
                   message=f"broker {b.overrides['broker.id']} keeps only the untiered segment 8-9")
