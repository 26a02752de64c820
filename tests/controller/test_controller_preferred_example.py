"""The seeds' preferred-replica election example (§9.2 item 2) step by step, with the controller against a
real ZooKeeper and the simulated brokers and request recorder of test_controller_zk.py.

The example: 8 brokers, ``topic1`` with RF 3 and 8 partitions, leaders evenly spread. Stopping brokers 1, 2
and 4 moves leadership P0 1->3, P1 2->5, P2 3->6, P3 4->7. Restarting broker 1 gives it no leadership
(brokers 5, 6 and 7 lead 2 each: max 2, min 0; broker 1 is back in the ISRs of P0 and P5). The preferred
election tool puts every partition but P1 and P3 (preferred brokers 2 and 4 still down) back on its
preferred replica (max 2, min 1). Starting 2 and 4 changes nothing. Running the tool again: every broker
leads exactly 1. The seeds' layout screenshots are lost, so the text alone fixes the reading.

The reading taken. "P2 3->6" cannot follow from stopping 1, 2 and 4, since broker 3 stays up and leads
P2; yet "5/6/7 lead 2 each" needs P2 on 6. The smallest consistent reading: broker 3 was bounced before
1, 2 and 4 stopped (a step the text omits), which moved P2 to its second replica, 6; broker 3 came back
and rejoined its ISRs as a follower, and nothing moved P2 back (no automatic rebalance). The layout
(preferred replica of Pn is broker n+1, every broker holds 3 replicas) makes the first live in-sync
replica after the preferred one, once it is gone, the one the text names for P0..P3 (3, 5, 6 and 7),
and puts broker 1 in P5 beside P0; its third replica (P4) has not caught up when the text lists the
ISRs holding broker 1. Each restarted broker rejoins an ISR only
when that partition's leader says so (AlterPartition), and until then it is not elected even where it
is the preferred replica. Brokers 4, 2 and 1 stop in that order, each handled before the next, so that
each partition moves once, straight to the broker the text names (stopping 1 first would hand P0 to 2
on its way to 3)."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import pytest
from controller_harness import Cluster, alter_partition, partition_answer
from helpers import wait_for
from kio.schema.errors import ErrorCode
from zk_harness import zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import LeaderIsrAndControllerEpoch
from tieredlog.controller import ElectionType, KafkaController

pytestmark = pytest.mark.integration

TOPIC = "topic1"
BROKERS = range(1, 9)
# Pn's preferred replica is broker n+1; P0..P3's first replicas left once 1, 2 and 4 are down (and 3
# for P2 when it bounces) are 3, 5, 6 and 7; every broker holds three replicas.
LAYOUT = {0: [1, 2, 3], 1: [2, 4, 5], 2: [3, 6, 7], 3: [4, 7, 8],
          4: [5, 8, 1], 5: [6, 1, 2], 6: [7, 3, 4], 7: [8, 5, 6]}
PREFERRED = {p: replicas[0] for p, replicas in LAYOUT.items()}


class StateWritesZk(ZkClient):
    """The controller's session, recording every partition state it writes for the topic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[int, int, tuple[int, ...]]] = []
        self._lock = threading.Lock()

    def _record(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch) -> None:
        if topic == TOPIC:
            with self._lock:
                self.writes.append((partition, state.leader, state.isr))

    def create_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch, *,
                               expected_controller_epoch_zk_version: int | None = None) -> int:
        self._record(topic, partition, state)
        return super().create_partition_state(topic, partition, state,
                                              expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_version: int, *, expected_controller_epoch_zk_version: int | None = None) -> int:
        self._record(topic, partition, state)
        return super().update_partition_state(topic, partition, state, expected_version,
                                              expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)


@pytest.fixture
def cluster(zk_connect: str) -> Iterator[Cluster]:  # noqa: F811
    c = Cluster(zk_connect)
    try:
        yield c
    finally:
        c.close()


def states(cluster: Cluster) -> dict[int, LeaderIsrAndControllerEpoch]:
    out = {}
    for p in LAYOUT:
        got = cluster.state(TOPIC, p)
        assert got is not None
        out[p] = got[0]
    return out


def leaders(cluster: Cluster) -> dict[int, int]:
    return {p: st.leader for p, st in states(cluster).items()}


