"""DescribeProducers (61) from real broker processes: every active producer of a partition with
Kafka's fields (an idempotent one, a transactional one left open), Kafka's errors for unknown and
invalid topics; in a two-broker cluster on a real ZooKeeper a follower answers from its own replica
(as Kafka's Partition.activeProducerState) and a broker without a replica says NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import member, partition_state
from kio.schema.errors import ErrorCode
from txn_helpers import HOUR_MS, create_topic, idempotent_batch, now_ms, open_transaction, produce_batch
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog import cli
from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import DESCRIBE_PRODUCERS

STANDALONE = {"remote.log.storage.system.enable": "false"}


def describe(bootstrap: str, topics: dict[str, list[int]]) -> dict[tuple[str, int], Any]:
    with KafkaClient(bootstrap, timeout=30) as c:
        r = c.request(DESCRIBE_PRODUCERS, {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): p for t in r.topics for p in t.partitions}


def producers(answer: Any) -> dict[int, tuple[int, int, int, int, int]]:
    """producer id -> (epoch, last sequence, last timestamp, coordinator epoch, txn start offset)."""
    return {s.producer_id: (s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
                            s.current_txn_start_offset) for s in answer.active_producers}


def test_every_active_producer_with_kafkas_fields_and_errors(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(STANDALONE)
    create_topic(b.bootstrap, "dp", partitions=2)
    idle_ts, txn_ts = now_ms() - 2 * HOUR_MS, now_ms() - HOUR_MS
    produce_batch(b.bootstrap, "dp", 0, idempotent_batch(4001, 2, 0, 3, timestamp_ms=idle_ts))
    start = open_transaction(b.bootstrap, "dp", 0, producer_id=4002, producer_epoch=5, records=4, timestamp_ms=txn_ts)
    assert start == 3

    got = describe(b.bootstrap, {"dp": [0, 1, 2], "absent": [0], "bad/name": [3]})
    assert got[("dp", 0)].error_code == ErrorCode.none
    assert producers(got[("dp", 0)]) == {
        4001: (2, 2, idle_ts, -1, -1),  # no transaction: Kafka's -1 start offset, no marker yet: -1 epoch
        4002: (5, 3, txn_ts, -1, 3),
    }
    assert got[("dp", 1)].error_code == ErrorCode.none and got[("dp", 1)].active_producers == ()
    assert got[("dp", 2)].error_code == ErrorCode.unknown_topic_or_partition
    assert got[("absent", 0)].error_code == ErrorCode.unknown_topic_or_partition
    assert got[("bad/name", 3)].error_code == ErrorCode.invalid_topic_exception

    # the producer state outlives a restart (snapshot at the clean shutdown)
    b.restart()
    assert producers(describe(b.bootstrap, {"dp": [0]})[("dp", 0)]) == {
        4001: (2, 2, idle_ts, -1, -1), 4002: (5, 3, txn_ts, -1, 3)}


def test_cluster_a_follower_answers_and_a_broker_without_a_replica_does_not(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    # no controlled shutdown at the end: nothing is left to hand over
    brokers = {i: broker_factory(member(zk_connect, i, {"controlled.shutdown.enable": "false"})) for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], message="both brokers registered")
        wait_until(lambda: zk.get_controller_id() is not None, message="a controller elected")
    create_topic(brokers[1].bootstrap, "both", assignment=[[1, 2]])
    create_topic(brokers[1].bootstrap, "only1", assignment=[[1]])
    wait_until(lambda: (s := partition_state(brokers[2], "both")) and len(s[0][3]) == 2, timeout=30,
               message="a full ISR for 'both'")
    wait_until(lambda: (s := partition_state(brokers[2], "only1")) and s[0][0] == 1, timeout=30,
               message="'only1' led by broker 1 in broker 2's metadata")

    start = open_transaction(brokers[1].bootstrap, "both", 0, producer_id=4100, timestamp_ms=now_ms() - HOUR_MS)
    leader = describe(brokers[1].bootstrap, {"both": [0]})[("both", 0)]
    assert leader.error_code == ErrorCode.none and producers(leader)[4100][4] == start
    # acks=all: the follower has appended the batch, so its own producer state holds the transaction
    follower = describe(brokers[2].bootstrap, {"both": [0]})[("both", 0)]
    assert follower.error_code == ErrorCode.none and producers(follower) == producers(leader)

    assert describe(brokers[2].bootstrap, {"only1": [0]})[("only1", 0)].error_code == ErrorCode.not_leader_or_follower
    assert describe(brokers[2].bootstrap, {"only1": [1]})[("only1", 1)].error_code == \
        ErrorCode.unknown_topic_or_partition

    # the tool asks the follower when told its id, and searches only the partitions with a replica there
    def tool(*argv: str) -> tuple[int, list[list[str]]]:
        capsys.readouterr()
        rc = cli.main(["transactions", "--bootstrap-server", brokers[1].bootstrap, *argv])
        return rc, [[c.strip() for c in line.split("\t")[:-1]] for line in capsys.readouterr().out.splitlines()]

    rc, table = tool("describe-producers", "--topic", "both", "--partition", "0", "--broker-id", "2")
    assert rc == 0 and [(r[0], r[5]) for r in table[1:]] == [("4100", str(start))]
    open_transaction(brokers[1].bootstrap, "only1", 0, producer_id=4101, timestamp_ms=now_ms() - HOUR_MS)
    for broker_id, hanging in (("2", ["both"]), ("1", ["both", "only1"])):
        rc, table = tool("find-hanging", "--broker-id", broker_id)
        assert rc == 0 and [r[0] for r in table[1:]] == hanging, broker_id
