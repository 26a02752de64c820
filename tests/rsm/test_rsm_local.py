"""LocalTieredStorage: key layout, manifest written last, ranged fetches, idempotency, missing data."""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path

import pytest

from tieredlog.rsm import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
)
from tieredlog.rsm.local import (
    LocalTieredStorage,
    uuid_from_base64,
    uuid_to_base64,
)

TOPIC_ID = uuid.UUID("8c5fcef3-df6d-4ab1-bf3c-da5bc2f06c01")
TP = TopicIdPartition(TOPIC_ID, "tieredTopic", 0)


def make_md(start=0, end=99, tp=TP, seg_id=None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, seg_id or uuid.uuid4()), start, end, 1_700_000_000_000, 1, 1_700_000_000_500,
        4096, {0: start},
    )


def make_files(tmp: Path, log_bytes: bytes, with_txn=True) -> LogSegmentData:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "s.log").write_bytes(log_bytes)
    (tmp / "s.index").write_bytes(b"I" * 16)
    (tmp / "s.timeindex").write_bytes(b"T" * 24)
    (tmp / "s.snapshot").write_bytes(b"P" * 10)
    if with_txn:
        (tmp / "s.txnindex").write_bytes(b"X" * 34)
    return LogSegmentData(
        tmp / "s.log", tmp / "s.index", tmp / "s.timeindex", (tmp / "s.txnindex") if with_txn else None,
        tmp / "s.snapshot", b"0\n1\n0 0\n",
    )


@pytest.fixture
def rsm(tmp_path):
    storage = LocalTieredStorage()
    storage.configure({"dir": str(tmp_path / "remote"), "broker.id": 7})
    return storage


def test_uuid_string_form_matches_kafka():
    # Kafka's docs example: topic id jF8s79t9SrG_PNqlwv7bAA is URL-safe base64 of the 16 bytes.
    u = uuid_from_base64("jF8s79t9SrG_PNqlwv7bAA")
    assert u.bytes[:4] == bytes([0x8C, 0x5F, 0x2C, 0xEF])
    assert uuid_to_base64(u) == "jF8s79t9SrG_PNqlwv7bAA"
    with pytest.raises(ValueError):
        uuid_from_base64("short")


def test_copy_writes_kafka_key_layout_and_manifest(rsm, tmp_path):
    md = make_md(start=1234, end=2000)
    data = make_files(tmp_path / "local", b"abcdef" * 100)
    assert rsm.copy_log_segment_data(md, data) is None
    pdir = tmp_path / "remote" / f"tieredTopic-{uuid_to_base64(TOPIC_ID)}" / "0"
    stem = f"{1234:020d}-{uuid_to_base64(md.remote_log_segment_id.id)}"
    names = sorted(p.name for p in pdir.iterdir())
    assert names == sorted(
        stem + s for s in (".log", ".index", ".timeindex", ".txnindex", ".leader_epoch_checkpoint", ".snapshot",
                           ".manifest")
    )
    assert (pdir / (stem + ".log")).read_bytes() == b"abcdef" * 100
    assert (pdir / (stem + ".leader_epoch_checkpoint")).read_bytes() == b"0\n1\n0 0\n"
    manifest = json.loads((pdir / (stem + ".manifest")).read_bytes())
    assert manifest["start_offset"] == 1234 and manifest["end_offset"] == 2000
    assert manifest["segment_id"] == uuid_to_base64(md.remote_log_segment_id.id)
    assert manifest["files"]["log"] == {"name": stem + ".log", "size": 600}
    assert manifest["files"]["txnindex"]["size"] == 34
    assert manifest["tx_index_present"] is True
    assert manifest["segment_leader_epochs"] == [[0, 1234]]
    assert rsm.list_manifests(TP) == [manifest]


def test_listing_for_readers_without_a_broker(rsm, tmp_path):
    other = TopicIdPartition(TOPIC_ID, "tieredTopic-b", 0)  # its name starts with the first topic's
    md1, md2, md3 = make_md(0, 99), make_md(100, 199, tp=TopicIdPartition(TOPIC_ID, "tieredTopic", 1)), make_md(tp=other)
    for i, md in enumerate((md1, md2, md3)):
        rsm.copy_log_segment_data(md, make_files(tmp_path / f"local{i}", b"x" * 10, with_txn=False))
    (rsm.root / "stray.txt").write_text("not a segment")
    listed = rsm.list_segment_objects()
    assert len(listed) == 3 * 6 and [k.topic for k in listed[:6]] == ["tieredTopic"] * 6
    assert {k.partition for k in rsm.list_topic_segment_objects("tieredTopic")} == {0, 1}
    assert {k.topic for k in rsm.list_topic_segment_objects("tieredTopic-b")} == {"tieredTopic-b"}
    assert [k.start_offset for k in rsm.list_segment_objects(md2.topic_id_partition)] == [100] * 6
    manifest = next(k for k in rsm.list_segment_objects(TP) if k.suffix == "manifest")
    assert rsm.read_manifest(manifest) == rsm.list_manifests(TP)[0]
    with pytest.raises(ValueError, match="not a manifest"):
        rsm.read_manifest(manifest.key.replace(".manifest", ".log"))
    with pytest.raises(ValueError):
        rsm.read_manifest("../../etc/passwd")


