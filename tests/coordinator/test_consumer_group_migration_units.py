"""Units of KIP-848's online migration: a classic member's ConsumerGroupMemberMetadataValue carries its
ClassicMemberMetadata in tagged field 0 (Kafka's layout) and reads back; the consumer protocol's codec
reads a subscription's owned partitions and writes an assignment a client reads."""

from __future__ import annotations

import asyncio
import io
import uuid
from typing import Any

from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as TopicPartitionV1
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.consumer_group import HeartbeatRequest, records
from tieredlog.coordinator.consumer_group.member import ClassicMemberMetadata
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.loader import load_records
from tieredlog.coordinator.storage import MemoryGroupStore
from tieredlog.coordinator.timer import ManualScheduler
from tieredlog.server.consumer_protocol import ConsumerProtocolCodec, subscribed_topics


def test_member_metadata_with_classic_metadata_round_trips() -> None:
    classic = ClassicMemberMetadata(6000, (("range", b"\x00\x01abc"), ("roundrobin", b"")))
    stored = records.StoredMemberMetadata(None, "rack-a", "client", "/127.0.0.1", ("t1", "t2"), None, 30000, None,
                                          classic)
    value = records.encode_member_metadata(stored)
    # the tagged-field section: one field, tag 0, its size, then the presence byte of the nullable struct
    tail = records.encode_member_metadata(records.StoredMemberMetadata(
        None, "rack-a", "client", "/127.0.0.1", ("t1", "t2"), None, 30000, None))
    assert value[:len(tail) - 1] == tail[:-1]
    assert value[len(tail) - 1:len(tail) + 1] == b"\x01\x00" and value[len(tail) + 2] == 1
    assert records.decode_member_metadata(value) == stored
    assert records.decode_member_metadata(tail).classic is None


def test_codec_reads_owned_partitions_and_writes_assignments() -> None:
    metadata = subscription({"a": [0, 2]}, topics=("a", "b"))
    codec = ConsumerProtocolCodec()
    sub = codec.subscription(metadata)
    assert sub is not None and sub.topics == ("a", "b") and sub.owned == {"a": frozenset({0, 2})}
    assert sub.rack_id is None
    data = codec.encode_assignment({"a": [1, 0], "b": [3]}, metadata)
    assert data[:2] == b"\x00\x01"
    assert codec.assignment(data) == {"a": frozenset({0, 1}), "b": frozenset({3})}
    assert codec.assignment(b"") == {}
    assert codec.assignment(b"\x00\x01\xff") is None
    assert codec.subscription(b"\xff\xff") is None


# -- the migration state machine, on a coordinator with a manual clock ----------------------------------

T1 = uuid.UUID(int=1)
TOPICS = {"t1": (T1, 6)}


def subscription(owned: dict[str, list[int]] | None = None, topics: tuple[str, ...] = ("t1",)) -> bytes:
    buf = io.BytesIO()
    buf.write((1).to_bytes(2, "big"))
    entity_writer(SubscriptionV1)(buf, SubscriptionV1(topics=topics, user_data=None, owned_partitions=tuple(
        TopicPartitionV1(topic=TopicName(t), partitions=tuple(i32(p) for p in ps)) for t, ps in (owned or {}).items())))
    return buf.getvalue()


def coordinator(policy: str = "bidirectional", store: MemoryGroupStore | None = None
                ) -> tuple[GroupCoordinator, ManualScheduler]:
    clock = ManualScheduler()
    coord = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0, consumer_migration_policy=policy), clock,
                             store or MemoryGroupStore(), subscriptions=subscribed_topics,
                             protocol=ConsumerProtocolCodec())
    coord.consumer.topics = lambda: TOPICS
    return coord, clock


async def classic_group(coord: GroupCoordinator, clock: ManualScheduler) -> str:
    """One classic member "c" holding all of t1: a Stable classic group "g"."""
    await coord.start()
    joining = coord.join_group("g", "", None, "client", "/h", 10_000, 10_000, "consumer",
                               [("range", subscription())], False)
    clock.advance(0)
    joined = await joining
    assert joined.error == ErrorCode.none
    codec = ConsumerProtocolCodec()
    synced = await coord.sync_group("g", joined.generation_id, joined.member_id, None, "consumer", "range",
                                    {joined.member_id: codec.encode_assignment({"t1": range(6)}, subscription())})
    assert synced.error == ErrorCode.none
    return joined.member_id


def heartbeat(coord: GroupCoordinator, member: str, epoch: int, owned: dict | None = None) -> Any:
    fields: dict[str, Any] = {}
    if epoch == 0:
        fields = {"subscribed_topic_names": ("t1",), "rebalance_timeout_ms": 30_000}
        owned = {}
    return coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id=member, member_epoch=epoch,
                                                           owned=owned, **fields))


