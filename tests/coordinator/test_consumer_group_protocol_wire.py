"""KIP-848 over a raw socket, every version: ConsumerGroupHeartbeat v0-1 and ConsumerGroupDescribe v0-1
advertised by default and not with group.coordinator.rebalance.protocols=classic, a join / heartbeat /
describe / leave per version, Kafka's errors for bad heartbeats, and a group id kept to one protocol."""

from __future__ import annotations

import uuid

import pytest
from broker_harness import BrokerProcess

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    CREATE_TOPICS,
    JOIN_GROUP,
    METADATA,
)

pytestmark = pytest.mark.integration

TOPIC = "wire"
NONE, INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, GROUP_ID_NOT_FOUND = 0, 42, 112, 69
INCONSISTENT_GROUP_PROTOCOL, FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID = 23, 110, 25
MEMBER_ID_REQUIRED = 79


@pytest.fixture(scope="module")
def broker(tmp_path_factory):  # type: ignore[no-untyped-def]
    b = BrokerProcess(tmp_path_factory.mktemp("kip848-wire") / "data",
                      {"offsets.topic.num.partitions": "2"}).start()
    try:
        with KafkaClient(b.bootstrap) as c:
            r = c.request(CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 4, "replication_factor": 1}],
                                          "timeout": 10000}, version=4)
            assert r.topics[0].error_code.value == 0
        yield b
    finally:
        b.stop()


def topic_id(c: KafkaClient) -> uuid.UUID:
    r = c.request(METADATA, {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False}, version=12)
    return r.topics[0].topic_id


def heartbeat(c: KafkaClient, v: int, group: str, member: str, epoch: int, **fields):  # type: ignore[no-untyped-def]
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000, "subscribed_topic_names": [TOPIC] if epoch == 0 else None,
            "server_assignor": None, "topic_partitions": [] if epoch == 0 else None}
    if v >= 1:
        body["subscribed_topic_regex"] = None
    body.update(fields)
    return c.request(CONSUMER_GROUP_HEARTBEAT, body, version=v)


def test_advertised_by_default(broker) -> None:  # type: ignore[no-untyped-def]
    with KafkaClient(broker.bootstrap) as c:
        assert c.versions[CONSUMER_GROUP_HEARTBEAT] == (0, 1)
        assert c.versions[CONSUMER_GROUP_DESCRIBE] == (0, 1)


def test_not_advertised_without_the_consumer_protocol(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = BrokerProcess(tmp_path / "data", {"group.coordinator.rebalance.protocols": "classic"}).start()
    try:
        with KafkaClient(b.bootstrap) as c:
            assert CONSUMER_GROUP_HEARTBEAT not in c.versions and CONSUMER_GROUP_DESCRIBE not in c.versions
    finally:
        b.stop()


@pytest.mark.parametrize("v", [0, 1])
def test_join_describe_leave(broker, v: int) -> None:  # type: ignore[no-untyped-def]
    group = f"wire-{v}"
    with KafkaClient(broker.bootstrap) as c:
        tid = topic_id(c)
        # v0 may leave the member id to the coordinator; v1 clients make their own
        member = "" if v == 0 else "member-one"
        r = heartbeat(c, v, group, member, 0)
        assert r.error_code.value == NONE and r.member_epoch == 1 and r.heartbeat_interval.total_seconds() == 5
        member = r.member_id
        assert member
        assert [(t.topic_id, list(t.partitions)) for t in r.assignment.topic_partitions] == [(tid, [0, 1, 2, 3])]
        again = heartbeat(c, v, group, member, 1)
        assert again.error_code.value == NONE and again.assignment is None  # nothing new to tell
        assert heartbeat(c, v, group, member, 7).error_code.value == FENCED_MEMBER_EPOCH
        d = c.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": [group, "nobody"],
                                                "include_authorized_operations": False}, version=v)
        g, missing = d.groups
        assert (g.error_code.value, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == \
            (NONE, "Stable", 1, 1, "uniform")
        assert [(m.member_id, m.member_epoch, list(m.subscribed_topic_names)) for m in g.members] == \
            [(member, 1, [TOPIC])]
        assert [(t.topic_name, list(t.partitions)) for t in g.members[0].assignment.topic_partitions] == \
            [(TOPIC, [0, 1, 2, 3])]
        assert missing.error_code.value == GROUP_ID_NOT_FOUND
        left = heartbeat(c, v, group, member, -1)
        assert left.error_code.value == NONE and left.member_epoch == -1
        assert heartbeat(c, v, group, member, 1).error_code.value == UNKNOWN_MEMBER_ID


def test_bad_heartbeats(broker) -> None:  # type: ignore[no-untyped-def]
    with KafkaClient(broker.bootstrap) as c:
        assert heartbeat(c, 1, "bad", "m", 0, rebalance_timeout=-1).error_code.value == INVALID_REQUEST
        assert heartbeat(c, 1, "bad", "", 0).error_code.value == INVALID_REQUEST
        assert heartbeat(c, 1, "bad", "m", 0, server_assignor="sticky").error_code.value == UNSUPPORTED_ASSIGNOR
        assert heartbeat(c, 1, "bad", "m", 0, subscribed_topic_names=None).error_code.value == INVALID_REQUEST


def test_one_protocol_per_group_id(broker) -> None:  # type: ignore[no-untyped-def]
    with KafkaClient(broker.bootstrap) as c:
        assert heartbeat(c, 1, "kip848", "m", 0).error_code.value == NONE
        join = c.request(JOIN_GROUP, {"group_id": "kip848", "session_timeout": 10000, "rebalance_timeout": 10000,
                                      "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                      "protocols": [{"name": "range", "metadata": b""}], "reason": None}, version=9)
        # a classic member may join a consumer group (KIP-848's online migration), with the consumer
        # protocol's embedded subscription: empty metadata is not one
        assert join.error_code.value == MEMBER_ID_REQUIRED
        join = c.request(JOIN_GROUP, {"group_id": "kip848", "session_timeout": 10000, "rebalance_timeout": 10000,
                                      "member_id": join.member_id, "group_instance_id": None,
                                      "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
                                      "reason": None}, version=9)
        assert join.error_code.value == INCONSISTENT_GROUP_PROTOCOL
        # a classic group with a member: not a consumer group
        classic = c.request(JOIN_GROUP, {"group_id": "classic", "session_timeout": 10000, "rebalance_timeout": 10000,
                                         "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                         "protocols": [{"name": "range", "metadata": b""}], "reason": None}, version=3)
        assert classic.error_code.value == NONE
        assert heartbeat(c, 1, "classic", "m", 0).error_code.value == GROUP_ID_NOT_FOUND
        d = c.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": ["classic"], "include_authorized_operations": False},
                      version=1)
        assert d.groups[0].error_code.value == GROUP_ID_NOT_FOUND
