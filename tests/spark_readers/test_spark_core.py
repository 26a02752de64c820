"""spark_readers without Spark: segments written by tieredlog's own LogSegment, copied by
LocalTieredStorage (the broker's default remote tier), read back through the fsspec RSM from a
file:// URL; the decoder against all five codecs; lineage resolution of overlapping uploads; the
planner's ranged reads."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from spark_harness import TOPIC, TS0, expected_rows, record, write_segment

from spark_readers.catalog import Catalog, Lineage, build_lineage, resolve_slices
from spark_readers.decoder import CorruptSegmentError, Source, decode_records, kafka_schema
from spark_readers.indexes import offset_index_entries
from spark_readers.options import OptionError, parse_options
from spark_readers.planner import PlanError, plan
from spark_readers.read import read_task
from spark_readers.storage import StorageError, open_storage, storage_spec
from tieredlog.formats.checkpoints import encode_leader_epoch_checkpoint
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import CONTROL_COMMIT, build_batch, build_control_batch
from tieredlog.rsm.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tieredlog.rsm.local import LocalTieredStorage


@pytest.fixture
def remote(tmp_path: Path) -> tuple[LocalTieredStorage, Path]:
    folder = tmp_path / "remote"
    rsm = LocalTieredStorage(folder)
    return rsm, folder


def options(folder: Path, **extra: str) -> dict[str, str]:
    return {"path": folder.as_uri(), "topic": TOPIC, **extra}


def read_all(folder: Path, **extra: str) -> pa.Table:
    opts = parse_options(options(folder, **extra))
    rsm = open_storage(storage_spec(opts.path, opts.storage))
    batches = [read_task(rsm, t, opts.include_headers) for t in plan(rsm, opts)]
    return pa.Table.from_batches(batches, schema=kafka_schema(opts.include_headers))


def table_rows(table: pa.Table) -> list[dict]:
    rows = table.to_pylist()
    for r in rows:
        r["timestamp"] = int(r["timestamp"].timestamp() * 1000)
    return rows


def test_reads_local_tiered_storage_folder_with_every_codec(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    a = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 60)
    b = write_segment(tmp_path, rsm, tp, [(0, 0)], 60, 130, with_control=True)
    written = {**a.records, **b.records}
    table = read_all(folder, includeHeaders="true")
    assert table.schema == kafka_schema(True)
    assert table_rows(table) == expected_rows(written, 0, sorted(written))  # control records skipped
    assert read_all(folder).schema.names == kafka_schema(False).names  # no headers column by default


def test_offset_ranges_read_sub_ranges_with_the_index(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    tp0, tp1 = TopicIdPartition(uuid.uuid4(), TOPIC, 0), None
    tp1 = TopicIdPartition(tp0.topic_id, TOPIC, 1)
    w0 = write_segment(tmp_path, rsm, tp0, [(0, 0)], 0, 200, per_batch=3)
    w1 = write_segment(tmp_path, rsm, tp1, [(0, 0)], 0, 50)
    opts = parse_options(options(folder, startingOffsets='{"orders":{"0":37,"1":-2}}',
                                 endingOffsets='{"orders":{"0":151,"1":-1}}'))
    rsm_r = open_storage(storage_spec(opts.path, opts.storage))
    tasks = plan(rsm_r, opts)
    p0 = [t for t in tasks if t.partition == 0]
    assert p0[0].start_position > 0 and p0[-1].end_position is not None  # a ranged GET, not the object
    assert p0[-1].end_position < w0.metadata.segment_size_in_bytes - 1
    table = pa.Table.from_batches([read_task(rsm_r, t, True) for t in tasks])
    got = table_rows(table)
    assert got == expected_rows(w0.records, 0, range(37, 151)) + expected_rows(w1.records, 1, range(0, 50))


def test_large_segments_split_at_batch_boundaries(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    w = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 300, per_batch=4)
    opts = parse_options(options(folder, maxBytesPerPartition="1000", includeHeaders="true"))
    rsm_r = open_storage(storage_spec(opts.path, opts.storage))
    tasks = plan(rsm_r, opts)
    assert len(tasks) > 5
    positions = [(t.start_position, t.end_position) for t in tasks]
    assert positions[0][0] == 0 and positions[-1][1] == w.metadata.segment_size_in_bytes - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(positions, positions[1:]))  # contiguous, no overlap
    index_positions = {p for _, p in offset_index_entries(rsm_r, w.metadata)}
    assert all(t.start_position == 0 or t.start_position in index_positions for t in tasks)
    got = table_rows(pa.Table.from_batches([read_task(rsm_r, t, True) for t in tasks]))
    assert got == expected_rows(w.records, 0, range(300))


def test_overlapping_uploads_resolve_to_the_latest_epoch_lineage(tmp_path: Path, remote) -> None:
    """A (epoch 0) holds 0..99; C is a retried copy of the same offsets under another segment id; B was
    written after a failover: epoch 0 up to 49, then epoch 1 from 50 with other records (A's 50..99
    were truncated away). The log is 0..49 of epoch 0, then B's 50..79."""
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    a = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 100, tag=b"A")
    write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 100, tag=b"A")
    # epoch 0's records are the same in every copy (one leader wrote them); epoch 1's differ
    b = write_segment(tmp_path, rsm, tp, [(0, 0), (1, 50)], 0, 80, tag=b"B", tag_from=50)
    segments = Catalog(open_storage(storage_spec(folder.as_uri(), {}))).committed_segments(TOPIC)[0]
    assert len(segments) == 3
    assert build_lineage(segments) == [(0, 0), (1, 50)]
    slices = resolve_slices(segments)
    assert [(s.from_offset, s.to_offset) for s in slices][-1][1] == 80
    assert all(x.to_offset == y.from_offset for x, y in zip(slices, slices[1:]))
    assert slices[-1].segment.metadata.remote_log_segment_id == b.metadata.remote_log_segment_id
    got = table_rows(read_all(folder, includeHeaders="true"))
    assert [r["offset"] for r in got] == list(range(80))
    assert got[:50] == expected_rows(a.records, 0, range(50))
    assert got[50:] == expected_rows(b.records, 0, range(50, 80))


