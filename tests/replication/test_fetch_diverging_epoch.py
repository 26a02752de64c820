"""Fetch's diverging epoch (KIP-320, Fetch v12+) on a real cluster whose leader-epoch history splits.

Brokers 1 (A) and 2 (B) hold the topic, broker 3 is the controller. A and B hold m0-m2 in epoch 0;
B stops fetching (SIGSTOP) and leaves the ISR; A writes a3 and a4 alone, still in epoch 0, and dies.
B is elected uncleanly in epoch 1 and writes b3 at offset 3, so its lineage is {0: 0, 1: 3}:

- a Fetch that names ``last_fetched_epoch`` 0 at offset 5 (where A's log ends) is answered, without
  records, with ``diverging_epoch`` {epoch 0, end offset 3}, as Kafka's Partition.readRecords does;
  at offset 3 it is not (epoch 0 ends exactly there) and gets b3; an epoch B never heard of past its
  latest is OFFSET_OUT_OF_RANGE; a librdkafka consumer reads the whole log across the two epochs;
- A restarts as B's follower and truncates a3 and a4 on that answer alone (Kafka's truncation on
  fetch), then replicates b3 and rejoins the ISR;
- A then leads epoch 2 without writing in it and B takes over in epoch 3 while A is paused: A's epoch
  2 starts at its log end and B never had it, so A's fetch diverges with nothing to cut; the empty
  epoch leaves A's cache (as Kafka's truncateTo does) and A rejoins the ISR instead of diverging forever.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import consume_all, member, partition_state
from confluent_kafka.admin import AdminClient, NewTopic
from tiered_cluster import epoch_checkpoint, local_records, produce_values
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import FETCH, METADATA
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import decode_batch

pytestmark = pytest.mark.integration

A, B, CONTROLLER = 1, 2, 3
TOPIC = "div"
OFFSET_OUT_OF_RANGE = 1
CONF = {"auto.leader.rebalance.enable": "false", "replica.lag.time.max.ms": "2000",
        "controlled.shutdown.max.retries": "1", "controlled.shutdown.retry.backoff.ms": "100"}


def wait_state(c: BrokerProcess, leader: int, epoch: int, isr: list[int]) -> None:
    wait_until(lambda: (s := partition_state(c, TOPIC)) and s[0][0] == leader and s[0][1] == epoch
               and s[0][3] == sorted(isr), timeout=40, message=f"leader {leader} at epoch {epoch} with ISR {isr}")


def fetch(b: BrokerProcess, version: int, offset: int, last_fetched_epoch: int, topic_id: Any = None,
          leader_epoch: int = 1) -> Any:
    """One consumer Fetch of partition 0 naming ``last_fetched_epoch``; the answer's partition."""
    topic: dict[str, Any] = {"topic_id": topic_id} if version >= 13 else {"topic": TOPIC}
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{**topic, "partitions": [{
                "partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}]}, version=version)
    return r.responses[0].partitions[0]


def values(p: Any) -> list[tuple[int, bytes]]:
    data = bytes(p.records or b"")
    out = []
    for pos, _ in iter_headers(data):
        _header, records = decode_batch(data, pos)
        out += [(r.offset, r.value or b"") for r in records]
    return out


def test_a_fetch_naming_an_epoch_that_ends_before_its_offset_gets_the_diverging_epoch_and_the_follower_truncates_on_it(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    c = broker_factory(member(zk_connect, CONTROLLER, CONF))
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_controller_id() == CONTROLLER, timeout=30, message="broker 3 is the controller")
    # A's ZooKeeper session expires soon after it is killed; B's outlives its pause
    a = broker_factory(member(zk_connect, A, {**CONF, "zookeeper.session.timeout.ms": "4000"}))
    b = broker_factory(member(zk_connect, B, {**CONF, "zookeeper.session.timeout.ms": "12000"}))
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [A, B, CONTROLLER], timeout=40, message="three brokers")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    new = NewTopic(TOPIC, num_partitions=1, replica_assignment=[[A, B]],
                   config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    admin.create_topics([new])[TOPIC].result(30)
    wait_state(c, A, 0, [A, B])
    produce_values(a.bootstrap, TOPIC, [b"m0", b"m1", b"m2"])

    # B stops fetching and leaves the ISR; A writes a3 and a4 alone in epoch 0, then dies
    assert b.proc is not None
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        wait_state(c, A, 0, [A])
        produce_values(a.bootstrap, TOPIC, [b"a3", b"a4"])
        assert [(o, v) for o, v, _ in local_records(a, TOPIC)] == [(0, b"m0"), (1, b"m1"), (2, b"m2"),
                                                                   (3, b"a3"), (4, b"a4")]
        a.kill9()
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
    wait_state(c, B, 1, [B])  # unclean: B was out of sync
    produce_values(b.bootstrap, TOPIC, [b"b3"])
    assert epoch_checkpoint(b, TOPIC) == [(0, 0), (1, 3)]

    with KafkaClient(b.bootstrap, timeout=10) as client:
        md = client.request(METADATA, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}, version=12)
    topic_id = md.topics[0].topic_id
    for version in (12, 16):
        # A's log ends at 5 in epoch 0; on B epoch 0 ends at 3: diverging, and no records
        p = fetch(b, version, 5, 0, topic_id)
        assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 0, 3)
        assert values(p) == []
        assert (p.high_watermark, p.log_start_offset) == (4, 0)
        # at 3, epoch 0 ends exactly where the fetch starts: no divergence, b3 comes back
        p = fetch(b, version, 3, 0, topic_id)
        assert (p.error_code, p.diverging_epoch.end_offset) == (0, -1)
        assert values(p) == [(3, b"b3")]
        # the latest epoch at the log end: nothing to read, nothing diverges
        p = fetch(b, version, 4, 1, topic_id)
        assert (p.error_code, p.diverging_epoch.end_offset, values(p)) == (0, -1, [])
        # an epoch past every epoch B has: Kafka cannot place it and answers OFFSET_OUT_OF_RANGE
        p = fetch(b, version, 4, 7, topic_id)
        assert (p.error_code, p.diverging_epoch.end_offset) == (OFFSET_OUT_OF_RANGE, -1)
    # librdkafka names the epoch of the last batch it read in each fetch: across the epochs, no divergence
    assert [m.value() for m in consume_all(b.bootstrap, TOPIC, 4)] == [b"m0", b"m1", b"m2", b"b3"]

    # A comes back as B's follower: its first fetch (offset 5, epoch 0) diverges and it cuts a3 and a4
    a.start()
    wait_state(c, B, 1, [A, B])
    assert "truncating div-0 from 5 to 3 (diverging epoch: leader epoch 0 ends at 3)" in a.log_text()
    assert local_records(a, TOPIC) == [(0, b"m0", 0), (1, b"m1", 0), (2, b"m2", 0),
                                                                  (3, b"b3", 1)]
    assert epoch_checkpoint(a, TOPIC) == [(0, 0), (1, 3)]

    # A leads epoch 2 and writes nothing in it (B stops, then rejoins); then B leads epoch 3 while A,
    # paused past its ZooKeeper session, keeps its state in memory (a restart would reload its log and
    # drop the empty epoch at the log end)
    b.stop()
    wait_state(c, A, 2, [A])
    b.start()
    wait_state(c, A, 2, [A, B])
    assert a.proc is not None
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        wait_state(c, B, 3, [B])
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    assert epoch_checkpoint(a, TOPIC) == [(0, 0), (1, 3), (2, 4)]  # epoch 2 starts at A's end, empty
    # epoch 2 is one B never had: it answers with its largest epoch below, 1, which ends at 4
    p = fetch(b, 12, 4, 2, topic_id, leader_epoch=3)
    assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 1, 4)
    # A follows B: nothing to cut, but its empty epoch 2 goes, so its next fetch no longer diverges
    wait_state(c, B, 3, [A, B])
    produce_values(b.bootstrap, TOPIC, [b"b4"])
    wait_until(lambda: len(local_records(a, TOPIC)) == 5, timeout=20, message="A replicates b4")
    assert local_records(a, TOPIC)[4] == (4, b"b4", 3)
    assert epoch_checkpoint(a, TOPIC) == [(0, 0), (1, 3), (3, 4)]
