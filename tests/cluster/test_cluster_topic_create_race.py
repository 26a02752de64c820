"""A topic creation that loses the race to another broker's (an auto-creating Metadata on a broker whose
metadata has not caught up with a CreateTopics made elsewhere) fails with TOPIC_ALREADY_EXISTS and leaves
the existing topic's configs in ZooKeeper as they were, as Kafka's check before its config write does."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import pytest
from zk_harness import zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.config import BrokerConfig
from tieredlog.errors import TopicAlreadyExistsError
from tieredlog.server.cluster_node import ClusterNode

pytestmark = pytest.mark.integration


@dataclass
class Membership:
    zk: ZkClient


def test_a_creation_that_lost_the_race_keeps_the_existing_topics_configs(zk_connect: str) -> None:  # noqa: F811
    with ZkClient(zk_connect) as zk:
        zk.set_topic_config("t", {"remote.storage.enable": "true", "segment.bytes": "1024"})
        zk.create_topic_assignment("t", TopicAssignment.of({0: [1]}, uuid.uuid4()))
        node = ClusterNode(BrokerConfig.from_props({"broker.id": "1"}), Membership(zk))  # type: ignore[arg-type]
        with pytest.raises(TopicAlreadyExistsError):
            asyncio.run(node.create_topic("t", {0: [1]}, uuid.uuid4(), {}))
        assert zk.get_topic_config("t") == {"remote.storage.enable": "true", "segment.bytes": "1024"}
        asyncio.run(node.create_topic("u", {0: [1]}, uuid.uuid4(), {"cleanup.policy": "compact"}))
        assert zk.get_topic_config("u") == {"cleanup.policy": "compact"}
