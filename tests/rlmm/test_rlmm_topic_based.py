"""TopicBasedRemoteLogMetadataManager over an in-memory metadata topic: read-your-write, sharing
between brokers, restarts, and snapshot + tail replay giving the same state as a full replay."""

from __future__ import annotations

import threading
import time
import uuid

import crc32c
import pytest
from rlmm_harness import NUM, TPS, PartitionLogs, log_manager_for, manager, seg, tp, upd

from tieredlog.errors import ReplicaNotAvailableError
from tieredlog.rlmm import serde
from tieredlog.rlmm.api import RemoteLogMetadataManagerFatalError
from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rlmm.snapshot import SNAPSHOT_DIR, snapshot_path
from tieredlog.rlmm.topic import MetadataTopic
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager
from tieredlog.rsm import (
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
)

S = RemoteLogSegmentState


class MemoryMetadataTopic:
    """A metadata topic held in lists: the unit-test stand-in for the broker's partition logs."""

    def __init__(self) -> None:
        self.partitions: list[list[bytes]] | None = None
        self.lock = threading.Lock()
        self.records_read = 0

    def ensure_created(self, num_partitions: int) -> None:
        with self.lock:
            if self.partitions is None:
                self.partitions = [[] for _ in range(num_partitions)]
            elif len(self.partitions) != num_partitions:
                raise RemoteLogMetadataManagerFatalError("partition count mismatch")

    def append(self, partition: int, value: bytes) -> int:
        with self.lock:
            self.partitions[partition].append(bytes(value))
            return len(self.partitions[partition]) - 1

    def read(self, partition: int, from_offset: int):
        with self.lock:
            records = list(self.partitions[partition][from_offset:])
        for i, value in enumerate(records):
            self.records_read += 1
            yield from_offset + i, value

    def end_offset(self, partition: int) -> int:
        with self.lock:
            return len(self.partitions[partition])


def canonical(m: TopicBasedRemoteLogMetadataManager) -> dict:
    """Everything the manager knows, in a comparable form."""
    out = {}
    for p, store in m._stores.items():
        for t, cache in store.caches.items():
            out[(p, t)] = (
                sorted((md.remote_log_segment_id.id.hex, md.start_offset, md.end_offset, int(md.state))
                       for md in cache.id_to_metadata.values()),
                sorted((e, s.highest_log_offset, tuple((o, s.offset_to_id[o].id.hex) for o in s.offsets),
                        tuple(sorted(x.id.hex for x in s.unreferenced))) for e, s in cache.epochs.items()),
            )
        for t, d in store.delete_metadata.items():
            out[(p, t, "delete")] = int(d.state)
    return out


def test_read_your_write_and_queries():
    m = manager(MemoryMetadataTopic())
    t = TPS[0]
    md = seg(t, 0, 99, {0: 0, 3: 50}, size=1000)
    m.add_remote_log_segment_metadata(md)
    assert [x.state for x in m.list_remote_log_segments(t)] == [S.COPY_SEGMENT_STARTED]
    assert m.remote_log_segment_metadata(t, 0, 10) is None
    m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    assert m.remote_log_segment_metadata(t, 0, 10).state == S.COPY_SEGMENT_FINISHED
    assert m.remote_log_segment_metadata(t, 0, 50) is None
    assert m.remote_log_segment_metadata(t, 3, 99) is not None
    assert m.highest_offset_for_epoch(t, 0) == 49
    assert m.highest_offset_for_epoch(t, 3) == 99
    assert m.remote_log_size(t, 3) == 1000
    assert list(m.list_remote_log_segments(TPS[1])) == []
    m.close()


def test_argument_checks():
    m = manager(MemoryMetadataTopic())
    md = seg(TPS[0], 0, 9)
    with pytest.raises(ValueError):
        m.add_remote_log_segment_metadata(md.create_with_updates(upd(md, S.COPY_SEGMENT_FINISHED)))
    with pytest.raises(ValueError):
        m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_STARTED))
    with pytest.raises(RemoteResourceNotFoundException):
        m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    m.close()


def test_records_use_kafka_serde_and_partitioner():
    topic = MemoryMetadataTopic()
    m = manager(topic)
    md = seg(TPS[2], 0, 9)
    m.add_remote_log_segment_metadata(md)
    m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    p = metadata_partition(TPS[2], NUM)
    assert topic.partitions[p] == [serde.serialize(md), serde.serialize(upd(md, S.COPY_SEGMENT_FINISHED))]
    assert sum(len(x) for x in topic.partitions) == 2
    m.close()


