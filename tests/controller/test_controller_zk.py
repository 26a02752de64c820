"""The controller against a real ZooKeeper. Brokers are simulated by their own ZooKeeper sessions that
register /brokers/ids/<id> (closing one is a broker's death); the controller's channel is replaced by an
in-process recorder of the requests it would send (it answers StopReplica at once, as a broker would),
so these tests check what the controller writes to ZooKeeper and what it tells each broker."""

from __future__ import annotations

import logging
import uuid
from typing import Any, Iterator

import pytest
from controller_harness import Cluster, alter_partition, partition_answer, partitions_of
from helpers import wait_for
from kio.schema.errors import ErrorCode
from zk_harness import zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import ControllerMovedError
from tieredlog.cluster.znodes import LeaderIsrAndControllerEpoch
from tieredlog.controller import ControllerConfig, ElectionType
from tieredlog.controller.request_batch import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(zk_connect: str) -> Iterator[Cluster]:  # noqa: F811
    c = Cluster(zk_connect)
    try:
        yield c
    finally:
        c.close()


# ---- topic creation, broker failure ---------------------------------------------------------------------


def test_topic_creation_and_leader_failover_are_batched(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="state.change.logger")
    for b in (1, 2, 3):
        cluster.start_broker(b)
    ctl, rec, _ = cluster.start_controller()
    rec.clear()
    layout = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 3, 2]}
    cluster.create_topic("orders", layout)
    for p, replicas in layout.items():
        cluster.wait_state("orders", p, f"orders-{p} online", leader=replicas[0], leader_epoch=0, isr=tuple(replicas))
    ctl.barrier().result(timeout=30)
    lai = rec.of(LEADER_AND_ISR)
    assert sorted(s.broker_id for s in lai) == [1, 2, 3]  # one request per broker for the four partitions
    for s in lai:
        parts = partitions_of(s.body)
        assert sorted(parts) == [("orders", p) for p in range(4)]
        assert all(p["is_new"] and p["partition_epoch"] == 0 for p in parts.values())
        assert s.body["broker_epoch"] == cluster.epochs[s.broker_id]
        assert s.body["topic_states"][0]["topic_id"] is not None
    um = rec.of(UPDATE_METADATA)
    assert sorted(s.broker_id for s in um) == [1, 2, 3]
    assert sorted(b["id_"] for b in um[0].body["live_brokers"]) == [1, 2, 3]
    assert "Changed partition orders-0 from NewPartition to OnlinePartition with state LeaderAndIsr(leader=1" in caplog.text

    rec.clear()
    cluster.kill_broker(1)
    st0, v0 = cluster.wait_state("orders", 0, "orders-0 led by 2", leader=2)
    assert (st0.leader_epoch, st0.isr, v0) == (1, (2, 3), 1)
    st3, _ = cluster.wait_state("orders", 3, "orders-3 led by 3", leader=3)
    assert st3.isr == (3, 2)
    st1, _ = cluster.wait_state("orders", 1, "broker 1 out of orders-1's ISR", isr=(2, 3))
    assert (st1.leader, st1.leader_epoch) == (2, 1)  # a follower leaving the ISR bumps the leader epoch too
    ctl.barrier().result(timeout=30)
    lai = rec.of(LEADER_AND_ISR)
    assert sorted(s.broker_id for s in lai) == [2, 3]  # N partitions: one request per surviving broker
    parts = partitions_of(next(s for s in lai if s.broker_id == 2).body)
    assert parts[("orders", 0)]["leader"] == 2 and parts[("orders", 0)]["leader_epoch"] == 1
    assert parts[("orders", 0)]["partition_epoch"] == 1
    assert sorted(s.broker_id for s in rec.of(UPDATE_METADATA)) == [2, 3]
    assert "Changed partition orders-0 from OfflinePartition to OnlinePartition" in caplog.text
    assert "Changed state of replica 1 for partition orders-1 from OnlineReplica to OfflineReplica" in caplog.text