def test_lineage_drops_a_lower_epoch_overwritten_from_its_start() -> None:
    def seg(epochs: dict[int, int], end: int, ts: int) -> object:
        tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), min(epochs.values()), end, 0, 0, ts,
                                      1, epochs)
        from spark_readers.catalog import Segment
        return Segment(md, 1, "x")

    # epoch 2 wrote 10.. after an unclean election that discarded epoch 1's 10..; epoch 1 is gone
    segments = [seg({0: 0}, 9, 1), seg({1: 10}, 19, 2), seg({2: 10}, 25, 3)]
    assert build_lineage(segments) == [(0, 0), (2, 10)]  # type: ignore[arg-type]
    slices = resolve_slices(segments)  # type: ignore[arg-type]
    assert [(s.from_offset, s.to_offset, s.segment.metadata.event_timestamp_ms) for s in slices] == [
        (0, 10, 1), (10, 26, 3)]


def catalog_view(folder: Path) -> tuple[Catalog, list]:
    catalog = Catalog(open_storage(storage_spec(folder.as_uri(), {})))
    return catalog, catalog.committed_segments(TOPIC)[0]


def slice_ids(slices: list) -> list[tuple[int, int, uuid.UUID]]:
    return [(s.from_offset, s.to_offset, s.segment.metadata.remote_log_segment_id.id) for s in slices]