def test_invalid_transition_in_topic_is_dropped():
    topic = MemoryMetadataTopic()
    m = manager(topic)
    md = seg(TPS[0], 0, 9)
    m.add_remote_log_segment_metadata(md)
    m.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))  # STARTED -> DELETE_FINISHED
    assert [x.state for x in m.list_remote_log_segments(TPS[0])] == [S.COPY_SEGMENT_STARTED]
    m.close()


def test_two_brokers_share_the_topic():
    topic = MemoryMetadataTopic()
    a, b = manager(topic), manager(topic)
    md = seg(TPS[3], 0, 9)
    a.add_remote_log_segment_metadata(md)
    a.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    found = b.remote_log_segment_metadata(TPS[3], 0, 5)
    assert found is not None and found.remote_log_segment_id == md.remote_log_segment_id
    b.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    assert a.remote_log_segment_metadata(TPS[3], 0, 5) is None
    a.close(), b.close()


def test_partition_states_report_lag_as_last_read_and_time_to_ready():
    topic = MemoryMetadataTopic()
    a, b = manager(topic), manager(topic, **{"broker.id": 7})
    assert b.consumer_client_id == "__remote_log_metadata_client_7_consumer"
    p = metadata_partition(TPS[3], NUM)
    states = {s.partition: s for s in b.metadata_partition_states()}
    assert set(states) == {metadata_partition(t, NUM) for t in TPS}
    assert all(s.lag == 0 and s.ready_time_s is not None and s.ready_time_s >= 0 for s in states.values())
    md = seg(TPS[3], 0, 9)
    a.add_remote_log_segment_metadata(md)
    a.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    # b has not read since: the state reports the end it last saw, without reading the topic itself
    read_before = topic.records_read
    assert {s.partition: s.lag for s in b.metadata_partition_states()}[p] == 0
    assert topic.records_read == read_before
    b._learn_end(p)  # what its next read does first
    assert {s.partition: s.lag for s in b.metadata_partition_states()}[p] == 2
    assert b.remote_log_segment_metadata(TPS[3], 0, 5) is not None  # catches up
    state = {s.partition: s for s in b.metadata_partition_states()}[p]
    assert (state.end_offset, state.consumed_offset, state.lag) == (2, 2, 0)
    a.close(), b.close()


def test_a_loading_partition_has_no_ready_time():
    m = TopicBasedRemoteLogMetadataManager(MemoryMetadataTopic(), {"remote.log.metadata.topic.num.partitions": NUM})
    assert m.metadata_partition_states() == []
    gate = threading.Event()
    for _ in range(4):  # every loader thread busy: the load waits behind them
        m._loader.submit(gate.wait)
    m.on_partition_leadership_changes([TPS[0]], [])
    [state] = m.metadata_partition_states()
    assert state.partition == metadata_partition(TPS[0], NUM) and state.ready_time_s is None
    gate.set()
    m.wait_until_ready([TPS[0]], timeout=30)
    assert m.metadata_partition_states()[0].ready_time_s is not None
    m.close()


def test_not_ready_partition_raises_retriable_error():
    topic = MemoryMetadataTopic()
    m = TopicBasedRemoteLogMetadataManager(topic, {"remote.log.metadata.topic.num.partitions": NUM})
    stranger = TopicIdPartition(uuid.UUID(int=9), "x", 0)
    assert not m.is_ready(stranger)
    with pytest.raises(ReplicaNotAvailableError) as err:
        m.remote_log_segment_metadata(stranger, 0, 0)
    assert err.value.retriable
    m.wait_until_ready([stranger], timeout=30)
    assert m.is_ready(stranger)
    assert m.remote_log_segment_metadata(stranger, 0, 0) is None
    m.close()


def test_partition_count_mismatch_is_fatal():
    topic = MemoryMetadataTopic()
    topic.ensure_created(3)
    m = TopicBasedRemoteLogMetadataManager(topic, {"remote.log.metadata.topic.num.partitions": NUM})
    with pytest.raises(RemoteLogMetadataManagerFatalError):
        m.wait_until_ready(TPS[:1], timeout=30)
    m.close()