def test_unclean_election_off_then_on(cluster: Cluster) -> None:
    e1, _ = cluster.start_broker(1), cluster.start_broker(2)
    ctl, rec, _ = cluster.start_controller()
    clean_id = cluster.create_topic("clean", {0: [1, 2]})
    lossy_id = cluster.create_topic("lossy", {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
    for t in ("clean", "lossy"):
        cluster.wait_state(t, 0, f"{t}-0 online", leader=1)
    # the leader drops broker 2 from both ISRs; then the leader dies
    ctl.barrier().result(timeout=30)
    for tid in (clean_id, lossy_id):
        answer = partition_answer(alter_partition(ctl, 1, e1, tid, 0, 0, [1], 0, cluster.epochs))
        assert (answer["isr"], answer["partition_epoch"]) == ([1], 1)
    cluster.kill_broker(1)
    lossy, _ = cluster.wait_state("lossy", 0, "lossy-0 elected uncleanly", leader=2)
    assert lossy.isr == (2,)
    clean, _ = cluster.wait_state("clean", 0, "clean-0 without a leader", leader=-1)
    assert clean.isr == (1,)  # the last ISR member stays, so a clean election is possible when it returns
    result = ctl.elect_leaders(ElectionType.PREFERRED, [("clean", 0)]).result(timeout=30)
    assert result["replica_election_results"][0]["partition_result"][0]["error_code"] == \
        ErrorCode.preferred_leader_not_available
    result = ctl.elect_leaders(ElectionType.UNCLEAN, [("clean", 0), ("nope", 0)]).result(timeout=30)
    codes = {(r["topic"], p["partition_id"]): p["error_code"] for r in result["replica_election_results"]
             for p in r["partition_result"]}
    assert codes == {("clean", 0): ErrorCode.none, ("nope", 0): ErrorCode.unknown_topic_or_partition}
    st, _ = cluster.wait_state("clean", 0, "clean-0 led by 2", leader=2)
    assert st.isr == (2,)


# ---- AlterPartition ----------------------------------------------------------------------------------


def test_alter_partition_validations_and_answers(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.start_broker(b)
    ctl, rec, _ = cluster.start_controller()
    tid = cluster.create_topic("t", {0: [1, 2, 3]})
    cluster.wait_state("t", 0, "t-0 online", leader=1)
    ctl.barrier().result(timeout=30)
    ep = cluster.epochs

    def code(response: dict[str, Any]) -> ErrorCode:
        if response["error_code"] != ErrorCode.none:
            return response["error_code"]  # type: ignore[no-any-return]
        return partition_answer(response)["error_code"]  # type: ignore[no-any-return]

    assert code(alter_partition(ctl, 1, ep[1] + 1, tid, 0, 0, [1, 2], 0, ep)) == ErrorCode.stale_broker_epoch
    assert code(alter_partition(ctl, 2, ep[2], tid, 0, 0, [1, 2], 0, ep)) == ErrorCode.not_leader_or_follower
    assert code(alter_partition(ctl, 1, ep[1], tid, 0, 1, [1, 2], 0, ep)) == ErrorCode.not_controller
    assert code(alter_partition(ctl, 1, ep[1], uuid.uuid4(), 0, 0, [1, 2], 0, ep)) == ErrorCode.unknown_topic_id
    assert code(alter_partition(ctl, 1, ep[1], tid, 0, 0, [1, 2, 9], 0, ep)) == ErrorCode.ineligible_replica
    assert code(alter_partition(ctl, 1, ep[1], tid, 0, 0, [1, 2], 0, {**ep, 2: ep[2] - 1})) == ErrorCode.ineligible_replica
    rec.clear()
    answer = partition_answer(alter_partition(ctl, 1, ep[1], tid, 0, 0, [1, 2], 0, ep))
    assert answer == {"partition_index": 0, "error_code": ErrorCode.none, "leader_id": 1, "leader_epoch": 0,
                      "isr": [1, 2], "leader_recovery_state": 0, "partition_epoch": 1}
    st, version = cluster.state("t", 0) or (None, -1)
    assert st is not None and (st.isr, st.leader_epoch, version) == ((1, 2), 0, 1)
    ctl.barrier().result(timeout=30)
    um = rec.of(UPDATE_METADATA)
    assert sorted(s.broker_id for s in um) == [1, 2, 3]
    assert partitions_of(um[0].body)[("t", 0)]["isr"] == [1, 2]
    # a retry of the same change is answered with the current state; an older partition epoch is refused
    assert partition_answer(alter_partition(ctl, 1, ep[1], tid, 0, 0, [1, 2], 0, ep))["partition_epoch"] == 1
    assert code(alter_partition(ctl, 1, ep[1], tid, 0, 0, [1], 0, ep)) == ErrorCode.invalid_update_version
    # a newer leader epoch fences the old leader's request
    assert ctl.elect_leaders(ElectionType.PREFERRED, [("t", 0)]).result(timeout=30)["replica_election_results"][0][
        "partition_result"][0]["error_code"] == ErrorCode.election_not_needed
    ctl.controlled_shutdown(1, ep[1]).result(timeout=30)
    cluster.wait_state("t", 0, "t-0 moved to 2", leader=2, leader_epoch=1)
    assert code(alter_partition(ctl, 1, ep[1], tid, 0, 0, [1, 2], 1, ep)) == ErrorCode.fenced_leader_epoch
    # a shutting-down broker may not join an ISR
    assert code(alter_partition(ctl, 2, ep[2], tid, 0, 1, [2, 1], 2, ep)) == ErrorCode.ineligible_replica


# ---- controlled shutdown, preferred election -----------------------------------------------------------


def test_controlled_shutdown_moves_leaderships(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.start_broker(b)
    ctl, rec, _ = cluster.start_controller()
    cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3], 2: [1]})
    cluster.wait_state("t", 2, "t-2 online", leader=1)
    cluster.wait_state("t", 0, "t-0 online", leader=1)
    ctl.barrier().result(timeout=30)
    rec.clear()
    assert ctl.controlled_shutdown(1, cluster.epochs[1] - 1).result(timeout=30) == (ErrorCode.stale_broker_epoch.value, [])
    assert ctl.controlled_shutdown(7, -1).result(timeout=30) == (ErrorCode.broker_not_available.value, [])
    error, remaining = ctl.controlled_shutdown(1, cluster.epochs[1]).result(timeout=30)
    assert (error, remaining) == (0, [])  # t-2 has one replica: Kafka does not count it
    st0, _ = cluster.wait_state("t", 0, "t-0 led by 2", leader=2)
    assert (st0.isr, st0.leader_epoch) == ((2, 3), 1)
    st1, _ = cluster.wait_state("t", 1, "1 out of t-1's ISR", isr=(2, 3))
    assert st1.leader == 2
    ctl.barrier().result(timeout=30)
    stops = rec.of(STOP_REPLICA)
    assert [s.broker_id for s in stops] == [1]
    assert {k: v["delete_partition"] for k, v in partitions_of(stops[0].body).items()} == {("t", 1): False}
    lai = {s.broker_id: partitions_of(s.body) for s in rec.of(LEADER_AND_ISR)}
    # the old leader learns it follows now; the partition it followed is stopped on it instead
    assert set(lai) == {1, 2, 3} and lai[2][("t", 0)]["leader"] == 2
    assert set(lai[1]) == {("t", 0)} and lai[1][("t", 0)]["leader"] == 2


def test_preferred_leader_election(cluster: Cluster) -> None:
    cluster.start_broker(1)
    e2 = cluster.start_broker(2)
    ctl, rec, _ = cluster.start_controller()
    tid = cluster.create_topic("t", {0: [1, 2]})
    cluster.wait_state("t", 0, "t-0 online", leader=1)
    cluster.kill_broker(1)
    cluster.wait_state("t", 0, "t-0 led by 2", leader=2, isr=(2,))
    cluster.start_broker(1)
    wait_for(lambda: 1 in ctl.ctx.live_brokers, "broker 1 back")
    result = ctl.elect_leaders(ElectionType.PREFERRED, [("t", 0)]).result(timeout=30)
    assert result["replica_election_results"][0]["partition_result"][0]["error_code"] == \
        ErrorCode.preferred_leader_not_available  # broker 1 is not in the ISR yet
    st, version = cluster.state("t", 0) or (None, -1)
    assert st is not None
    partition_answer(alter_partition(ctl, 2, e2, tid, 0, st.leader_epoch, [2, 1], version, cluster.epochs))
    result = ctl.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30)
    assert result["replica_election_results"][0]["partition_result"][0]["error_code"] == ErrorCode.none
    st2, _ = cluster.wait_state("t", 0, "t-0 back on its preferred replica", leader=1)
    assert st2.leader_epoch == st.leader_epoch + 1 and st2.isr == (2, 1)
    result = ctl.elect_leaders(ElectionType.PREFERRED, [("t", 0)]).result(timeout=30)
    assert result["replica_election_results"][0]["partition_result"][0]["error_code"] == ErrorCode.election_not_needed


