"""Corrupt remote objects: a remote read over them fails with UNKNOWN_SERVER_ERROR (what Kafka's
broker answers for a failed remote read: the read's exception through Errors.forException) and
one log line, never a hang, an unbounded read or a dead broker; everything else keeps being served.

Unit tests run the RemoteLogManager over LocalTieredStorage (the ``tiered_log`` fixture of
test_rlm_units); the integration test corrupts the default local-folder tier of a real broker.
"""

from __future__ import annotations

import logging
import struct
import time

import pytest
from confluent_kafka import Producer
from rlm_harness import catch_up, tiered_log  # noqa: F401 - the fixture, shared

from tieredlog.clients.blocking import KafkaClient
from tieredlog.errors import KafkaStorageError, UnknownServerError
from tieredlog.protocol.api import FETCH, LIST_OFFSETS
from tieredlog.records.batch import iter_headers
from tieredlog.rlm.index_cache import DIR_NAME
from tieredlog.rsm.api import RemoteLogSegmentState


def _remote(rlm, plog):
    """The partition's finished remote segments, by start offset, and the RSM holding them."""
    tip = rlm._tip(plog.topic_partition, plog)
    mds = sorted((m for m in rlm.list_segments(tip) if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                 key=lambda m: m.start_offset)
    return mds, rlm.rsm


def _read_fails(rlm, plog, offset: int, caplog, what: str) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        with pytest.raises(UnknownServerError, match=what):
            rlm.read(plog.topic_partition, offset, 4096, timeout=10)
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "remote read at" in lines[0].getMessage(), [r.getMessage() for r in lines]


def test_an_offset_index_that_points_at_the_wrong_batch_fails_the_read(tiered_log, caplog):
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[1]
    path = rsm.segment_path(md, ".index")
    entries = [struct.unpack_from(">ii", path.read_bytes(), i) for i in range(0, path.stat().st_size, 8)]
    assert len(entries) >= 4
    # every entry keeps its offset but takes the position of the last one: sorted, plausible, wrong
    path.write_bytes(b"".join(struct.pack(">ii", rel, entries[-1][1]) for rel, _ in entries))
    target = md.start_offset + entries[1][0]
    _read_fails(rlm, plog, target, caplog, "offset index .* maps offset")
    # the bad entry was dropped from the cache, so a repaired object heals the next read
    path.write_bytes(b"".join(struct.pack(">ii", *e) for e in entries))
    data = rlm.read(plog.topic_partition, target, 4096, timeout=10)
    assert [h for _, h in iter_headers(data)][0].base_offset <= target


def test_an_offset_index_past_the_segment_end_fails_the_read(tiered_log, caplog):
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[0]
    path = rsm.segment_path(md, ".index")
    data = bytearray(path.read_bytes())
    for i in range(0, len(data), 8):
        struct.pack_into(">i", data, i + 4, md.segment_size_in_bytes + 1000 + i)
    path.write_bytes(bytes(data))
    _read_fails(rlm, plog, md.end_offset, caplog, "past its end")


@pytest.mark.parametrize("length", [-12, 0, 1 << 30])
def test_a_segment_batch_length_that_cannot_be_fails_the_read(tiered_log, caplog, length):
    # 0 (size 12) would never move the reader on; 1 GiB would have it fetch the rest of the object
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[1]
    path = rsm.segment_path(md, ".log")
    data = bytearray(path.read_bytes())
    headers = list(iter_headers(bytes(data)))
    pos, h = headers[len(headers) // 2]
    struct.pack_into(">i", data, pos + 8, length)
    path.write_bytes(bytes(data))
    _read_fails(rlm, plog, h.last_offset, caplog, "declares")
    # the segment before it is still served
    assert rlm.read(plog.topic_partition, mds[0].start_offset, 4096, timeout=10)


def test_a_time_index_out_of_order_fails_the_read_and_the_timestamp_lookup(tiered_log):
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[0]
    path = rsm.segment_path(md, ".timeindex")
    entries = [struct.unpack_from(">qi", path.read_bytes(), i) for i in range(0, path.stat().st_size, 12)]
    assert len(entries) >= 2
    path.write_bytes(b"".join(struct.pack(">qi", *e) for e in reversed(entries)))
    # a read past the segment's start loads its indexes (a read at the start needs none)
    with pytest.raises(UnknownServerError, match="out of order"):
        rlm.read(plog.topic_partition, md.start_offset + 1, 4096, timeout=10)
    with pytest.raises(KafkaStorageError, match="out of order"):
        rlm.find_offset_by_timestamp(plog.topic_partition, 0)


def test_a_txn_index_entry_of_an_unknown_version_fails_the_read(tiered_log):
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[0]
    rsm.segment_path(md, ".txnindex").write_bytes(struct.pack(">hqqqq", 9, 1, md.start_offset, md.start_offset, 0))
    with pytest.raises(UnknownServerError, match="unknown version"):
        rlm.read(plog.topic_partition, md.start_offset + 1, 4096, timeout=10)


def test_an_index_object_larger_than_any_index_is_not_copied_to_the_cache(tiered_log, tmp_path):
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[0]
    with open(rsm.segment_path(md, ".index"), "r+b") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of zeros for a ~24 KiB segment
    with pytest.raises(UnknownServerError, match="more than its segment can need"):
        rlm.read(plog.topic_partition, md.start_offset + 1, 4096, timeout=10)
    cached = sum(p.stat().st_size for p in (tmp_path / "logs" / DIR_NAME).iterdir())
    assert cached < 1 << 20


def test_a_timestamp_scan_over_a_batch_claiming_the_whole_segment_reads_it_once(tiered_log):
    plog, rlm, events, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[0]
    path = rsm.segment_path(md, ".log")
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, 8, 1 << 30)  # the first batch claims 1 GiB
    path.write_bytes(bytes(data))
    with pytest.raises(KafkaStorageError, match="declares"):
        rlm.find_offset_by_timestamp(plog.topic_partition, 0)


# ---------------------------------------------------------------------------------------------
# A real broker with the default local-folder tier

FAST = {
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    "remote.fetch.max.wait.ms": "5000",
}
TIERED = [{"name": "segment.bytes", "value": "16384"}, {"name": "local.retention.bytes", "value": "1"},
          {"name": "remote.storage.enable", "value": "true"}]
# what each remote object is overwritten with, and whether the fetch path reads it
CORRUPTIONS = {
    ".index": (lambda b: b[:-3], True),  # not a whole number of entries
    ".timeindex": (lambda b: b[::-1], True),  # entries out of order
    ".manifest": (lambda b: b"{" * 200_000, False),  # the commit marker, for readers without the broker
    ".leader_epoch_checkpoint": (lambda b: b"0\n99999999999\n", False),  # for followers' rebuilds
    ".snapshot": (lambda b: b"\xff" * 17, False),  # producer state, for followers' rebuilds
}


def _fetch(c: KafkaClient, parts: dict[str, int]):
    r = c.request(FETCH, {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                          "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": o,
                                                                  "partition_max_bytes": 1 << 16}]}
                                     for t, o in parts.items()]}, version=12)
    return {t.topic: t.partitions[0] for t in r.responses}