def test_concurrent_writers():
    m = manager(MemoryMetadataTopic())
    errors = []

    def work(i: int) -> None:
        try:
            for j in range(20):
                md = seg(TPS[i], j * 10, j * 10 + 9)
                m.add_remote_log_segment_metadata(md)
                m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(TPS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for t in TPS:
        segs = list(m.list_remote_log_segments(t))
        assert [s.start_offset for s in segs] == [j * 10 for j in range(20)]
        assert {s.state for s in segs} == {S.COPY_SEGMENT_FINISHED}
    m.close()


def workload(m, rounds: int, start: int = 0) -> None:
    """Copies, re-uploads by a new leader, deletions and a partition delete across partitions."""
    for r in range(start, start + rounds):
        for i, t in enumerate(TPS):
            md = seg(t, r * 100, r * 100 + 99, {r % 3: r * 100})
            m.add_remote_log_segment_metadata(md)
            if (r + i) % 5 != 0:  # some copies never finish
                m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
            if (r + i) % 4 == 0:
                again = seg(t, r * 100, r * 100 + 99, {r % 3: r * 100})  # a new leader re-uploads
                m.add_remote_log_segment_metadata(again)
                m.update_remote_log_segment_metadata(upd(again, S.COPY_SEGMENT_FINISHED))
            if (r + i) % 3 == 0:
                m.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
                if r % 2:
                    m.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))
    gone = TPS[7]
    m.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
        gone, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 0))


def test_restart_without_snapshot_replays_everything(tmp_path):
    topic = MemoryMetadataTopic()
    m = manager(topic)  # no log.dir: no snapshots
    workload(m, 6)
    before = canonical(m)
    m.close()
    again = manager(topic)
    assert canonical(again) == before
    assert again.highest_offset_for_epoch(TPS[1], 0) == m.highest_offset_for_epoch(TPS[1], 0)
    again.close()


def test_snapshot_plus_tail_equals_full_replay(tmp_path):
    topic = MemoryMetadataTopic()
    m = manager(topic, tmp_path / "broker")
    workload(m, 6)
    assert m.snapshot_now() == len({metadata_partition(t, NUM) for t in TPS})
    assert m.snapshot_now() == 0  # nothing new since
    for p in range(NUM):
        if topic.end_offset(p):
            assert snapshot_path(tmp_path / "broker" / SNAPSHOT_DIR, p).exists()
    workload(m, 3, start=6)  # the tail: not in the snapshot
    # crash: no close(), so the snapshots do not cover the tail
    total = sum(topic.end_offset(p) for p in range(NUM))

    topic.records_read = 0
    from_snapshot = manager(topic, tmp_path / "broker")
    tail_reads = topic.records_read
    topic.records_read = 0
    full = manager(topic, tmp_path / "other")  # no snapshot there
    assert topic.records_read == total
    assert 0 < tail_reads < total / 2
    assert canonical(from_snapshot) == canonical(full) == canonical(m)
    # and it keeps working on top of the restored state
    md = seg(TPS[0], 10_000, 10_099)
    from_snapshot.add_remote_log_segment_metadata(md)
    from_snapshot.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    assert from_snapshot.remote_log_segment_metadata(TPS[0], 0, 10_050) is not None
    assert full.remote_log_segment_metadata(TPS[0], 0, 10_050) is not None
    for x in (from_snapshot, full):
        x.close()


def test_close_writes_snapshot_covering_everything(tmp_path):
    topic = MemoryMetadataTopic()
    m = manager(topic, tmp_path)
    workload(m, 3)
    m.close()
    topic.records_read = 0
    again = manager(topic, tmp_path)
    assert topic.records_read == 0
    assert canonical(again) == canonical(m)
    again.close()


def test_corrupt_or_stale_snapshot_is_ignored(tmp_path):
    topic = MemoryMetadataTopic()
    m = manager(topic, tmp_path)
    workload(m, 3)
    m.close()
    expected = canonical(m)
    paths = sorted((tmp_path / SNAPSHOT_DIR).glob("*.snapshot"))
    assert paths
    data = bytearray(paths[0].read_bytes())
    data[-5] ^= 0xFF  # flip a byte in the body: the checksum catches it
    paths[0].write_bytes(bytes(data))
    again = manager(topic, tmp_path)
    assert canonical(again) == expected
    again.close()

    # a snapshot that claims more than the topic holds (topic recreated) is not trusted
    fresh = MemoryMetadataTopic()
    empty = manager(fresh, tmp_path)
    assert canonical(empty) == {}
    empty.close()


