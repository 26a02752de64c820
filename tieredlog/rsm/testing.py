"""Conformance kit for RemoteStorageManager authors (pytest).

Subclass :class:`RemoteStorageManagerConformance` in a test module whose class name starts with
``Test`` and override :meth:`make_rsm`; pytest then runs every contract check against your backend::

    from tieredlog.rsm.testing import RemoteStorageManagerConformance

    class TestMyStorage(RemoteStorageManagerConformance):
        def make_rsm(self, tmp_path):
            rsm = MyStorage()
            rsm.configure({"my.dir": str(tmp_path / "remote"), "broker.id": 0})
            return rsm

The checks follow Kafka's RSM javadoc: copy and fetch (whole, ranges with an inclusive end, an end
past the object), every index type, a missing transaction index raising
RemoteResourceNotFoundException, idempotent copy (overwrite) and delete (twice), fetching a deleted
or never-written segment, concurrent readers, and a large segment (``large_segment_size``, 20 MiB by
default: configure small multipart or chunk sizes in ``make_rsm`` so it crosses them).

A backend that can also list what it holds (:class:`~tieredlog.rsm.listing.ListableRemoteStorageManager`,
which readers without a broker need) subclasses :class:`ListableRemoteStorageManagerConformance` instead;
one that keeps a compacted partition's remote clean offset without listing
(:class:`~tieredlog.rsm.cleaner_offset.RemoteCleanerOffsetStore`) subclasses
:class:`RemoteCleanerOffsetStoreConformance`.
"""

from __future__ import annotations

import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import pytest

from tieredlog.formats.manifest import manifest_fields
from tieredlog.rsm.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from tieredlog.rsm.cleaner_offset import RemoteCleanerOffsetStore
from tieredlog.rsm.listing import ListableRemoteStorageManager

MIB = 1024 * 1024


@dataclass
class SegmentFixture:
    """A segment's files on disk, the metadata the RLM would pass, and the expected bytes."""

    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    log: bytes
    indexes: dict[IndexType, bytes]


