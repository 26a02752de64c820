"""Deleting a tiered topic in a cluster (seeds digest §3.13, §3.18): every replica stops and drops its
local log, the controller then marks the partition DELETE_PARTITION_MARKED, and the broker leading the
matching ``__remote_log_metadata`` partition (not necessarily a replica of the topic) deletes its
remote segments, once."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state
from confluent_kafka.admin import AdminClient
from tiered_cluster import (
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    create_metadata_topic,
    create_topic_in_zk,
    produce_values,
    remote_segments,
    segment_bytes_for,
    tiered_member,
    value,
    wait_metadata_isr,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rsm.api import TopicIdPartition

pytestmark = pytest.mark.integration

TOPIC = "gone"


def test_the_metadata_partition_leader_deletes_a_deleted_topics_remote_data(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    brokers = {i: broker_factory(tiered_member(zk_connect, i, remote)) for i in (1, 2, 3)}
    servers = bootstrap(brokers)
    create_metadata_topic(servers, replication_factor=3)
    wait_metadata_isr(brokers[1], [1, 2, 3])
    topic_id = create_topic_in_zk(zk_connect, TOPIC, [1, 2], {
        "remote.storage.enable": "true", "segment.bytes": str(segment_bytes_for(2))})
    wait_until(lambda: (s := partition_state(brokers[1], TOPIC)) and s[0][3] == [1, 2], timeout=30,
               message=f"{TOPIC} in sync on [1, 2]")
    produce_values(servers, TOPIC, [value(o) for o in range(7)])
    wait_tiered_up_to(brokers[1], TOPIC, 5)
    uploaded = remote_segments(remote, TOPIC)
    assert [(m["start_offset"], m["end_offset"]) for m in uploaded] == [(0, 1), (2, 3), (4, 5)]

    m = metadata_partition(TopicIdPartition(topic_id, TOPIC, 0), METADATA_PARTITIONS)
    remover = partition_state(brokers[1], METADATA_TOPIC)[m][0]

    admin = AdminClient({"bootstrap.servers": servers})
    admin.delete_topics([TOPIC])[TOPIC].result(30)
    wait_until(lambda: not remote_segments(remote, TOPIC), timeout=30, message="the remote segments deleted")
    # a segment's manifest goes first, its other objects right after
    wait_until(lambda: not [p for p in remote.glob(f"{TOPIC}-*/0/*") if p.is_file()], timeout=30,
               message="no object left behind")
    # DELETE_PARTITION_FINISHED, then the line, come after the last object is gone
    done = f"{TOPIC}-0: remote data deleted (the topic was deleted)"
    wait_until(lambda: any(done in b.log_text() for b in brokers.values()), timeout=30, message="the remover's line")
    for i, b in brokers.items():
        assert not (b.data_dir / f"{TOPIC}-0").exists()
        deleted = done in b.log_text()
        assert deleted == (i == remover), f"broker {i} (the remover is {remover})"
    assert sum(f"{TOPIC}-0: marked for remote deletion" in b.log_text() for b in brokers.values()) == 1