def test_manifest_is_written_last(tmp_path, monkeypatch):
    rsm = LocalTieredStorage(tmp_path / "remote")
    order: list[str] = []
    real_replace = os.replace

    def spy(src, dst):
        order.append(Path(dst).suffix)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    rsm.copy_log_segment_data(make_md(), make_files(tmp_path / "l", b"x"))
    assert order[-1] == ".manifest"
    assert order == [".log", ".index", ".timeindex", ".txnindex", ".leader_epoch_checkpoint", ".snapshot",
                     ".manifest"]


def test_failed_copy_leaves_no_files_and_no_manifest(rsm, tmp_path):
    data = make_files(tmp_path / "l", b"x")
    data.producer_snapshot_index.unlink()  # the last file of the copy is missing
    with pytest.raises(RemoteStorageException):
        rsm.copy_log_segment_data(make_md(), data)
    assert list(rsm.iter_segment_files()) == []
    assert not list(rsm.root.rglob("*.tmp"))


def test_copy_is_idempotent_and_each_attempt_has_its_own_id(rsm, tmp_path):
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "a", b"first"))
    rsm.copy_log_segment_data(md, make_files(tmp_path / "b", b"second!"))
    assert rsm.fetch_log_segment(md, 0).read() == b"second!"
    retry = make_md()  # a retry of the same range carries a new segment id: both coexist
    rsm.copy_log_segment_data(retry, make_files(tmp_path / "c", b"third"))
    assert len(rsm.list_manifests(TP)) == 2
    assert rsm.fetch_log_segment(md, 0).read() == b"second!"
    assert rsm.fetch_log_segment(retry, 0).read() == b"third"


def test_fetch_ranges_are_inclusive_and_cut_at_end(rsm, tmp_path):
    payload = bytes(range(256)) * 40
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "l", payload))
    assert rsm.fetch_log_segment(md, 0).read() == payload
    assert rsm.fetch_log_segment(md, 100).read() == payload[100:]
    with rsm.fetch_log_segment(md, 100, 199) as s:
        assert s.read() == payload[100:200]
    with rsm.fetch_log_segment(md, 5, 5) as s:
        assert s.read() == payload[5:6]
    with rsm.fetch_log_segment(md, len(payload) - 3, len(payload) + 1000) as s:
        assert s.read() == payload[-3:]
    with rsm.fetch_log_segment(md, len(payload) + 10, len(payload) + 20) as s:
        assert s.read() == b""
    # small reads stop exactly at the end position
    s = rsm.fetch_log_segment(md, 10, 19)
    chunks = []
    while chunk := s.read(3):
        chunks.append(chunk)
    s.close()
    assert b"".join(chunks) == payload[10:20]
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(md, 10, 9)


def test_fetch_index_types(rsm, tmp_path):
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "l", b"x"))
    expected = {
        IndexType.OFFSET: b"I" * 16,
        IndexType.TIMESTAMP: b"T" * 24,
        IndexType.TRANSACTION: b"X" * 34,
        IndexType.PRODUCER_SNAPSHOT: b"P" * 10,
        IndexType.LEADER_EPOCH: b"0\n1\n0 0\n",
    }
    for index_type, content in expected.items():
        with rsm.fetch_index(md, index_type) as f:
            assert f.read() == content


def test_missing_txn_index_and_missing_segment_raise_not_found(rsm, tmp_path):
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "l", b"x", with_txn=False))
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_index(md, IndexType.TRANSACTION)
    assert rsm.list_manifests(TP)[0]["tx_index_present"] is False
    never = make_md()
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(never, 0)
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_index(never, IndexType.OFFSET)


def test_delete_is_idempotent_and_removes_everything(rsm, tmp_path):
    md = make_md()
    other = make_md(start=100, end=199)
    rsm.copy_log_segment_data(md, make_files(tmp_path / "l", b"x"))
    rsm.copy_log_segment_data(other, make_files(tmp_path / "m", b"y"))
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)  # already gone: not an error
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(md, 0)
    remaining = {p.name.split(".")[0] for p in rsm.iter_segment_files()}
    assert remaining == {f"{100:020d}-{uuid_to_base64(other.remote_log_segment_id.id)}"}


def test_delete_disabled_keeps_data(tmp_path):
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "r"), "delete.enable": "false"})
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "l", b"keep"))
    rsm.delete_log_segment_data(md)
    assert rsm.fetch_log_segment(md, 0).read() == b"keep"