def test_two_unclean_elections_read_the_lineage_of_the_newest_epoch(tmp_path: Path, remote) -> None:
    """KIP-405 scenario 5. A tiers seg-0-3 (epoch 0, uuid1). B wins an unclean election, writes 2..4 in
    epoch 1 and tiers its own seg-0-3 (uuid2). A wins another unclean election without ever having seen
    epoch 1, writes 5.. in epoch 2 and tiers seg-4-5 (uuid3, lineage {0:0, 2:5}). Epoch 1 is abandoned:
    offsets 0..3 are uuid1's, 4 and 5 uuid3's, and none of B's records is read."""
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    uuid1 = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 4, tag=b"A")
    uuid2 = write_segment(tmp_path, rsm, tp, [(0, 0), (1, 2)], 0, 4, tag=b"B", tag_from=2)
    uuid3 = write_segment(tmp_path, rsm, tp, [(0, 0), (2, 5)], 4, 6, tag=b"C", tag_from=5)
    assert uuid3.metadata.segment_leader_epochs == {0: 4, 2: 5}
    catalog, segments = catalog_view(folder)
    assert build_lineage(segments) == [(0, 0), (1, 2), (2, 5)]  # what the epoch maps alone would claim
    assert catalog.lineage(segments) == Lineage([(0, 0), (2, 5)], 6)
    assert slice_ids(catalog.resolve(segments)) == [
        (0, 4, uuid1.metadata.remote_log_segment_id.id), (4, 6, uuid3.metadata.remote_log_segment_id.id)]
    got = table_rows(read_all(folder, includeHeaders="true"))
    assert got == expected_rows(uuid1.records, 0, range(4)) + expected_rows(uuid3.records, 0, range(4, 6))
    assert uuid2.records[2][1] is not None and uuid2.records[2][1].startswith(b"B")
    assert not any(r["value"] is not None and r["value"].startswith(b"B") for r in got)  # none of B's


def test_unclean_election_with_truncation_ends_the_tiered_history_at_the_new_leader(tmp_path: Path,
                                                                                   remote) -> None:
    """KIP-405 scenario 4. A tiers seg-0-2 in epoch 0; out-of-sync B wins an unclean election with only
    offset 0, writes offset 1 in epoch 1 and tiers seg-0-1. Offset 1 is B's record; A's offset 2 belongs
    to another history, so the tiered part ends at 1."""
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    a = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 3, tag=b"A")
    b = write_segment(tmp_path, rsm, tp, [(0, 0), (1, 1)], 0, 2, tag=b"B", tag_from=1)
    catalog, segments = catalog_view(folder)
    assert catalog.lineage(segments) == Lineage([(0, 0), (1, 1)], 2)
    assert slice_ids(catalog.resolve(segments)) == [(0, 2, b.metadata.remote_log_segment_id.id)]
    got = table_rows(read_all(folder))
    assert [r["offset"] for r in got] == [0, 1]
    assert got[0]["value"] == a.records[0][1] == b.records[0][1]
    assert got[1]["value"] == b.records[1][1] != a.records[1][1]
    with pytest.raises(PlanError, match=r"orders-0: offsets from 2 are not in the remote tier"):
        read_all(folder, endingOffsets='{"orders":{"0":3}}')


def test_clean_failover_reads_each_offset_from_the_copy_of_its_epoch(tmp_path: Path, remote) -> None:
    """KIP-405 scenario 3. A tiers seg-0-1 in epoch 0; both crash, B (still in the ISR) lost offset 1,
    writes another record there in epoch 1 and tiers seg-1-1. Offset 0 comes from seg-0-1, offset 1 from
    seg-1-1."""
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    a = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 2, tag=b"A", per_batch=1)
    b = write_segment(tmp_path, rsm, tp, [(0, 0), (1, 1)], 1, 2, tag=b"B", tag_from=1)
    assert b.metadata.segment_leader_epochs == {1: 1}
    catalog, segments = catalog_view(folder)
    assert catalog.lineage(segments) == Lineage([(0, 0), (1, 1)], 2)
    assert slice_ids(catalog.resolve(segments)) == [
        (0, 1, a.metadata.remote_log_segment_id.id), (1, 2, b.metadata.remote_log_segment_id.id)]
    got = table_rows(read_all(folder, includeHeaders="true"))
    assert got == expected_rows(a.records, 0, range(1)) + expected_rows(b.records, 0, range(1, 2))


