"""Controller failover and cluster-wide topic configs with broker processes on one real ZooKeeper: the
controller broker is killed (SIGKILL), another takes the office once the dead one's ZooKeeper session
expires, moves the dead broker's leaderships, and admin calls keep working; a topic config changed
through one broker reaches every broker (the /config/changes notification)."""

from __future__ import annotations

from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state, start_cluster
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import DESCRIBE_CONFIGS

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")]

TOPIC_RESOURCE = 2


def topic_config(b: BrokerProcess, topic: str, key: str) -> str | None:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(DESCRIBE_CONFIGS, {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                                                        "configuration_keys": [key]}]})
    (res,) = r.results
    return next((c.value for c in res.configs if c.name == key), None)


def test_controller_killed_another_takes_over_and_moves_its_leaderships(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("spread", 3, 2)])["spread"].result(30)
    wait_until(lambda: (s := partition_state(brokers[1], "spread")) and all(len(p[3]) == 2 for p in s),
               timeout=30, message="every partition fully replicated")

    with ZkClient(zk_connect) as zk:
        controller = zk.get_controller_id()
        assert controller in brokers
        (epoch, _) = zk.get_controller_epoch() or (0, 0)
        brokers[controller].kill9()
        survivors = {i: b for i, b in brokers.items() if i != controller}
        wait_until(lambda: zk.get_controller_id() in survivors, timeout=40, message="a new controller")
        (new_epoch, _) = zk.get_controller_epoch() or (0, 0)
        assert new_epoch > epoch

    any_survivor = next(iter(survivors.values()))
    wait_until(lambda: (s := partition_state(any_survivor, "spread")) and all(p[0] in survivors for p in s),
               timeout=40, message="every partition led by a live broker")
    for leader, _epoch, replicas, isr in partition_state(any_survivor, "spread"):
        assert controller not in isr and leader in replicas

    # admin calls go through the new controller
    admin = AdminClient({"bootstrap.servers": bootstrap(survivors)})
    admin.create_topics([NewTopic("after", 2, 2)])["after"].result(30)
    wait_until(lambda: (s := partition_state(any_survivor, "after")) and len(s) == 2 and all(p[0] >= 0 for p in s),
               timeout=30, message="the new topic has leaders")


def test_a_topic_config_changed_through_one_broker_reaches_every_broker(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect, n=2)
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic("conf", 1, 2, config={"retention.ms": "3600000"})])["conf"].result(30)
    wait_until(lambda: all(topic_config(b, "conf", "retention.ms") == "3600000" for b in brokers.values()),
               timeout=30, message="both brokers read the creation's configs")
    res = ConfigResource("topic", "conf", set_config={"retention.ms": "7200000"})
    admin.alter_configs([res])[res].result(30)
    wait_until(lambda: topic_config(brokers[2], "conf", "retention.ms") == "7200000", timeout=30,
               message="the other broker sees the change")

    # a manual replica assignment is kept as given: its first replica is the preferred leader
    admin.create_topics([NewTopic("manual", num_partitions=2, replica_assignment=[[2, 1], [1, 2]])])["manual"].result(30)
    wait_until(lambda: [p[0] for p in partition_state(brokers[1], "manual")] == [2, 1], timeout=30,
               message="leaders are the first replicas of the assignment")
    bad = admin.create_topics([NewTopic("bad", num_partitions=1, replica_assignment=[[1, 7]])])["bad"]
    with pytest.raises(Exception, match="not registered"):
        bad.result(30)
