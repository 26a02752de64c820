"""tieredlog.cluster.zk against a real ZooKeeper: Kafka's paths under a chroot, conditional partition
state updates, and the controller-epoch check that fences a deposed controller's writes."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
from kazoo.client import KazooClient
from zk_harness import ZooKeeperServer, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import ControllerMovedError, ReassignmentInProgressError, ZkVersionConflictError
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import LeaderIsrAndControllerEpoch, PartitionReassignment, TopicAssignment
from tieredlog.errors import TopicAlreadyExistsError

pytestmark = pytest.mark.integration


@pytest.fixture
def clients(zk_connect: str) -> Iterator[list[ZkClient]]:  # noqa: F811
    made: list[ZkClient] = []
    try:
        for i in range(3):
            c = ZkClient(zk_connect, session_timeout_ms=6000, name=f"test-{i}")
            made.append(c)
            c.start()
        yield made
    finally:
        for c in made:
            c.close()


def test_chroot_is_created_and_honoured(zookeeper: ZooKeeperServer) -> None:  # noqa: F811
    chroot = f"/tieredlog/chroot-{uuid.uuid4().hex[:8]}"
    with ZkClient(zookeeper.connect + chroot, session_timeout_ms=6000) as zk:
        zk.create_or_get_cluster_id("cid")
        zk.create_topic_assignment("t", TopicAssignment.of({0: [1]}))
        assert zk.get_children("/") and zk.exists("/brokers/ids") is not None
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=10)
    try:
        assert root.get(f"{chroot}/cluster/id")[0] == b'{"version":"1","id":"cid"}'
        assert root.exists(f"{chroot}/brokers/topics/t") is not None
        # Kafka's persistent top-level paths exist under the chroot, and nothing was written outside it
        for path in znodes.PERSISTENT_PATHS:
            assert root.exists(chroot + path) is not None, path
        assert root.exists("/cluster") is None and root.exists("/brokers") is None
    finally:
        root.stop()
        root.close()


def test_stale_partition_state_version_is_refused(clients: list[ZkClient]) -> None:
    a, b, _ = clients
    a.create_topic_assignment("orders", TopicAssignment.of({0: [1, 2, 3]}, uuid.uuid4()))
    a.create_partition_state("orders", 0, LeaderIsrAndControllerEpoch(1, 0, (1, 2, 3), 1))
    raw = a.get_data("/brokers/topics/orders/partitions/0/state")
    assert raw is not None
    assert raw[0] == b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}'

    got_a, got_b = a.get_partition_state("orders", 0), b.get_partition_state("orders", 0)
    assert got_a is not None and got_b is not None and got_a[1] == got_b[1] == 0
    shrunk = LeaderIsrAndControllerEpoch(1, 0, (1, 2), 1)
    assert a.update_partition_state("orders", 0, shrunk, expected_version=got_a[1]) == 1
    # b decided on what it read at version 0: its write must not land on top of a's
    with pytest.raises(ZkVersionConflictError, match="version is no longer 0"):
        b.update_partition_state("orders", 0, LeaderIsrAndControllerEpoch(2, 1, (2, 3), 1), expected_version=got_b[1])
    assert b.get_partition_state("orders", 0) == (shrunk, 1)
    # read again, decide again: now it lands
    assert b.update_partition_state("orders", 0, LeaderIsrAndControllerEpoch(2, 1, (2,), 1), expected_version=1) == 2
    with pytest.raises(TopicAlreadyExistsError, match="Topic 'orders' already exists."):
        a.create_topic_assignment("orders", TopicAssignment.of({0: [1]}))


def test_deposed_controller_writes_are_fenced(clients: list[ZkClient]) -> None:
    old, new, other = clients
    epoch1, zkv1 = old.register_controller_and_increment_epoch(1)
    assert (epoch1, zkv1) == (1, 0) and other.get_data(znodes.CONTROLLER_EPOCH_PATH)[0] == b"1"  # type: ignore[index]
    old.create_partition_state("t", 0, LeaderIsrAndControllerEpoch(1, 0, (1, 2), epoch1),
                               expected_controller_epoch_zk_version=zkv1)
    # a second controller cannot win while the first holds /controller
    with pytest.raises(ControllerMovedError):
        new.register_controller_and_increment_epoch(2)
    other.delete_path(znodes.CONTROLLER_PATH)  # what the old controller's session expiry does
    epoch2, zkv2 = new.register_controller_and_increment_epoch(2)
    assert (epoch2, zkv2) == (2, 1)

    _, version = old.get_partition_state("t", 0)  # type: ignore[misc]
    with pytest.raises(ControllerMovedError, match="Expected zkVersion = 0"):
        old.update_partition_state("t", 0, LeaderIsrAndControllerEpoch(1, 1, (1,), epoch1), version,
                                   expected_controller_epoch_zk_version=zkv1)
    assert new.update_partition_state("t", 0, LeaderIsrAndControllerEpoch(2, 1, (2,), epoch2), version,
                                      expected_controller_epoch_zk_version=zkv2) == version + 1
    state = other.get_partition_state("t", 0)
    assert state is not None and state[0].controller_epoch == 2 and state[0].leader == 2


def test_topic_config_and_admin_paths(clients: list[ZkClient]) -> None:
    a, b, _ = clients
    a.set_topic_config("t", {"retention.ms": "60000"})
    a.set_topic_config("t", {"retention.ms": "1000", "cleanup.policy": "delete"})
    assert b.get_topic_config("t") == {"retention.ms": "1000", "cleanup.policy": "delete"}
    assert b.get_data("/config/topics/t")[0] == (  # type: ignore[index]
        b'{"version":1,"config":{"retention.ms":"1000","cleanup.policy":"delete"}}')

    a.mark_topic_for_deletion("t")
    a.mark_topic_for_deletion("t")
    assert b.get_topics_marked_for_deletion() == ["t"]
    b.remove_topic_deletion_marker("t")
    assert a.get_topics_marked_for_deletion() == []

    r = PartitionReassignment({("t", 0): (2, 3)})
    a.create_partition_reassignment(r)
    with pytest.raises(ReassignmentInProgressError):
        b.create_partition_reassignment(r)
    assert b.get_partition_reassignment() == r
    b.delete_partition_reassignment()
    assert a.get_partition_reassignment() is None