# -- over real PartitionLogs ------------------------------------------------------------------------

from tieredlog.log.types import TopicPartition  # noqa: E402
from tieredlog.rlmm.topic import METADATA_TOPIC, LogMetadataTopic, iter_partition_dir  # noqa: E402


def test_log_metadata_topic_is_a_metadata_topic(tmp_path):
    assert isinstance(LogMetadataTopic(PartitionLogs(tmp_path), lambda *a: 0), MetadataTopic)


def test_over_partition_logs_restart_and_offline_read(tmp_path):
    logs = PartitionLogs(tmp_path / "data")
    m = log_manager_for(logs, tmp_path / "data")
    workload(m, 5)
    state = canonical(m)
    assert logs.created == 1
    # every record is in the log, in Kafka's serde, readable offline from the partition folders
    values = []
    for p in range(NUM):
        plog = logs.get_log(TopicPartition(METADATA_TOPIC, p))
        assert plog.high_watermark == plog.log_end_offset
        offline = list(iter_partition_dir(plog.dir))
        assert [o for o, _ in offline] == list(range(plog.log_end_offset))
        values += [serde.deserialize(v) for _, v in offline]
    assert len(values) == sum(logs.get_log(TopicPartition(METADATA_TOPIC, p)).log_end_offset for p in range(NUM))
    assert sum(1 for plog in logs.logs.values() if len(plog.segments) > 1) >= 1  # reads cross segment files
    m.close()

    logs.restart()
    from_snapshot = log_manager_for(logs, tmp_path / "data")
    assert canonical(from_snapshot) == state
    workload(from_snapshot, 2, start=5)
    from_snapshot.close()
    assert logs.created == 1  # the topic was found, not created again

    logs.restart()
    replayed = log_manager_for(logs)  # no snapshots: the whole topic from offset 0
    assert canonical(replayed) == canonical(from_snapshot)
    replayed.close()


def test_over_partition_logs_partition_count_mismatch(tmp_path):
    logs = PartitionLogs(tmp_path)
    logs.create_topic(METADATA_TOPIC, 3, 1, {"cleanup.policy": "delete", "remote.storage.enable": "false"})
    m = TopicBasedRemoteLogMetadataManager(LogMetadataTopic(logs, logs.create_topic),
                                           {"remote.log.metadata.topic.num.partitions": NUM})
    with pytest.raises(RemoteLogMetadataManagerFatalError):
        m.wait_until_ready(TPS[:1], timeout=30)
    m.close()


# -- damaged records, batches and snapshots: skipped with one line each, never a failed load ----------

import logging  # noqa: E402
import random  # noqa: E402
import struct  # noqa: E402

from tieredlog.records.batch import CRC_OFFSET, HEADER_SIZE, compute_crc, peek_size  # noqa: E402
from tieredlog.records.record import build_batch  # noqa: E402
from tieredlog.rlmm.snapshot import MAGIC, VERSION  # noqa: E402


def test_undecodable_values_are_skipped_with_one_line_each(caplog):
    topic = MemoryMetadataTopic()
    m = manager(topic)
    workload(m, 3)
    expected = canonical(m)
    m.close()
    rnd = random.Random(7)
    garbage = [b"", b"\x01", b"\x02\x00\x00", b"\x01\x00\x00" + b"\xff" * 9, rnd.randbytes(40),
               serde.serialize(seg(TPS[0], 1, 2))[:-7], b"\x01\x00\x00" + bytes.fromhex("ffffffff0f")]
    loaded = sorted({m.partition_for(t) for t in TPS})  # the partitions a manager of TPS reads
    for i, value in enumerate(garbage):
        topic.append(loaded[i % len(loaded)], value)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = manager(topic)
    assert canonical(again) == expected
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == len(garbage) and all("skipping undecodable record" in line for line in lines), lines
    again.close()


