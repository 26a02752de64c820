"""Partition reassignment (KIP-455) in the controller against a real ZooKeeper, with the simulated
brokers and request recorder of test_controller_zk.py. The controller's ZooKeeper session records
every write of an assignment or a partition state, so the order of the writes is checked, not only
where they end."""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterator

import pytest
from controller_harness import Cluster, alter_partition, partition_answer, partitions_of
from helpers import wait_for
from kio.schema.errors import ErrorCode
from zk_harness import zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster import znodes
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import LeaderIsrAndControllerEpoch, PartitionReassignment, TopicAssignment
from tieredlog.controller import KafkaController
from tieredlog.controller.request_batch import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA

pytestmark = pytest.mark.integration

Write = tuple[Any, ...]


class ControllerCrashed(Exception):
    """Injected: the controller's broker dies at this write."""


class RecordingZk(ZkClient):
    """The controller's session: records its assignment and state writes; ``crash_on`` makes the
    matching write fail as if the broker had died at that point. Only partition t-0 is watched."""

    watched: tuple[str, int] = ("t", 0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[Write] = []
        self.crash_on: Any = None
        self._lock = threading.Lock()

    def _record(self, write: Write) -> None:
        if self.crash_on is not None and self.crash_on(write):
            raise ControllerCrashed(str(write))
        with self._lock:
            self.writes.append(write)

    def update_topic_assignment(self, topic: str, assignment: TopicAssignment, expected_version: int, *,
                                expected_controller_epoch_zk_version: int | None = None) -> int:
        for p, a in sorted(assignment.partitions.items()):
            if (topic, p) == self.watched:
                self._record(("assignment", a.replicas, a.adding_replicas, a.removing_replicas))
        return super().update_topic_assignment(topic, assignment, expected_version,
                                               expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_version: int, *, expected_controller_epoch_zk_version: int | None = None) -> int:
        if (topic, partition) == self.watched:
            self._record(("state", state.leader, state.isr, state.leader_epoch))
        return super().update_partition_state(topic, partition, state, expected_version,
                                              expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)

    def take(self) -> list[Write]:
        with self._lock:
            out, self.writes = self.writes, []
        return out


@pytest.fixture
def cluster(zk_connect: str) -> Iterator[Cluster]:  # noqa: F811
    c = Cluster(zk_connect)
    try:
        yield c
    finally:
        c.close()


def alter(ctl: KafkaController, targets: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], ErrorCode]:
    response = ctl.alter_partition_reassignments(targets).result(timeout=30)
    assert response["error_code"] == ErrorCode.none
    return {(t["name"], p["partition_index"]): p["error_code"] for t in response["responses"] for p in t["partitions"]}


def in_progress(ctl: KafkaController) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    response = ctl.list_partition_reassignments().result(timeout=30)
    return {(t["name"], p["partition_index"]): (p["replicas"], p["adding_replicas"], p["removing_replicas"])
            for t in response["topics"] for p in t["partitions"]}


