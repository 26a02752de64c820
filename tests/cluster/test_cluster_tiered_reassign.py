"""Tiered partitions moving between brokers and losing their leader, with real broker processes.

A reassignment onto a broker that never had the partition: the partition's history is mostly remote
and gone from the leader's disk; the new replica (KIP-405's brand-new follower) rebuilds its
leader-epoch lineage and producer state from the remote tier and copies only what the leader still
holds locally, never the tiered history. It then leads: it serves offset 0 from the remote tier and
tiers new segments under its own epoch, after the last remote offset of its lineage, re-uploading
nothing.

A leader killed during an upload: the COPY_SEGMENT_STARTED it recorded and the objects it had written
are an orphan. Every committed segment stays, the next leader uploads the range again and its
expiration task deletes the orphan through DELETE_SEGMENT_STARTED / FINISHED, objects included, and
every offset stays readable from 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, consume_all, controller_of, partition_state
from tiered_cluster import (
    BATCH_SIZE,
    create_metadata_topic,
    create_topic_in_zk,
    epoch_checkpoint,
    local_base_offsets,
    local_log_bytes,
    metadata_events,
    produce_values,
    remote_objects,
    remote_segments,
    segment_bytes_for,
    segment_ranges,
    tiered_member,
    value,
    wait_metadata_isr,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import ALTER_PARTITION_REASSIGNMENTS

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).resolve().parents[1] / "harness" / "rsm_plugins"
RECORDS_PER_SEGMENT = 5
SEGMENT_BYTES = RECORDS_PER_SEGMENT * BATCH_SIZE
# no automatic preferred-leader elections: every leader below is one the test chose; the last brokers
# standing stop without waiting 4 x 5 s for a controlled shutdown with nowhere to move leaders. Deleted
# local segments stay as *.deleted files for the default minute: what a broker ever dropped shows.
CONF = {"auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "200"}


def tiered_topic(connect: str, topic: str, replicas: list[int]) -> None:
    create_topic_in_zk(connect, topic, replicas, {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes_for(RECORDS_PER_SEGMENT)),
        # two full segments stay local: the active one and the last rolled one
        "local.retention.bytes": str(2 * SEGMENT_BYTES),
        "min.insync.replicas": "1",
    })


def wait_state(b: BrokerProcess, topic: str, leader: int, isr: list[int]) -> int:
    """Waits for ``leader`` with exactly ``isr``; returns the leader epoch."""
    wait_until(lambda: (s := partition_state(b, topic)) and s[0][0] == leader and s[0][3] == sorted(isr),
               timeout=40, message=f"{topic}-0 led by {leader} with ISR {isr}")
    return partition_state(b, topic)[0][1]


def reassign(b: BrokerProcess, topic: str, replicas: list[int]) -> None:
    with KafkaClient(b.bootstrap, timeout=30) as c:
        r = c.request(ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas}]}]}, version=0)
    assert r.error_code == 0
    assert [p.error_code for t in r.responses for p in t.partitions] == [0]


def test_reassigned_onto_a_new_broker_a_mostly_remote_partition_is_rebuilt_from_the_remote_tier_then_leads(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    topic = "moved"
    remote = tmp_path / "remote"
    brokers = {i: broker_factory(tiered_member(zk_connect, i, remote, CONF)) for i in (1, 2, 3)}
    b1, b2, b3 = brokers[1], brokers[2], brokers[3]
    create_metadata_topic(bootstrap(brokers), replication_factor=3)
    wait_metadata_isr(b1, [1, 2, 3])
    tiered_topic(zk_connect, topic, [1, 2])

    # LE-0 on broker 1: offsets 0-29; then broker 2 leads (LE-1) and writes 30-59, so the history the
    # new replica must rebuild has two epochs
    wait_state(b1, topic, 1, [1, 2])
    produce_values(b1.bootstrap, topic, [value(o) for o in range(0, 30)])
    b1.stop()
    assert wait_state(b2, topic, 2, [2]) == 1
    b1.start()
    wait_state(b2, topic, 2, [1, 2])
    produce_values(b2.bootstrap, topic, [value(o) for o in range(30, 60)])
    # every rolled segment (0-54) tiered; locally the leader keeps 50-54 and the active 55-59
    wait_tiered_up_to(b2, topic, 54)
    wait_until(lambda: local_base_offsets(b2, topic) == [50, 55], timeout=30,
               message="local retention on the leader down to offsets 50-59")
    leader_bytes = local_log_bytes(b2, topic)
    total_bytes = 60 * BATCH_SIZE
    assert leader_bytes == 10 * BATCH_SIZE
    remote_before = segment_ranges(remote, topic)
    assert [(s, e) for s, e, _ in remote_before] == [(o, o + 4) for o in range(0, 55, 5)]
    assert not (b3.data_dir / f"{topic}-0").exists()

    # the move: broker 3 joins from nothing, broker 1 leaves; broker 2 stays the leader
    reassign(brokers[controller_of(b1)], topic, [2, 3])
    wait_until(lambda: all((s := partition_state(b, topic)) and s[0][0] == 2 and s[0][2:] == ([2, 3], [2, 3])
                           for b in brokers.values()), timeout=60, message="replicas and ISR 2,3 on every broker")
    # in the ISR, broker 3 has every offset up to 59: about the leader's local bytes, never the tiered
    # history, and it never had more (no segment it dropped since)
    new_bytes = local_log_bytes(b3, topic)
    assert new_bytes <= leader_bytes + SEGMENT_BYTES
    assert new_bytes * 4 <= total_bytes
    assert local_base_offsets(b3, topic)[0] >= 50
    assert not list((b3.data_dir / f"{topic}-0").glob("*.deleted"))
    text = b3.log_text()
    assert "offset 0 is only in the leader's remote tier" in text
    assert "rebuilt from the remote tier: log start 0, local log start 50, leader epochs [(0, 0), (1, 30)]" in text
    # the leader's checkpoint also has the epoch it leads in from offset 60, which no record carries
    # yet; a follower learns epochs from the batches it fetches, as Kafka's does
    leader_lineage = epoch_checkpoint(b2, topic)
    assert leader_lineage[:2] == [(0, 0), (1, 30)] and all(o == 60 for _, o in leader_lineage[2:])
    wait_until(lambda: epoch_checkpoint(b3, topic) == leader_lineage[:2], timeout=10,
               message="broker 3's lineage is the leader's")

    # the old leader dies: broker 3, the only other ISR member, leads and serves the whole history
    b2.kill9()
    epoch = wait_state(b3, topic, 3, [3])
    got = consume_all(b3.bootstrap, topic, 60)
    assert [(m.offset(), m.value()) for m in got] == [(o, value(o)) for o in range(60)]

    # it tiers under its own epoch, after offset 54: 55-59 is LE-1's, 60-64 its own
    produce_values(b3.bootstrap, topic, [value(o) for o in range(60, 70)])
    wait_tiered_up_to(b3, topic, 64)
    assert segment_ranges(remote, topic) == remote_before + [(55, 59, {1: 55}), (60, 64, {epoch: 60})]
    assert [m["broker_id"] for m in remote_segments(remote, topic)[len(remote_before):]] == [3, 3]


def test_leader_killed_during_a_copy_loses_no_committed_segment_and_its_orphan_is_deleted(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    topic = "cut"
    remote = tmp_path / "remote"
    controls = {i: tmp_path / f"control-{i}" for i in (1, 2, 3)}
    brokers = {}
    for i, control in controls.items():
        control.mkdir()
        brokers[i] = broker_factory(tiered_member(zk_connect, i, remote, {
            **CONF, "remote.log.storage.manager.class.name": "interrupted_rsm:InterruptedCopyStorage",
            "remote.log.storage.manager.class.path": str(PLUGINS), "rsm.config.control.dir": str(control)}))
    b1, b2 = brokers[1], brokers[2]
    create_metadata_topic(bootstrap(brokers), replication_factor=3)
    wait_metadata_isr(b1, [1, 2, 3])
    tiered_topic(zk_connect, topic, [1, 2])
    wait_state(b1, topic, 1, [1, 2])

    produce_values(b1.bootstrap, topic, [value(o) for o in range(0, 20)])
    wait_tiered_up_to(b1, topic, 14)
    committed = remote_segments(remote, topic)
    assert [(m["start_offset"], m["end_offset"]) for m in committed] == [(0, 4), (5, 9), (10, 14)]

    # offset 20 rolls 15-19; broker 1's upload of it stops after the .log object
    (controls[1] / "hang-copy").touch()
    produce_values(b1.bootstrap, topic, [value(20)])
    wait_until(lambda: (controls[1] / "hung-copy-15").exists(), timeout=30, message="broker 1 mid-copy of 15-19")
    orphans = {sid: sufs for sid, sufs in remote_objects(remote, topic).items() if "manifest" not in sufs}
    assert list(orphans.values()) == [{"log"}]
    (orphan,) = orphans
    wait_until(lambda: metadata_events(b2, topic).get(orphan) == [("COPY_SEGMENT_STARTED", 1)], timeout=20,
               message="the interrupted upload's COPY_SEGMENT_STARTED replicated to broker 2")
    b1.kill9()

    # broker 2 leads, uploads 15-19 again, and its expiration deletes broker 1's orphan
    epoch = wait_state(b2, topic, 2, [2])
    produce_values(b2.bootstrap, topic, [value(o) for o in range(21, 30)])  # 25 rolls 20-24
    wait_tiered_up_to(b2, topic, 24)
    wait_until(lambda: orphan not in remote_objects(remote, topic), timeout=30,
               message="the orphan's objects deleted from the remote tier")
    wait_until(lambda: metadata_events(b2, topic)[orphan][-1] == ("DELETE_SEGMENT_FINISHED", 2), timeout=20,
               message="the orphan's deletion recorded")
    assert metadata_events(b2, topic)[orphan] == [
        ("COPY_SEGMENT_STARTED", 1), ("DELETE_SEGMENT_STARTED", 2), ("DELETE_SEGMENT_FINISHED", 2)]

    # every committed segment is still there, the range is tiered once more, and nothing else
    after = remote_segments(remote, topic)
    assert after[:3] == committed
    assert all(metadata_events(b2, topic)[m["segment_id"]] == [("COPY_SEGMENT_STARTED", 1), ("COPY_SEGMENT_FINISHED", 1)]
               for m in committed)
    assert [(m["start_offset"], m["end_offset"], m["broker_id"]) for m in after[3:]] == [(15, 19, 2), (20, 24, 2)]
    assert segment_ranges(remote, topic)[3:] == [(15, 19, {0: 15}), (20, 24, {0: 20, epoch: 21})]
    assert all("manifest" in sufs for sufs in remote_objects(remote, topic).values())
    # every offset from 0, the first ones from the remote tier only
    wait_until(lambda: local_base_offsets(b2, topic)[0] >= 20, timeout=30, message="local retention on broker 2")
    got = consume_all(b2.bootstrap, topic, 30)
    assert [(m.offset(), m.value()) for m in got] == [(o, value(o)) for o in range(30)]