def test_upgrade_refused_by_the_policy() -> None:
    async def body() -> None:
        coord, clock = coordinator("downgrade")
        await classic_group(coord, clock)
        refused = await heartbeat(coord, "m", 0)
        assert refused.error == ErrorCode.group_id_not_found
        assert "g" not in coord.state.consumer_groups and len(coord.groups["g"].members) == 1
    asyncio.run(body())


def test_upgrade_serve_classic_member_then_downgrade() -> None:
    async def body() -> None:
        store = MemoryGroupStore()
        coord, clock = coordinator(store=store)
        c = await classic_group(coord, clock)
        generation = coord.groups["g"].generation_id
        m = await heartbeat(coord, "m", 0)
        # upgraded: c keeps all six partitions at its generation; m waits for its share
        assert m.error == ErrorCode.none and m.assignment == {}
        group = coord.state.consumer_groups["g"]
        assert group.members[c].member_epoch == generation and group.members[c].assigned == {T1: frozenset(range(6))}
        assert not coord.groups["g"].members
        # c is told to rejoin; it stays at its epoch with the partitions it keeps (it must revoke first)
        assert coord.heartbeat("g", c, None, generation) == ErrorCode.rebalance_in_progress
        rejoined = await coord.join_group("g", c, None, "client", "/h", 10_000, 10_000, "consumer",
                                          [("range", subscription())], True)
        assert rejoined.error == ErrorCode.none and rejoined.generation_id == generation
        assert rejoined.leader_id == "" and rejoined.members == []
        synced = await coord.sync_group("g", rejoined.generation_id, c, None, "consumer", "range", {})
        mine = ConsumerProtocolCodec().assignment(synced.assignment)
        assert synced.error == ErrorCode.none and mine is not None and len(mine["t1"]) == 3
        # once it says it owns only those (a cooperative client's subscription), it moves to the group epoch
        assert coord.heartbeat("g", c, None, generation) == ErrorCode.rebalance_in_progress
        rejoined = await coord.join_group("g", c, None, "client", "/h", 10_000, 10_000, "consumer",
                                          [("range", subscription({"t1": sorted(mine["t1"])}))], True)
        assert rejoined.error == ErrorCode.none and rejoined.generation_id == group.group_epoch
        synced = await coord.sync_group("g", rejoined.generation_id, c, None, "consumer", "range", {})
        assert ConsumerProtocolCodec().assignment(synced.assignment) == mine
        assert coord.heartbeat("g", c, None, rejoined.generation_id) == ErrorCode.none
        # DescribeGroups shows the classic member as a classic group would
        described = {m.member_id: m for m in coord.describe_group("g").members}
        assert described[c].assignment == synced.assignment and described[c].metadata
        assert described["m"].metadata == b""
        m2 = await heartbeat(coord, "m", m.member_epoch)
        assert m2.assignment == {T1: frozenset(range(6)) - mine["t1"]}
        # a commit of c with its generation is taken, with an older one ILLEGAL_GENERATION
        assert coord.commit_offsets("g", c, None, generation, {("t1", 0): (5, -1, "")}) \
            == {("t1", 0): ErrorCode.illegal_generation}
        # what a new coordinator would load: c is a classic member of the consumer group
        loaded: dict = {}
        load_records(store.replay(), clock.wall_clock_ms(), loaded)
        assert loaded["g"].members[c].classic.session_timeout_ms == 10_000
        assert loaded["g"].members["m"].classic is None
        # m leaves: only a classic member is left, the group is classic again and rebalances
        left = await heartbeat(coord, "m", -1)
        assert left.error == ErrorCode.none and "g" not in coord.state.consumer_groups
        classic = coord.groups["g"]
        assert list(classic.members) == [c] and classic.state == GroupState.PREPARING_REBALANCE
        assert classic.generation_id == group.group_epoch
        again = await coord.join_group("g", c, None, "client", "/h", 10_000, 10_000, "consumer",
                                       [("range", subscription())], True)
        assert again.error == ErrorCode.none and again.leader_id == c
        loaded = {}
        groups = load_records(store.replay(), clock.wall_clock_ms(), loaded)
        assert not loaded and list(groups["g"].members) == [c]
    asyncio.run(body())