def test_auto_leader_rebalance(cluster: Cluster) -> None:
    cluster.start_broker(1)
    e2 = cluster.start_broker(2)
    ctl, _, _ = cluster.start_controller(ControllerConfig(auto_leader_rebalance_enable=True,
                                                          leader_imbalance_check_interval_seconds=1))
    tid = cluster.create_topic("t", {0: [1, 2]})
    cluster.wait_state("t", 0, "t-0 online", leader=1)
    cluster.kill_broker(1)
    cluster.wait_state("t", 0, "t-0 led by 2", leader=2, isr=(2,))
    cluster.start_broker(1)
    wait_for(lambda: 1 in ctl.ctx.live_brokers, "broker 1 back")
    st, version = cluster.state("t", 0) or (None, -1)
    assert st is not None and st.leader == 2  # not in the ISR: leadership never moves outside it
    partition_answer(alter_partition(ctl, 2, e2, tid, 0, st.leader_epoch, [2, 1], version, cluster.epochs))
    cluster.wait_state("t", 0, "the rebalance to move t-0 back to broker 1", leader=1)


# ---- controller failover -------------------------------------------------------------------------------


def test_controller_failover_fences_the_old_controller(cluster: Cluster) -> None:
    e1 = cluster.start_broker(1)
    cluster.start_broker(2)
    old, _, old_zk = cluster.start_controller(elect=False, controller_id=0)
    epoch, _ = old_zk.register_controller_and_increment_epoch(0)
    old.on_become_controller(epoch)
    wait_for(lambda: old.is_active, "the first controller")
    tid = cluster.create_topic("t", {0: [1, 2]})
    cluster.wait_state("t", 0, "t-0 online", leader=1)
    old.barrier().result(timeout=30)

    # another broker takes the office (as after a long pause of the first one): epoch + 1
    new, rec, new_zk = cluster.start_controller(elect=False, controller_id=5)
    new_zk.delete_path(znodes.CONTROLLER_PATH)
    new_epoch, _ = new_zk.register_controller_and_increment_epoch(5)
    assert new_epoch == epoch + 1
    new.on_become_controller(new_epoch)
    wait_for(lambda: new.is_active, "the second controller")
    new.barrier().result(timeout=30)
    assert new.ctx.leadership[next(iter(new.ctx.leadership))].leader_and_isr.leader == 1
    assert sorted(s.broker_id for s in rec.of(UPDATE_METADATA)) == [1, 2]
    assert all(s.body["controller_epoch"] == new_epoch for s in rec.sent)
    assert sorted(s.broker_id for s in rec.of(LEADER_AND_ISR)) == [1, 2]

    # the old controller still thinks it is in office: its write is fenced, and it steps down
    response = alter_partition(old, 1, e1, tid, 0, 0, [1], 0, cluster.epochs)
    assert response["error_code"] == ErrorCode.not_controller
    assert not old.is_active
    st, version = cluster.state("t", 0) or (None, -1)
    assert st is not None and (st.isr, version) == ((1, 2), 0)
    with pytest.raises(ControllerMovedError):
        old_zk.update_partition_state("t", 0, st, 0, expected_controller_epoch_zk_version=0)
    answer = partition_answer(alter_partition(new, 1, e1, tid, 0, 0, [1], 0, cluster.epochs))
    assert answer["partition_epoch"] == 1
    assert (cluster.state("t", 0) or (None, -1))[0] == LeaderIsrAndControllerEpoch(1, 0, (1,), new_epoch)


