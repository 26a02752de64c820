"""KIP-405's lagging followers and hard failures with real broker processes (seeds digest §3.8.5, §3.8.6).

Scenario 2, an out-of-sync follower catching up. The leader A holds offsets 0-9 with the epochs
{LE-0: 0, LE-1: 3, LE-2: 5, LE-3: 7}; the follower B left the ISR holding 0-3 with {LE-0: 0, LE-1: 3}.
B comes back in Truncating; OffsetForLeaderEpoch(LE-1) answers 5, past B's log end, so it keeps its
log. Case A: the leader still has offset 4 locally, and B fetches normally from 4 to 9. Case B: the
leader has tiered seg-0-2, seg-3-5 and seg-6-8 and keeps only 9-11 locally; B's fetch at (LE-1, 4)
gets OFFSET_MOVED_TO_TIERED_STORAGE, B drops its whole local log, learns the earliest local offset 9
in LE-3, rebuilds {LE-0: 0, LE-1: 3, LE-2: 5, LE-3: 7} from seg-6-8's leader-epoch index and goes on
fetching at 9.

Scenario 3, two hard failures at once. A (leader) and B hold 0-2 in LE-0 and A has tiered seg-0-1.
Both crash; B had not flushed msg1 and msg2. B comes back first, is elected cleanly (it never left
the ISR) in LE-1, and writes msg3 at offset 1. A comes back as a follower, truncates 1-2 and
replicates msg3; msg4 lands at 2 and B tiers seg-1-1. The remote tier now holds two different
records for offset 1 (msg1 in seg-0-1, msg3 in seg-1-1): reads must follow the leader's epoch
lineage (KIP-101), never the offset alone.

Epochs in ZooKeeper mode move with the controller: a leader change and the controller taking a
live ISR member out (a controlled shutdown or a broker failure) bump the leader epoch, the
leader's own AlterPartition shrinks and expansions do not. Each epoch below is one the test chose
that way, with automatic preferred-leader elections off.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, consume_all, partition_state
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tiered_cluster import (
    BATCH_SIZE,
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    METADATA_TOPIC,
    create_topic_in_zk,
    epoch_checkpoint,
    list_offset,
    local_base_offsets,
    local_records,
    produce_values,
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
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import FETCH, OFFSET_FOR_LEADER_EPOCH
from tieredlog.records.record import iter_batches_records

pytestmark = pytest.mark.integration

# no automatic preferred-leader elections: every epoch is one the test chose; and the last broker
# standing at the end stops without waiting 3 x 5 s for a controlled shutdown with nowhere to go
CONF = {"auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "200"}
FENCED_LEADER_EPOCH = 74


def msg(n: int) -> bytes:
    return value(n, "msg")


def wait_state(b: BrokerProcess, topic: str, leader: int, epoch: int, isr: list[int]) -> None:
    wait_until(lambda: (s := partition_state(b, topic)) and s[0][0] == leader and s[0][1] == epoch
               and s[0][3] == sorted(isr), timeout=40,
               message=f"{topic}: leader {leader} at epoch {epoch} with ISR {isr}")


def wait_unregistered(connect: str, *broker_ids: int) -> None:
    """A killed broker's registration lasts as long as its ZooKeeper session; it must be gone before
    the broker starts again (its id is still taken) or before the controller may count it as dead."""
    with ZkClient(connect) as zk:
        wait_until(lambda: not set(broker_ids) & set(zk.get_all_broker_ids()), timeout=40,
                   message=f"the sessions of brokers {list(broker_ids)} expire")


def wait_controller(connect: str, broker_id: int) -> None:
    with ZkClient(connect) as zk:
        wait_until(lambda: zk.get_controller_id() == broker_id, timeout=30, message=f"broker {broker_id} is the controller")


def remote_epoch_indexes(remote_dir: Path, topic: str) -> list[list[tuple[int, int]]]:
    """The leader-epoch index uploaded with each remote segment (the whole lineage up to it), in the
    order of ``remote_segments``."""
    out = []
    for path in remote_dir.glob(f"{topic}-*/0/*.manifest"):
        m = json.loads(path.read_bytes())
        lines = path.with_suffix(".leader_epoch_checkpoint").read_text().split("\n")
        out.append(((m["start_offset"], m["event_timestamp_ms"]),
                    [(int(e), int(o)) for e, o in (line.split() for line in lines[2:] if line.strip())]))
    return [epochs for _, epochs in sorted(out)]


def fetch(b: BrokerProcess, topic: str, offset: int, current_leader_epoch: int = -1) -> tuple[int, list[tuple[int, bytes]]]:
    """A consumer's Fetch of partition 0 at ``offset``: (error code, [(offset, value)])."""
    with KafkaClient(b.bootstrap, timeout=30) as c:
        r = c.request(FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}, version=12)
    p = r.responses[0].partitions[0]
    data = bytes(p.records or b"")
    records = [(rec.offset, rec.value or b"") for _, recs in iter_batches_records(data, stop_at_partial=True)
               for rec in recs if rec.offset >= offset]
    return int(p.error_code), records