def test_offsets_below_the_lineage_start_were_deleted_and_are_not_read(tmp_path: Path, remote) -> None:
    """The broker cuts its epoch history at the log start offset (retention, DeleteRecords): a copy
    uploaded after DeleteRecords to 5 ships {0: 5}, and 0..4 of the older copy wait for deletion."""
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    old = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 10, per_batch=2)
    new = write_segment(tmp_path, rsm, tp, [(0, 5)], 10, 20)
    catalog, segments = catalog_view(folder)
    assert catalog.lineage(segments) == Lineage([(0, 5)], 20)
    got = table_rows(read_all(folder, includeHeaders="true"))
    assert got == expected_rows({**old.records, **new.records}, 0, range(5, 20))
    with pytest.raises(PlanError, match=r"offset 0 is no longer in the remote tier \(earliest 5\)"):
        read_all(folder, startingOffsets='{"orders":{"0":0}}')


@pytest.mark.parametrize("damage", ["missing", "garbage", "disagrees"])
def test_an_unusable_checkpoint_falls_back_to_the_epoch_maps_with_one_warning(
        tmp_path: Path, remote, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 10)
    newest = write_segment(tmp_path, rsm, tp, [(0, 0), (1, 5)], 0, 10, tag=b"B", tag_from=5)
    checkpoint = rsm.segment_path(newest.metadata, ".leader_epoch_checkpoint")
    if damage == "missing":
        checkpoint.unlink()
    elif damage == "garbage":
        checkpoint.write_bytes(b"0\n2\n0 0\n")
    else:  # a well-formed checkpoint of another segment's history
        checkpoint.write_bytes(encode_leader_epoch_checkpoint([(0, 0), (1, 3)]))
    catalog, segments = catalog_view(folder)
    with caplog.at_level("WARNING", logger="spark_readers.catalog"):
        assert catalog.lineage(segments) == Lineage([(0, 0), (1, 5)], None)
    warnings = [r for r in caplog.records if r.name == "spark_readers.catalog"]
    assert len(warnings) == 1 and "leader_epoch_checkpoint" in warnings[0].getMessage()
    got = table_rows(read_all(folder, includeHeaders="true"))
    assert got == expected_rows(newest.records, 0, range(10))


def test_decoder_reports_the_object_and_byte_of_a_corrupt_batch() -> None:
    batch = bytearray(build_batch([record(i) for i in range(5)], base_offset=10, codec=4))
    good = build_batch([record(i) for i in range(3)], base_offset=0)
    data = bytes(good) + bytes(batch[:-1]) + bytes([batch[-1] ^ 0xFF])
    source = Source(TOPIC, 0, "orders-x/0/00000000000000000000-abc.log", 4096)
    with pytest.raises(CorruptSegmentError, match=rf"00000000000000000000-abc.log: corrupt batch at byte {4096 + len(good)}"):
        decode_records(data, source, 0, 100, False)
    with pytest.raises(CorruptSegmentError, match=r"partial batch at byte 4096"):
        decode_records(good[:-3], source, 0, 100, False)


def test_decoder_skips_control_batches_and_out_of_range_records() -> None:
    data = (build_batch([record(i) for i in range(4)], base_offset=0, codec=2)
            + build_control_batch(CONTROL_COMMIT, 1, 0, 4, TS0)
            + build_batch([record(i) for i in range(5, 9)], base_offset=5, codec=3))
    out = decode_records(data, Source(TOPIC, 2, "x", 0), 2, 7, True)
    assert out.column("offset").to_pylist() == [2, 3, 5, 6]
    assert out.column("partition").to_pylist() == [2] * 4
    assert out.schema == kafka_schema(True)


def test_errors_are_clear(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 20)
    with pytest.raises(Exception, match="topic 'missing' has no committed segments"):
        read_all(folder, topic="missing")
    with pytest.raises(PlanError, match=r"orders-0: offsets from 20 are not in the remote tier"):
        read_all(folder, endingOffsets='{"orders":{"0":25}}')
    with pytest.raises(OptionError, match="exactly one of"):
        parse_options({"path": folder.as_uri()})
    with pytest.raises(OptionError, match="startingOffsets must list every partition"):
        read_all(folder, startingOffsets='{"orders":{"1":0}}')
    with pytest.raises(StorageError, match="is not a folder"):
        open_storage(storage_spec((tmp_path / "nowhere").as_uri(), {}))
    with pytest.raises(StorageError, match="key.prefix"):
        storage_spec("s3://bucket/../etc", {})