def isrs_holding(cluster: Cluster, broker: int) -> list[int]:
    return [p for p, st in states(cluster).items() if broker in st.isr]


def lead_counts(cluster: Cluster) -> dict[int, int]:
    """Leaderships per live broker (a live broker leading nothing counts 0)."""
    led = leaders(cluster)
    return {b: sum(1 for leader in led.values() if leader == b) for b in sorted(cluster.brokers)}


def settle(cluster: Cluster, ctl: KafkaController, expected: dict[int, int], what: str) -> None:
    """Wait until the controller has handled the broker changes: the leaders are ``expected`` and no
    ISR names a dead broker."""
    def done() -> bool:
        sts = states(cluster)
        return {p: st.leader for p, st in sts.items()} == expected and \
            all(set(st.isr) <= set(cluster.brokers) for st in sts.values())
    wait_for(lambda: set(ctl.ctx.live_brokers) == set(cluster.brokers) and done(), what)
    ctl.barrier().result(timeout=30)


def catch_up(cluster: Cluster, ctl: KafkaController, partition: int, broker: int) -> None:
    """The partition's leader adds a restarted follower that caught up to the ISR (AlterPartition)."""
    got = cluster.state(TOPIC, partition)
    assert got is not None
    st, version = got
    assert broker not in st.isr
    answer = partition_answer(alter_partition(ctl, st.leader, cluster.epochs[st.leader], ctl.ctx.topic_ids[TOPIC],
                                              partition, st.leader_epoch, [*st.isr, broker], version, cluster.epochs))
    assert (answer["error_code"], answer["leader_id"]) == (ErrorCode.none, st.leader)  # the ISR grows, the leader stays


def run_tool(ctl: KafkaController, partitions: list[int] | None = None) -> dict[int, ErrorCode]:
    """The preferred replica election tool (ElectLeaders PREFERRED); None: every partition, and the
    answer lists only those that needed an election."""
    targets = None if partitions is None else [(TOPIC, p) for p in partitions]
    result = ctl.elect_leaders(ElectionType.PREFERRED, targets).result(timeout=30)
    assert result["error_code"] == ErrorCode.none
    return {p["partition_id"]: p["error_code"] for r in result["replica_election_results"] for p in r["partition_result"]
            if r["topic"] == TOPIC}