@pytest.mark.parametrize("topic", ["../escape", "a/b", "", ".", "..", "x" * 250, "sp ace"])
def test_illegal_topic_names_never_become_paths(rsm, tmp_path, topic):
    tp = TopicIdPartition(TOPIC_ID, topic, 0)
    with pytest.raises(RemoteStorageException):
        rsm.copy_log_segment_data(make_md(tp=tp), make_files(tmp_path / "l", b"x"))
    remote = tmp_path / "remote"
    assert not remote.exists() or list(remote.rglob("*")) == []
    assert list(tmp_path.rglob("escape*")) == []
    with pytest.raises(RemoteStorageException):
        rsm.fetch_log_segment(make_md(tp=tp), 0)


def test_events_are_reported(rsm, tmp_path):
    events = []
    rsm.add_listener(events.append)
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "l", b"x"))
    rsm.fetch_log_segment(md, 0).close()
    rsm.fetch_index(md, IndexType.OFFSET).close()
    rsm.delete_log_segment_data(md)
    assert [e.type for e in events] == ["COPY_SEGMENT", "FETCH_SEGMENT", "FETCH_OFFSET_INDEX", "DELETE_SEGMENT"]
    assert {e.broker_id for e in events} == {7}
    assert {e.segment_id for e in events} == {md.remote_log_segment_id.id}


def test_concurrent_copies_of_one_partition(rsm, tmp_path):
    mds = [make_md(start=i * 10, end=i * 10 + 9) for i in range(16)]
    errors = []

    def work(i: int) -> None:
        try:
            rsm.copy_log_segment_data(mds[i], make_files(tmp_path / f"l{i}", bytes([i]) * (i + 1)))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [m["start_offset"] for m in rsm.list_manifests(TP)] == [i * 10 for i in range(16)]
    for i, md in enumerate(mds):
        assert rsm.fetch_log_segment(md, 0).read() == bytes([i]) * (i + 1)


def test_recopy_without_txn_index_drops_the_earlier_one(rsm, tmp_path):
    md = make_md()
    rsm.copy_log_segment_data(md, make_files(tmp_path / "a", b"x", with_txn=True))
    rsm.copy_log_segment_data(md, make_files(tmp_path / "b", b"y", with_txn=False))
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_index(md, IndexType.TRANSACTION)
    assert rsm.list_manifests(TP)[0]["tx_index_present"] is False


def test_deleting_the_last_segments_removes_the_empty_partition_and_topic_folders(rsm, tmp_path):
    root = tmp_path / "remote"
    p0, p1 = TopicIdPartition(TOPIC_ID, "gone", 0), TopicIdPartition(TOPIC_ID, "gone", 1)
    a, b, c = make_md(tp=p0), make_md(start=100, end=199, tp=p0), make_md(tp=p1)
    for i, md in enumerate((a, b, c)):
        rsm.copy_log_segment_data(md, make_files(tmp_path / f"s{i}", b"x"))
    pdir0 = rsm.partition_dir(p0)
    tdir = pdir0.parent
    rsm.delete_log_segment_data(a)
    assert pdir0.is_dir()  # another segment is still there
    rsm.delete_log_segment_data(b)
    assert not pdir0.exists() and tdir.is_dir()  # partition 1 still lives in the topic folder
    rsm.delete_log_segment_data(c)
    assert not tdir.exists() and root.is_dir()
    assert list(root.iterdir()) == []
    # a later copy to the same partition recreates the folders
    rsm.copy_log_segment_data(make_md(start=200, end=299, tp=p0), make_files(tmp_path / "s9", b"y"))
    assert len(rsm.list_manifests(p0)) == 1


def test_an_unreadable_manifest_is_not_listed_and_logged_once(rsm, tmp_path, caplog):
    import logging

    mds = [make_md(start=i * 10, end=i * 10 + 9) for i in range(3)]
    for i, md in enumerate(mds):
        rsm.copy_log_segment_data(md, make_files(tmp_path / f"s{i}", b"x" * 100))
    bad = rsm.segment_path(mds[1], ".manifest")
    bad.write_bytes(b"[" * 100_000)  # JSON too deep for the parser: a RecursionError, not a ValueError
    with caplog.at_level(logging.WARNING):
        listed = rsm.list_manifests(TP)
    assert [m["start_offset"] for m in listed] == [0, 20]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and lines[0].startswith(f"ignoring unreadable manifest {bad}"), lines


def test_same_files_and_manifest_bytes_as_the_object_store_backends(tmp_path):
    # One key layout and one manifest schema for every backend: a broker-less reader sees one shape.
    from tieredlog.rsm.fsspec_rsm import FsspecRemoteStorageManager
    from tieredlog.rsm.testing import make_segment

    seg = make_segment(tmp_path / "local", size=300, topic="t", partition=2, start_offset=7)
    local = LocalTieredStorage(tmp_path / "a")
    local.copy_log_segment_data(seg.metadata, seg.data)
    other = FsspecRemoteStorageManager()
    other.configure({"storage.fsspec.url": f"file://{tmp_path}/b"})
    other.copy_log_segment_data(seg.metadata, seg.data)
    files_a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    files_b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert files_a == files_b and len(files_a) == 7
    assert local.list_manifests(seg.metadata.topic_id_partition) == [
        json.loads(v) for k, v in files_b.items() if k.suffix == ".manifest"]
