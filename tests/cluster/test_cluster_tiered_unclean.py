"""KIP-405's unclean-election scenarios with real broker processes (seeds digest §3.8.7 and §3.8.8).

Brokers 1 (A) and 2 (B) hold the topic; broker 3 is the controller and keeps __remote_log_metadata
available whichever of the other two is down. B falls out of sync the way a replica does in Kafka:
it stops fetching (SIGSTOP, a long pause) and the leader shrinks the ISR itself (AlterPartition, no
new leader epoch). An unclean election happens when the leader dies while the only other live
replica is out of sync: the controller elects it in one step, with one new epoch. So every epoch
below is the digest's.

Scenario 4, unclean leader election including truncation: A holds msg0-msg3 in LE-0 and tiers
seg-0-2 {LE-0: 0}; B has only msg0. A dies and B leads in LE-1, writes msg4 and msg5 at 1 and 2 and
tiers its own seg-0-1 {LE-0: 0, LE-1: 1} (A's seg-0-2 covers offset 1 as well, with msg1). Once B's
first local segment is gone: offset 0 reads msg0, offset 1 reads msg4 (B's lineage says offset 1
is LE-1's), and offset 2 is not in LE-0: OffsetForLeaderEpoch(LE-0) ends it at 1 and a fetch that
names LE-0 is fenced (FENCED_LEADER_EPOCH).

Scenario 5, log divergence in the remote tier after two unclean elections: A holds 0-4 in LE-0 and
tiers seg-0-3 (uuid1); B has 0-1. A dies, B leads in LE-1, writes msg4-msg6 at 2-4 and tiers its
own seg-0-3 (uuid2): two remote segments with the same offsets and different records. B dies, A
comes back and leads in LE-2 without ever hearing of LE-1, writes msg7 and msg8 at 5 and 6 and
tiers seg-4-5 (uuid3). B restarts with its partition directory gone: OFFSET_MOVED_TO_TIERED_STORAGE,
ListOffsets(EARLIEST_LOCAL) gives 6 in LE-2, seg-4-5's leader-epoch index gives it {LE-0: 0, LE-2: 5},
and it joins the ISR. Led by B, offset 2 reads msg2 from uuid1 (A's lineage) and LE-1 is not in the
lineage (OffsetForLeaderEpoch(LE-1) answers LE-0, a fetch naming LE-1 is fenced). uuid2's own
records (msg4, msg5) are never read, and B's expiration task deletes uuid2 once remote retention has
moved the log start past it.

The digest names both A's record at offset 4 and B's first record msg4; here A's is msg4'.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import consume_all, partition_state
from confluent_kafka.admin import AdminClient, NewTopic
from tiered_cluster import (
    BATCH_SIZE,
    EARLIEST,
    EARLIEST_LOCAL,
    METADATA_TOPIC,
    VALUE_SIZE,
    create_topic_in_zk,
    epoch_checkpoint,
    list_offset,
    local_base_offsets,
    produce_values,
    remote_segments,
    segment_bytes_for,
    segment_ranges,
    tiered_member,
    wait_metadata_isr,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.config_changes import notify_topic_config_change
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import DESCRIBE_CONFIGS, FETCH, OFFSET_FOR_LEADER_EPOCH
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import decode_batch

pytestmark = pytest.mark.integration

A, B, CONTROLLER = 1, 2, 3
FENCED_LEADER_EPOCH = 74
TOPIC_RESOURCE = 2


def msg(name: str) -> bytes:
    return name.encode().ljust(VALUE_SIZE, b".")


def name_of(value: bytes) -> str:
    return value.rstrip(b".").decode()


# ---- the cluster ------------------------------------------------------------------------------------

def start_cluster(broker_factory: Callable[..., BrokerProcess], connect: str,
                  remote: Path) -> tuple[BrokerProcess, BrokerProcess, BrokerProcess]:
    # The ISR shrinks 2-3 s after a replica stops fetching. B's ZooKeeper session outlives a pause that
    # long plus the leader's writes meanwhile, and, once B is killed, A's restart (an unclean election
    # needs A registered before the controller sees B gone). A's is short: the tests wait for it to expire.
    conf = {"auto.leader.rebalance.enable": "false", "replica.lag.time.max.ms": "2000",
            # the last replica of a partition stops at once instead of retrying to hand leadership over
            "controlled.shutdown.max.retries": "1", "controlled.shutdown.retry.backoff.ms": "100"}
    c = broker_factory(tiered_member(connect, CONTROLLER, remote, conf))
    with ZkClient(connect) as zk:
        wait_until(lambda: zk.get_controller_id() == CONTROLLER, timeout=30, message="broker 3 is the controller")
    a = broker_factory(tiered_member(connect, A, remote, {**conf, "zookeeper.session.timeout.ms": "5000"}))
    b = broker_factory(tiered_member(connect, B, remote, {**conf, "zookeeper.session.timeout.ms": "12000"}))
    wait_registered(connect, [A, B, CONTROLLER])
    # the controller leads the metadata partitions: neither pausing B nor killing A stops them
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    metadata = NewTopic(METADATA_TOPIC, num_partitions=2, replica_assignment=[[3, 1, 2], [3, 2, 1]])
    admin.create_topics([metadata])[METADATA_TOPIC].result(30)
    wait_metadata_isr(c, [A, B, CONTROLLER])
    return a, b, c


def topic_configs(records_per_segment: int) -> dict[str, str]:
    return {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes_for(records_per_segment)),
        # every tiered segment leaves the local log, never the active one (half a batch never holds it)
        "local.retention.bytes": str(BATCH_SIZE // 2),
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "true",
    }


def wait_local_records(b: BrokerProcess, topic: str, count: int) -> None:
    """``b``'s local log holds exactly ``count`` one-record batches (a follower has fetched them)."""
    wait_until(lambda: sum(p.stat().st_size for p in (b.data_dir / f"{topic}-0").glob("*.log")) == count * BATCH_SIZE,
               timeout=20, message=f"{count} records on the broker at {b.bootstrap}")