def assignment(cluster: Cluster, topic: str, partition: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    got = cluster.admin.get_topic_assignment(topic)
    assert got is not None
    a = got[0].partitions[partition]
    return a.replicas, a.adding_replicas, a.removing_replicas


def expand_isr(cluster: Cluster, ctl: KafkaController, topic: str, partition: int, isr: list[int]) -> dict[str, Any]:
    """The leader's AlterPartition: ``isr`` at the current leader and partition epochs."""
    st, version = cluster.state(topic, partition) or (None, -1)
    assert st is not None
    tid = ctl.ctx.topic_ids[topic]
    return partition_answer(alter_partition(ctl, st.leader, cluster.epochs[st.leader], tid, partition, st.leader_epoch,
                                            isr, version, cluster.epochs))


# ---- the seeds' trace: OAR {1,2,3} -> RAR {4,5,6} -------------------------------------------------------------


def test_reassignment_trace_of_the_seeds(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="state.change.logger")
    for b in range(1, 7):
        cluster.start_broker(b)
    ctl, rec, zk = cluster.start_controller(zk_class=RecordingZk)
    assert isinstance(zk, RecordingZk)
    cluster.create_topic("t", {0: [1, 2, 3]})
    cluster.wait_state("t", 0, "t-0 online", leader=1, isr=(1, 2, 3), leader_epoch=0)  # initial: 1/{1,2,3}
    ctl.barrier().result(timeout=30)
    zk.take()
    rec.clear()

    # steps 1-3: AR = RAR + OAR in ZooKeeper, the leader epoch bumped, LeaderAndIsr to every replica of AR
    assert alter(ctl, {("t", 0): [4, 5, 6]}) == {("t", 0): ErrorCode.none}
    ctl.barrier().result(timeout=30)
    assert zk.take() == [("assignment", (4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3)),
                         ("state", 1, (1, 2, 3), 1)]
    assert assignment(cluster, "t", 0) == ((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    lai = {s.broker_id: partitions_of(s.body)[("t", 0)] for s in rec.of(LEADER_AND_ISR)}
    assert sorted(lai) == [1, 2, 3, 4, 5, 6]
    for broker, p in lai.items():
        assert (p["leader"], p["leader_epoch"], p["isr"]) == (1, 1, [1, 2, 3])
        assert (p["replicas"], p["adding_replicas"], p["removing_replicas"]) == ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])
        assert p["is_new"] == (broker >= 4)  # the added replicas start a new log
    assert not rec.of(STOP_REPLICA)
    assert in_progress(ctl) == {("t", 0): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])}
    assert "Changed state of replica 4 for partition t-0 from NonExistentReplica to NewReplica" in caplog.text

    # step 4: the move waits for the leader to put every RAR replica in the ISR
    rec.clear()
    expand_isr(cluster, ctl, "t", 0, [1, 2, 3, 4])
    ctl.barrier().result(timeout=30)
    assert zk.take() == [("state", 1, (1, 2, 3, 4), 1)]
    assert assignment(cluster, "t", 0) == ((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert not rec.of(LEADER_AND_ISR) and not rec.of(STOP_REPLICA)
    rec.clear()

    expand_isr(cluster, ctl, "t", 0, [1, 2, 3, 4, 5, 6])
    ctl.barrier().result(timeout=30)
    assert zk.take() == [
        ("state", 1, (1, 2, 3, 4, 5, 6), 1),  # step 4: 1/{1,2,3,4,5,6}
        ("state", 4, (1, 2, 3, 4, 5, 6), 2),  # step 7: the leader is not in RAR: 4 elected from RAR
        ("state", 4, (2, 3, 4, 5, 6), 3),  # step 8: OAR - RAR leave the ISR, one replica at a time...
        ("state", 4, (3, 4, 5, 6), 4),
        ("state", 4, (4, 5, 6), 5),  # ...to 4/{4,5,6}
        ("assignment", (4, 5, 6), (), ()),  # step 10: AR = RAR, last
    ]
    assert assignment(cluster, "t", 0) == ((4, 5, 6), (), ())
    st, _ = cluster.state("t", 0) or (None, -1)
    assert st is not None and (st.leader, st.isr, st.leader_epoch) == (4, (4, 5, 6), 5)

    # LeaderAndIsr to the new replicas; StopReplica with deletion to the old ones; everyone learns the result
    lai = {s.broker_id: partitions_of(s.body)[("t", 0)] for s in rec.of(LEADER_AND_ISR)}
    assert sorted(lai) == [4, 5, 6]
    assert all((p["leader"], p["leader_epoch"], p["isr"], p["replicas"]) == (4, 5, [4, 5, 6], [4, 5, 6])
               for p in lai.values())
    stops = {s.broker_id: partitions_of(s.body)[("t", 0)] for s in rec.of(STOP_REPLICA)}
    assert sorted(stops) == [1, 2, 3] and all(p["delete_partition"] for p in stops.values())
    um = [partitions_of(s.body)[("t", 0)] for s in rec.of(UPDATE_METADATA) if ("t", 0) in partitions_of(s.body)]
    assert um and (um[-1]["leader"], um[-1]["isr"], um[-1]["replicas"]) == (4, [4, 5, 6], [4, 5, 6])
    assert sorted(s.broker_id for s in rec.of(UPDATE_METADATA)) == [1, 2, 3, 4, 5, 6]
    removal = ["OnlineReplica", "OfflineReplica", "ReplicaDeletionStarted", "ReplicaDeletionSuccessful",
               "NonExistentReplica"]
    for old, new in zip(removal, removal[1:]):
        assert f"Changed state of replica 1 for partition t-0 from {old} to {new}" in caplog.text
    assert "Changed state of replica 4 for partition t-0 from NewReplica to OnlineReplica" in caplog.text
    assert in_progress(ctl) == {}
    assert not [r for r in ctl.ctx.replica_states if r.replica in (1, 2, 3)]


# ---- errors, a replaced target, cancellation ------------------------------------------------------------------


def test_errors_replacement_and_cancellation(cluster: Cluster) -> None:
    for b in (1, 2, 3, 4):
        cluster.start_broker(b)
    ctl, rec, _ = cluster.start_controller()
    cluster.create_topic("t", {0: [1, 2]})
    cluster.create_topic("doomed", {0: [1, 2]})
    cluster.wait_state("t", 0, "t-0 online", leader=1, isr=(1, 2))
    cluster.wait_state("doomed", 0, "doomed-0 online", leader=1)
    cluster.kill_broker(2)
    cluster.wait_state("doomed", 0, "broker 2 out of the ISR", isr=(1,))
    cluster.admin.mark_topic_for_deletion("doomed")  # waits for broker 2's replica
    wait_for(lambda: ctl.ctx.is_topic_queued_up_for_deletion("doomed"), "doomed queued for deletion")
    assert alter(ctl, {("t", 1): [1], ("nope", 0): [1], ("t", 0): [], ("doomed", 0): [3]}) == {
        ("t", 1): ErrorCode.unknown_topic_or_partition, ("nope", 0): ErrorCode.unknown_topic_or_partition,
        ("t", 0): ErrorCode.invalid_replica_assignment, ("doomed", 0): ErrorCode.unknown_topic_or_partition}
    assert alter(ctl, {("t", 0): [3, 3]}) == {("t", 0): ErrorCode.invalid_replica_assignment}
    assert alter(ctl, {("t", 0): [1, 9]}) == {("t", 0): ErrorCode.invalid_replica_assignment}  # 9 is not alive
    assert alter(ctl, {("t", 0): None}) == {("t", 0): ErrorCode.no_reassignment_in_progress}
    assert assignment(cluster, "t", 0) == ((1, 2), (), ())

    # a new target replaces the running one: ORS stays [1,2]; the replica added for the old target goes
    assert alter(ctl, {("t", 0): [1, 3]}) == {("t", 0): ErrorCode.none}
    assert assignment(cluster, "t", 0) == ((1, 3, 2), (3,), (2,))
    ctl.barrier().result(timeout=30)
    rec.clear()
    assert alter(ctl, {("t", 0): [1, 4]}) == {("t", 0): ErrorCode.none}
    ctl.barrier().result(timeout=30)
    assert assignment(cluster, "t", 0) == ((1, 4, 2), (4,), (2,))
    assert in_progress(ctl) == {("t", 0): ([1, 4, 2], [4], [2])}
    stops = {s.broker_id: partitions_of(s.body) for s in rec.of(STOP_REPLICA)}
    assert list(stops) == [3] and stops[3][("t", 0)]["delete_partition"]
    assert partitions_of(next(s for s in rec.of(LEADER_AND_ISR) if s.broker_id == 4).body)[("t", 0)]["is_new"]

    # cancellation: back to the original replicas, the added one deleted, the leader epoch bumped
    before, _ = cluster.state("t", 0) or (None, -1)
    assert before is not None
    rec.clear()
    assert alter(ctl, {("t", 0): None}) == {("t", 0): ErrorCode.none}
    ctl.barrier().result(timeout=30)
    assert assignment(cluster, "t", 0) == ((1, 2), (), ())
    st, _ = cluster.state("t", 0) or (None, -1)
    assert st is not None and (st.leader, st.isr) == (1, (1,)) and st.leader_epoch > before.leader_epoch
    stops = {s.broker_id: partitions_of(s.body) for s in rec.of(STOP_REPLICA)}
    assert list(stops) == [4] and stops[4][("t", 0)]["delete_partition"]
    assert in_progress(ctl) == {}
    assert alter(ctl, {("t", 0): None}) == {("t", 0): ErrorCode.no_reassignment_in_progress}


# ---- controller failover ----------------------------------------------------------------------------------------


def test_a_new_controller_completes_what_the_dead_one_started(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.start_broker(b)
    first, _, first_zk = cluster.start_controller(zk_class=RecordingZk, controller_id=0)
    assert isinstance(first_zk, RecordingZk)
    cluster.create_topic("t", {0: [1, 2], 1: [1, 2]})
    cluster.wait_state("t", 0, "t-0 online", leader=1, isr=(1, 2))
    cluster.wait_state("t", 1, "t-1 online", leader=1, isr=(1, 2))
    first.barrier().result(timeout=30)
    assert alter(first, {("t", 0): [2, 3]}) == {("t", 0): ErrorCode.none}
    # the controller's broker dies just before the last step: the final assignment write
    first_zk.crash_on = lambda w: w[0] == "assignment" and not w[2]
    expand_isr(cluster, first, "t", 0, [1, 2, 3])
    first.barrier().result(timeout=30)
    assert assignment(cluster, "t", 0) == ((2, 3, 1), (3,), (1,))  # ZooKeeper still says: in progress
    st, _ = cluster.state("t", 0) or (None, -1)
    assert st is not None and (st.leader, st.isr) == (2, (2, 3))
    cluster.kill_controller(first)
    # meanwhile a tool asks for a move the legacy way
    cluster.admin.create_partition_reassignment(PartitionReassignment({("t", 1): (3, 1)}))

    second, rec, _ = cluster.start_controller(controller_id=7)
    second.barrier().result(timeout=30)
    # t-0's move is complete (its TRS is in the ISR): the new controller finishes it
    assert assignment(cluster, "t", 0) == ((2, 3), (), ())
    stops = {s.broker_id: partitions_of(s.body) for s in rec.of(STOP_REPLICA)}
    assert stops[1][("t", 0)]["delete_partition"]
    # t-1's move started from the znode, which is gone once accepted
    assert cluster.admin.get_data(znodes.REASSIGN_PARTITIONS_PATH) is None
    assert assignment(cluster, "t", 1) == ((3, 1, 2), (3,), (2,))
    assert in_progress(second) == {("t", 1): ([3, 1, 2], [3], [2])}
    lai3 = partitions_of(next(s for s in rec.of(LEADER_AND_ISR) if s.broker_id == 3).body)
    assert lai3[("t", 1)]["is_new"] and lai3[("t", 1)]["replicas"] == [3, 1, 2]
    expand_isr(cluster, second, "t", 1, [1, 2, 3])
    second.barrier().result(timeout=30)
    assert assignment(cluster, "t", 1) == ((3, 1), (), ())
    st1, _ = cluster.state("t", 1) or (None, -1)
    assert st1 is not None and (st1.leader, st1.isr) == (1, (1, 3))  # the leader is in TRS: it stays
    assert in_progress(second) == {}
    # and the watch is set again: the next znode a tool writes is taken too
    cluster.admin.create_partition_reassignment(PartitionReassignment({("t", 1): (3, 1, 2)}))
    wait_for(lambda: cluster.admin.get_data(znodes.REASSIGN_PARTITIONS_PATH) is None, "the znode taken")
    assert assignment(cluster, "t", 1) == ((3, 1, 2), (2,), ())


def test_a_move_waits_for_its_broker_and_a_deletion_waits_for_the_move(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.start_broker(b)
    ctl, rec, _ = cluster.start_controller()
    cluster.create_topic("t", {0: [1, 2]})
    cluster.wait_state("t", 0, "t-0 online", leader=1, isr=(1, 2))
    # a tool names broker 3 before it runs: the move starts and waits for it
    cluster.admin.create_partition_reassignment(PartitionReassignment({("t", 0): (1, 3)}))
    wait_for(lambda: cluster.admin.get_data(znodes.REASSIGN_PARTITIONS_PATH) is None, "the znode taken")
    assert assignment(cluster, "t", 0) == ((1, 3, 2), (3,), (2,))
    cluster.admin.mark_topic_for_deletion("t")
    wait_for(lambda: ctl.ctx.is_topic_queued_up_for_deletion("t"), "t queued for deletion")
    ctl.barrier().result(timeout=30)
    assert not rec.of(STOP_REPLICA)  # the move holds the deletion back
    rec.clear()
    cluster.start_broker(3)
    wait_for(lambda: any(s.broker_id == 3 and ("t", 0) in partitions_of(s.body) for s in rec.of(LEADER_AND_ISR)),
             "the move's LeaderAndIsr to broker 3 once it is up")
    ctl.barrier().result(timeout=30)
    lai3 = partitions_of(next(s for s in rec.of(LEADER_AND_ISR) if s.broker_id == 3).body)[("t", 0)]
    assert lai3["is_new"] and lai3["replicas"] == [1, 3, 2] and lai3["adding_replicas"] == [3]
    expand_isr(cluster, ctl, "t", 0, [1, 2, 3])
    # the move completes, then the deletion it held back runs
    wait_for(lambda: cluster.admin.get_topic_assignment("t") is None, "t deleted after its move")
    ctl.barrier().result(timeout=30)
    deleted = {s.broker_id for s in rec.of(STOP_REPLICA)
               if any(p["delete_partition"] for p in partitions_of(s.body).values())}
    assert deleted == {1, 2, 3}
