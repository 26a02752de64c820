"""Every version of every group API against a real broker subprocess, over a raw Kafka socket.

Each JoinGroup version runs a whole one-member lifecycle (join, sync, heartbeat, commit, fetch, leave)
so the version-generic request reading and response building is exercised version by version.
"""

from __future__ import annotations

import pytest
from broker_harness import BrokerProcess

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import (
    CREATE_TOPICS,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)

pytestmark = pytest.mark.integration

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
}
TOPIC = "proto-topic"
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x0b" + TOPIC.encode() + b"\xff\xff\xff\xff"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("groups-proto") / "data", OVERRIDES).start()
    try:
        with KafkaClient(b.bootstrap) as c:
            r = c.request(CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 1}],
                                          "timeout": 10000}, version=4)
            assert r.topics[0].error_code.value == 0
            yield c
    finally:
        b.stop()


def code(x) -> int:
    return x.error_code.value


@pytest.mark.parametrize("v", range(0, 7))
def test_find_coordinator_returns_this_broker(client, v):
    if v >= 4:
        r = client.request(FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["a", "b"]}, version=v)
        assert [(c.key, code(c), c.port) for c in r.coordinators] == [("a", 0, client.port), ("b", 0, client.port)]
    else:
        r = client.request(FIND_COORDINATOR, {"key": "a", "key_type": 0}, version=v)
        assert code(r) == 0 and r.port == client.port and r.host == client.host


@pytest.mark.parametrize("v", range(1, 7))  # v0 has no key type: always a group
def test_find_coordinator_for_a_transactional_id_returns_this_broker(client, v):
    # a broker alone coordinates every transactional id; an empty one is refused as Kafka does
    if v >= 4:
        r = client.request(FIND_COORDINATOR, {"key_type": 1, "coordinator_keys": ["tx", ""]}, version=v)
        assert [(c.key, code(c), c.port) for c in r.coordinators] == [("tx", 0, client.port), ("", 42, -1)]
    else:
        entry = client.request(FIND_COORDINATOR, {"key": "tx", "key_type": 1}, version=v)
        assert code(entry) == 0 and entry.port == client.port and entry.host == client.host


@pytest.mark.parametrize("v", range(0, 10))
def test_join_group_lifecycle_per_version(client, v):
    group = f"proto-v{v}"
    join = {"group_id": group, "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}
    r = client.request(JOIN_GROUP, join, version=v)
    if v >= 4:
        assert code(r) == 79 and r.member_id  # MEMBER_ID_REQUIRED with the id to use
        r = client.request(JOIN_GROUP, {**join, "member_id": r.member_id}, version=v)
    assert code(r) == 0 and r.generation_id == 1 and r.leader == r.member_id and r.protocol_name == "range"
    assert [(m.member_id, bytes(m.metadata)) for m in r.members] == [(r.member_id, SUBSCRIPTION)]
    member, gen = r.member_id, r.generation_id

    sv = min(v, 5)
    s = client.request(SYNC_GROUP, {"group_id": group, "generation_id": gen, "member_id": member,
                                    "protocol_type": "consumer", "protocol_name": "range",
                                    "assignments": [{"member_id": member, "assignment": b"plan"}]}, version=sv)
    assert code(s) == 0 and bytes(s.assignment) == b"plan"

    hb = {"group_id": group, "generation_id": gen, "member_id": member}
    assert code(client.request(HEARTBEAT, hb, version=min(v, 4))) == 0
    assert code(client.request(HEARTBEAT, {**hb, "generation_id": gen + 1}, version=min(v, 4))) == 22

    cv = max(2, min(v, 9))
    c = client.request(OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": gen, "member_id": member,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 1, "committed_offset": 10 + v,
                                                   "committed_leader_epoch": 0, "committed_metadata": "md"}]},
                   {"name": "no-such-topic", "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
    }, version=cv)
    assert {(t.name, p.partition_index): p.error_code.value for t in c.topics for p in t.partitions} == {
        (TOPIC, 1): 0, ("no-such-topic", 0): 3}

    fv = max(1, min(v, 9))
    topics = [{"name": TOPIC, "partition_indexes": [0, 1]}]
    if fv >= 8:
        f = client.request(OFFSET_FETCH, {"groups": [{"group_id": group, "topics": topics}]}, version=fv)
        assert code(f.groups[0]) == 0
        parts = f.groups[0].topics[0].partitions
    else:
        f = client.request(OFFSET_FETCH, {"group_id": group, "topics": topics}, version=fv)
        parts = f.topics[0].partitions
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in parts] == [(0, -1, ""), (1, 10 + v, "md")]

    lv = min(v, 5)
    if lv >= 3:
        left = client.request(LEAVE_GROUP, {"group_id": group, "members": [{"member_id": member}]}, version=lv)
        assert code(left) == 0 and [code(m) for m in left.members] == [0]
    else:
        left = client.request(LEAVE_GROUP, {"group_id": group, "member_id": member}, version=lv)
        assert code(left) == 0
    assert code(client.request(HEARTBEAT, hb, version=min(v, 4))) == 25  # gone: UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("v", range(5, 10))