def wait_registered(connect: str, ids: list[int]) -> None:
    with ZkClient(connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == sorted(ids), timeout=40, message=f"registered brokers {ids}")


def wait_state(c: BrokerProcess, topic: str, leader: int, epoch: int, isr: list[int]) -> None:
    wait_until(lambda: (s := partition_state(c, topic)) and s[0][0] == leader and s[0][1] == epoch
               and s[0][3] == sorted(isr), timeout=40,
               message=f"leader {leader} at epoch {epoch} with ISR {isr}")


def wait_checkpoint(b: BrokerProcess, topic: str, entries: list[tuple[int, int]]) -> None:
    """A new leader writes its epoch's entry once it has taken the controller's decision, after ZooKeeper shows it."""
    wait_until(lambda: epoch_checkpoint(b, topic) == entries, timeout=30, message=f"leader epochs {entries} on disk")


def pause(b: BrokerProcess) -> None:
    """SIGSTOP: the broker stops fetching but stays registered (its session outlives the pause)."""
    assert b.proc is not None
    os.kill(b.proc.pid, signal.SIGSTOP)


def resume(b: BrokerProcess) -> None:
    assert b.proc is not None
    os.kill(b.proc.pid, signal.SIGCONT)


def alter_topic_config(connect: str, topic: str, configs: dict[str, str], brokers: list[BrokerProcess]) -> None:
    """Replace the topic's configs as AlterConfigs does, and wait until every broker named applied them."""
    with ZkClient(connect) as zk:
        zk.set_topic_config(topic, configs)
        notify_topic_config_change(zk, topic)
    for b in brokers:
        wait_until(lambda b=b: described_configs(b, topic, list(configs)) == configs, timeout=20,
                   message=f"broker at {b.bootstrap} applied {configs}")


