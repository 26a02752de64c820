"""Sans-I/O tests of the classic group state machine, driven by a hand-stepped clock.

The four JoinGroup scenarios of seeds-digest §2.10 are reproduced as written in the code path (scenario 4
follows the code, not the seed's prose).
"""

from __future__ import annotations

import asyncio
import functools
import io
import struct

import pytest
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_writer

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.storage import MemoryGroupStore
from tieredlog.coordinator.timer import ManualScheduler
from tieredlog.server.consumer_protocol import subscribed_topics

SESSION = 10_000
REBALANCE = 30_000
RANGE = [("range", b"r")]

UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_SESSION_TIMEOUT = 26
MEMBER_ID_REQUIRED = 79
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_GROUP_ID = 24
OFFSET_METADATA_TOO_LARGE = 12
FENCED_INSTANCE_ID = 82


def async_test(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


class Harness:
    def __init__(self, store: MemoryGroupStore | None = None, **config):
        settings = dict(min_session_timeout_ms=1000, initial_rebalance_delay_ms=0)
        settings.update(config)
        self.clock = ManualScheduler()
        self.store = store or MemoryGroupStore()
        self.coord = GroupCoordinator(GroupConfig(**settings), self.clock, self.store,
                                      subscriptions=subscribed_topics)

    async def start(self) -> "Harness":
        await self.coord.start()
        return self

    def join(self, member_id="", group="g", protocols=RANGE, protocol_type="consumer",
             session=SESSION, rebalance=REBALANCE, require_known=False, instance_id=None, client="c"):
        return self.coord.join_group(group, member_id, instance_id, client, "/127.0.0.1", session, rebalance,
                                     protocol_type, protocols, require_known)

    def sync(self, member_id, generation, assignments=None, group="g", instance_id=None):
        return self.coord.sync_group(group, generation, member_id, instance_id, None, None, assignments or {})

    def group(self, group_id="g"):
        return self.coord.groups[group_id]

    async def form_group(self, n: int, group="g", instance_ids=None, **join):
        """n members join a new group and complete one rebalance; returns their member ids, leader first.
        `instance_ids`: one group.instance.id (or None) per member, in joining order."""
        instance_ids = instance_ids or [None] * n
        futures = [self.join(group=group, client=f"c{i}", instance_id=instance_ids[i], **join) for i in range(n)]
        self.clock.advance(0)
        results = [f.result() for f in futures]
        assert all(r.error == 0 for r in results)
        ids = [r.member_id for r in results]
        instance_of = dict(zip(ids, instance_ids))
        leader = results[0].leader_id
        generation = results[0].generation_id
        syncs = [self.sync(mid, generation, group=group, instance_id=instance_of[mid]) for mid in ids if mid != leader]
        self.sync(leader, generation, {mid: mid.encode() for mid in ids}, group=group, instance_id=instance_of[leader])
        assert all(s.result().error == 0 for s in syncs)
        assert self.group(group).state is GroupState.STABLE
        return [leader] + [m for m in ids if m != leader]


# -- JoinGroup scenarios of seeds-digest §2.10 ---------------------------------------------------------


@async_test
async def test_scenario1_first_rebalance_first_member_leads_and_all_wait_for_the_delayed_join():
    h = await Harness().start()
    first = h.join(client="c1")
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.group().join_handle is not None
    later = [h.join(client="c2"), h.join(client="c3")]
    assert not first.done() and not any(f.done() for f in later)

    h.clock.advance(0)  # group.initial.rebalance.delay.ms = 0
    r1 = first.result()
    others = [f.result() for f in later]
    assert r1.error == 0 and r1.leader_id == r1.member_id
    assert r1.generation_id == 1 and r1.protocol_name == "range"
    assert sorted(m[0] for m in r1.members) == sorted([r1.member_id] + [o.member_id for o in others])
    assert all(o.members == [] and o.leader_id == r1.member_id for o in others)
    assert h.group().state is GroupState.COMPLETING_REBALANCE


@async_test
async def test_scenario2_leader_first_creates_the_delayed_join_and_others_wait():
    h = await Harness().start()
    leader, a, b = await h.form_group(3)
    f_leader = h.join(leader)
    assert h.group().state is GroupState.PREPARING_REBALANCE and not f_leader.done()
    f_a = h.join(a)
    assert not f_a.done()
    f_b = h.join(b)  # last known member: the DelayedJoin completes
    results = [f.result() for f in (f_leader, f_a, f_b)]
    assert {r.generation_id for r in results} == {2}
    assert results[0].leader_id == leader and len(results[0].members) == 3
    assert results[1].members == [] and results[2].members == []


@async_test
async def test_scenario3_known_followers_before_the_leader_answer_immediately():
    h = await Harness().start()
    leader, a, b = await h.form_group(3)
    f_a = h.join(a)
    assert f_a.done() and f_a.result().generation_id == 1 and f_a.result().members == []
    assert h.group().state is GroupState.STABLE

    f_leader = h.join(leader)
    assert h.group().state is GroupState.PREPARING_REBALANCE and not f_leader.done()
    f_b = h.join(b)
    assert not f_b.done()
    # a answered too early; it learns of the rebalance from its heartbeat and rejoins.
    assert h.coord.heartbeat("g", a, None, 1) == REBALANCE_IN_PROGRESS
    f_a2 = h.join(a)
    assert all(f.done() for f in (f_leader, f_b, f_a2))
    assert f_leader.result().generation_id == 2 and len(f_leader.result().members) == 3


@async_test
async def test_scenario4_new_member_first_creates_the_delayed_join_but_previous_leader_stays():
    h = await Harness().start()
    leader, a, b = await h.form_group(3)
    f_new = h.join(client="newcomer")
    assert h.group().state is GroupState.PREPARING_REBALANCE and not f_new.done()
    f_a = h.join(a)
    assert not f_a.done()  # the code path (not the seed's prose): a waits
    f_leader = h.join(leader)
    f_b = h.join(b)
    results = [f.result() for f in (f_new, f_a, f_leader, f_b)]
    assert {r.leader_id for r in results} == {leader}
    assert len(results[2].members) == 4 and results[0].members == []


# -- JoinGroup details ----------------------------------------------------------------------------------


@async_test
async def test_member_id_required_round_then_join_with_the_given_id():
    h = await Harness().start()
    first = h.join(require_known=True).result()
    assert first.error == MEMBER_ID_REQUIRED and first.member_id.startswith("c-")
    assert h.group().members == {}
    second = h.join(first.member_id, require_known=True)
    h.clock.advance(0)
    assert second.result().error == 0 and second.result().member_id == first.member_id


@async_test
async def test_pending_member_holds_the_rebalance_until_its_id_expires():
    h = await Harness().start()
    leader, a = await h.form_group(2)
    pending = h.join(require_known=True, session=5000).result()
    assert pending.error == MEMBER_ID_REQUIRED
    f1, f2 = h.join(leader), h.join(a)
    assert not f1.done()  # the pending member may still come back
    h.clock.advance(5000)
    assert f1.result().generation_id == 2 and len(f1.result().members) == 2 and f2.result().error == 0


@async_test
async def test_rebalance_timeout_evicts_members_that_did_not_rejoin():
    h = await Harness().start()
    leader, a = await h.form_group(2)
    f = h.join(leader)
    # a keeps heartbeating (so its session does not expire) but never rejoins; the DelayedJoin waits
    # for the largest rebalance timeout of the group.
    for _ in range(REBALANCE // 5000 - 1):
        h.clock.advance(5000)
        assert h.coord.heartbeat("g", a, None, 1) == REBALANCE_IN_PROGRESS
    assert not f.done()
    h.clock.advance(5000)
    r = f.result()
    assert r.generation_id == 2 and [m[0] for m in r.members] == [leader]
    assert h.coord.heartbeat("g", a, None, 2) == UNKNOWN_MEMBER_ID


@async_test
async def test_leader_that_does_not_rejoin_is_replaced_by_a_member_that_did():
    h = await Harness().start()
    leader, a = await h.form_group(2)
    f_a = h.join(a, protocols=[("range", b"changed")])  # changed metadata: a starts the rebalance
    assert not f_a.done()
    h.clock.advance(REBALANCE)
    r = f_a.result()
    assert r.leader_id == a and r.generation_id == 2 and r.members == [(a, None, b"changed")]


@async_test
async def test_protocol_chosen_by_votes_and_inconsistent_protocols_rejected():
    h = await Harness().start()
    both = [("range", b""), ("roundrobin", b"")]
    prefer_rr = [("roundrobin", b""), ("range", b"")]
    fs = [h.join(protocols=both), h.join(protocols=prefer_rr), h.join(protocols=prefer_rr)]
    h.clock.advance(0)
    assert {f.result().protocol_name for f in fs} == {"roundrobin"}
    assert h.join(protocols=[("sticky", b"")]).result().error == INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocol_type="connect").result().error == INCONSISTENT_GROUP_PROTOCOL
    assert h.join(group="other", protocols=[]).result().error == INCONSISTENT_GROUP_PROTOCOL
    assert "other" not in {g for g, _, _ in h.coord.list_groups()[1]}  # no phantom group left behind


@async_test
async def test_session_timeout_bounds_and_bad_ids():
    h = await Harness().start()
    assert h.join(session=999).result().error == INVALID_SESSION_TIMEOUT
    h2 = await Harness(max_session_timeout_ms=20_000).start()
    assert h2.join(session=20_001).result().error == INVALID_SESSION_TIMEOUT
    assert h.join(group="").result().error == INVALID_GROUP_ID
    assert h.join("made-up-id").result().error == UNKNOWN_MEMBER_ID


@async_test
async def test_initial_rebalance_delay_waits_for_more_members():
    h = await Harness(initial_rebalance_delay_ms=3000).start()
    f1 = h.join(rebalance=10_000)
    h.clock.advance(2000)
    f2 = h.join(rebalance=10_000)
    h.clock.advance(1000)
    assert not f1.done()  # a new member arrived during the delay: it is extended
    h.clock.advance(3000)
    assert f1.result().generation_id == 1 and len(f1.result().members) == 2 and f2.result().error == 0


# -- SyncGroup / Heartbeat / LeaveGroup -----------------------------------------------------------------


@async_test
async def test_followers_wait_for_the_leaders_assignment():
    h = await Harness().start()
    fs = [h.join(), h.join()]
    h.clock.advance(0)
    r_leader, r_follower = sorted((f.result() for f in fs), key=lambda r: r.member_id != r.leader_id)
    follower_sync = h.sync(r_follower.member_id, 1)
    assert not follower_sync.done()
    assert h.sync(r_follower.member_id, 0).result().error == ILLEGAL_GENERATION
    leader_sync = h.sync(r_leader.member_id, 1, {r_follower.member_id: b"p0,p1"})
    assert follower_sync.result().assignment == b"p0,p1"
    assert leader_sync.result().assignment == b""  # the leader gave itself nothing
    assert h.group().state is GroupState.STABLE
    assert h.sync(r_follower.member_id, 1).result().assignment == b"p0,p1"  # Stable: answered at once


@async_test
async def test_rebalance_while_awaiting_sync_answers_rebalance_in_progress():
    h = await Harness().start()
    fs = [h.join(), h.join()]
    h.clock.advance(0)
    follower = next(f.result() for f in fs if f.result().member_id != f.result().leader_id)
    waiting = h.sync(follower.member_id, 1)
    h.join(client="late")
    assert waiting.result().error == REBALANCE_IN_PROGRESS
    assert h.sync(follower.member_id, 1).result().error == REBALANCE_IN_PROGRESS


@async_test
async def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = await Harness().start()
    fs = [h.join(), h.join()]
    h.clock.advance(0)
    leader = fs[0].result().leader_id
    lazy = next(f.result().member_id for f in fs if f.result().member_id != leader)
    h.sync(leader, 1, {})
    for _ in range(REBALANCE // 5000):
        assert lazy in h.group().members
        assert h.coord.heartbeat("g", leader, None, 1) == 0
        assert h.coord.heartbeat("g", lazy, None, 1) == 0  # alive, but it never syncs
        h.clock.advance(5000)
    assert lazy not in h.group().members
    assert h.coord.heartbeat("g", leader, None, 1) == REBALANCE_IN_PROGRESS
    assert h.join(leader).result().members == [(leader, None, b"r")]


@async_test
async def test_session_expiry_removes_member_and_triggers_rebalance():
    h = await Harness().start()
    leader, a = await h.form_group(2)
    for _ in range(3):
        h.clock.advance(SESSION // 2)
        assert h.coord.heartbeat("g", leader, None, 1) in (0, REBALANCE_IN_PROGRESS)
    assert a not in h.group().members
    assert h.coord.heartbeat("g", leader, None, 1) == REBALANCE_IN_PROGRESS
    assert h.coord.heartbeat("g", a, None, 1) == UNKNOWN_MEMBER_ID
    f = h.join(leader)
    assert f.result().generation_id == 2 and len(f.result().members) == 1


@async_test
async def test_heartbeat_errors():
    h = await Harness().start()
    leader, _ = await h.form_group(2)
    assert h.coord.heartbeat("g", leader, None, 1) == 0
    assert h.coord.heartbeat("g", leader, None, 7) == ILLEGAL_GENERATION
    assert h.coord.heartbeat("g", "nobody", None, 1) == UNKNOWN_MEMBER_ID
    assert h.coord.heartbeat("missing", leader, None, 1) == UNKNOWN_MEMBER_ID


@async_test
async def test_leave_group_batch_and_last_member_empties_the_group():
    h = await Harness().start()
    leader, a, b = await h.form_group(3)
    code, results = h.coord.leave_group("g", [(a, None), ("ghost", None)])
    assert code == 0 and results == [(a, None, 0), ("ghost", None, UNKNOWN_MEMBER_ID)]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    f = h.join(leader), h.join(b)
    assert f[0].result().generation_id == 2
    h.coord.leave_group("g", [(leader, None), (b, None)])
    assert h.group().state is GroupState.EMPTY and h.group().generation_id == 3


@async_test
async def test_static_member_replaced_by_a_new_instance_is_fenced():
    h = await Harness().start()
    f1 = h.join(instance_id="i-1")
    h.clock.advance(0)
    old = f1.result().member_id
    f2 = h.join(instance_id="i-1")
    h.clock.advance(0)
    new = f2.result()
    assert new.error == 0 and new.member_id != old
    assert h.coord.heartbeat("g", old, "i-1", new.generation_id) == 82  # FENCED_INSTANCE_ID
    assert h.coord.leave_group("g", [("", "i-1")])[1] == [("", "i-1", 0)]


# -- static membership (KIP-345) ------------------------------------------------------------------------


@async_test
async def test_static_member_rejoining_a_stable_group_takes_its_place_back_without_a_rebalance():
    h = await Harness().start()
    leader, follower = await h.form_group(2, instance_ids=["i-1", "i-2"])
    assert follower.startswith("i-2-")  # Kafka's static member id: instance id and a UUID

    joined = h.join(instance_id="i-2", client="restarted")  # a restart: unknown member id, same instance
    assert joined.done(), "answered at once, no rebalance"
    r = joined.result()
    assert r.error == 0 and r.member_id not in (follower, "") and r.member_id.startswith("i-2-")
    assert (r.generation_id, r.leader_id, r.members, r.skip_assignment) == (1, leader, [], False)
    g = h.group()
    assert g.state is GroupState.STABLE and g.generation_id == 1 and follower not in g.members
    assert g.members[r.member_id].client_id == "restarted"
    sync = h.sync(r.member_id, 1, instance_id="i-2").result()
    assert sync.error == 0 and sync.assignment == follower.encode()  # the assignment of the old id
    assert h.coord.heartbeat("g", leader, "i-1", 1) == 0  # the other member notices nothing

    # the old id is fenced wherever it shows up with its instance id, unknown without it
    assert h.coord.heartbeat("g", follower, "i-2", 1) == FENCED_INSTANCE_ID
    assert h.coord.heartbeat("g", follower, None, 1) == UNKNOWN_MEMBER_ID
    assert h.sync(follower, 1, instance_id="i-2").result().error == FENCED_INSTANCE_ID
    assert h.coord.commit_offsets("g", follower, "i-2", 1, {("t", 0): (1, -1, "")}) == {("t", 0): FENCED_INSTANCE_ID}
    assert h.join(follower, instance_id="i-2").result().error == FENCED_INSTANCE_ID
    assert h.coord.leave_group("g", [(follower, "i-2")])[1] == [(follower, "i-2", FENCED_INSTANCE_ID)]
    assert h.coord.commit_offsets("g", r.member_id, "i-2", 1, {("t", 0): (1, -1, "")}) == {("t", 0): 0}
    assert g.state is GroupState.STABLE and g.generation_id == 1

    # the new member id is stored (GroupMetadataValue v3 with its instance id) and survives a reload
    await h.coord.shutdown()
    h2 = await Harness(store=h.store).start()
    assert {(m.member_id, m.group_instance_id) for m in h2.group().members.values()} == {
        (leader, "i-1"), (r.member_id, "i-2")}
    assert h2.coord.heartbeat("g", r.member_id, "i-2", 1) == 0
    assert h2.coord.heartbeat("g", follower, "i-2", 1) == FENCED_INSTANCE_ID


@async_test
async def test_static_leader_rejoining_a_stable_group_does_not_assign_again():
    h = await Harness().start()
    leader, follower = await h.form_group(2, instance_ids=["i-1", "i-2"])
    old = h.join(instance_id="i-1").result()
    # before JoinGroup v9 the old leader id is answered, so the new member does not run the assignor
    assert old.error == 0 and old.leader_id == leader != old.member_id and old.members == []
    assert h.group().leader_id == old.member_id and h.group().state is GroupState.STABLE
    # v9+: it learns it leads, with every member's metadata, and skip_assignment tells it not to assign
    new = h.coord.join_group("g", "", "i-1", "c", "/127.0.0.1", SESSION, REBALANCE, "consumer", RANGE, True,
                             supports_skip_assignment=True).result()
    assert new.error == 0 and new.skip_assignment and new.leader_id == new.member_id
    assert sorted(m[0] for m in new.members) == sorted([new.member_id, follower])
    assert h.group().state is GroupState.STABLE and h.group().generation_id == 1
    assert h.sync(new.member_id, 1, instance_id="i-1").result().assignment == leader.encode()


@async_test
async def test_static_member_rejoining_with_another_protocol_rebalances():
    h = await Harness().start()
    both = [("range", b"r"), ("roundrobin", b"rr")]
    (member,) = await h.form_group(1, instance_ids=["i-1"], protocols=both)
    # the only member rejoined, so the rebalance it starts completes at once
    r = h.join(instance_id="i-1", protocols=list(reversed(both))).result()
    assert r.error == 0 and r.generation_id == 2 and r.protocol_name == "roundrobin" and r.member_id != member


@async_test
async def test_static_member_replaced_while_parked_is_fenced_and_the_group_rebalances():
    h = await Harness().start()
    futures = [h.join(instance_id="i-1"), h.join(instance_id="i-2")]
    h.clock.advance(0)
    old = futures[1].result().member_id
    parked = h.sync(old, 1, instance_id="i-2")  # CompletingRebalance: waits for the leader
    assert not parked.done()
    replacement = h.join(instance_id="i-2")
    assert parked.result().error == FENCED_INSTANCE_ID
    assert h.group().state is GroupState.PREPARING_REBALANCE and old not in h.group().members
    h.join(futures[0].result().member_id, instance_id="i-1")
    assert replacement.result().error == 0 and replacement.result().generation_id == 2


@async_test
async def test_static_member_that_misses_a_rebalance_stays_until_its_session_expires():
    h = await Harness().start()
    leader, static = await h.form_group(2, instance_ids=[None, "i-s"], session=60_000, rebalance=10_000)
    f = h.join(leader, session=60_000, rebalance=10_000)  # the leader rejoins; the static member does not
    h.clock.advance(10_000)
    r = f.result()
    assert r.generation_id == 2 and sorted(m[0] for m in r.members) == sorted([leader, static])
    assert static in h.group().members  # a dynamic member would have been removed here

    h2 = await Harness().start()
    leader2, static2 = await h2.form_group(2, instance_ids=[None, "i-s"])
    for _ in range(3):
        h2.clock.advance(SESSION // 2)
        h2.coord.heartbeat("g", leader2, None, 1)
    assert static2 not in h2.group().members  # session.timeout.ms governs static members too
    assert h2.group().state is GroupState.PREPARING_REBALANCE


@async_test
async def test_rebalance_where_no_member_rejoined_waits_for_the_static_ones():
    h = await Harness().start()
    (static,) = await h.form_group(1, instance_ids=["i-s"], session=60_000, rebalance=10_000)
    newcomer = h.join(client="d", session=60_000, rebalance=10_000)  # starts a rebalance ...
    other = next(m for m in h.group().members if m != static)
    assert h.coord.leave_group("g", [(other, None)])[1] == [(other, None, 0)]
    assert newcomer.result().error == UNKNOWN_MEMBER_ID  # ... and leaves it at once
    h.clock.advance(10_000)  # nobody rejoined: no generation without members that joined
    assert h.group().state is GroupState.PREPARING_REBALANCE and static in h.group().members
    r = h.join(static, instance_id="i-s", session=60_000, rebalance=10_000).result()
    assert r.error == 0 and r.generation_id == 2 and r.leader_id == static


@async_test
async def test_leave_group_by_instance_id_batch():
    h = await Harness().start()
    leader, a, b = await h.form_group(3, instance_ids=["i-1", "i-2", None])
    code, results = h.coord.leave_group("g", [("", "i-2"), ("", "nobody"), (leader, "i-2"), (b, None), ("x", None)])
    assert code == 0 and results == [
        ("", "i-2", 0), ("", "nobody", UNKNOWN_MEMBER_ID), (leader, "i-2", UNKNOWN_MEMBER_ID), (b, None, 0),
        ("x", None, UNKNOWN_MEMBER_ID)]
    assert set(h.group().members) == {leader}
    assert h.coord.leave_group("g", [(a, "i-1")])[1] == [(a, "i-1", FENCED_INSTANCE_ID)]


@async_test
async def test_static_member_replacement_is_undone_when_it_cannot_be_stored():
    from tieredlog import errors

    class BreakableStore(MemoryGroupStore):
        broken = False

        def append(self, group_id, records, timestamp_ms):
            if self.broken:
                raise errors.NotEnoughReplicasError()
            return super().append(group_id, records, timestamp_ms)

    store = BreakableStore()
    h = await Harness(store=store).start()
    leader, follower = await h.form_group(2, instance_ids=["i-1", "i-2"])
    store.broken = True
    r = h.join(instance_id="i-2").result()
    assert r.error == 15 and r.member_id == ""  # COORDINATOR_NOT_AVAILABLE: the client retries
    assert follower in h.group().members and h.coord.heartbeat("g", follower, "i-2", 1) == 0


# -- offsets --------------------------------------------------------------------------------------------


@async_test
async def test_simple_commit_and_fetch_without_a_group():
    h = await Harness().start()
    assert h.coord.commit_offsets("solo", "", None, -1, {("t", 0): (42, 3, "meta")}) == {("t", 0): 0}
    code, got = h.coord.fetch_offsets("solo", [("t", 0), ("t", 1)])
    assert code == 0 and got[("t", 1)] is None
    assert (got[("t", 0)].offset, got[("t", 0)].leader_epoch, got[("t", 0)].metadata) == (42, 3, "meta")
    assert h.coord.commit_offsets("nogroup", "m", None, 1, {("t", 0): (1, -1, None)}, api_version=8) == \
        {("t", 0): ILLEGAL_GENERATION}
    # OffsetCommit v9 (KIP-848) answers GROUP_ID_NOT_FOUND (69) for a group that does not exist, as Kafka
    assert h.coord.commit_offsets("nogroup", "m", None, 1, {("t", 0): (1, -1, None)}) == {("t", 0): 69}
    too_big = h.coord.commit_offsets("solo", "", None, -1, {("t", 1): (5, -1, "x" * 4097), ("t", 2): (6, -1, "")})
    assert too_big == {("t", 1): OFFSET_METADATA_TOO_LARGE, ("t", 2): 0}


@async_test
async def test_group_commit_checks_generation_member_and_state():
    h = await Harness().start()
    leader, a = await h.form_group(2)
    tp = ("t", 0)
    assert h.coord.commit_offsets("g", a, None, 1, {tp: (10, -1, "")}) == {tp: 0}
    assert h.coord.commit_offsets("g", a, None, 0, {tp: (11, -1, "")}) == {tp: ILLEGAL_GENERATION}
    assert h.coord.commit_offsets("g", "who", None, 1, {tp: (11, -1, "")}) == {tp: UNKNOWN_MEMBER_ID}
    assert h.coord.commit_offsets("g", "", None, -1, {tp: (11, -1, "")}) == {tp: UNKNOWN_MEMBER_ID}
    h.join(leader), h.join(a)  # both rejoin: now CompletingRebalance at generation 2
    assert h.coord.commit_offsets("g", a, None, 2, {tp: (12, -1, "")}) == {tp: REBALANCE_IN_PROGRESS}
    assert h.coord.fetch_offsets("g", None)[1][tp].offset == 10


@async_test
async def test_state_survives_a_reload_from_the_store():
    h = await Harness().start()
    leader, a = await h.form_group(2)
    h.coord.commit_offsets("g", a, None, 1, {("t", 3): (99, 1, "m")})
    h.coord.commit_offsets("solo", "", None, -1, {("t", 0): (5, -1, "")})
    h.coord.delete_offsets("solo", [("t", 0)])
    await h.coord.shutdown()

    h2 = await Harness(store=h.store).start()
    g = h2.group()
    assert g.state is GroupState.STABLE and g.generation_id == 1 and g.leader_id == leader
    assert g.members[a].assignment == a.encode()
    assert h2.coord.fetch_offsets("g", [("t", 3)])[1][("t", 3)].offset == 99
    assert h2.coord.fetch_offsets("solo", None)[1] == {}
    assert h2.coord.heartbeat("g", a, None, 1) == 0


# -- admin ----------------------------------------------------------------------------------------------


def _subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


@async_test
async def test_list_describe_delete_groups():
    h = await Harness().start()
    await h.form_group(2, group="busy")
    h.coord.commit_offsets("idle", "", None, -1, {("t", 0): (1, -1, "")})
    assert sorted(h.coord.list_groups()[1]) == [("busy", "consumer", "Stable"), ("idle", "", "Empty")]
    assert h.coord.list_groups(["empty"])[1] == [("idle", "", "Empty")]

    summary = h.coord.describe_group("busy")
    assert summary.state == "Stable" and summary.protocol == "range" and len(summary.members) == 2
    assert {m.metadata for m in summary.members} == {b"r"}
    assert h.coord.describe_group("nope").state == "Dead"

    assert h.coord.delete_groups(["busy", "idle", "nope"]) == {
        "busy": NON_EMPTY_GROUP, "idle": 0, "nope": GROUP_ID_NOT_FOUND}
    assert h.coord.fetch_offsets("idle", None)[1] == {}
    h2 = await Harness(store=h.store).start()
    assert "idle" not in h2.coord.groups


@async_test
async def test_offset_delete_refuses_subscribed_topics():
    h = await Harness().start()
    fs = [h.join(protocols=[("range", _subscription("orders"))])]
    h.clock.advance(0)
    m = fs[0].result().member_id
    h.sync(m, 1, {m: b""})
    h.coord.commit_offsets("g", m, None, 1, {("orders", 0): (1, -1, ""), ("old", 0): (2, -1, "")})
    code, res = h.coord.delete_offsets("g", [("orders", 0), ("old", 0)])
    assert code == 0 and res == {("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("old", 0): 0}
    assert set(h.coord.fetch_offsets("g", None)[1]) == {("orders", 0)}
    assert h.coord.delete_offsets("missing", [("x", 0)])[0] == GROUP_ID_NOT_FOUND


@async_test
async def test_requests_before_start_are_refused_as_coordinator_not_available():
    h = Harness()
    assert h.coord.heartbeat("g", "m", None, 1) == 15
    assert h.join().result().error == 15


@pytest.mark.parametrize("bad", [
    b"", b"\x00", b"\x00\x00\x7f\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x09ab",
    b"\xff\xff" + _subscription("t")[2:],  # a negative version
    # v1: no topics, null user data, then owned partitions claiming 2^31-1 entries (kio's native reader
    # would try to allocate them all; the guard refuses first)
    b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff\x7f\xff\xff\xff",
])
def test_malformed_subscription_metadata_is_not_an_error(bad):
    assert subscribed_topics(bad) is None


def test_subscriptions_of_every_version_and_newer_ones_are_read():
    assert subscribed_topics(_subscription("a", "b")) == ("a", "b")
    v3 = io.BytesIO()
    entity_writer(SubscriptionV3)(v3, SubscriptionV3(topics=("x",), user_data=b"u", owned_partitions=(),
                                                     generation_id=4, rack_id="r"))
    body = v3.getvalue()
    assert subscribed_topics(struct.pack(">h", 3) + body) == ("x",)
    # A newer version than kio knows is read as the newest one, as Kafka's ConsumerProtocol does.
    assert subscribed_topics(struct.pack(">h", 9) + body + b"later fields") == ("x",)


class FailingStore(MemoryGroupStore):
    """Fault injection: every append fails the way a log can."""

    def __init__(self, exc: Exception):
        super().__init__()
        self.exc = exc

    def append(self, group_id, records, timestamp_ms):
        raise self.exc


@async_test
async def test_failed_appends_map_to_kafka_errors_and_keep_state_unchanged():
    from tieredlog import errors

    h = await Harness(store=FailingStore(errors.NotEnoughReplicasError())).start()
    assert h.coord.commit_offsets("g", "", None, -1, {("t", 0): (1, -1, "")}) == {("t", 0): 15}
    assert h.coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None
    fs = [h.join(), h.join()]
    h.clock.advance(0)
    leader = fs[0].result().leader_id
    follower = next(f.result().member_id for f in fs if f.result().member_id != leader)
    waiting = h.sync(follower, 1)
    assert h.sync(leader, 1, {}).result().error == 15
    assert waiting.result().error == 15
    assert h.group().state is GroupState.PREPARING_REBALANCE  # the group tries again

    h2 = await Harness(store=FailingStore(OSError("disk full"))).start()
    assert h2.coord.commit_offsets("g", "", None, -1, {("t", 0): (1, -1, "")}) == {("t", 0): -1}

    # A full log dir surfaces from the log as KAFKA_STORAGE_ERROR; Kafka answers NOT_COORDINATOR.
    h3 = await Harness(store=FailingStore(errors.KafkaStorageError("No space left on device"))).start()
    assert h3.coord.commit_offsets("g", "", None, -1, {("t", 0): (1, -1, "")}) == {("t", 0): 16}
    assert h3.coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None