def _batch_holding(plog_dir, needle: bytes):
    for path in sorted(plog_dir.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            size = peek_size(data, pos)
            if needle in data[pos : pos + size]:
                return path, pos, size
            pos += size
    raise AssertionError("not found")


def test_over_partition_logs_corrupt_batches_are_skipped_and_later_records_load(tmp_path, caplog):
    logs = PartitionLogs(tmp_path / "data")
    m = log_manager_for(logs)
    workload(m, 2)
    fresh = tp(100)
    p = m.partition_for(fresh)
    plog = logs.get_log(TopicPartition(METADATA_TOPIC, p))
    lost, kept = seg(fresh, 0, 9), seg(fresh, 10, 19)
    m.add_remote_log_segment_metadata(lost)
    # records that are garbage under a valid CRC (appends never decode records)
    bad = bytearray(build_batch([(None, b"x" * 30), (None, b"y" * 30)]))
    bad[HEADER_SIZE + 33 :] = b"\xff" * (len(bad) - HEADER_SIZE - 33)
    struct.pack_into(">I", bad, CRC_OFFSET, compute_crc(bad, 0, len(bad)))
    plog.append_as_leader(bytes(bad), 0)
    m.add_remote_log_segment_metadata(kept)
    expected = canonical(m)
    m.close()
    path, pos, size = _batch_holding(plog.dir, lost.remote_log_segment_id.id.bytes)
    data = bytearray(path.read_bytes())
    data[pos + size - 2] ^= 0x5A  # the value's last bytes: the CRC no longer holds
    path.write_bytes(bytes(data))
    logs.restart()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = log_manager_for(logs)
    got = canonical(again)
    ids = {s.remote_log_segment_id.id for s in again.list_remote_log_segments(fresh)}
    assert ids == {kept.remote_log_segment_id.id}  # the damaged record is a gap, the next one is there
    assert {k: v for k, v in got.items() if k[1] != fresh} == {k: v for k, v in expected.items() if k[1] != fresh}
    lines = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2 and all(n == "tieredlog.rlmm.topic" and "skipping a corrupt batch" in msg
                                   for n, msg in lines), lines
    again.close()


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b"[" * 100_000 + b"]" * 100_000, b'{"partitions": "x"}',
                                  b'{"metadata_partition": 0, "num_partitions": 5, "next_offset": 0, "partitions": [7]}',
                                  b"\xff\xfe not utf-8"])
def test_snapshot_with_a_valid_checksum_but_bad_content_is_ignored(tmp_path, body, caplog):
    topic = MemoryMetadataTopic()
    m = manager(topic, tmp_path)
    workload(m, 2)
    m.close()
    expected = canonical(m)
    for path in sorted((tmp_path / SNAPSHOT_DIR).glob("*.snapshot")):
        header = struct.pack(">8sHIQ", MAGIC, VERSION, crc32c.crc32c(body), len(body))
        path.write_bytes(header + body)
    with caplog.at_level(logging.WARNING):
        again = manager(topic, tmp_path)
    assert canonical(again) == expected  # replayed from the topic instead
    assert any("ignoring metadata snapshot" in r.getMessage() for r in caplog.records)
    again.close()


class LeaderlessMetadataTopic(MemoryMetadataTopic):
    """A metadata topic whose partitions have no leader until ``leader_back`` is set, as after every
    replica restarted at once: reads give up as the cluster client does after its request timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.leader_back = threading.Event()

    def end_offset(self, partition: int) -> int:
        if not self.leader_back.is_set():
            raise TimeoutError(f"end offset of __remote_log_metadata-{partition}: gave up, no leader")
        return super().end_offset(partition)


def test_a_load_that_failed_is_tried_again_when_the_partition_is_asked_for(caplog):
    topic = LeaderlessMetadataTopic()
    first = MemoryMetadataTopic()
    writer = manager(first)
    md = seg(TPS[0], 0, 9)
    writer.add_remote_log_segment_metadata(md)
    writer.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    writer.close()
    topic.partitions = first.partitions
    m = TopicBasedRemoteLogMetadataManager(topic, {"remote.log.metadata.topic.num.partitions": NUM, "broker.id": 1,
                                                   "remote.log.metadata.snapshot.interval.ms": 0})
    try:
        m.on_partition_leadership_changes([TPS[0]], [])
        with pytest.raises(TimeoutError):
            m.wait_until_ready([TPS[0]], timeout=30)
        assert "not loaded yet" in caplog.text and not m.is_ready(TPS[0])
        topic.leader_back.set()
        # the RLM's tasks ask on every pass; no leadership change comes to trigger a load
        deadline = time.monotonic() + 30
        while not m.is_ready(TPS[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert m.remote_log_segment_metadata(TPS[0], 0, 5).remote_log_segment_id == md.remote_log_segment_id
    finally:
        m.close()