def test_a_corrupt_object_is_named_with_its_byte_position(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    w = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 30)
    log_file = rsm.segment_path(w.metadata, ".log")
    data = bytearray(log_file.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch, covered by its CRC
    log_file.write_bytes(bytes(data))
    last = [p for p, _ in iter_headers(bytes(data))][-1]
    with pytest.raises(CorruptSegmentError, match=rf"{log_file.name}: corrupt batch at byte {last}: .*CRC"):
        read_all(folder)


def test_credentials_errors_never_show_the_secret() -> None:
    with pytest.raises(StorageError) as err:
        open_storage(storage_spec("s3://bucket/p", {"storage.aws.access.key.id": "AKIAEXAMPLE",
                                                     "storage.s3.endpoint.url": "http://127.0.0.1:9"}))
    assert "storage.aws.secret.access.key" in str(err.value) and "rsm.config." not in str(err.value)
    with pytest.raises(StorageError) as err:
        open_storage(storage_spec("s3://bucket/p", {
            "storage.aws.access.key.id": "AKIAEXAMPLE", "storage.aws.secret.access.key": "very-secret",
            "storage.s3.endpoint.url": "http://127.0.0.1:9", "storage.s3.retry.max.attempts": "1",
            "storage.s3.api.call.timeout.ms": "500"}))
    assert "cannot reach S3 bucket 'bucket'" in str(err.value)
    assert "very-secret" not in str(err.value) and "AKIAEXAMPLE" not in str(err.value)


def test_timestamp_options_find_the_earliest_offset_at_or_after_the_time(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    a = write_segment(tmp_path, rsm, tp, [(0, 0)], 0, 120, jumble=True, per_batch=3)
    b = write_segment(tmp_path, rsm, tp, [(0, 0)], 120, 200, per_batch=3)
    written = {**a.records, **b.records}

    def first_at_or_after(ts: int) -> int:
        return min(o for o, r in written.items() if r[3] >= ts)

    for start_ts, end_ts in ((TS0 + 50, TS0 + 150), (TS0 + 100, TS0 + 170), (TS0 - 5, TS0 + 1000)):
        got = read_all(folder, startingTimestamp=str(start_ts), endingTimestamp=str(end_ts))
        end = first_at_or_after(end_ts) if end_ts <= TS0 + 199 else 200
        assert got.column("offset").to_pylist() == list(range(first_at_or_after(start_ts), end)), (start_ts, end_ts)
    by_partition = read_all(folder, startingOffsetsByTimestamp=f'{{"{TOPIC}":{{"0":{TS0 + 77}}}}}',
                            startingOffsets="latest")  # the timestamp wins, as in Spark
    assert by_partition.column("offset").to_pylist()[0] == first_at_or_after(TS0 + 77)
    with pytest.raises(PlanError, match="no record in the remote tier has a timestamp at or after"):
        read_all(folder, startingTimestamp=str(TS0 + 10_000))
    assert read_all(folder, startingTimestamp=str(TS0 + 10_000),
                    startingOffsetsByTimestampStrategy="latest").num_rows == 0


def test_a_topic_name_that_prefixes_another_lists_only_its_own_segments(tmp_path: Path, remote) -> None:
    rsm, folder = remote
    mine = write_segment(tmp_path, rsm, TopicIdPartition(uuid.uuid4(), TOPIC, 0), [(0, 0)], 0, 10)
    write_segment(tmp_path, rsm, TopicIdPartition(uuid.uuid4(), TOPIC + "-archive", 0), [(0, 0)], 0, 30)
    assert Catalog(open_storage(storage_spec(folder.as_uri(), {}))).topics() == [TOPIC, TOPIC + "-archive"]
    assert read_all(folder).column("offset").to_pylist() == sorted(mine.records)
    opts = parse_options({"path": folder.as_uri(), "topicPattern": r"orders-.*"})
    rsm_r = open_storage(storage_spec(opts.path, opts.storage))
    assert sum(read_task(rsm_r, t, False).num_rows for t in plan(rsm_r, opts)) == 30
