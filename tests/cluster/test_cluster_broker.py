"""Broker processes with ``zookeeper.connect`` against a real ZooKeeper: registration at /brokers/ids,
one cluster id, Metadata / DescribeCluster listing every registered broker and the elected controller,
the start-up refusals (broker id in use, another cluster's data, bad or unreachable ZooKeeper) as one
line and exit code 1, and the controller moving when the controller broker stops."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
from broker_harness import REPO, BrokerProcess
from zk_harness import free_port, wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.meta_properties import read_meta_properties
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import DESCRIBE_CLUSTER, METADATA

pytestmark = pytest.mark.integration


def member(connect: str, broker_id: int) -> dict[str, str]:
    return {"zookeeper.connect": connect, "broker.id": str(broker_id), "node.id": str(broker_id),
            "zookeeper.session.timeout.ms": "6000", "group.initial.rebalance.delay.ms": "0"}


def metadata(b: BrokerProcess) -> Any:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        return c.request(METADATA, {"topics": None, "allow_auto_topic_creation": False})


def brokers_and_controller(b: BrokerProcess) -> tuple[list[tuple[int, str, int]], int]:
    r = metadata(b)
    return sorted((x.node_id, x.host, x.port) for x in r.brokers), r.controller_id


def run_to_failure(b: BrokerProcess, timeout: float = 60) -> tuple[int, str]:
    """Run a broker that must refuse to start; its exit code and its whole log."""
    b.data_dir.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(b.command(), cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def assert_one_line_refusal(rc: int, text: str, needle: str) -> None:
    assert rc == 1, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and needle in errors[0], text
    assert "Traceback" not in text, text


def test_two_brokers_form_a_cluster_and_the_controller_moves_on_sigterm(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    b1 = broker_factory(member(zk_connect, 1))
    b2 = broker_factory(member(zk_connect, 2))
    # a broker serves requests once it knows the controller: its very first Metadata names it
    assert metadata(b2).controller_id == 1

    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], message="both brokers at /brokers/ids")
        registered = {b.broker_id: b.endpoints[0].port for b in zk.get_all_brokers()}
        assert registered == {1: b1.port, 2: b2.port}
        cluster_id = zk.get_cluster_id()
        controller = zk.get_controller_id()
    assert controller in (1, 2)

    expected = [(1, "127.0.0.1", b1.port), (2, "127.0.0.1", b2.port)]
    for b in (b1, b2):
        wait_until(lambda b=b: brokers_and_controller(b) == (expected, controller),  # type: ignore[misc]
                   message=f"Metadata from {b.bootstrap} lists both brokers and controller {controller}")
        r = metadata(b)
        assert r.cluster_id == cluster_id
        with KafkaClient(b.bootstrap, timeout=10) as c:
            dc = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False})
        assert (dc.cluster_id, dc.controller_id) == (cluster_id, controller)
        assert sorted((x.broker_id, x.port) for x in dc.brokers) == [(1, b1.port), (2, b2.port)]

    metas = [read_meta_properties(b.data_dir) for b in (b1, b2)]
    assert [(m.cluster_id, m.broker_id, m.version) for m in metas if m] == [(cluster_id, 1, 0), (cluster_id, 2, 0)]

    # a third broker configured with broker 1's id is refused once its listeners are up
    dup = BrokerProcess(tmp_path / "dup" / "data", member(zk_connect, 1))
    rc, text = run_to_failure(dup)
    assert_one_line_refusal(rc, text, "Error while creating ephemeral at /brokers/ids/1, node already exists")
    assert brokers_and_controller(b1)[0] == expected  # the live broker 1 is untouched

    # SIGTERM of the controller: the other broker takes over, and Metadata says so
    stopped, survivor = (b1, b2) if controller == 1 else (b2, b1)
    assert stopped.stop() == 0
    other = 2 if controller == 1 else 1
    only = [(other, "127.0.0.1", survivor.port)]
    wait_until(lambda: brokers_and_controller(survivor) == (only, other),
               message=f"broker {other} becomes the controller and is the only live broker")


def test_a_broker_of_another_cluster_is_refused_with_one_line(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    # broker 3 belongs to cluster B (its own chroot) and is stopped; cluster A has broker 1
    b3 = broker_factory(member(f"{zk_connect}-b", 3))
    other_cluster = metadata(b3).cluster_id
    assert b3.stop() == 0
    broker_factory(member(zk_connect, 1))
    with ZkClient(zk_connect) as zk:
        this_cluster = zk.get_cluster_id()
    assert this_cluster and this_cluster != other_cluster

    # broker 3 pointed at cluster A's chroot by mistake
    wrong = BrokerProcess(b3.data_dir, member(zk_connect, 3))
    rc, text = run_to_failure(wrong)
    assert_one_line_refusal(rc, text, f"The Cluster ID {this_cluster} doesn't match stored clusterId "
                                      f"Some({other_cluster}) in meta.properties.")
    with ZkClient(zk_connect) as zk:
        assert zk.get_all_broker_ids() == [1]  # nothing stayed registered
    meta = read_meta_properties(b3.data_dir)
    assert meta is not None and meta.cluster_id == other_cluster  # its data untouched


def test_bad_or_unreachable_zookeeper_is_one_line_and_exit_1(tmp_path: Path) -> None:
    bad = BrokerProcess(tmp_path / "bad" / "data", {"zookeeper.connect": "127.0.0.1:notaport"})
    assert_one_line_refusal(*run_to_failure(bad), "Invalid zookeeper.connect")
    unreachable = BrokerProcess(tmp_path / "down" / "data", {
        "zookeeper.connect": f"127.0.0.1:{free_port()}/kafka", "zookeeper.connection.timeout.ms": "1000"})
    assert_one_line_refusal(*run_to_failure(unreachable), "Timed out waiting for connection to ZooKeeper")
    assert not (tmp_path / "down" / "data" / "meta.properties").exists()  # no cluster id invented