def test_static_member_rejoin_per_version(client, v):
    group = f"static-v{v}"
    join = {"group_id": group, "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "group_instance_id": "inst-1", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}
    r = client.request(JOIN_GROUP, join, version=v)  # a static member gets no MEMBER_ID_REQUIRED round
    assert code(r) == 0 and r.member_id.startswith("inst-1-") and r.leader == r.member_id
    old, gen = r.member_id, r.generation_id
    s = client.request(SYNC_GROUP, {"group_id": group, "generation_id": gen, "member_id": old,
                                    "group_instance_id": "inst-1",
                                    "assignments": [{"member_id": old, "assignment": b"plan"}]}, version=min(v, 5))
    assert code(s) == 0

    again = client.request(JOIN_GROUP, join, version=v)  # restarted: same instance, unknown member id
    new = again.member_id
    assert code(again) == 0 and new != old and again.generation_id == gen
    if v >= 9:  # the leader is told it leads but must not assign again
        assert again.skip_assignment and again.leader == new and [m.member_id for m in again.members] == [new]
    else:
        assert again.leader == old and list(again.members) == []
    s = client.request(SYNC_GROUP, {"group_id": group, "generation_id": gen, "member_id": new,
                                    "group_instance_id": "inst-1", "assignments": []}, version=min(v, 5))
    assert code(s) == 0 and bytes(s.assignment) == b"plan"
    hb = {"group_id": group, "generation_id": gen, "group_instance_id": "inst-1"}
    assert code(client.request(HEARTBEAT, {**hb, "member_id": old}, version=min(v, 4))) == 82  # FENCED_INSTANCE_ID
    assert code(client.request(HEARTBEAT, {**hb, "member_id": new}, version=min(v, 4))) == 0

    d = client.request(DESCRIBE_GROUPS, {"groups": [group]}, version=5)
    assert [(m.member_id, m.group_instance_id) for m in d.groups[0].members] == [(new, "inst-1")]
    left = client.request(LEAVE_GROUP, {"group_id": group, "members": [
        {"member_id": old, "group_instance_id": "inst-1"}, {"member_id": "", "group_instance_id": "inst-1"},
        {"member_id": "", "group_instance_id": "inst-2"}]}, version=min(v, 5))
    assert code(left) == 0 and [(m.member_id, m.group_instance_id, code(m)) for m in left.members] == [
        (old, "inst-1", 82), ("", "inst-1", 0), ("", "inst-2", 25)]
    d = client.request(DESCRIBE_GROUPS, {"groups": [group]}, version=5)
    assert d.groups[0].group_state == "Empty" and list(d.groups[0].members) == []


@pytest.mark.parametrize("v", range(3, 6))
def test_describe_groups_authorized_operations(client, v):
    group = f"authz-v{v}"
    c = client.request(OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                       "topics": [{"name": TOPIC, "partitions": [
                                           {"partition_index": 0, "committed_offset": 1}]}]}, version=8)
    assert c.topics[0].partitions[0].error_code.value == 0
    for asked, expected in ((True, 328), (False, -(2**31))):  # READ, DELETE, DESCRIBE as Kafka's bit field
        d = client.request(DESCRIBE_GROUPS, {"groups": [group, "authz-none"], "include_authorized_operations": asked},
                           version=v)
        assert [g.authorized_operations for g in d.groups] == [expected, expected]