def _log_start(c: KafkaClient, topic: str, ts: int) -> int:
    r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]})
    return r.topics[0].partitions[0].offset


@pytest.mark.integration
def test_corrupt_remote_objects_fail_only_their_partitions_fetch(broker_factory):
    from tieredlog.protocol.api import CREATE_TOPICS

    b = broker_factory(FAST)
    topics = [f"rc{i}" for i in range(len(CORRUPTIONS))] + ["healthy"]
    with KafkaClient(b.bootstrap) as c:
        r = c.request(CREATE_TOPICS, {"topics": [{"name": t, "num_partitions": 1, "replication_factor": 1,
                                                   "configs": TIERED} for t in topics], "timeout": 10000})
        assert all(t.error_code.value == 0 for t in r.topics)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 4096})
        for t in topics:
            for i in range(600):
                p.produce(t, key=b"k%d" % i, value=b"value-%d-" % i * 10)
        assert p.flush(30) == 0
        deadline = time.monotonic() + 40
        while any(_log_start(c, t, -4) < 200 for t in topics):  # -4: earliest local offset
            assert time.monotonic() < deadline, "segments were not tiered"
            time.sleep(0.2)
        remote_root = b.data_dir / "remote-storage"
        for t, (suffix, (corrupt, _read_on_fetch)) in zip(topics, CORRUPTIONS.items()):
            files = sorted(remote_root.glob(f"{t}-*/0/*{suffix}"))
            assert files, f"no {suffix} object for {t}"
            for f in files:
                f.write_bytes(corrupt(f.read_bytes()))
        before = b.log_text()
        # offset 1, past the first segment's start: the fetch looks its position up in the indexes (a
        # fetch at a segment's start needs none)
        got = _fetch(c, {t: 1 for t in topics})
        for t, (suffix, (_, read_on_fetch)) in zip(topics, CORRUPTIONS.items()):
            part = got[t]
            if read_on_fetch:
                assert (part.error_code.value, bytes(part.records or b"")) == (-1, b""), (suffix, part)
            else:  # objects the fetch path never reads: the data is served as before
                assert part.error_code.value == 0 and part.records, (suffix, part)
        healthy = got["healthy"]
        assert healthy.error_code.value == 0 and list(iter_headers(bytes(healthy.records)))[0][1].base_offset <= 1
        # one line per failed partition, and nothing else worth a warning
        new_lines = [line for line in b.log_text()[len(before):].splitlines() if " WARNING " in line or " ERROR " in line]
        assert len(new_lines) == 2 and all("remote read at 1 failed" in line for line in new_lines), new_lines
        assert {line.split(": ")[1].split("-")[0] for line in new_lines} == {"rc0", "rc1"}
        # local reads and produces of the damaged partitions go on
        local = _log_start(c, "rc0", -4)
        assert _fetch(c, {"rc0": local})["rc0"].error_code.value == 0
        p.produce("rc0", value=b"after")
        assert p.flush(30) == 0
    assert b.alive()
    assert "Traceback" not in b.log_text()


def test_a_zero_length_batch_before_the_fetch_offset_does_not_spin_a_reader_thread(tiered_log):
    # The reader skips the batches between the index floor and the fetch offset by their lengths:
    # a length of -12 (size 0) used to keep it on the same batch forever, one pool thread lost.
    plog, rlm, _, _ = tiered_log
    mds, rsm = _remote(rlm, plog)
    md = mds[1]
    path = rsm.segment_path(md, ".log")
    data = bytearray(path.read_bytes())
    headers = list(iter_headers(bytes(data)))
    index = rsm.segment_path(md, ".index").read_bytes()
    indexed = {struct.unpack_from(">ii", index, i)[1] for i in range(0, len(index), 8)}
    k = next(i for i in range(1, len(headers) - 1) if headers[i][0] in indexed)  # where a fresh read starts
    struct.pack_into(">i", data, headers[k][0] + 8, -12)
    path.write_bytes(bytes(data))
    fut = rlm.read_async(plog.topic_partition, headers[k + 1][1].base_offset, 4096)
    with pytest.raises(UnknownServerError, match="declares 0 bytes"):
        fut.result(timeout=10)
