"""The coordinator of a cluster member: it serves the groups of the `__consumer_offsets` partitions it
leads, loads a partition's groups from its real log when elected (COORDINATOR_LOAD_IN_PROGRESS
meanwhile), drops them when it resigns (NOT_COORDINATOR), and answers commits and SyncGroup only once
the store's wait for the ISR ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tieredlog import errors
from tieredlog.coordinator import schema
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore, MemoryGroupStore, WaitForIsr
from tieredlog.coordinator.timer import ManualScheduler
from tieredlog.log.config import LogConfig
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.server.consumer_protocol import subscribed_topics

PARTITIONS = 3
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS = 15, 16, 14
REBALANCE_IN_PROGRESS = 27
CONFIG = GroupConfig(min_session_timeout_ms=1000, initial_rebalance_delay_ms=0)


def group_in(partition: int, prefix: str = "g") -> str:
    return next(f"{prefix}{i}" for i in range(1000) if schema.partition_for(f"{prefix}{i}", PARTITIONS) == partition)


async def loaded(coord: GroupCoordinator) -> None:
    own = coord.state.ownership
    assert own is not None
    while own.loading:
        await asyncio.sleep(0.01)


def test_groups_load_on_election_and_unload_on_resignation(tmp_path: Path) -> None:
    config = LogConfig().with_overrides({"cleanup.policy": "compact"})
    logs = {p: UnifiedLog(tmp_path / f"{OFFSETS_TOPIC}-{p}", config) for p in range(PARTITIONS)}
    mine, other = group_in(0), group_in(1)

    async def run() -> None:
        # a former leader's commits, in the partitions' logs
        writer = GroupCoordinator(CONFIG, ManualScheduler(), LogGroupStore(logs.get, PARTITIONS),
                                  subscriptions=subscribed_topics)
        await writer.start()
        for group in (mine, other):
            assert writer.commit_offsets(group, "", None, -1, {("t", 0): (42, 3, "m")}) == {("t", 0): 0}
        await writer.shutdown()

        clock = ManualScheduler()
        coord = GroupCoordinator.for_cluster(CONFIG, clock, LogGroupStore(logs.get, PARTITIONS),
                                             subscriptions=subscribed_topics)
        await coord.start()
        assert coord.fetch_offsets(mine, None)[0] == NOT_COORDINATOR  # led by nobody here yet
        coord.on_elected(0, 5)
        assert coord.fetch_offsets(mine, None)[0] == COORDINATOR_LOAD_IN_PROGRESS
        assert coord.list_groups()[0] == COORDINATOR_LOAD_IN_PROGRESS
        await loaded(coord)
        code, got = coord.fetch_offsets(mine, None)
        assert code == 0 and (got[("t", 0)].offset, got[("t", 0)].leader_epoch) == (42, 3)
        assert coord.fetch_offsets(other, None)[0] == NOT_COORDINATOR  # partition 1 is led elsewhere
        assert coord.list_groups() == (0, [(mine, "", "Empty")])

        # a member parked in a rebalance learns that the coordinator moved
        parked = coord.join_group(mine, "", None, "c", "/h", 5000, 9000, "consumer", [("range", b"")], False)
        assert not parked.done()
        coord.on_resigned(0, 6)
        assert parked.result().error == NOT_COORDINATOR
        assert coord.fetch_offsets(mine, None)[0] == NOT_COORDINATOR
        assert coord.groups == {}

        # resigned while loading: the load's result is thrown away
        coord.on_elected(1, 2)
        coord.on_resigned(1, 2)
        await asyncio.gather(*coord._loads)
        assert coord.fetch_offsets(other, None)[0] == NOT_COORDINATOR and coord.groups == {}
        await coord.shutdown()

    asyncio.run(run())
    for plog in logs.values():
        plog.close()


class GatedStore(MemoryGroupStore):
    """A store whose appends wait for the ISR like the replicated one: each wait ends when the test
    resolves its future (None: the ISR has the records; an exception: the wait's failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Future] = []

    def append(self, group_id, records, timestamp_ms) -> WaitForIsr | None:
        super().append(group_id, records, timestamp_ms)
        gate = asyncio.get_running_loop().create_future()
        self.gates.append(gate)

        async def wait() -> None:
            error = await gate
            if error is not None:
                raise error

        return wait


def test_commits_and_assignments_answer_after_the_isr_has_them() -> None:
    async def run() -> None:
        store = GatedStore()
        coord = GroupCoordinator(CONFIG, ManualScheduler(), store, subscriptions=subscribed_topics)
        await coord.start()
        tp = ("t", 0)
        commit = asyncio.ensure_future(coord.handle_commit_offsets("solo", "", None, -1, {tp: (7, -1, "")}))
        await asyncio.sleep(0)
        assert not commit.done() and coord.fetch_offsets("solo", [tp])[1][tp] is None  # not committed yet
        store.gates[-1].set_result(None)
        assert await commit == {tp: 0}
        assert coord.fetch_offsets("solo", [tp])[1][tp].offset == 7

        # Kafka's mapping of a failed wait for an offset commit; the offset is not taken
        for error, code in ((errors.NotEnoughReplicasAfterAppendError, COORDINATOR_NOT_AVAILABLE),
                            (errors.RequestTimedOutError, COORDINATOR_NOT_AVAILABLE),
                            (errors.NotLeaderOrFollowerError, NOT_COORDINATOR)):
            commit = asyncio.ensure_future(coord.handle_commit_offsets("solo", "", None, -1, {tp: (9, -1, "")}))
            await asyncio.sleep(0)
            store.gates[-1].set_result(error())
            assert await commit == {tp: code}
            assert coord.fetch_offsets("solo", [tp])[1][tp].offset == 7

        # SyncGroup: the members get the leader's assignment once it is replicated
        clock = coord.state.scheduler
        assert isinstance(clock, ManualScheduler)
        joins = [coord.join_group("g", "", None, "c", "/h", 5000, 9000, "consumer", [("range", b"")], False)
                 for _ in range(2)]
        clock.advance(0)
        leader = joins[0].result().leader_id
        follower = next(j.result().member_id for j in joins if j.result().member_id != leader)
        waiting = coord.sync_group("g", 1, follower, None, None, None, {})
        answer = coord.sync_group("g", 1, leader, None, None, None, {leader: b"A", follower: b"B"})
        await asyncio.sleep(0)
        assert not answer.done() and not waiting.done()
        store.gates[-1].set_result(None)
        assert (await answer).assignment == b"A" and (await waiting).assignment == b"B"

        # a wait that times out sends the members to join again (Kafka: REBALANCE_IN_PROGRESS)
        coord.join_group("g", leader, None, "c", "/h", 5000, 9000, "consumer", [("range", b"x")], False)
        rejoin = coord.join_group("g", follower, None, "c", "/h", 5000, 9000, "consumer", [("range", b"")], False)
        clock.advance(0)
        assert rejoin.result().generation_id == 2
        waiting = coord.sync_group("g", 2, follower, None, None, None, {})
        coord.sync_group("g", 2, leader, None, None, None, {leader: b"A2", follower: b"B2"})
        await asyncio.sleep(0)
        store.gates[-1].set_result(errors.RequestTimedOutError())
        assert (await waiting).error == REBALANCE_IN_PROGRESS
        await coord.shutdown()

    asyncio.run(run())


def test_static_member_replacement_answers_after_the_isr_has_it() -> None:
    FENCED_INSTANCE_ID = 82

    async def run() -> None:
        store = GatedStore()
        clock = ManualScheduler()
        coord = GroupCoordinator(CONFIG, clock, store, subscriptions=subscribed_topics)
        await coord.start()
        join = coord.join_group("g", "", "i-1", "c", "/h", 5000, 9000, "consumer", [("range", b"")], False)
        clock.advance(0)
        old = join.result().member_id
        sync = coord.sync_group("g", 1, old, "i-1", None, None, {old: b"A"})
        store.gates[-1].set_result(None)
        assert (await sync).assignment == b"A"

        # restarted: answered once the new member id is replicated, and only then
        rejoin = coord.join_group("g", "", "i-1", "c", "/h", 5000, 9000, "consumer", [("range", b"")], False)
        await asyncio.sleep(0)
        assert not rejoin.done()
        store.gates[-1].set_result(None)
        new = (await rejoin).member_id
        assert new != old and coord.heartbeat("g", old, "i-1", 1) == FENCED_INSTANCE_ID

        # the wait fails: the replacement is undone and the new instance is told to retry
        again = coord.join_group("g", "", "i-1", "c", "/h", 5000, 9000, "consumer", [("range", b"")], False)
        await asyncio.sleep(0)
        store.gates[-1].set_result(errors.NotEnoughReplicasAfterAppendError())
        failed = await again
        assert failed.error == COORDINATOR_NOT_AVAILABLE and failed.member_id == ""
        assert coord.heartbeat("g", new, "i-1", 1) == 0
        await coord.shutdown()

    asyncio.run(run())
