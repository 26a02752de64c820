"""A broker killed with SIGKILL and started again at once, before ZooKeeper has expired its old session:
its registration (and the /controller znode, when it was the controller) still belongs to that session.
Kafka exits there and leaves the restart to a supervisor; this broker waits for the old session to
expire, says so in one line, registers and serves."""

from __future__ import annotations

import signal
import subprocess
from typing import Callable

import pytest
from broker_harness import REPO, BrokerProcess
from cluster_harness import consume_all, partition_state, start_cluster
from confluent_kafka.admin import AdminClient, NewTopic
from tiered_cluster import produce_values
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import METADATA

pytestmark = pytest.mark.integration

WAITING = "Waiting up to 9000 ms for the registration of broker {} left by a previous session (0x"


def registered_brokers(b: BrokerProcess) -> list[int]:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
    return sorted(n.node_id for n in r.brokers)


def test_broker_restarted_before_its_old_session_expired_waits_registers_and_serves(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect, n=2)  # zookeeper.session.timeout.ms=6000
    with ZkClient(zk_connect) as zk:
        victim_id = zk.get_controller_id()
        assert victim_id in brokers
        old_session = zk.exists(f"/brokers/ids/{victim_id}")
        assert old_session is not None
    victim = brokers[victim_id]
    other = next(b for i, b in brokers.items() if i != victim_id)
    servers = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": other.bootstrap})
    admin.create_topics([NewTopic("on-victim", num_partitions=1, replica_assignment=[[victim_id]])])["on-victim"].result(30)
    wait_until(lambda: (s := partition_state(other, "on-victim")) and s[0][0] == victim_id, timeout=20,
               message="the victim leads its partition")
    produce_values(servers, "on-victim", [b"before"])

    victim.kill9()
    victim.start()  # at once: the old session is still alive in ZooKeeper

    log = victim.log_text()
    assert log.count(WAITING.format(victim_id)) == 1, log
    assert f"0x{old_session.ephemeralOwner:x}) to expire" in log, log
    assert "node already exists and owner" not in log, log
    with ZkClient(zk_connect) as zk:
        now = zk.exists(f"/brokers/ids/{victim_id}")
        assert now is not None and now.ephemeralOwner != old_session.ephemeralOwner
    assert registered_brokers(victim) == sorted(brokers)
    wait_until(lambda: (s := partition_state(victim, "on-victim")) and s[0][0] == victim_id, timeout=30,
               message="the restarted broker leads its partition again")
    produce_values(servers, "on-victim", [b"after"])
    got = consume_all(servers, "on-victim", 2, timeout_s=30)
    assert [m.value() for m in got] == [b"before", b"after"]


def test_broker_told_to_stop_while_it_waits_gives_up_at_once(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    b = start_cluster(broker_factory, zk_connect, n=1)[1]
    b.kill9()
    with open(b.log_path, "ab") as out:
        proc = subprocess.Popen(b.command(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: WAITING.format(1) in b.log_text(), timeout=30, message="the restarted broker waiting")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = b.log_text()
    assert "cannot start: shut down while waiting for the registration of broker 1 left by a previous session" in log
    assert "Traceback" not in log, log