def described_configs(b: BrokerProcess, topic: str, keys: list[str]) -> dict[str, str]:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(DESCRIBE_CONFIGS, {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                                                        "configuration_keys": keys}],
                                         "include_synonyms": False, "include_documentation": False}, version=4)
    return {e.name: e.value for e in r.results[0].configs}


# ---- reads with epochs ------------------------------------------------------------------------------

def fetch(b: BrokerProcess, topic: str, offset: int, current_leader_epoch: int = -1
          ) -> tuple[int, list[tuple[int, int, str]]]:
    """(error, [(offset, leader epoch of its batch, record name)]) of a consumer's Fetch at ``offset``.
    A remote read that has not answered within remote.fetch.max.wait.ms comes back empty without an
    error, and a consumer simply fetches again: so does this."""
    got: list[tuple[int, list[tuple[int, int, str]]]] = []

    def once() -> bool:
        with KafkaClient(b.bootstrap, timeout=10) as c:
            r = c.request(FETCH, {
                "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{
                    "partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
                    "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]},
                version=12)
        p = r.responses[0].partitions[0]
        data = bytes(p.records or b"")
        records = []
        for pos, _ in iter_headers(data):
            header, recs = decode_batch(data, pos)
            records += [(rec.offset, header.partition_leader_epoch, name_of(rec.value or b"")) for rec in recs]
        got[:] = [(int(p.error_code), records)]
        return int(p.error_code) != 0 or bool(records)

    wait_until(once, timeout=20, message=f"an answer to a fetch at {offset}")
    return got[0]


def epoch_end(b: BrokerProcess, topic: str, epoch: int) -> tuple[int, int, int]:
    """(error, epoch, end offset) of a consumer's OffsetForLeaderEpoch (KIP-320): the largest epoch
    at or below ``epoch`` in the broker's lineage and the offset where it ends."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}]}, version=4)
    p = r.topics[0].partitions[0]
    return int(p.error_code), p.leader_epoch, p.end_offset


def segment_ids(remote: Path, topic: str) -> list[tuple[int, int, int, str]]:
    """(start, end, uploading broker, segment id) of each remote segment."""
    return [(m["start_offset"], m["end_offset"], m["broker_id"], m["segment_id"]) for m in remote_segments(remote, topic)]


# ---- scenario 4 -------------------------------------------------------------------------------------

def test_unclean_election_truncates_and_reads_follow_the_new_leaders_lineage(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    topic = "s4"
    remote = tmp_path / "remote"
    a, b, c = start_cluster(broker_factory, zk_connect, remote)
    create_topic_in_zk(zk_connect, topic, [A, B], topic_configs(3))  # A's seg-0-2
    wait_state(c, topic, A, 0, [A, B])

    # Step 1: both have msg0; B pauses, A shrinks the ISR to itself and goes on alone in LE-0
    produce_values(a.bootstrap, topic, [msg("msg0")])
    wait_local_records(b, topic, 1)
    pause(b)
    wait_state(c, topic, A, 0, [A])
    produce_values(a.bootstrap, topic, [msg(f"msg{i}") for i in (1, 2, 3)])
    wait_tiered_up_to(a, topic, 2)
    assert segment_ranges(remote, topic) == [(0, 2, {0: 0})]
    assert epoch_checkpoint(a, topic) == [(0, 0)]

    # Step 2: A dies; B, alive and out of sync, is elected uncleanly: LE-1
    a.kill9()
    resume(b)
    wait_state(c, topic, B, 1, [B])
    assert "Unclean leader election for partition s4-0: broker 2 becomes leader" in c.log_text()
    alter_topic_config(zk_connect, topic, topic_configs(2), [b])  # B's seg-0-1
    produce_values(b.bootstrap, topic, [msg("msg4"), msg("msg5")])
    assert epoch_checkpoint(b, topic) == [(0, 0), (1, 1)]
    wait_tiered_up_to(b, topic, 1)
    assert segment_ranges(remote, topic) == [(0, 2, {0: 0}), (0, 1, {0: 0, 1: 1})]
    (_, _, by_a, uuid1), (_, _, by_b, uuid2) = segment_ids(remote, topic)
    assert (by_a, by_b) == (A, B) and uuid1 != uuid2

    # Step 3: B's first local segment expires; offsets 0 and 1 are only remote now
    wait_until(lambda: local_base_offsets(b, topic) == [2], timeout=30, message="B's segment 0-1 gone locally")
    assert list_offset(b, topic, EARLIEST_LOCAL) == (0, 2, 1)
    assert list_offset(b, topic, EARLIEST) == (0, 0, 0)
    # (0, LE-0): LE-0 ends at 1 on B, so offset 0 is LE-0's: msg0
    assert epoch_end(b, topic, 0) == (0, 0, 1)
    assert fetch(b, topic, 0) == (0, [(0, 0, "msg0"), (1, 1, "msg4")])
    # offset 1 without an epoch: B's cache gives it to LE-1, so seg-0-1 serves it, not seg-0-2's msg1
    assert fetch(b, topic, 1) == (0, [(1, 1, "msg4")])
    # (1, LE-1): LE-1 runs from 1 to the log end; the fetch at B's current epoch reads msg4 remotely
    assert epoch_end(b, topic, 1) == (0, 1, 3)
    assert fetch(b, topic, 1, current_leader_epoch=1) == (0, [(1, 1, "msg4")])
    # (2, LE-0): LE-0 ended at 1, so offset 2 is not in it; a fetch naming LE-0 is fenced
    assert fetch(b, topic, 2, current_leader_epoch=0) == (FENCED_LEADER_EPOCH, [])
    assert fetch(b, topic, 2, current_leader_epoch=1) == (0, [(2, 1, "msg5")])
    # a consumer from the start sees B's log only: A's msg1-msg3 are gone with the unclean election
    assert [name_of(m.value()) for m in consume_all(b.bootstrap, topic, 3)] == ["msg0", "msg4", "msg5"]


# ---- scenario 5 -------------------------------------------------------------------------------------

def test_two_unclean_elections_leave_divergent_remote_segments_and_the_lineage_picks_the_live_one(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    topic = "s5"
    remote = tmp_path / "remote"
    a, b, c = start_cluster(broker_factory, zk_connect, remote)
    create_topic_in_zk(zk_connect, topic, [A, B], topic_configs(4))  # seg-0-3
    wait_state(c, topic, A, 0, [A, B])

    # Step 1: both have msg0-msg1; B pauses and A writes on alone in LE-0, tiering seg-0-3 (uuid1)
    produce_values(a.bootstrap, topic, [msg("msg0"), msg("msg1")])
    wait_local_records(b, topic, 2)
    pause(b)
    wait_state(c, topic, A, 0, [A])
    produce_values(a.bootstrap, topic, [msg("msg2"), msg("msg3"), msg("msg4'")])
    wait_tiered_up_to(a, topic, 3)
    assert segment_ranges(remote, topic) == [(0, 3, {0: 0})]

    # Step 2: A dies, B leads uncleanly in LE-1, writes msg4-msg6 at 2-4 and tiers its own seg-0-3 (uuid2)
    a.kill9()
    resume(b)
    wait_state(c, topic, B, 1, [B])
    assert "Unclean leader election for partition s5-0: broker 2 becomes leader" in c.log_text()
    produce_values(b.bootstrap, topic, [msg("msg4"), msg("msg5"), msg("msg6")])
    assert epoch_checkpoint(b, topic) == [(0, 0), (1, 2)]
    wait_tiered_up_to(b, topic, 3)
    assert segment_ranges(remote, topic) == [(0, 3, {0: 0}), (0, 3, {0: 0, 1: 2})]
    (_, _, by_a, uuid1), (_, _, by_b, uuid2) = segment_ids(remote, topic)
    assert (by_a, by_b) == (A, B) and uuid1 != uuid2

    # Step 3: B dies; A comes back before the controller notices and is elected uncleanly in LE-2 without
    # ever having fetched from B: its log is still its own 0-4, and LE-2 starts at its end
    b.kill9()
    a.start()
    wait_state(c, topic, A, 2, [A])
    assert "Unclean leader election for partition s5-0: broker 1 becomes leader" in c.log_text()
    wait_checkpoint(a, topic, [(0, 0), (2, 5)])
    alter_topic_config(zk_connect, topic, topic_configs(2), [a])  # seg-4-5
    produce_values(a.bootstrap, topic, [msg("msg7"), msg("msg8")])
    assert epoch_checkpoint(a, topic) == [(0, 0), (2, 5)]
    wait_tiered_up_to(a, topic, 5)
    assert segment_ranges(remote, topic) == [(0, 3, {0: 0}), (0, 3, {0: 0, 1: 2}), (4, 5, {0: 4, 2: 5})]
    uuid3 = segment_ids(remote, topic)[2][3]
    wait_until(lambda: local_base_offsets(a, topic) == [6], timeout=30, message="A's segments 0-3 and 4-5 gone locally")
    assert list_offset(a, topic, EARLIEST_LOCAL) == (0, 6, 2)
    # offset 2 is msg2 from uuid1: uuid2 holds offset 2 in LE-1, which A's lineage does not have
    assert fetch(a, topic, 2) == (0, [(2, 0, "msg2"), (3, 0, "msg3")])

    # Step 4: B restarts with its local data lost, rebuilds from seg-4-5 and joins the ISR
    shutil.rmtree(b.data_dir / f"{topic}-0")
    b.start()
    wait_state(c, topic, A, 2, [A, B])
    text = b.log_text()
    assert "offset 0 is only in the leader's remote tier" in text
    assert "rebuilt from the remote tier: log start 0, local log start 6, leader epochs [(0, 0), (2, 5)]" in text
    assert epoch_checkpoint(b, topic) == [(0, 0), (2, 5)]
    assert local_base_offsets(b, topic) == [6]

    # reads from B, once it leads (LE-3, a clean election: it is in the ISR)
    a.stop()
    wait_state(c, topic, B, 3, [B])
    wait_checkpoint(b, topic, [(0, 0), (2, 5), (3, 7)])
    # (3, LE-1): LE-1 is not in B's lineage: the largest epoch B has at or below it is LE-0, ending at 5
    assert epoch_end(b, topic, 1) == (0, 0, 5)
    assert fetch(b, topic, 3, current_leader_epoch=1) == (FENCED_LEADER_EPOCH, [])
    # offset 2 is A's msg2 from uuid1, not B's old msg4 from uuid2
    assert fetch(b, topic, 2) == (0, [(2, 0, "msg2"), (3, 0, "msg3")])
    expected = ["msg0", "msg1", "msg2", "msg3", "msg4'", "msg7", "msg8"]
    assert [name_of(m.value()) for m in consume_all(b.bootstrap, topic, len(expected))] == expected

    # retention.bytes of 2.5 batches against B's 7 (uuid1's 4, uuid3's 2, one local): uuid1 goes and the
    # log start moves to 4; uuid2, never on B's lineage, is below it now and goes too
    alter_topic_config(zk_connect, topic, {**topic_configs(2), "retention.bytes": str(BATCH_SIZE * 5 // 2)}, [b])
    wait_until(lambda: [s[3] for s in segment_ids(remote, topic)] == [uuid3], timeout=30,
               message="uuid1 and uuid2 deleted, uuid3 kept")
    assert list_offset(b, topic, EARLIEST) == (0, 4, 0)
    assert {uuid1, uuid2} & {s[3] for s in segment_ids(remote, topic)} == set()