def test_regex_resolution_is_stored_as_kafka_4_does() -> None:
    async def body() -> None:
        store = MemoryGroupStore()
        coord, clock = coordinator(store=store)
        topics = dict(TOPICS)
        coord.consumer.topics = lambda: topics
        await coord.start()

        def regex_records() -> list[tuple[bytes, bytes | None]]:
            return [(k, v) for k, v, _ in store.replay() if k[:2] == b"\x00\x10"]

        joined = await coord.consumer_group_heartbeat(HeartbeatRequest(
            group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=30_000, subscribed_topic_regex="t.*",
            owned={}))
        # resolved in a later turn, as Kafka's executor does: nothing yet, then a new group epoch
        assert joined.assignment == {} and not regex_records()
        clock.advance(0)
        [(key, value)] = regex_records()
        assert key == records.encode_key(records.REGULAR_EXPRESSION, "g", "t.*")
        assert value is not None and records.decode_resolved_regex(value).topics == {"t1"}
        joined = await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m",
                                                                       member_epoch=joined.member_epoch))
        assert joined.assignment == {T1: frozenset(range(6))}
        # a new matching topic: resolved again once the last resolution is 10 s old, then the member gets it
        topics["t2"] = (uuid.UUID(int=2), 2)
        clock.advance(5_000)
        soon = await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m",
                                                                     member_epoch=joined.member_epoch))
        clock.advance(0)
        assert soon.member_epoch == joined.member_epoch and len(regex_records()) == 1
        clock.advance(5_001)
        await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m",
                                                              member_epoch=joined.member_epoch))
        clock.advance(0)
        again = await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m",
                                                                      member_epoch=joined.member_epoch))
        assert again.member_epoch == joined.member_epoch + 1
        assert again.assignment is not None and again.assignment[uuid.UUID(int=2)] == frozenset({0, 1})
        latest = regex_records()[-1][1]
        assert latest is not None and records.decode_resolved_regex(latest).topics == {"t1", "t2"}
        loaded: dict = {}
        load_records(store.replay(), clock.wall_clock_ms(), loaded)
        assert loaded["g"].resolved_regexes["t.*"].topics == {"t1", "t2"}
        # the only member leaves: nobody uses the regex any more, its record is deleted
        await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m", member_epoch=-1))
        assert regex_records()[-1] == (key, None)
        loaded = {}
        load_records(store.replay(), clock.wall_clock_ms(), loaded)
        assert loaded["g"].resolved_regexes == {}
    asyncio.run(body())


def test_static_members_swap_protocols_in_place() -> None:
    async def body() -> None:
        coord, clock = coordinator()
        await coord.start()
        codec = ConsumerProtocolCodec()
        # a classic static member holding all of t1
        joining = coord.join_group("g", "", "i1", "client", "/h", 10_000, 10_000, "consumer",
                                   [("range", subscription())], True)
        clock.advance(0)
        joined = await joining
        await coord.sync_group("g", joined.generation_id, joined.member_id, "i1", "consumer", "range",
                               {joined.member_id: codec.encode_assignment({"t1": range(6)}, subscription())})
        # restarted with the consumer protocol, same instance id: it takes the classic member's place at once
        # (a classic member never says it left), with its partitions
        m = await coord.consumer_group_heartbeat(HeartbeatRequest(
            group_id="g", member_id="m", member_epoch=0, instance_id="i1", rebalance_timeout_ms=30_000,
            subscribed_topic_names=("t1",), owned={}))
        assert m.error == ErrorCode.none and m.assignment == {T1: frozenset(range(6))}
        group = coord.state.consumer_groups["g"]
        assert list(group.members) == ["m"] and group.members["m"].classic is None
        # a classic static member joins; then m leaves as a static member and its instance comes back
        # classic: the group is classic again at once, without a rebalance, the returning member with m's share
        other = await coord.join_group("g", "", "i2", "client", "/h", 10_000, 10_000, "consumer",
                                       [("range", subscription())], True)
        assert other.error == ErrorCode.none
        m2 = await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m",
                                                                   member_epoch=m.member_epoch))
        await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m",
                                                              member_epoch=m2.member_epoch, instance_id="i1"))
        m_target = group.target["m"]
        await coord.consumer_group_heartbeat(HeartbeatRequest(group_id="g", member_id="m", member_epoch=-2,
                                                              instance_id="i1"))
        back = await coord.join_group("g", "", "i1", "client", "/h", 10_000, 10_000, "consumer",
                                      [("range", subscription())], True)
        assert back.error == ErrorCode.none and "g" not in coord.state.consumer_groups
        classic = coord.groups["g"]
        assert classic.state == GroupState.STABLE and back.generation_id == classic.generation_id
        assert sorted(classic.members) == sorted([back.member_id, other.member_id])
        synced = await coord.sync_group("g", back.generation_id, back.member_id, "i1", "consumer", "range", {})
        assert synced.error == ErrorCode.none
        assert codec.assignment(synced.assignment) == {"t1": m_target[T1]}
    asyncio.run(body())