def random_bytes(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def make_segment(
    directory: Path,
    *,
    size: int = 64 * 1024,
    with_txn_index: bool = True,
    topic: str = "conformance.topic-1",
    partition: int = 3,
    start_offset: int = 1000,
    seed: int | None = None,
    topic_id: uuid.UUID | None = None,
    segment_id: uuid.UUID | None = None,
) -> SegmentFixture:
    """Write a segment's files (random content: an RSM must not interpret them) into ``directory``."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    tp = TopicIdPartition(topic_id or uuid.uuid4(), topic, partition)
    seg_id = RemoteLogSegmentId(tp, segment_id or uuid.uuid4())
    name = f"{start_offset:020d}-{seg_id.id.hex}"
    log = random_bytes(rng, size)
    indexes = {
        IndexType.OFFSET: random_bytes(rng, 8 * 97),
        IndexType.TIMESTAMP: random_bytes(rng, 12 * 55),
        IndexType.PRODUCER_SNAPSHOT: random_bytes(rng, 301),
        IndexType.LEADER_EPOCH: b"0\n2\n0 0\n3 %d\n" % start_offset,
    }
    if with_txn_index:
        indexes[IndexType.TRANSACTION] = random_bytes(rng, 34 * 3)
    paths = {}
    for suffix, content in (("log", log), ("index", indexes[IndexType.OFFSET]),
                            ("timeindex", indexes[IndexType.TIMESTAMP]),
                            ("snapshot", indexes[IndexType.PRODUCER_SNAPSHOT])):
        paths[suffix] = directory / f"{name}.{suffix}"
        paths[suffix].write_bytes(content)
    txn_path = None
    if with_txn_index:
        txn_path = directory / f"{name}.txnindex"
        txn_path.write_bytes(indexes[IndexType.TRANSACTION])
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=seg_id,
        start_offset=start_offset,
        end_offset=start_offset + 99,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_001,
        segment_size_in_bytes=size,
        segment_leader_epochs={0: 0, 3: start_offset},
        tx_index_present=with_txn_index,
    )
    data = LogSegmentData(
        log_segment=paths["log"],
        offset_index=paths["index"],
        time_index=paths["timeindex"],
        transaction_index=txn_path,
        producer_snapshot_index=paths["snapshot"],
        leader_epoch_index=indexes[IndexType.LEADER_EPOCH],
    )
    return SegmentFixture(metadata, data, log, indexes)


def read_all(stream: BinaryIO) -> bytes:
    with stream:
        chunks = []
        while chunk := stream.read(1024 * 1024):
            chunks.append(chunk)
        return b"".join(chunks)


class RemoteStorageManagerConformance:
    """Base class of the kit. Override :meth:`make_rsm`; optionally ``large_segment_size``."""

    large_segment_size: int = 20 * MIB
    segment_size: int = 256 * 1024

    def make_rsm(self, tmp_path: Path) -> RemoteStorageManager:
        raise NotImplementedError("override make_rsm(self, tmp_path) to return a configured RSM")

    @pytest.fixture
    def rsm(self, tmp_path: Path) -> Iterator[RemoteStorageManager]:
        manager = self.make_rsm(tmp_path)
        try:
            yield manager
        finally:
            manager.close()

    @pytest.fixture
    def segment(self, tmp_path: Path) -> SegmentFixture:
        return make_segment(tmp_path / "local-segment", size=self.segment_size)

    @pytest.fixture
    def copied(self, rsm: RemoteStorageManager, segment: SegmentFixture) -> SegmentFixture:
        rsm.copy_log_segment_data(segment.metadata, segment.data)
        return segment

    # -- copy and fetch -------------------------------------------------------------------------

    def test_fetch_whole_segment(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        assert read_all(rsm.fetch_log_segment(copied.metadata, 0)) == copied.log

    def test_fetch_from_start_position(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        start = len(copied.log) // 3
        assert read_all(rsm.fetch_log_segment(copied.metadata, start)) == copied.log[start:]

    def test_fetch_range_end_is_inclusive(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        for start, end in ((0, 0), (5, 5), (10, 4095), (4096, 8191), (len(copied.log) - 1, len(copied.log) - 1)):
            got = read_all(rsm.fetch_log_segment(copied.metadata, start, end))
            assert got == copied.log[start:end + 1], (start, end)

    def test_fetch_end_past_object_is_cut(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        size = len(copied.log)
        assert read_all(rsm.fetch_log_segment(copied.metadata, size - 10, size + 1000)) == copied.log[-10:]
        assert read_all(rsm.fetch_log_segment(copied.metadata, 0, 10 * size)) == copied.log

    @pytest.mark.parametrize("index_type", list(IndexType))
    def test_fetch_every_index(self, rsm: RemoteStorageManager, copied: SegmentFixture, index_type: IndexType) -> None:
        assert read_all(rsm.fetch_index(copied.metadata, index_type)) == copied.indexes[index_type]

    def test_missing_transaction_index_raises_not_found(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        segment = make_segment(tmp_path / "no-txn", size=4096, with_txn_index=False)
        rsm.copy_log_segment_data(segment.metadata, segment.data)
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_index(segment.metadata, IndexType.TRANSACTION))
        assert read_all(rsm.fetch_index(segment.metadata, IndexType.OFFSET)) == segment.indexes[IndexType.OFFSET]

    def test_segments_are_kept_apart(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        tp_id = uuid.uuid4()
        first = make_segment(tmp_path / "a", size=5000, start_offset=0, topic_id=tp_id)
        second = make_segment(tmp_path / "b", size=7000, start_offset=100, topic_id=tp_id)
        other_partition = make_segment(tmp_path / "c", size=3000, start_offset=0, partition=4, topic_id=tp_id)
        for seg in (first, second, other_partition):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        for seg in (first, second, other_partition):
            assert read_all(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log

    # -- idempotence ----------------------------------------------------------------------------

    def test_copy_is_idempotent_and_overwrites(self, rsm: RemoteStorageManager, copied: SegmentFixture, tmp_path: Path) -> None:
        rsm.copy_log_segment_data(copied.metadata, copied.data)
        assert read_all(rsm.fetch_log_segment(copied.metadata, 0)) == copied.log
        # Same segment id, new content: the second copy wins.
        again = make_segment(tmp_path / "again", size=len(copied.log) // 2,
                             topic=copied.metadata.topic_id_partition.topic,
                             partition=copied.metadata.topic_id_partition.partition,
                             start_offset=copied.metadata.start_offset,
                             topic_id=copied.metadata.topic_id_partition.topic_id,
                             segment_id=copied.metadata.remote_log_segment_id.id, seed=7)
        rsm.copy_log_segment_data(again.metadata, again.data)
        assert read_all(rsm.fetch_log_segment(again.metadata, 0)) == again.log
        for index_type in IndexType:
            assert read_all(rsm.fetch_index(again.metadata, index_type)) == again.indexes[index_type]

    def test_recopy_without_txn_index_drops_the_old_one(self, rsm: RemoteStorageManager, copied: SegmentFixture, tmp_path: Path) -> None:
        # A stale txn index would make readers apply aborted-transaction ranges the segment lacks.
        again = make_segment(tmp_path / "again", size=1000, with_txn_index=False,
                             topic=copied.metadata.topic_id_partition.topic,
                             partition=copied.metadata.topic_id_partition.partition,
                             start_offset=copied.metadata.start_offset,
                             topic_id=copied.metadata.topic_id_partition.topic_id,
                             segment_id=copied.metadata.remote_log_segment_id.id, seed=8)
        rsm.copy_log_segment_data(again.metadata, again.data)
        assert read_all(rsm.fetch_log_segment(again.metadata, 0)) == again.log
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_index(again.metadata, IndexType.TRANSACTION))

    def test_delete_is_idempotent(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        rsm.delete_log_segment_data(copied.metadata)
        rsm.delete_log_segment_data(copied.metadata)
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_log_segment(copied.metadata, 0))
        for index_type in IndexType:
            with pytest.raises(RemoteResourceNotFoundException):
                read_all(rsm.fetch_index(copied.metadata, index_type))

    def test_delete_of_never_copied_segment_is_not_an_error(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        rsm.delete_log_segment_data(make_segment(tmp_path / "never", size=10).metadata)

    def test_fetch_of_missing_segment_raises_not_found(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        missing = make_segment(tmp_path / "missing", size=10)
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_log_segment(missing.metadata, 0))
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_log_segment(missing.metadata, 0, 5))
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_index(missing.metadata, IndexType.OFFSET))

    def test_delete_leaves_other_segments(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        tp_id = uuid.uuid4()
        keep = make_segment(tmp_path / "keep", size=2000, start_offset=0, topic_id=tp_id)
        drop = make_segment(tmp_path / "drop", size=2000, start_offset=50, topic_id=tp_id)
        for seg in (keep, drop):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        rsm.delete_log_segment_data(drop.metadata)
        assert read_all(rsm.fetch_log_segment(keep.metadata, 0)) == keep.log
        assert read_all(rsm.fetch_index(keep.metadata, IndexType.TRANSACTION)) == keep.indexes[IndexType.TRANSACTION]

    # -- concurrency and size -------------------------------------------------------------------

    def test_concurrent_readers(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        size = len(copied.log)
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def reader(seed: int) -> int:
            rng = random.Random(seed)
            barrier.wait()
            checked = 0
            for _ in range(12):
                start = rng.randrange(size)
                end = min(size - 1, start + rng.randrange(1, 40_000))
                got = read_all(rsm.fetch_log_segment(copied.metadata, start, end))
                if got != copied.log[start:end + 1]:
                    raise AssertionError(f"wrong bytes for range {start}-{end}")
                checked += 1
            got_index = read_all(rsm.fetch_index(copied.metadata, IndexType.TIMESTAMP))
            if got_index != copied.indexes[IndexType.TIMESTAMP]:
                raise AssertionError("wrong time index")
            return checked

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(reader, i) for i in range(8)]
            for f in futures:
                try:
                    assert f.result() == 12
                except BaseException as exc:  # collect, so every thread's failure is shown
                    errors.append(exc)
        assert not errors, errors

    def test_large_segment(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        big = make_segment(tmp_path / "big", size=self.large_segment_size, seed=11)
        rsm.copy_log_segment_data(big.metadata, big.data)
        assert read_all(rsm.fetch_log_segment(big.metadata, 0)) == big.log
        middle = self.large_segment_size // 2
        # A range that straddles the middle, where part or chunk borders lie for power-of-two sizes.
        got = read_all(rsm.fetch_log_segment(big.metadata, middle - 1000, middle + 1000))
        assert got == big.log[middle - 1000:middle + 1001]
        tail = read_all(rsm.fetch_log_segment(big.metadata, self.large_segment_size - 7, self.large_segment_size + 7))
        assert tail == big.log[-7:]
        rsm.delete_log_segment_data(big.metadata)
        with pytest.raises(RemoteResourceNotFoundException):
            read_all(rsm.fetch_log_segment(big.metadata, 0, 10))


class RemoteCleanerOffsetStoreConformance(RemoteStorageManagerConformance):
    """The checks of an RSM that keeps a compacted partition's remote clean offset
    (:class:`~tieredlog.rsm.cleaner_offset.RemoteCleanerOffsetStore`), with or without listing: it reads
    back as last written, per partition, and removing it (twice) leaves none, the segments untouched."""

    def test_the_cleaner_offset_reads_back_as_last_written(self, rsm: RemoteStorageManager,
                                                          copied: SegmentFixture) -> None:
        assert isinstance(rsm, RemoteCleanerOffsetStore), f"{type(rsm).__name__} keeps no cleaner offset"
        tp = copied.metadata.topic_id_partition
        other = TopicIdPartition(tp.topic_id, tp.topic, tp.partition + 1)
        assert rsm.read_cleaner_offset(tp) is None
        rsm.write_cleaner_offset(tp, 40)
        rsm.write_cleaner_offset(tp, 70)  # replaces it
        assert (rsm.read_cleaner_offset(tp), rsm.read_cleaner_offset(other)) == (70, None)
        rsm.write_cleaner_offset(tp, None)
        rsm.write_cleaner_offset(tp, None)  # gone already: not an error
        assert rsm.read_cleaner_offset(tp) is None
        assert read_all(rsm.fetch_log_segment(copied.metadata, 0)) == copied.log


class ListableRemoteStorageManagerConformance(RemoteCleanerOffsetStoreConformance):
    """The checks a reader without a broker needs of a :class:`ListableRemoteStorageManager`, on top of
    the contract's: what was copied is listed under its partition, with its manifest, whose body
    describes the segment; a copy that fails leaves no manifest (so the manifest is written last and a
    half-copied segment is never read); and a byte range of a segment found only by listing reads as
    the bytes that were copied (the reader's ranged GET); and the log start offset published beside
    a partition's segments reads back as written."""

    def test_listing_returns_what_was_copied(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        listable = _listable(rsm)
        md = copied.metadata
        keys = listable.list_segment_objects(md.topic_id_partition)
        mine = [k for k in keys if k.segment_id == md.remote_log_segment_id.id]
        suffixes = {k.suffix for k in mine}
        assert {"log", "index", "timeindex", "snapshot", "txnindex", "manifest"} <= suffixes, suffixes
        assert all((k.topic, k.partition, k.start_offset) == (md.topic_id_partition.topic,
                                                                md.topic_id_partition.partition, md.start_offset)
                   for k in mine)
        assert [k.key for k in listable.list_topic_segment_objects(md.topic_id_partition.topic)
                if k.segment_id == md.remote_log_segment_id.id] == [k.key for k in mine]
        [manifest_key] = [k for k in mine if k.suffix == "manifest"]
        fields = manifest_fields(listable.read_manifest(manifest_key))
        assert (fields.topic, fields.topic_id, fields.partition, fields.segment_id) == (
            md.topic_id_partition.topic, md.topic_id_partition.topic_id, md.topic_id_partition.partition,
            md.remote_log_segment_id.id)
        assert (fields.start_offset, fields.end_offset, fields.segment_size_in_bytes, fields.tx_index_present,
                dict(fields.segment_leader_epochs)) == (md.start_offset, md.end_offset, md.segment_size_in_bytes,
                                                         md.tx_index_present, md.segment_leader_epochs)
        rsm.delete_log_segment_data(md)
        assert not [k for k in listable.list_segment_objects(md.topic_id_partition)
                    if k.segment_id == md.remote_log_segment_id.id]

    def test_failed_copy_leaves_no_manifest(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        segment = make_segment(tmp_path / "broken", size=8192)
        Path(segment.data.producer_snapshot_index).unlink()  # the copy fails part way through
        with pytest.raises((RemoteStorageException, OSError)):
            rsm.copy_log_segment_data(segment.metadata, segment.data)
        listed = _listable(rsm).list_segment_objects(segment.metadata.topic_id_partition)
        assert not [k for k in listed if k.segment_id == segment.metadata.remote_log_segment_id.id
                    and k.suffix == "manifest"]

    def test_fetch_range_of_a_listed_segment(self, rsm: RemoteStorageManager, copied: SegmentFixture) -> None:
        listable = _listable(rsm)
        [key] = [k for k in listable.list_segment_objects(copied.metadata.topic_id_partition)
                 if k.suffix == "manifest"]
        fields = manifest_fields(listable.read_manifest(key))
        # only what the listing and the manifest say: what a reader without the broker's metadata has
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(
                TopicIdPartition(fields.topic_id, fields.topic, fields.partition), fields.segment_id),
            start_offset=fields.start_offset, end_offset=fields.end_offset, max_timestamp_ms=fields.max_timestamp_ms,
            broker_id=fields.broker_id, event_timestamp_ms=fields.event_timestamp_ms,
            segment_size_in_bytes=fields.segment_size_in_bytes,
            segment_leader_epochs=dict(fields.segment_leader_epochs), tx_index_present=fields.tx_index_present)
        size = fields.segment_size_in_bytes
        for start, end in ((0, size - 1), (size // 3, 2 * size // 3), (size - 100, size - 1)):
            assert read_all(rsm.fetch_log_segment(md, start, end)) == copied.log[start:end + 1], (start, end)
        assert read_all(rsm.fetch_index(md, IndexType.OFFSET)) == copied.indexes[IndexType.OFFSET]

    def test_log_start_offset_is_published_beside_the_segments(self, rsm: RemoteStorageManager,
                                                              copied: SegmentFixture) -> None:
        listable = _listable(rsm)
        tp = copied.metadata.topic_id_partition
        other = TopicIdPartition(tp.topic_id, tp.topic, tp.partition + 1)
        assert listable.read_log_start_offset(tp) is None
        listed = sorted(k.key for k in listable.list_segment_objects(tp))
        listable.write_log_start_offset(tp, copied.metadata.start_offset + 5)
        listable.write_log_start_offset(tp, copied.metadata.start_offset + 9)  # replaces it
        assert listable.read_log_start_offset(tp) == copied.metadata.start_offset + 9
        assert listable.read_log_start_offset(other) is None
        assert sorted(k.key for k in listable.list_segment_objects(tp)) == listed  # never taken for a segment
        listable.write_log_start_offset(tp, None)
        listable.write_log_start_offset(tp, None)  # gone already: not an error
        assert listable.read_log_start_offset(tp) is None
        assert read_all(rsm.fetch_log_segment(copied.metadata, 0)) == copied.log

    def test_cleaner_offset_is_published_beside_the_log_start(self, rsm: RemoteStorageManager,
                                                              copied: SegmentFixture) -> None:
        listable = _listable(rsm)
        tp = copied.metadata.topic_id_partition
        listed = sorted(k.key for k in listable.list_segment_objects(tp))
        assert listable.read_cleaner_offset(tp) is None
        listable.write_log_start_offset(tp, 3)
        listable.write_cleaner_offset(tp, 40)
        listable.write_cleaner_offset(tp, 70)  # replaces it
        assert (listable.read_cleaner_offset(tp), listable.read_log_start_offset(tp)) == (70, 3)  # two objects
        assert sorted(k.key for k in listable.list_segment_objects(tp)) == listed  # never taken for a segment
        listable.write_log_start_offset(tp, None)
        assert listable.read_cleaner_offset(tp) == 70
        listable.write_cleaner_offset(tp, None)
        listable.write_cleaner_offset(tp, None)  # gone already: not an error
        assert listable.read_cleaner_offset(tp) is None
        assert read_all(rsm.fetch_log_segment(copied.metadata, 0)) == copied.log


def _listable(rsm: RemoteStorageManager) -> ListableRemoteStorageManager:
    assert isinstance(rsm, ListableRemoteStorageManager), f"{type(rsm).__name__} does not implement listing"
    return rsm
