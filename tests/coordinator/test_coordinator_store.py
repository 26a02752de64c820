"""The coordinator's state written to real `__consumer_offsets` UnifiedLogs and loaded back."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from pathlib import Path

from tieredlog.coordinator import schema
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore
from tieredlog.coordinator.timer import ManualScheduler
from tieredlog.log.config import LogConfig
from tieredlog.log.types import FetchIsolation
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import CRC_OFFSET, HEADER_SIZE, compute_crc, peek_size
from tieredlog.records.record import build_batch, iter_batches_records
from tieredlog.server.consumer_protocol import subscribed_topics

PARTITIONS = 3


def open_logs(root: Path) -> dict[int, UnifiedLog]:
    # Tiny segments so the load has to walk several of them.
    config = LogConfig().with_overrides({"segment.bytes": "600", "cleanup.policy": "compact"})
    return {p: UnifiedLog(root / f"{OFFSETS_TOPIC}-{p}", config) for p in range(PARTITIONS)}


def coordinator_on(logs: dict[int, UnifiedLog], clock: ManualScheduler) -> GroupCoordinator:
    config = GroupConfig(min_session_timeout_ms=1000, initial_rebalance_delay_ms=0)
    return GroupCoordinator(config, clock, LogGroupStore(logs.get, PARTITIONS), subscriptions=subscribed_topics)


def test_offsets_and_groups_survive_reopening_the_logs(tmp_path: Path):
    async def first_life() -> tuple[str, str]:
        logs = open_logs(tmp_path)
        clock = ManualScheduler()
        coord = coordinator_on(logs, clock)
        await coord.start()
        for i in range(30):
            assert coord.commit_offsets(f"solo-{i % 5}", "", None, -1, {("t", i % 4): (i, 1, f"m{i}")}) \
                == {("t", i % 4): 0}
        coord.commit_offsets("doomed", "", None, -1, {("t", 0): (1, -1, "")})
        assert coord.delete_groups(["doomed"]) == {"doomed": 0}

        futures = [coord.join_group("live", "", None, "cli", "/h", 5000, 9000, "consumer", [("range", b"sub")], False)
                   for _ in range(2)]
        clock.advance(0)
        results = [f.result() for f in futures]
        leader = results[0].leader_id
        follower = next(r.member_id for r in results if r.member_id != leader)
        coord.sync_group("live", 1, follower, None, None, None, {})
        coord.sync_group("live", 1, leader, None, None, None, {leader: b"A", follower: b"B"})
        assert coord.commit_offsets("live", follower, None, 1, {("t", 2): (77, 4, "x")}) == {("t", 2): 0}
        await coord.shutdown()
        # The group's records sit in the partition Kafka would pick for it.
        home = logs[schema.partition_for("live", PARTITIONS)]
        keys, offset = [], home.log_start_offset
        while offset < home.log_end_offset:  # one read returns at most one segment's worth
            data = home.read(offset, 1 << 20, FetchIsolation.LOG_END).records
            raw = data if isinstance(data, (bytes, bytearray)) else data.read_bytes()
            for header, recs in iter_batches_records(raw):
                keys += [schema.decode_key(r.key) for r in recs]
                offset = header.last_offset + 1
        assert schema.GroupKey("live") in keys
        assert sum(len(list(plog.dir.glob("*.log"))) for plog in logs.values()) > PARTITIONS  # rolled
        for plog in logs.values():
            plog.close()
        return leader, follower

    async def second_life(leader: str, follower: str) -> None:
        logs = open_logs(tmp_path)
        coord = coordinator_on(logs, ManualScheduler())
        await coord.start()
        for i in range(25, 30):  # the last commit of each solo group wins
            got = coord.fetch_offsets(f"solo-{i % 5}", [("t", i % 4)])[1][("t", i % 4)]
            assert (got.offset, got.leader_epoch, got.metadata) == (i, 1, f"m{i}")
        assert "doomed" not in coord.groups
        live = coord.groups["live"]
        assert live.state is GroupState.STABLE and live.generation_id == 1 and live.leader_id == leader
        assert live.members[follower].assignment == b"B" and live.protocol_name == "range"
        assert coord.fetch_offsets("live", [("t", 2)])[1][("t", 2)].offset == 77
        await coord.shutdown()
        for plog in logs.values():
            plog.close()

    leader, follower = asyncio.run(first_life())
    asyncio.run(second_life(leader, follower))


def _reseal(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def _batch_on_disk_holding(plog_dir: Path, needle: bytes) -> tuple[Path, int]:
    """(segment file, byte position) of the stored batch whose bytes contain ``needle``."""
    for path in sorted(plog_dir.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            size = peek_size(data, pos)
            if needle in data[pos : pos + size]:
                return path, pos
            pos += size
    raise AssertionError(f"{needle!r} is in no batch")


def test_corrupt_batches_and_records_are_skipped_with_one_line_each(tmp_path: Path, caplog):
    group = "g"
    home = schema.partition_for(group, PARTITIONS)

    def commit(coord: GroupCoordinator, partition: int, offset: int, metadata: str) -> None:
        assert coord.commit_offsets(group, "", None, -1, {("t", partition): (offset, -1, metadata)}) == {("t", partition): 0}

    async def first_life() -> None:
        logs = open_logs(tmp_path)
        coord = coordinator_on(logs, ManualScheduler())
        await coord.start()
        commit(coord, 0, 1, "first")
        commit(coord, 1, 10, "crc-damaged-on-disk")
        plog = logs[home]
        # Records that are garbage under a valid CRC: appends never decode records, loads do.
        two = bytearray(build_batch([(b"k1", b"v1"), (b"k2", b"v2")]))
        second = HEADER_SIZE + 1 + two[HEADER_SIZE] // 2
        two[second + 1 :] = b"\xff" * (len(two) - second - 1)
        # A compacted topic's appends walk the records for keys; as a deleting topic's, this one does
        # not, so the garbage reaches the disk (as it could from an older broker) for the load to meet.
        compacted = plog.config
        plog.config = dataclasses.replace(compacted, cleanup_policy="delete")
        try:
            plog.append_as_leader(_reseal(two), 0)
        finally:
            plog.config = compacted
        plog.append_as_leader(build_batch([(b"\x00\x09 no schema reads this", b"v")]), 0)  # unreadable key
        commit(coord, 2, 20, "after")
        commit(coord, 0, 5, "last")
        await coord.shutdown()
        for plog in logs.values():
            plog.close()

    asyncio.run(first_life())
    home_dir = tmp_path / f"{OFFSETS_TOPIC}-{home}"
    path, pos = _batch_on_disk_holding(home_dir, b"crc-damaged-on-disk")
    data = bytearray(path.read_bytes())
    data[pos + peek_size(data, pos) - 3] ^= 0x55  # inside the value: the CRC no longer holds
    path.write_bytes(bytes(data))

    async def second_life() -> None:
        logs = open_logs(tmp_path)
        coord = coordinator_on(logs, ManualScheduler())
        with caplog.at_level(logging.WARNING):
            await coord.start()
        got = coord.fetch_offsets(group, [("t", p) for p in range(3)])[1]
        assert {p: (v.offset, v.metadata) if v else None for (_, p), v in got.items()} == {
            0: (5, "last"), 1: None, 2: (20, "after")}
        await coord.shutdown()
        for plog in logs.values():
            plog.close()

    asyncio.run(second_life())
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2, [r.getMessage() for r in lines]
    load_line = next(r.getMessage() for r in lines if r.name == "tieredlog.coordinator.storage")
    assert load_line.startswith(f"{OFFSETS_TOPIC}-{home}: loading skipped 2 corrupt batch(es)"), load_line
    assert "skipped 1 unreadable __consumer_offsets record(s)" in next(
        r.getMessage() for r in lines if r.name == "tieredlog.coordinator.loader")
