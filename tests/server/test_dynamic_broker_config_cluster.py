"""Dynamic broker configs in a 2-broker ZooKeeper cluster: the cluster-wide default set through broker 1
is stored in Kafka's /config/brokers/<default> and applied by broker 2; a per-broker value stays with its
broker; a restarted broker reads both levels back."""

from __future__ import annotations

import json
from typing import Callable

import dynamic_config_harness as single
import pytest
from broker_harness import BrokerProcess
from cluster_harness import start_cluster
from confluent_kafka.admin import AdminClient, NewTopic
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient

pytestmark = pytest.mark.integration


def _topic_retention(b: BrokerProcess) -> list[tuple[str, str | None, int]]:
    try:
        return single.describe_synonyms(b.bootstrap, 2, "dyn-c", "retention.ms")
    except ValueError:
        return []  # the broker has not learnt the topic yet


def test_cluster_default_set_on_one_broker_applies_on_every_broker(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect, n=2)
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic("dyn-c", 1, 2)])["dyn-c"].result(30)

    assert single.alter_cluster_default(brokers[1].bootstrap, log_retention_ms=("SET", "7200000"))[0] == "none"
    with ZkClient(zk_connect) as zk:
        got = zk.get_data("/config/brokers/<default>")
    assert got is not None and json.loads(got[0]) == {"version": 1, "config": {"log.retention.ms": "7200000"}}
    default = ("log.retention.ms", "7200000", 3)
    wait_until(lambda: _topic_retention(brokers[2])[:1] == [default], timeout=20,
               message="broker 2 applies the cluster-wide default")

    # broker 1's own value is its alone
    assert single.alter_cluster_default(brokers[1].bootstrap, name="1", log_retention_ms=("SET", "3600000"))[0] == "none"
    assert _topic_retention(brokers[1])[:2] == [("log.retention.ms", "3600000", 2), default]
    assert _topic_retention(brokers[2])[:1] == [default]

    brokers[2].restart()
    wait_until(lambda: _topic_retention(brokers[2])[:1] == [default], timeout=20,
               message="broker 2 reads the cluster-wide default back at start")
