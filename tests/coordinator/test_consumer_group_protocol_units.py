"""KIP-848 consumer groups without I/O: the assignors, the reconciliation state machine and the heartbeat
rules (fencing, static members, leaving, session and revocation timeouts, offset commits with member
epochs, records rebuilt after a restart), driven by a hand-stepped clock."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.consumer_group import HeartbeatRequest, HeartbeatResult
from tieredlog.coordinator.consumer_group.assignors import RangeAssignor, UniformAssignor
from tieredlog.coordinator.consumer_group.member import MemberState
from tieredlog.coordinator.consumer_group.reconciliation import MemberAssignment, reconcile
from tieredlog.coordinator.consumer_group.regex import InvalidRegex, compile_topic_regex
from tieredlog.coordinator.consumer_group.regex_refresh import RESOLVE_SLICE, RegexResolution
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.storage import MemoryGroupStore
from tieredlog.coordinator.timer import ManualScheduler
from tieredlog.server.consumer_protocol import subscribed_topics

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"t1": (T1, 6), "t2": (T2, 3), "other": (uuid.UUID(int=3), 2)}


def total(assignment: dict) -> int:
    return sum(len(ps) for ps in assignment.values())


# -- assignors ----------------------------------------------------------------------------------------


def test_uniform_balances_and_sticks() -> None:
    subs = {m: frozenset({T1, T2}) for m in ("a", "b", "c")}
    counts = {T1: 6, T2: 3}
    first = UniformAssignor().assign(subs, counts, {})
    assert sorted(total(a) for a in first.values()) == [3, 3, 3]
    everything = {(t, p) for a in first.values() for t, ps in a.items() for p in ps}
    assert len(everything) == 9
    # c leaves: a and b keep all they had and share c's partitions
    second = UniformAssignor().assign({m: subs[m] for m in ("a", "b")}, counts, first)
    assert sorted(total(a) for a in second.values()) == [4, 5]
    for m in ("a", "b"):
        for t, ps in first[m].items():
            assert ps <= second[m].get(t, frozenset())


def test_uniform_mixed_subscriptions_per_topic() -> None:
    subs = {"a": frozenset({T1}), "b": frozenset({T1, T2})}
    out = UniformAssignor().assign(subs, {T1: 6, T2: 3}, {})
    assert T2 not in out["a"] and len(out["b"][T2]) == 3
    assert len(out["a"][T1]) == 3 and len(out["b"][T1]) == 3


def test_range_is_contiguous_per_topic() -> None:
    subs = {"b": frozenset({T1, T2}), "a": frozenset({T1, T2})}
    out = RangeAssignor().assign(subs, {T1: 5, T2: 3}, {})
    assert out["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1})}
    assert out["b"] == {T1: frozenset({3, 4}), T2: frozenset({2})}


# -- reconciliation -----------------------------------------------------------------------------------


def state(epoch: int, assigned: dict, pending: dict | None = None, st: MemberState = MemberState.STABLE,
          previous: int = -1) -> MemberAssignment:
    return MemberAssignment(epoch, previous, st, assigned, pending or {})


def test_revoke_before_epoch_moves() -> None:
    current = state(1, {T1: frozenset({0, 1, 2})})
    nxt = reconcile(current, 2, {T1: frozenset({0, 1})}, None, lambda t, p: False)
    assert nxt.state is MemberState.UNREVOKED_PARTITIONS and nxt.member_epoch == 1
    assert nxt.assigned == {T1: frozenset({0, 1})} and nxt.pending_revocation == {T1: frozenset({2})}
    # still owning partition 2: nothing moves
    assert reconcile(nxt, 2, {T1: frozenset({0, 1})}, {T1: frozenset({0, 1, 2})}, lambda t, p: False) == nxt
    done = reconcile(nxt, 2, {T1: frozenset({0, 1})}, {T1: frozenset({0, 1})}, lambda t, p: False)
    assert done.state is MemberState.STABLE and done.member_epoch == 2 and done.previous_member_epoch == 1
    assert done.pending_revocation == {}


def test_unreleased_partitions_wait_for_their_owner() -> None:
    held = {(T1, 3)}
    current = state(1, {T1: frozenset({0})})
    nxt = reconcile(current, 2, {T1: frozenset({0, 3, 4})}, None, lambda t, p: (t, p) in held)
    assert nxt.state is MemberState.UNRELEASED_PARTITIONS and nxt.member_epoch == 2
    assert nxt.assigned == {T1: frozenset({0, 4})}
    held.clear()
    later = reconcile(nxt, 2, {T1: frozenset({0, 3, 4})}, None, lambda t, p: False)
    assert later.state is MemberState.STABLE and later.assigned == {T1: frozenset({0, 3, 4})}


# -- the heartbeat state machine ---------------------------------------------------------------------


class Harness:
    def __init__(self, store: MemoryGroupStore | None = None, **config: object) -> None:
        self.clock = ManualScheduler()
        self.store = store or MemoryGroupStore()
        settings: dict = dict(consumer_session_timeout_ms=45_000)
        settings.update(config)
        self.coord = GroupCoordinator(GroupConfig(**settings), self.clock, self.store,
                                      subscriptions=subscribed_topics)
        self.coord.consumer.topics = lambda: TOPICS

    async def start(self) -> "Harness":
        await self.coord.start()
        return self

    async def hb(self, member: str, epoch: int, owned: dict | None = None, group: str = "g",
                 **fields: object) -> HeartbeatResult:
        if epoch == 0:
            fields.setdefault("subscribed_topic_names", ("t1",))
            fields.setdefault("rebalance_timeout_ms", 30_000)
            owned = {} if owned is None else owned
        return await self.coord.consumer_group_heartbeat(
            HeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, owned=owned, **fields))  # type: ignore[arg-type]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_join_revoke_then_assign() -> None:
    async def body() -> None:
        h = await Harness().start()
        a = await h.hb("a", 0)
        assert a.error == ErrorCode.none and a.member_epoch == 1 and a.assignment == {T1: frozenset(range(6))}
        b = await h.hb("b", 0)
        # b's partitions are still a's: b moves to epoch 2 with nothing yet
        assert b.member_epoch == 2 and b.assignment == {}
        a2 = await h.hb("a", 1, owned={T1: frozenset(range(6))})
        assert a2.member_epoch == 1 and a2.assignment is not None and total(a2.assignment) == 3
        kept = a2.assignment[T1]
        assert (await h.hb("b", 2)).assignment is None  # a has not revoked yet
        a3 = await h.hb("a", 1, owned={T1: kept})
        assert a3.member_epoch == 2
        b2 = await h.hb("b", 2)
        assert b2.assignment == {T1: frozenset(range(6)) - kept}
        describe = h.coord.consumer_group_describe("g")
        assert describe.state == "Stable" and describe.group_epoch == 2 and describe.assignment_epoch == 2
    run(body())


def test_fencing_and_unknown_members() -> None:
    async def body() -> None:
        h = await Harness().start()
        await h.hb("a", 0)
        assert (await h.hb("a", 5)).error == ErrorCode.fenced_member_epoch
        assert (await h.hb("zz", 1)).error == ErrorCode.unknown_member_id
        assert (await h.hb("a", 1, group="nope")).error == ErrorCode.unknown_member_id
        bad = await h.hb("b", 0, subscribed_topic_regex="(?=x)t1", subscribed_topic_names=None)
        assert bad.error == ErrorCode.invalid_regular_expression
        assert (await h.hb("b", 0, server_assignor="sticky")).error == ErrorCode.unsupported_assignor
        left = await h.hb("a", -1)
        assert left.member_epoch == -1 and h.coord.consumer_group_describe("g").state == "Empty"
    run(body())


def test_group_max_size() -> None:
    async def body() -> None:
        h = await Harness(consumer_max_size=1).start()
        await h.hb("a", 0)
        assert (await h.hb("b", 0)).error == ErrorCode.group_max_size_reached
    run(body())


def test_static_member_leaves_and_comes_back() -> None:
    async def body() -> None:
        h = await Harness().start()
        first = await h.hb("a", 0, instance_id="i1")
        assert first.member_epoch == 1
        assert (await h.hb("a2", 0, instance_id="i1")).error == ErrorCode.unreleased_instance_id
        assert (await h.hb("a", -2, instance_id="i1")).member_epoch == -2
        back = await h.hb("a2", 0, instance_id="i1")
        # same assignment, no rebalance of the group
        assert back.error == ErrorCode.none and back.assignment == first.assignment
        assert h.coord.consumer_group_describe("g").group_epoch == 1
        assert (await h.hb("a", 1, instance_id="i1")).error in (ErrorCode.unknown_member_id,
                                                               ErrorCode.fenced_instance_id)
    run(body())


def test_session_and_revocation_timeouts() -> None:
    async def body() -> None:
        h = await Harness(consumer_session_timeout_ms=10_000).start()
        await h.hb("a", 0, rebalance_timeout_ms=5_000)
        await h.hb("b", 0)
        a = await h.hb("a", 1, owned={T1: frozenset(range(6))})
        assert a.member_epoch == 1  # must revoke three partitions
        h.clock.advance(5_001)  # a never revokes within its rebalance timeout
        assert "a" not in h.coord.state.consumer_groups["g"].members
        assert (await h.hb("a", 1)).error == ErrorCode.unknown_member_id
        b = await h.hb("b", 2)
        assert b.assignment == {T1: frozenset(range(6))}
        h.clock.advance(10_001)
        assert not h.coord.state.consumer_groups["g"].members
    run(body())


def test_offset_commit_uses_member_epoch() -> None:
    async def body() -> None:
        h = await Harness().start()
        await h.hb("a", 0)
        commit = h.coord.commit_offsets
        assert commit("g", "a", None, 1, {("t1", 0): (5, -1, "")}) == {("t1", 0): ErrorCode.none}
        assert commit("g", "a", None, 0, {("t1", 0): (6, -1, "")}) == {("t1", 0): ErrorCode.stale_member_epoch}
        assert commit("g", "x", None, 1, {("t1", 0): (6, -1, "")}) == {("t1", 0): ErrorCode.unknown_member_id}
        code, fetched = h.coord.fetch_offsets("g", [("t1", 0)])
        assert fetched[("t1", 0)] is not None and fetched[("t1", 0)].offset == 5
    run(body())


def test_classic_and_consumer_groups_keep_apart() -> None:
    async def body() -> None:
        h = await Harness().start()
        await h.hb("a", 0)
        joined = await h.coord.join_group("g", "", None, "c", "/h", 10_000, 10_000, "consumer",
                                          [("range", b"")], require_known_member_id=True)
        assert joined.error == ErrorCode.inconsistent_group_protocol
        assert h.coord.heartbeat("g", "a", None, 1) == ErrorCode.unknown_member_id
        assert h.coord.delete_groups(["g"]) == {"g": ErrorCode.non_empty_group}
        await h.hb("a", -1)
        assert h.coord.delete_groups(["g"]) == {"g": ErrorCode.none}
    run(body())


def test_records_rebuild_the_group_after_a_restart() -> None:
    async def body() -> None:
        store = MemoryGroupStore()
        h = await Harness(store).start()
        a = await h.hb("a", 0, subscribed_topic_regex="t[12]", subscribed_topic_names=None)
        assert a.assignment == {}  # the regex is resolved in a later turn, as Kafka does
        h.clock.advance(0)
        a = await h.hb("a", a.member_epoch, owned={})
        assert total(a.assignment or {}) == 9 and a.member_epoch == 2
        await h.hb("b", 0, instance_id="s1", subscribed_topic_names=("t1", "t2"))
        h.coord.commit_offsets("g", "a", None, 2, {("t1", 0): (7, -1, "")})
        before = h.coord.consumer_group_describe("g")
        await h.coord.shutdown()
        again = await Harness(store).start()
        after = again.coord.consumer_group_describe("g")
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert {m.member.member_id: (m.member.member_epoch, m.member.assigned, m.target) for m in after.members} == \
            {m.member.member_id: (m.member.member_epoch, m.member.assigned, m.target) for m in before.members}
        assert after.members[0].member.subscribed_topic_regex in ("t[12]", None)
        assert again.coord.fetch_offsets("g", [("t1", 0)])[1][("t1", 0)].offset == 7  # type: ignore[union-attr]
        # a member carries on at the epoch it had
        assert (await again.hb("a", 2, owned=None)).error == ErrorCode.none
    run(body())


def test_regex_subset() -> None:
    assert compile_topic_regex("orders-.*").fullmatch("orders-eu")
    for bad in ("(?=a)", "(a)\\1", "a++", "(?>a)", "x" * 300, "("):
        with pytest.raises(InvalidRegex):
            compile_topic_regex(bad)


def test_cluster_coordinator_loads_consumer_groups_on_election(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore
    from tieredlog.log.config import LogConfig
    from tieredlog.log.unified_log import UnifiedLog

    partitions = 3
    config = LogConfig().with_overrides({"cleanup.policy": "compact"})
    logs = {p: UnifiedLog(tmp_path / f"{OFFSETS_TOPIC}-{p}", config) for p in range(partitions)}
    gid = "cluster-group"
    partition = LogGroupStore(logs.get, partitions).partition_for(gid)

    async def body() -> None:
        # a former leader's group, in the partition's log
        writer = Harness(LogGroupStore(logs.get, partitions))  # type: ignore[arg-type]
        await writer.start()
        joined = await writer.hb("a", 0, group=gid)
        await writer.coord.shutdown()
        clock = ManualScheduler()
        coord = GroupCoordinator.for_cluster(GroupConfig(), clock, LogGroupStore(logs.get, partitions),
                                             subscriptions=subscribed_topics)
        coord.consumer.topics = lambda: TOPICS
        await coord.start()
        request = HeartbeatRequest(group_id=gid, member_id="a", member_epoch=joined.member_epoch, owned=None)
        assert (await coord.consumer_group_heartbeat(request)).error == ErrorCode.not_coordinator
        coord.on_elected(partition, 1)
        own = coord.state.ownership
        assert own is not None
        while own.loading:
            await asyncio.sleep(0.01)
        served = await coord.consumer_group_heartbeat(request)
        assert served.error == ErrorCode.none and served.member_epoch == joined.member_epoch
        assert coord.consumer_group_describe(gid).members[0].member.assigned == joined.assignment
        coord.on_resigned(partition, 2)
        assert (await coord.consumer_group_heartbeat(request)).error == ErrorCode.not_coordinator
        await coord.shutdown()

    run(body())


def test_transactional_commit_of_a_member() -> None:
    from tieredlog.coordinator.storage import Producer

    async def body() -> None:
        h = await Harness().start()
        await h.hb("a", 0)
        txn = h.coord.txn_commit_offsets
        ok = await txn("g", Producer(7, 0), "a", None, 1, {("t1", 0): (3, -1, "")})
        assert ok == {("t1", 0): ErrorCode.none}
        stale = await txn("g", Producer(7, 0), "a", None, 0, {("t1", 0): (4, -1, "")})
        assert stale == {("t1", 0): ErrorCode.illegal_generation}
        assert (await txn("g", Producer(7, 0), "b", None, 1, {("t1", 0): (4, -1, "")})) == \
            {("t1", 0): ErrorCode.unknown_member_id}
    run(body())


def test_regex_resolution_runs_a_slice_of_topics_per_loop_turn() -> None:
    turns: list = []

    class Loop(ManualScheduler):
        """Each callback handed over is one later turn of the loop, run when the test says."""

        def call_later(self, delay_ms, callback):  # type: ignore[no-untyped-def]
            turns.append(callback)
            return super().call_later(delay_ms, lambda: None)

    names = [f"t{i}" for i in range(2 * RESOLVE_SLICE + 5)] + ["__internal1"]
    results: list = []
    RegexResolution(Loop(), ["t1.*", "__.*"], names, lambda: True, results.append).start()
    steps = 0
    while turns:
        turns.pop(0)()
        steps += 1
        assert not results or not turns  # delivered once, after the last slice
    assert steps == 3
    assert results == [{"t1.*": frozenset(n for n in names if n.startswith("t1")), "__.*": frozenset()}]
    # a group no longer served here (or a cancelled resolution) gets nothing
    RegexResolution(Loop(), ["t1.*"], names, lambda: False, results.append).start()
    cancelled = RegexResolution(Loop(), ["t1.*"], names, lambda: True, results.append)
    cancelled.start()
    cancelled.cancel()
    while turns:
        turns.pop(0)()
    assert len(results) == 1