@pytest.mark.parametrize("v", range(0, 6))
def test_list_and_describe_groups_per_version(client, v):
    group = f"admin-v{v}"
    c = client.request(OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                       "topics": [{"name": TOPIC, "partitions": [
                                           {"partition_index": 0, "committed_offset": 5}]}]}, version=2)
    assert c.topics[0].partitions[0].error_code.value == 0
    body = {"states_filter": ["Empty"]} if v >= 4 else {}
    listed = client.request(LIST_GROUPS, body, version=v)
    assert code(listed) == 0 and group in {g.group_id for g in listed.groups}
    if v >= 4:
        assert all(g.group_state == "Empty" for g in listed.groups)
        none = client.request(LIST_GROUPS, {"states_filter": ["Stable"]}, version=v)
        assert group not in {g.group_id for g in none.groups}
    d = client.request(DESCRIBE_GROUPS, {"groups": [group, "never-seen"]}, version=v)
    assert [(g.group_id, code(g), g.group_state) for g in d.groups] == [(group, 0, "Empty"), ("never-seen", 0, "Dead")]


@pytest.mark.parametrize("v", range(0, 3))
def test_delete_groups_per_version(client, v):
    group = f"delete-v{v}"
    client.request(OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                   "topics": [{"name": TOPIC, "partitions": [
                                       {"partition_index": 0, "committed_offset": 5}]}]}, version=2)
    r = client.request(DELETE_GROUPS, {"groups_names": [group, "missing-group"]}, version=v)
    assert {x.group_id: code(x) for x in r.results} == {group: 0, "missing-group": 69}
    f = client.request(OFFSET_FETCH, {"group_id": group, "topics": None}, version=2)
    assert f.topics == ()


def test_delete_groups_refuses_a_group_with_members(client):
    group = "busy-group"
    join = {"group_id": group, "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}
    r = client.request(JOIN_GROUP, join, version=3)
    assert code(r) == 0
    d = client.request(DELETE_GROUPS, {"groups_names": [group]}, version=2)
    assert code(d.results[0]) == 68  # NON_EMPTY_GROUP
    # OffsetDelete while the (Stable, subscribed to TOPIC) group has a member
    client.request(SYNC_GROUP, {"group_id": group, "generation_id": 1, "member_id": r.member_id,
                                "assignments": [{"member_id": r.member_id, "assignment": b""}]}, version=3)
    client.request(OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": 1, "member_id": r.member_id,
                                   "topics": [{"name": TOPIC, "partitions": [
                                       {"partition_index": 0, "committed_offset": 3}]}]}, version=2)
    od = client.request(OFFSET_DELETE, {"group_id": group, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0}]}]}, version=0)
    assert code(od) == 0 and od.topics[0].partitions[0].error_code.value == 86  # GROUP_SUBSCRIBED_TO_TOPIC
    assert code(client.request(OFFSET_DELETE, {"group_id": "nope", "topics": []}, version=0)) == 69


def test_bad_join_requests_get_kafka_errors(client):
    base = {"group_id": "bad", "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    assert code(client.request(JOIN_GROUP, {**base, "session_timeout": 10}, version=5)) == 26
    assert code(client.request(JOIN_GROUP, {**base, "group_id": ""}, version=5)) == 24
    assert code(client.request(JOIN_GROUP, {**base, "protocols": []}, version=5)) == 23
    assert code(client.request(JOIN_GROUP, {**base, "member_id": "ghost"}, version=5)) == 25
    # The broker keeps serving on the same connection.
    assert code(client.request(FIND_COORDINATOR, {"key": "bad"}, version=1)) == 0
