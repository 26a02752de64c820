"""Committed-offset expiry (offsets.retention.minutes, KIP-211) in the group coordinator, driven by a
hand-stepped clock: Kafka's rules per group state, the tombstones in `__consumer_offsets`, the group that
becomes Dead, and what a reload from the stored records (real UnifiedLogs) brings back."""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from pathlib import Path

import pytest

from tieredlog.config import BrokerConfig
from tieredlog.coordinator import schema
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore, MemoryGroupStore, Producer, WaitForIsr
from tieredlog.coordinator.timer import ManualScheduler
from tieredlog.log.config import LogConfig
from tieredlog.log.types import FetchIsolation
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.record import iter_batches_records
from tieredlog.server.consumer_protocol import subscribed_topics

RETENTION = 60_000  # offsets.retention.minutes=1
CHECK = 5_000  # offsets.retention.check.interval.ms
SESSION = 600_000  # members outlive the retention without heartbeats
REBALANCE = 600_000
PARTITIONS = 3
CONFIG = GroupConfig(min_session_timeout_ms=1000, initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION,
                     offsets_retention_check_interval_ms=CHECK)


def async_test(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 naming ``topics``."""
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


class Harness:
    def __init__(self, store=None, clock: ManualScheduler | None = None):
        self.clock = clock or ManualScheduler()
        self.store = store if store is not None else MemoryGroupStore()
        self.coord = GroupCoordinator(CONFIG, self.clock, self.store, subscriptions=subscribed_topics)

    async def start(self) -> "Harness":
        await self.coord.start()
        return self

    def now(self) -> int:
        return self.clock.wall_clock_ms()

    def join(self, group: str, topics: tuple[str, ...], member_id: str = ""):
        return self.coord.join_group(group, member_id, None, "c", "/127.0.0.1", SESSION, REBALANCE, "consumer",
                                     [("range", subscription(*topics))], False)

    def form_group(self, group: str, *topics: str) -> str:
        """One consumer subscribed to ``topics`` joins and syncs: a Stable group of generation 1."""
        joined = self.join(group, topics)
        self.clock.advance(0)
        member = joined.result().member_id
        assert self.coord.sync_group(group, 1, member, None, None, None, {member: b"a"}).result().error == 0
        assert self.coord.groups[group].state is GroupState.STABLE
        return member

    def leave(self, group: str, member: str) -> None:
        """The group's only member leaves: the rebalance that follows (due at once) empties it."""
        assert self.coord.leave_group(group, [(member, None)]) == (0, [(member, None, 0)])
        self.clock.advance(0)
        assert self.coord.groups[group].state is GroupState.EMPTY

    def commit(self, group: str, offsets: dict[tuple[str, int], int], member: str = "", generation: int = -1):
        result = self.coord.commit_offsets(group, member, None, generation,
                                           {tp: (o, -1, "") for tp, o in offsets.items()})
        assert result == {tp: 0 for tp in offsets}

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        code, got = self.coord.fetch_offsets(group, None)
        assert code == 0
        return {tp: o.offset for tp, o in got.items() if o is not None}

    def tombstones(self, group: str) -> list[schema.OffsetKey | schema.GroupKey]:
        return [schema.decode_key(key) for g, key, value in self.store.records if g == group and value is None]


# -- the rules ------------------------------------------------------------------------------------------


@async_test
async def test_an_empty_groups_offsets_expire_a_retention_after_it_became_empty(caplog):
    h = await Harness().start()
    member = h.form_group("g", "t")
    h.commit("g", {("t", 0): 10, ("t", 1): 11}, member, 1)
    h.clock.advance(RETENTION)  # the commits are a retention old, but the group is Stable and subscribed
    assert h.committed("g") == {("t", 0): 10, ("t", 1): 11}

    h.leave("g", member)
    group = h.coord.groups["g"]
    assert group.state_timestamp_ms == h.now()
    h.clock.advance(RETENTION - CHECK)  # counted from when it became Empty, not from the commits
    assert h.committed("g") == {("t", 0): 10, ("t", 1): 11}

    with caplog.at_level(logging.INFO, logger="tieredlog.coordinator.offsets"):
        h.clock.advance(2 * CHECK)
    assert h.committed("g") == {}
    assert "Removed 2 expired offsets in 0 milliseconds." in caplog.text
    # no offsets left: the group is Dead, gone from the table, and its metadata record deleted too
    assert "g" not in h.coord.groups and group.state is GroupState.DEAD
    assert h.coord.describe_group("g").state == "Dead"
    assert h.coord.list_groups()[1] == []
    assert sorted(h.tombstones("g"), key=repr) == [
        schema.GroupKey("g"), schema.OffsetKey("g", "t", 0), schema.OffsetKey("g", "t", 1)]


@async_test
async def test_an_empty_group_without_a_state_timestamp_goes_by_the_commit_timestamps():
    h = await Harness().start()
    member = h.form_group("g", "t")
    h.commit("g", {("t", 0): 1}, member, 1)
    h.clock.advance(RETENTION // 2)
    h.leave("g", member)
    h.coord.groups["g"].state_timestamp_ms = -1  # as loaded from a GroupMetadataValue v0/v1
    h.clock.advance(RETENTION // 2 - CHECK)
    assert h.committed("g") == {("t", 0): 1}
    h.clock.advance(CHECK)  # a retention after the commit, half of one after the group became Empty
    assert h.committed("g") == {} and "g" not in h.coord.groups


@async_test
async def test_a_stable_group_keeps_the_offsets_of_subscribed_topics_and_expires_the_others():
    h = await Harness().start()
    member = h.form_group("g", "orders", "payments")
    h.commit("g", {("orders", 0): 1, ("payments", 0): 2, ("old", 0): 3, ("old", 1): 4}, member, 1)
    h.clock.advance(RETENTION - CHECK)
    h.commit("g", {("older", 0): 5}, member, 1)
    h.clock.advance(2 * CHECK)
    # unsubscribed topics go by their commit timestamps: "older" was committed later
    assert h.committed("g") == {("orders", 0): 1, ("payments", 0): 2, ("older", 0): 5}
    assert sorted(h.tombstones("g"), key=repr) == [schema.OffsetKey("g", "old", 0), schema.OffsetKey("g", "old", 1)]
    h.clock.advance(RETENTION)
    assert h.committed("g") == {("orders", 0): 1, ("payments", 0): 2}
    group = h.coord.groups["g"]
    assert group.state is GroupState.STABLE and group.members.keys() == {member}


@async_test
async def test_a_group_in_a_rebalance_keeps_its_offsets():
    h = await Harness().start()
    member = h.form_group("g", "t")
    h.commit("g", {("t", 0): 1, ("gone", 0): 2}, member, 1)
    h.join("g", ("t",))  # a new member: the group waits up to the rebalance timeout for the first one
    assert h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    h.clock.advance(RETENTION + CHECK)
    assert h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert h.committed("g") == {("t", 0): 1, ("gone", 0): 2}


@async_test
async def test_standalone_offsets_expire_by_their_commit_timestamps():
    h = await Harness().start()
    h.commit("solo", {("t", 0): 1})
    h.clock.advance(RETENTION // 2)
    h.commit("solo", {("t", 1): 2})
    h.clock.advance(RETENTION // 2 + CHECK)
    assert h.committed("solo") == {("t", 1): 2}
    assert h.coord.groups["solo"].state is GroupState.EMPTY  # an offset is left
    h.clock.advance(RETENTION // 2)
    assert h.committed("solo") == {} and "solo" not in h.coord.groups
    # generation 0: the group never had a GroupMetadataValue, so only its offsets get tombstones
    assert sorted(h.tombstones("solo"), key=repr) == [schema.OffsetKey("solo", "t", 0), schema.OffsetKey("solo", "t", 1)]


@async_test
async def test_an_empty_group_without_offsets_becomes_dead_at_the_next_run():
    h = await Harness().start()
    member = h.form_group("g", "t")
    h.leave("g", member)
    assert h.coord.cleanup_group_metadata() == 0
    assert "g" not in h.coord.groups and h.tombstones("g") == [schema.GroupKey("g")]
    # the group id is free again: a new consumer starts a new group
    joined = h.join("g", ("t",))
    h.clock.advance(0)
    assert joined.result().error == 0 and joined.result().generation_id == 1


@async_test
async def test_pending_transactional_offsets_are_never_expired():
    h = await Harness().start()
    producer = Producer(producer_id=7, producer_epoch=0)
    h.commit("tx", {("t", 1): 5})
    result = await h.coord.txn_commit_offsets("tx", producer, "", None, -1, {("t", 0): (100, -1, "")})
    assert result == {("t", 0): 0}
    h.clock.advance(RETENTION + CHECK)
    # the committed offset expired; the one of the open transaction stays, and so does the group
    assert h.committed("tx") == {}
    assert {pid: set(offsets) for pid, offsets in h.coord.groups["tx"].pending_txn_offsets.items()} == {7: {("t", 0)}}
    assert h.coord.unstable_offsets("tx", [("t", 0)]) == {("t", 0)}
    assert h.tombstones("tx") == [schema.OffsetKey("tx", "t", 1)]

    h.coord.complete_txn(7, True, None)
    assert h.committed("tx") == {("t", 0): 100}
    # once committed it is an offset like any other, expiring by the time TxnOffsetCommit stored it
    h.clock.advance(CHECK)
    assert h.committed("tx") == {} and "tx" not in h.coord.groups


class GatedStore(MemoryGroupStore):
    """Appends that wait for the ISR as a cluster's do: each wait ends when the test resolves its gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Future] = []

    def append(self, group_id, records, timestamp_ms, producer=None) -> WaitForIsr | None:
        super().append(group_id, records, timestamp_ms, producer)
        gate = asyncio.get_running_loop().create_future()
        self.gates.append(gate)

        async def wait() -> None:
            await gate

        return wait


@async_test
async def test_a_commit_waiting_for_the_isr_is_neither_expired_nor_left_in_a_dead_group():
    store = GatedStore()
    h = await Harness(store).start()
    first = asyncio.ensure_future(h.coord.handle_commit_offsets("solo", "", None, -1, {("t", 0): (1, -1, "")}))
    await asyncio.sleep(0)
    store.gates[-1].set_result(None)
    assert await first == {("t", 0): 0}
    h.clock.advance(RETENTION - CHECK)

    # a new commit of a partition about to expire, and a new group's first commit, both still in flight
    again = asyncio.ensure_future(h.coord.handle_commit_offsets("solo", "", None, -1, {("t", 0): (2, -1, "")}))
    fresh = asyncio.ensure_future(h.coord.handle_commit_offsets("new", "", None, -1, {("t", 0): (3, -1, "")}))
    await asyncio.sleep(0)
    appended = len(store.records)
    h.clock.advance(2 * CHECK)
    assert len(store.records) == appended and h.committed("solo") == {("t", 0): 1}
    assert h.coord.groups["new"].state is GroupState.EMPTY
    for gate in store.gates[-2:]:
        gate.set_result(None)
    assert await again == {("t", 0): 0} and await fresh == {("t", 0): 0}
    assert h.committed("solo") == {("t", 0): 2} and h.committed("new") == {("t", 0): 3}

    # the tombstones of a cluster are appended, not waited for (Kafka writes them with acks=0)
    h.clock.advance(RETENTION)
    assert not store.gates[-1].done() and h.committed("solo") == {} and h.coord.groups == {}
    assert h.tombstones("solo") == [schema.OffsetKey("solo", "t", 0)]


class FailingStore(MemoryGroupStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def append(self, group_id, records, timestamp_ms, producer=None):
        if self.fail:
            raise OSError("disk full")
        return super().append(group_id, records, timestamp_ms, producer)


@async_test
async def test_offsets_whose_tombstones_cannot_be_appended_stay_until_the_next_run():
    store = FailingStore()
    h = await Harness(store).start()
    h.commit("solo", {("t", 0): 1})
    store.fail = True
    h.clock.advance(RETENTION + CHECK)
    assert h.committed("solo") == {("t", 0): 1}
    store.fail = False
    h.clock.advance(CHECK)
    assert h.committed("solo") == {} and h.tombstones("solo") == [schema.OffsetKey("solo", "t", 0)]


def test_the_broker_configs_reach_the_group_config():
    assert BrokerConfig.load(warn=False)["offsets.retention.check.interval.ms"] == 600_000
    config = GroupConfig.from_properties(BrokerConfig.load(
        None, ["offsets.retention.minutes=2", "offsets.retention.check.interval.ms=1000"], warn=False))
    assert (config.offsets_retention_ms, config.offsets_retention_check_interval_ms) == (120_000, 1000)
    assert GroupConfig.from_properties({}).offsets_retention_ms == 10080 * 60_000
    with pytest.raises(ValueError):
        GroupConfig.from_properties({"offsets.retention.check.interval.ms": "0"})


# -- what a reload brings back (real `__consumer_offsets` logs) ------------------------------------------


def open_logs(root: Path) -> dict[int, UnifiedLog]:
    config = LogConfig().with_overrides({"cleanup.policy": "compact"})
    return {p: UnifiedLog(root / f"{OFFSETS_TOPIC}-{p}", config) for p in range(PARTITIONS)}


def group_in(partition: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(1000) if schema.partition_for(f"{prefix}{i}", PARTITIONS) == partition)


def keys_in(plog: UnifiedLog) -> list[tuple[schema.OffsetKey | schema.GroupKey, bool]]:
    """(key, is a tombstone) of every record of the partition, in log order."""
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20, FetchIsolation.LOG_END).records
        raw = data if isinstance(data, (bytes, bytearray)) else data.read_bytes()
        for header, records in iter_batches_records(raw):
            out += [(schema.decode_key(r.key), r.value is None) for r in records]
            offset = header.last_offset + 1
    return out


def test_a_reload_after_expiry_brings_neither_the_offsets_nor_the_dead_group_back(tmp_path: Path):
    clock = ManualScheduler()

    async def first_life() -> tuple[int, int]:
        logs = open_logs(tmp_path)
        h = await Harness(LogGroupStore(logs.get, PARTITIONS), clock).start()
        gone = h.form_group("gone", "t")
        h.commit("gone", {("t", 0): 1}, gone, 1)
        h.commit("solo", {("t", 0): 2})
        h.leave("gone", gone)
        h.clock.advance(RETENTION // 2)
        kept = h.form_group("kept", "t")
        h.commit("kept", {("t", 0): 3}, kept, 1)
        h.leave("kept", kept)
        emptied = h.now()
        h.clock.advance(RETENTION // 2 + CHECK // 2)
        assert h.coord.groups.keys() == {"kept"} and h.committed("kept") == {("t", 0): 3}
        home = logs[schema.partition_for("gone", PARTITIONS)]
        assert (schema.OffsetKey("gone", "t", 0), True) in keys_in(home)
        assert (schema.GroupKey("gone"), True) in keys_in(home)
        await h.coord.shutdown()
        for plog in logs.values():
            plog.close()
        return emptied, h.now()

    async def second_life(emptied: int, stopped: int) -> None:
        logs = open_logs(tmp_path)
        h = await Harness(LogGroupStore(logs.get, PARTITIONS), clock).start()
        assert h.coord.groups.keys() == {"kept"}
        assert h.committed("gone") == {} and h.committed("solo") == {}
        # the group's current_state_timestamp came back from its GroupMetadataValue: the retention
        # still counts from when it became Empty, not from the reload
        kept = h.coord.groups["kept"]
        assert kept.state is GroupState.EMPTY and kept.state_timestamp_ms == emptied < stopped
        h.clock.advance(emptied + RETENTION - CHECK - h.now())
        assert h.committed("kept") == {("t", 0): 3}
        h.clock.advance(2 * CHECK)
        assert h.committed("kept") == {} and h.coord.groups == {}
        await h.coord.shutdown()
        for plog in logs.values():
            plog.close()

    emptied, stopped = asyncio.run(first_life())
    asyncio.run(second_life(emptied, stopped))


def test_a_cluster_coordinator_expires_only_the_groups_of_the_partitions_it_leads(tmp_path: Path):
    logs = open_logs(tmp_path)
    mine, other = group_in(0, "mine"), group_in(1, "other")

    async def run() -> None:
        # a former leader's commits
        writer = Harness(LogGroupStore(logs.get, PARTITIONS))
        await writer.start()
        writer.commit(mine, {("t", 0): 1})
        writer.commit(other, {("t", 0): 2})
        await writer.coord.shutdown()

        clock = ManualScheduler()
        coord = GroupCoordinator.for_cluster(CONFIG, clock, LogGroupStore(logs.get, PARTITIONS),
                                             subscriptions=subscribed_topics)
        await coord.start()
        coord.on_elected(0, 1)
        while coord.state.ownership and coord.state.ownership.loading:
            await asyncio.sleep(0.01)
        ends = {p: plog.log_end_offset for p, plog in logs.items()}
        clock.advance(RETENTION + CHECK)
        assert coord.fetch_offsets(mine, None) == (0, {})
        assert (schema.OffsetKey(mine, "t", 0), True) in keys_in(logs[0])
        # partition 1 is led by another broker: its log is not this coordinator's to write
        assert {p: plog.log_end_offset for p, plog in logs.items() if p != 0} == {p: ends[p] for p in (1, 2)}

        coord.on_elected(1, 1)
        while coord.state.ownership and coord.state.ownership.loading:
            await asyncio.sleep(0.01)
        assert coord.fetch_offsets(other, None)[1][("t", 0)].offset == 2
        clock.advance(CHECK)
        assert coord.fetch_offsets(other, None) == (0, {})
        assert (schema.OffsetKey(other, "t", 0), True) in keys_in(logs[1])
        await coord.shutdown()

    asyncio.run(run())
    for plog in logs.values():
        plog.close()