def fetch_some(b: BrokerProcess, topic: str, offset: int, current_leader_epoch: int = -1) -> list[tuple[int, bytes]]:
    """Records of a Fetch that succeeds; a remote read that outlasts remote.fetch.max.wait.ms comes
    back empty, and the consumer simply asks again."""
    got: list[list[tuple[int, bytes]]] = []

    def attempt() -> bool:
        code, records = fetch(b, topic, offset, current_leader_epoch)
        assert code == 0, f"Fetch at {offset} answered error {code}"
        got.append(records)
        return bool(records)

    wait_until(attempt, timeout=30, message=f"records at offset {offset}")
    return got[-1]


def end_offset_for_epoch(b: BrokerProcess, topic: str, epoch: int, current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """A consumer's OffsetForLeaderEpoch (KIP-320): (error code, leader epoch, end offset)."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current_leader_epoch, "leader_epoch": epoch}]}]}, version=4)
    p = r.topics[0].partitions[0]
    return int(p.error_code), p.leader_epoch, p.end_offset


def alter_topic_config(servers: str, topic: str, name: str, val: str) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    res = ConfigResource("topic", topic, incremental_configs=[ConfigEntry(name, val, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


# ---- scenario 2 ------------------------------------------------------------------------------------

S2 = "s2"
S2_EPOCHS = [(0, 0), (1, 3), (2, 5), (3, 7)]


def stall_out_of_isr(b: BrokerProcess, leader: BrokerProcess, topic: str, leader_id: int, epoch: int,
                     isr: list[int]) -> None:
    """The broker stops fetching (SIGSTOP: a long GC pause) until the leader's own AlterPartition takes
    it out of the ISR, which keeps the epoch, then dies (SIGKILL) with the log it had. Its ZooKeeper
    session outlives the pause (a longer zookeeper.session.timeout.ms), so the controller never takes
    it out of the ISR itself, which would bump the epoch."""
    assert b.proc is not None
    os.kill(b.proc.pid, signal.SIGSTOP)
    wait_state(leader, topic, leader_id, epoch, isr)
    b.kill9()


def leader_ahead_of_a_lagging_follower(broker_factory: Callable[..., BrokerProcess], zk_connect: str,
                                       remote: Path, topic_configs: dict[str, str]
                                       ) -> tuple[BrokerProcess, BrokerProcess, BrokerProcess]:
    """Step 1 of scenario 2, up to B's return: A (broker 1) leads s2 with offsets 0-9 in
    {LE-0: 0, LE-1: 3, LE-2: 5, LE-3: 7}; B (broker 2) died out of the ISR with 0-3 in {LE-0: 0, LE-1: 3};
    C (broker 3) is the follower whose controlled shutdowns bumped the epochs, down at the end."""
    # A is the controller throughout: B's pause must not hold up the AlterPartition that drops it
    a = broker_factory(tiered_member(zk_connect, 1, remote, CONF))
    wait_controller(zk_connect, 1)
    b = broker_factory(tiered_member(zk_connect, 2, remote, {**CONF, "zookeeper.session.timeout.ms": "15000"}))
    c = broker_factory(tiered_member(zk_connect, 3, remote, CONF))
    # the metadata partitions are led by A and C, never by B while it pauses
    admin = AdminClient({"bootstrap.servers": bootstrap({1: a, 2: b, 3: c})})
    admin.create_topics([NewTopic(METADATA_TOPIC, 2, replica_assignment=[[1, 3, 2], [3, 1, 2]])])[METADATA_TOPIC].result(30)
    wait_metadata_isr(a, [1, 2, 3])
    create_topic_in_zk(zk_connect, S2, [1, 2, 3], {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes_for(3)),  # seg-0-2, seg-3-5, seg-6-8, then the active one
        "min.insync.replicas": "1",
        **topic_configs,
    })

    wait_state(a, S2, 1, 0, [1, 2, 3])
    produce_values(a.bootstrap, S2, [value(o) for o in range(0, 3)])
    # LE-1: C's controlled shutdown takes it out of the ISR
    c.stop()
    wait_state(a, S2, 1, 1, [1, 2])
    produce_values(a.bootstrap, S2, [value(3)])  # acks=all: B has it
    wait_tiered_up_to(a, S2, 2)
    # B falls out of sync at 0-3 without an epoch change, and dies
    stall_out_of_isr(b, a, S2, 1, 1, [1])
    assert local_records(b, S2) == [(o, value(o), 0 if o < 3 else 1) for o in range(4)]
    assert epoch_checkpoint(b, S2) == [(0, 0), (1, 3)]
    produce_values(a.bootstrap, S2, [value(4)])
    # LE-2 and LE-3: C rejoins the ISR (no new epoch) and leaves it again
    for epoch, offsets in ((2, range(5, 7)), (3, range(7, 10))):
        c.start()
        wait_state(a, S2, 1, epoch - 1, [1, 3])
        c.stop()
        wait_state(a, S2, 1, epoch, [1])
        produce_values(a.bootstrap, S2, [value(o) for o in offsets])
    assert epoch_checkpoint(a, S2) == S2_EPOCHS
    assert local_records(a, S2)[-1] == (9, value(9), 3)
    # B's session has expired by now at the latest: its id is free to start again
    wait_unregistered(zk_connect, 2)
    return a, b, c


def test_out_of_sync_follower_whose_offsets_are_still_local_on_the_leader_fetches_normally(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    a, b, _c = leader_ahead_of_a_lagging_follower(broker_factory, zk_connect, remote, {})
    assert list_offset(a, S2, EARLIEST_LOCAL) == (0, 0, 0)
    # what B's Truncating step will learn: LE-1 ends at 5 on the leader, past B's log end (4)
    assert end_offset_for_epoch(a, S2, 1) == (0, 1, 5)

    # Case A: B keeps its 0-3 and fetches 4-9 from the leader's local log
    b.start()
    wait_state(a, S2, 1, 3, [1, 2])
    text = b.log_text()
    assert "truncating s2-0" not in text
    assert "is only in the leader's remote tier" not in text
    assert local_records(b, S2) == local_records(a, S2)
    assert [o for o, _, _ in local_records(b, S2)] == list(range(10))
    assert local_base_offsets(b, S2) == [0, 3, 6, 9]
    assert epoch_checkpoint(b, S2) == S2_EPOCHS


def test_out_of_sync_follower_behind_the_leaders_local_log_rebuilds_from_the_remote_tier(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    # local retention keeps the active segment only: 9-11 once 9 has rolled seg-6-8
    a, b, _c = leader_ahead_of_a_lagging_follower(
        broker_factory, zk_connect, remote, {"local.retention.bytes": str(3 * BATCH_SIZE)})
    produce_values(a.bootstrap, S2, [value(o) for o in (10, 11)])  # still LE-3: nobody joined or left
    wait_until(lambda: local_base_offsets(a, S2) == [9], timeout=30, message="the leader's local log starts at 9")
    # the leader's side of step 2, as the digest draws it (segment epochs start at the segment's first
    # offset: seg-6-8 holds LE-2 from 6, where the digest writes LE-2's own start, 5)
    assert segment_ranges(remote, S2) == [(0, 2, {0: 0}), (3, 5, {1: 3, 2: 5}), (6, 8, {2: 6, 3: 7})]
    assert remote_epoch_indexes(remote, S2) == [[(0, 0)], [(0, 0), (1, 3), (2, 5)], S2_EPOCHS]
    assert epoch_checkpoint(a, S2) == S2_EPOCHS
    assert list_offset(a, S2, EARLIEST_LOCAL) == (0, 9, 3)
    assert list_offset(a, S2, EARLIEST) == (0, 0, 0)
    assert list_offset(a, S2, LATEST)[:2] == (0, 12)
    assert end_offset_for_epoch(a, S2, 1) == (0, 1, 5)

    # Case B: Truncating keeps B's 0-3 (LE-1 ends at 5 on the leader); the fetch at (LE-1, 4) answers
    # OFFSET_MOVED_TO_TIERED_STORAGE; B drops its local log, learns ELO 9 in LE-3, rebuilds the lineage
    # from seg-6-8 and fetches 9-11
    b.start()
    wait_state(a, S2, 1, 3, [1, 2])
    text = b.log_text()
    assert "truncating s2-0" not in text
    assert "offset 4 is only in the leader's remote tier" in text
    assert "rebuilt from the remote tier: log start 0, local log start 9, leader epochs " + str(S2_EPOCHS) in text
    assert local_base_offsets(b, S2) == [9]
    assert local_records(b, S2) == [(o, value(o), 3) for o in (9, 10, 11)]
    assert epoch_checkpoint(b, S2) == S2_EPOCHS
    assert list_offset(a, S2, LATEST)[:2] == (0, 12)


# ---- scenario 3 ------------------------------------------------------------------------------------

S3 = "s3"


def power_loss_after(b: BrokerProcess, topic: str, records_kept: int) -> None:
    """Emulate a power loss on a stopped broker: the page cache held everything after its first
    ``records_kept`` one-record batches, so the first segment ends there and later segments (with
    their indexes and producer snapshots) never reached the disk."""
    d = b.data_dir / f"{topic}-0"
    for path in d.iterdir():
        if not path.name[:20].isdigit():
            continue
        if int(path.name[:20]) > 0:
            path.unlink()
        elif path.suffix == ".log":
            os.truncate(path, records_kept * BATCH_SIZE)
        elif path.suffix in (".index", ".timeindex"):
            path.unlink()  # they may point past the new end; recovery rebuilds them from the log


def test_two_hard_failures_keep_kip101_semantics_across_overlapping_remote_segments(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    conf = {**CONF, "rlmm.config.remote.log.metadata.topic.replication.factor": "2"}
    # B is the controller, and A's ZooKeeper session outlives B's: when both crash, B is back (and the
    # controller again) while A still counts as live, so A's failure is then handled as any leader's
    # failure, one clean election: LE-1. Had both sessions expired first, the new controller's
    # failover would take A out of the ISR (LE-1, no leader) before electing B (LE-2), as Kafka's does.
    b = broker_factory(tiered_member(zk_connect, 2, remote, conf))
    wait_controller(zk_connect, 2)
    a = broker_factory(tiered_member(zk_connect, 1, remote, {**conf, "zookeeper.session.timeout.ms": "20000"}))
    admin = AdminClient({"bootstrap.servers": bootstrap({1: a, 2: b})})
    admin.create_topics([NewTopic(METADATA_TOPIC, 2, 2)])[METADATA_TOPIC].result(30)
    wait_metadata_isr(a, [1, 2])
    configs = {"remote.storage.enable": "true", "segment.bytes": str(segment_bytes_for(2))}
    create_topic_in_zk(zk_connect, S3, [1, 2], configs)

    # Step 1: A and B hold 0-2 in LE-0; A tiers seg-0-1
    wait_state(a, S3, 1, 0, [1, 2])
    produce_values(a.bootstrap, S3, [msg(n) for n in range(3)])
    wait_tiered_up_to(a, S3, 1)
    assert segment_ranges(remote, S3) == [(0, 1, {0: 0})]
    assert local_records(b, S3) == [(n, msg(n), 0) for n in range(3)]

    # Step 2: both crash; B had not flushed msg1 and msg2 (emulated on its files while it is down)
    a.kill9()
    b.kill9()
    power_loss_after(b, S3, 1)
    # B's next segment starts at offset 1, as the digest's seg-1-1 has it: one record per segment
    # from now on (the brokers read the topic's configs from ZooKeeper when they start)
    with ZkClient(zk_connect) as zk:
        zk.set_topic_config(S3, {**configs, "segment.bytes": str(segment_bytes_for(1))})
    wait_unregistered(zk_connect, 2)
    b.start()
    # A's session expires: B, in the ISR, is elected
    wait_state(b, S3, 2, 1, [2])
    assert local_records(b, S3) == [(0, msg(0), 0)]
    produce_values(b.bootstrap, S3, [msg(3)])
    assert epoch_checkpoint(b, S3) == [(0, 0), (1, 1)]

    # Step 3: A comes back as a follower and truncates offsets 1-2 (LE-0 ends at 1 on the leader)
    a.start()
    wait_state(b, S3, 2, 1, [1, 2])
    assert "truncating s3-0 from 3 to 1 (diverging epoch: leader epoch 0 ends at 1)" in a.log_text()
    assert local_records(a, S3) == [(0, msg(0), 0), (1, msg(3), 1)]
    assert epoch_checkpoint(a, S3) == [(0, 0), (1, 1)]

    # Step 4: msg4 at offset 2 rolls B's segment 1-1, which B tiers: its lineage already has offset 0
    # remote (seg-0-1 holds LE-0 up to 1, and LE-0 ends at 0 on B), so nothing before 1 is uploaded
    produce_values(b.bootstrap, S3, [msg(4)])
    wait_until(lambda: len(remote_segments(remote, S3)) == 2, timeout=30, message="seg-1-1 tiered")
    assert segment_ranges(remote, S3) == [(0, 1, {0: 0}), (1, 1, {1: 1})]
    assert [m["broker_id"] for m in remote_segments(remote, S3)] == [1, 2]
    assert remote_epoch_indexes(remote, S3) == [[(0, 0)], [(0, 0), (1, 1)]]
    assert local_records(a, S3) == local_records(b, S3) == [(0, msg(0), 0), (1, msg(3), 1), (2, msg(4), 1)]

    # both brokers delete their local segments up to offset 2
    alter_topic_config(b.bootstrap, S3, "local.retention.bytes", str(BATCH_SIZE))
    for broker in (a, b):
        wait_until(lambda broker=broker: local_base_offsets(broker, S3) == [2], timeout=30,
                   message=f"broker {broker.port} keeps only offset 2 locally")
    assert list_offset(b, S3, EARLIEST) == (0, 0, 0)
    assert list_offset(b, S3, EARLIEST_LOCAL) == (0, 2, 1)
    assert list_offset(b, S3, LATEST)[:2] == (0, 3)

    # (offset 0, LE-0): offset 0 is in LE-0 (which ends at 1), so it is served: msg0 from seg-0-1,
    # and nothing of seg-0-1 past LE-0's end
    assert end_offset_for_epoch(b, S3, 0) == (0, 0, 1)
    assert fetch_some(b, S3, 0) == [(0, msg(0))]
    # offset 1 without an epoch: the lineage puts it in LE-1: msg3 from seg-1-1, not msg1 from seg-0-1
    assert fetch_some(b, S3, 1) == [(1, msg(3))]
    # (offset 1, LE-1): valid in the current epoch, msg3 again
    assert end_offset_for_epoch(b, S3, 1, current_leader_epoch=1) == (0, 1, 3)
    assert fetch_some(b, S3, 1, current_leader_epoch=1) == [(1, msg(3))]
    # (offset 2, LE-0): LE-0 ends at 1, so a reader at 2 in LE-0 is on a truncated history, and a
    # Fetch naming LE-0 as the current epoch is fenced
    assert end_offset_for_epoch(b, S3, 0, current_leader_epoch=1) == (0, 0, 1)
    assert fetch(b, S3, 2, current_leader_epoch=0) == (FENCED_LEADER_EPOCH, [])
    # a consumer from the start reads B's history, one record per offset
    got = consume_all(b.bootstrap, S3, 3)
    assert [(m.offset(), m.value()) for m in got] == [(0, msg(0)), (1, msg(3)), (2, msg(4))]
