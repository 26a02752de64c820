"""Faults under a running cluster of broker processes: ZooKeeper restarted (data keeps flowing, the
brokers carry on with their sessions), and an unclean leader election — refused while the only live
replica is out of the ISR, done on request (ElectLeaders UNCLEAN), after which the old leader comes
back, truncates the records only it had (KIP-101) and follows."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import consume_all, member, partition_state
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from zk_harness import wait_until, zookeeper_factory  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import ELECT_LEADERS, METADATA
from tieredlog.tools.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.integration

UNCLEAN = 1


def produce(servers: str, topic: str, values: list[bytes], acks: str = "all") -> None:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": servers, "acks": acks, "message.timeout.ms": 20000})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(30) == 0
    assert not errors, errors


def create_topic(servers: str, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})  # kept alive until the answer comes
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)


def wait_registered(zk: ZooKeeperServer, ids: list[int]) -> None:
    with ZkClient(f"{zk.connect}/faults") as client:
        wait_until(lambda: client.get_all_broker_ids() == ids, timeout=40, message=f"registered brokers {ids}")


def controller_of(b: BrokerProcess) -> int:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        return int(c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False}).controller_id)


def two_brokers(broker_factory: Callable[..., BrokerProcess], zk: ZooKeeperServer,
                **extra: str) -> dict[int, BrokerProcess]:
    connect = f"{zk.connect}/faults"
    brokers = {i: broker_factory({**member(connect, i), **extra}) for i in (1, 2)}
    with ZkClient(connect) as client:
        wait_until(lambda: client.get_all_broker_ids() == [1, 2], message="both brokers registered")
        wait_until(lambda: client.get_controller_id() is not None, message="a controller")
    return brokers


def test_zookeeper_restarted_under_a_running_cluster(
        broker_factory: Callable[..., BrokerProcess], zookeeper_factory: Callable[[], ZooKeeperServer]) -> None:  # noqa: F811
    zk = zookeeper_factory()
    brokers = two_brokers(broker_factory, zk)
    servers = ",".join(b.bootstrap for b in brokers.values())
    create_topic(servers, "zkr", 1, 2)
    wait_until(lambda: (s := partition_state(brokers[1], "zkr")) and len(s[0][3]) == 2, timeout=30,
               message="a full ISR")
    produce(servers, "zkr", [b"a%d" % i for i in range(100)])

    zk.stop()
    # replication does not need ZooKeeper while the ISR holds
    produce(servers, "zkr", [b"b%d" % i for i in range(100)])
    zk.start()
    # sessions survive a restart within their timeout: the same controller, the same registrations
    with ZkClient(f"{zk.connect}/faults") as client:
        wait_until(lambda: client.get_all_broker_ids() == [1, 2], timeout=30, message="registrations kept")
    create_topic(servers, "after-zk", 1, 2)
    wait_until(lambda: (s := partition_state(brokers[2], "after-zk")) and s[0][0] in brokers, timeout=30,
               message="a topic created after the restart has a leader")
    got = consume_all(servers, "zkr", 200)
    assert [m.value() for m in got] == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(100)]


def test_unclean_election_refused_then_requested_and_the_old_leader_truncates(
        broker_factory: Callable[..., BrokerProcess], zookeeper_factory: Callable[[], ZooKeeperServer]) -> None:  # noqa: F811
    zk = zookeeper_factory()
    brokers = two_brokers(broker_factory, zk, **{"auto.leader.rebalance.enable": "false"})
    servers = ",".join(b.bootstrap for b in brokers.values())
    create_topic(servers, "u", 1, 2)
    wait_until(lambda: (s := partition_state(brokers[1], "u")) and len(s[0][3]) == 2, timeout=30,
               message="a full ISR")
    ((leader, _, _, _),) = partition_state(brokers[1], "u")
    follower = 3 - leader
    produce(servers, "u", [b"both%d" % i for i in range(50)])

    brokers[follower].kill9()
    wait_until(lambda: (s := partition_state(brokers[leader], "u")) and s[0][3] == [leader], timeout=40,
               message="the dead follower leaves the ISR")
    produce(brokers[leader].bootstrap, "u", [b"only-leader%d" % i for i in range(30)], acks="1")

    brokers[leader].kill9()
    # a SIGKILLed broker's registration stays until its session expires; a restart before that is
    # refused as a duplicate broker id, as Kafka's is
    wait_registered(zk, [])
    brokers[follower].restart()
    # the follower is not in the ISR: with unclean election off the partition stays offline
    wait_until(lambda: controller_of(brokers[follower]) == follower, timeout=40, message="the follower is controller")
    wait_until(lambda: partition_state(brokers[follower], "u") != [], timeout=30, message="metadata")
    assert partition_state(brokers[follower], "u")[0][0] == -1

    with KafkaClient(brokers[follower].bootstrap, timeout=10) as c:
        r = c.request(ELECT_LEADERS, {"election_type": UNCLEAN, "topic_partitions": [{"topic": "u", "partitions": [0]}],
                                      "timeout": 10000}, version=2)
    assert r.error_code.value == 0
    ((result,),) = [t.partition_result for t in r.replica_election_results]
    assert result.error_code.value == 0, result
    wait_until(lambda: partition_state(brokers[follower], "u")[0][0] == follower, timeout=30,
               message="the out-of-sync replica leads")
    produce(brokers[follower].bootstrap, "u", [b"after%d" % i for i in range(20)])

    # the old leader comes back as a follower: the 30 records only it had are cut from its log
    brokers[leader].restart()
    wait_until(lambda: (s := partition_state(brokers[follower], "u")) and len(s[0][3]) == 2, timeout=60,
               message="the old leader rejoins the ISR")
    expected = [b"both%d" % i for i in range(50)] + [b"after%d" % i for i in range(20)]
    assert [m.value() for m in consume_all(brokers[follower].bootstrap, "u", len(expected))] == expected
    # and it holds exactly the new leader's log: make it leader again and read everything from it
    brokers[follower].kill9()
    wait_until(lambda: (s := partition_state(brokers[leader], "u")) and s[0][0] == leader, timeout=40,
               message="the old leader leads again")
    assert [m.value() for m in consume_all(brokers[leader].bootstrap, "u", len(expected) + 1, timeout_s=10)] == expected