def test_preferred_election_example_of_the_seeds(cluster: Cluster) -> None:
    for b in BROKERS:
        cluster.start_broker(b)
    ctl, _, zk = cluster.start_controller(zk_class=StateWritesZk)
    assert isinstance(zk, StateWritesZk)
    cluster.create_topic(TOPIC, LAYOUT)
    for p, replicas in LAYOUT.items():
        cluster.wait_state(TOPIC, p, f"{TOPIC}-{p} online", leader=replicas[0], isr=tuple(replicas))
    ctl.barrier().result(timeout=30)
    # leaders evenly spread: every broker leads one partition
    assert leaders(cluster) == PREFERRED
    assert lead_counts(cluster) == {b: 1 for b in BROKERS}

    # the step the text omits: broker 3 bounces, P2 moves to 6, and 3 rejoins its ISRs as a follower
    cluster.kill_broker(3)
    settle(cluster, ctl, {**PREFERRED, 2: 6}, "P2 on broker 6, broker 3 out of every ISR")
    assert isrs_holding(cluster, 3) == []
    cluster.start_broker(3)
    settle(cluster, ctl, {**PREFERRED, 2: 6}, "broker 3 back, leading nothing")
    for p in (0, 2, 6):
        catch_up(cluster, ctl, p, 3)
    assert isrs_holding(cluster, 3) == [0, 2, 6]
    assert leaders(cluster) == {**PREFERRED, 2: 6}

    # stopping brokers 1, 2 and 4: P0 1->3, P1 2->5, P2 on 6 (3->6), P3 4->7
    cluster.kill_broker(4)
    settle(cluster, ctl, {**PREFERRED, 2: 6, 3: 7}, "P3 on 7")
    cluster.kill_broker(2)
    settle(cluster, ctl, {**PREFERRED, 1: 5, 2: 6, 3: 7}, "P1 on 5")
    cluster.kill_broker(1)
    stopped = {0: 3, 1: 5, 2: 6, 3: 7, 4: 5, 5: 6, 6: 7, 7: 8}
    settle(cluster, ctl, stopped, "P0 on 3")
    assert {p: states(cluster)[p].isr for p in LAYOUT} == {
        0: (3,), 1: (5,), 2: (6, 7, 3), 3: (7, 8), 4: (5, 8), 5: (6,), 6: (7, 3), 7: (8, 5, 6)}

    # restarting broker 1 gives it no leadership: 5, 6 and 7 lead 2 each, max 2, min 0
    cluster.start_broker(1)
    settle(cluster, ctl, stopped, "broker 1 back, leading nothing")
    assert lead_counts(cluster) == {1: 0, 3: 1, 5: 2, 6: 2, 7: 2, 8: 1}
    # not caught up yet, so not in P0's ISR: its preferred replica is not elected
    assert run_tool(ctl, [0]) == {0: ErrorCode.preferred_leader_not_available}
    assert leaders(cluster) == stopped
    catch_up(cluster, ctl, 0, 1)
    catch_up(cluster, ctl, 5, 1)
    assert isrs_holding(cluster, 1) == [0, 5]  # "Partition 0 and Partition 5 have 1 in their ISR"
    assert leaders(cluster) == stopped
    assert lead_counts(cluster) == {1: 0, 3: 1, 5: 2, 6: 2, 7: 2, 8: 1}

    # the tool: every partition but P1 and P3 (preferred brokers 2 and 4 down) on its preferred replica
    assert run_tool(ctl) == {0: ErrorCode.none, 1: ErrorCode.preferred_leader_not_available,
                             2: ErrorCode.none, 3: ErrorCode.preferred_leader_not_available}
    after_tool = {**PREFERRED, 1: 5, 3: 7}
    settle(cluster, ctl, after_tool, "P0 back on 1, P2 back on 3")
    counts = lead_counts(cluster)
    assert counts == {1: 1, 3: 1, 5: 2, 6: 1, 7: 2, 8: 1}
    assert (max(counts.values()), min(counts.values())) == (2, 1)

    # starting brokers 2 and 4 changes nothing, neither before nor after they rejoin the ISRs
    cluster.start_broker(2)
    cluster.start_broker(4)
    settle(cluster, ctl, after_tool, "brokers 2 and 4 back, leading nothing")
    assert lead_counts(cluster) == {1: 1, 2: 0, 3: 1, 4: 0, 5: 2, 6: 1, 7: 2, 8: 1}
    assert run_tool(ctl, [1, 3]) == {1: ErrorCode.preferred_leader_not_available,
                                     3: ErrorCode.preferred_leader_not_available}
    for p, broker in ((0, 2), (1, 2), (5, 2), (1, 4), (3, 4), (6, 4), (4, 1)):
        catch_up(cluster, ctl, p, broker)
    assert all(set(st.isr) == set(LAYOUT[p]) for p, st in states(cluster).items())
    assert leaders(cluster) == after_tool

    # the tool again: every broker leads exactly one partition
    assert run_tool(ctl) == {1: ErrorCode.none, 3: ErrorCode.none}
    settle(cluster, ctl, PREFERRED, "P1 back on 2, P3 back on 4")
    assert lead_counts(cluster) == {b: 1 for b in BROKERS}
    assert run_tool(ctl) == {}

    # leadership never moved to a replica outside the ISR: every write names a leader in its ISR, and a
    # new leader was in the ISR the partition had before; each partition moved only as the text says
    history: dict[int, list[int]] = {}
    last_isr: dict[int, tuple[int, ...]] = {}
    for p, leader, isr in zk.writes:
        assert leader in isr, (p, leader, isr)
        if p in history and history[p][-1] != leader:
            assert leader in last_isr[p], (p, last_isr[p], leader)
        if history.get(p, [None])[-1] != leader:
            history.setdefault(p, []).append(leader)
        last_isr[p] = isr
    assert history == {0: [1, 3, 1], 1: [2, 5, 2], 2: [3, 6, 3], 3: [4, 7, 4], 4: [5], 5: [6], 6: [7], 7: [8]}