# ---- topic deletion ------------------------------------------------------------------------------------


def test_topic_deletion_waits_for_a_dead_replica(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.start_broker(b)
    ctl, rec, _ = cluster.start_controller()
    cluster.create_topic("gone", {0: [1, 2], 1: [2, 3]}, {"retention.ms": "1000"})
    cluster.create_topic("kept", {0: [1, 2]})
    cluster.wait_state("gone", 1, "gone-1 online", leader=2)
    cluster.wait_state("kept", 0, "kept-0 online", leader=1)
    cluster.kill_broker(3)
    wait_for(lambda: 3 not in ctl.ctx.live_brokers, "broker 3 gone")
    ctl.barrier().result(timeout=30)
    rec.clear()
    cluster.admin.mark_topic_for_deletion("gone")
    wait_for(lambda: rec.of(STOP_REPLICA), "StopReplica for the live replicas")
    ctl.barrier().result(timeout=30)
    assert cluster.admin.get_topic_assignment("gone") is not None  # broker 3 holds a replica: deletion waits
    um = rec.of(UPDATE_METADATA)
    assert um and partitions_of(um[0].body)[("gone", 0)]["leader"] == -2
    deletes = {s.broker_id: partitions_of(s.body) for s in rec.of(STOP_REPLICA)}
    assert deletes[1][("gone", 0)]["delete_partition"] and deletes[2][("gone", 1)]["delete_partition"]
    assert deletes[1][("gone", 0)]["leader_epoch"] == -2
    cluster.start_broker(3)
    wait_for(lambda: cluster.admin.get_topic_assignment("gone") is None, "the topic's deletion")
    wait_for(lambda: cluster.admin.get_data(znodes.delete_topic_path("gone")) is None, "the deletion marker removed")
    assert cluster.admin.get_topic_config("gone") == {}
    assert cluster.admin.get_children(znodes.topic_path("gone")) == []
    assert cluster.admin.get_topic_assignment("kept") is not None
    ctl.barrier().result(timeout=30)
    assert "gone" not in ctl.ctx.all_topics and "kept" in ctl.ctx.all_topics
