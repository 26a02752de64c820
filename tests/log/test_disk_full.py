"""A full disk (ENOSPC / EDQUOT / EFBIG, any OSError on write) on the produce path and in background log work.

Unit level: write failures are injected into one file's writes, and the log must be exactly as before the
failed append (bytes on disk, indexes, offsets, epoch cache, producer state), answer KAFKA_STORAGE_ERROR,
log one line, and append with the next offsets once writes work again, also after a reload.

End to end: a real broker whose log dir is a 2 MiB tmpfs (RLIMIT_FSIZE if mounting is not allowed),
filled up, with confluent-kafka and raw Produce requests.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import FakeClock

from tieredlog import errors
from tieredlog.log import log_manager as log_manager_mod
from tieredlog.log.checkpoints import LeaderEpochCheckpointFile
from tieredlog.log.config import LogConfig
from tieredlog.log.index import _SparseIndex
from tieredlog.log.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from tieredlog.log.producer_state import ProducerStateManager
from tieredlog.log.storage_errors import storage_error_log
from tieredlog.log.types import FetchIsolation, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers, validate_batch
from tieredlog.records.record import build_batch

NOW = 1_700_000_000_000
KAFKA_STORAGE_ERROR = 56


@pytest.fixture(autouse=True)
def fresh_rate_limiter():
    """Each test starts from a clean limiter on a clock it controls (the limiter is shared module state)."""
    clock = FakeClock()
    storage_error_log.reset(clock)
    yield clock
    storage_error_log.reset(time.monotonic)


def batch(n: int = 3, value: bytes = b"v" * 200, **kw) -> bytes:
    return build_batch([(b"k", value, [], NOW + i) for i in range(n)], **kw)


def make_log(tmp_path: Path, **cfg) -> UnifiedLog:
    return UnifiedLog(tmp_path / "topic-0", LogConfig(**cfg), clock=lambda: NOW)


def disk_state(plog: UnifiedLog) -> dict[str, bytes]:
    """Every file of the partition dir, byte for byte (indexes trimmed to their valid entries)."""
    out = {}
    for seg in plog.segments:
        out[seg.log_path.name] = seg.log_path.read_bytes()
        out[seg.offset_index_path.name] = seg.offset_index.file_bytes()
        out[seg.time_index_path.name] = seg.time_index.file_bytes()
    for name in sorted(os.listdir(plog.dir)):
        if not name.endswith((".log", ".index", ".timeindex")):
            out[name] = (plog.dir / name).read_bytes()
    return out


def log_state(plog: UnifiedLog) -> tuple:
    return (
        plog.log_end_offset,
        plog.num_segments,
        [s.base_offset for s in plog.segments],
        [(s.size, s.next_offset) for s in plog.segments],
        plog.leader_epoch_cache.epoch_entries(),
        {pid: [(b.first_seq, b.last_seq, b.first_offset) for b in e.batches] for pid, e in plog.producer_state.active_producers.items()},
    )


def read_all(plog: UnifiedLog) -> list[tuple[int, bytes]]:
    """(base offset, batch bytes) of every batch; each must pass its CRC check."""
    out, off = [], plog.log_start_offset
    while off < plog.log_end_offset:
        data = plog.read(off, 1 << 20, isolation=FetchIsolation.LOG_END).records.read_bytes()
        for pos, h in iter_headers(data):
            validate_batch(data, pos)
            out.append((h.base_offset, bytes(data[pos : pos + h.size])))
            off = h.next_offset
    return out


class FailingWrites:
    """Make ``os.pwrite`` on files whose name ends with ``suffix`` write half the data, then fail."""

    def __init__(self, monkeypatch, suffix: str, err: int = errno.ENOSPC, partial: bool = True):
        self.suffix, self.err, self.partial = suffix, err, partial
        self.active = True
        self.failures = 0
        self._real = os.pwrite
        monkeypatch.setattr(os, "pwrite", self)

    def __call__(self, fd, data, offset):
        if self.active and os.readlink(f"/proc/self/fd/{fd}").endswith(self.suffix):
            self.failures += 1
            view = memoryview(data)
            if self.partial and len(view) > 1 and not getattr(self, "_half_done", False):
                self._half_done = True
                return self._real(fd, view[: len(view) // 2], offset)  # the caller loops for the rest
            self._half_done = False
            raise OSError(self.err, os.strerror(self.err))
        return self._real(fd, data, offset)


# ---- unit: produce path ------------------------------------------------------------------------------

@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_torn_segment_write_leaves_log_unchanged(tmp_path, monkeypatch, caplog, err):
    plog = make_log(tmp_path, index_interval_bytes=100)
    for _ in range(4):
        plog.append_as_leader(batch(), leader_epoch=0)
    before_disk, before_state, before_data = disk_state(plog), log_state(plog), read_all(plog)

    fail = FailingWrites(monkeypatch, ".log", err)
    payload = batch(5)
    with caplog.at_level(logging.ERROR, logger="tieredlog.log.storage_errors"):
        with pytest.raises(errors.KafkaStorageError) as ei:
            plog.append_as_leader(payload, leader_epoch=0)
    assert fail.failures == 2  # half the batch landed, then the disk was full
    assert ei.value.code == KAFKA_STORAGE_ERROR and ei.value.retriable
    assert os.strerror(err) in str(ei.value)
    assert disk_state(plog) == before_disk
    assert log_state(plog) == before_state
    assert read_all(plog) == before_data
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"partition topic-0: cannot append {len(payload)} bytes: {os.strerror(err)}"]

    fail.active = False
    info = plog.append_as_leader(payload, leader_epoch=0)
    assert info.first_offset == 12  # no offset was consumed by the failed append
    assert [o for o, _ in read_all(plog)] == [0, 3, 6, 9, 12]


def test_index_write_failure_undoes_the_data_too(tmp_path, monkeypatch):
    plog = make_log(tmp_path, index_interval_bytes=100)
    plog.append_as_leader(batch(), leader_epoch=0)
    plog.append_as_leader(batch(), leader_epoch=0)
    before_disk, before_state = disk_state(plog), log_state(plog)
    fail = FailingWrites(monkeypatch, ".index")
    with pytest.raises(errors.KafkaStorageError):
        plog.append_as_leader(batch(), leader_epoch=0)
    assert fail.failures >= 1
    assert disk_state(plog) == before_disk
    assert log_state(plog) == before_state
    fail.active = False
    assert plog.append_as_leader(batch(), leader_epoch=0).first_offset == 6


def test_epoch_checkpoint_failure_on_first_append(tmp_path, monkeypatch):
    plog = make_log(tmp_path)
    real = LeaderEpochCheckpointFile.write

    def full(self, entries, sync=True):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(LeaderEpochCheckpointFile, "write", full)
    with pytest.raises(errors.KafkaStorageError):
        plog.append_as_leader(batch(), leader_epoch=3)
    assert plog.log_end_offset == 0
    assert plog.active_segment.size == 0 and plog.active_segment.log_path.stat().st_size == 0
    assert plog.leader_epoch_cache.epoch_entries() == []
    monkeypatch.setattr(LeaderEpochCheckpointFile, "write", real)
    assert plog.append_as_leader(batch(), leader_epoch=3).first_offset == 0
    assert [tuple(e) for e in plog.leader_epoch_cache.epoch_entries()] == [(3, 0)]


def test_failed_idempotent_append_leaves_producer_state(tmp_path, monkeypatch):
    """The retry of the failed batch is accepted as new (not a duplicate, not out of order)."""
    plog = make_log(tmp_path)
    idem = dict(producer_id=7, producer_epoch=0)
    plog.append_as_leader(batch(2, base_sequence=0, **idem), leader_epoch=0)
    fail = FailingWrites(monkeypatch, ".log")
    retry = batch(2, base_sequence=2, **idem)
    with pytest.raises(errors.KafkaStorageError):
        plog.append_as_leader(retry, leader_epoch=0)
    fail.active = False
    info = plog.append_as_leader(retry, leader_epoch=0)
    assert (info.first_offset, info.duplicate) == (2, False)
    again = plog.append_as_leader(retry, leader_epoch=0)  # and now it is stored: a real duplicate
    assert (again.first_offset, again.duplicate) == (2, True)


def test_failed_append_is_not_recovered_after_crash(tmp_path, monkeypatch):
    plog = make_log(tmp_path)
    for _ in range(3):
        plog.append_as_leader(batch(), leader_epoch=0)
    fail = FailingWrites(monkeypatch, ".log")
    with pytest.raises(errors.KafkaStorageError):
        plog.append_as_leader(batch(4, value=b"x" * 3000), leader_epoch=0)
    fail.active = False
    expected = read_all(plog)
    plog.close_handles()  # a crash: nothing flushed or snapshotted
    again = UnifiedLog(tmp_path / "topic-0", LogConfig(), clock=lambda: NOW, had_clean_shutdown=False)
    assert again.log_end_offset == 9
    assert read_all(again) == expected
    assert again.append_as_leader(batch(), leader_epoch=0).first_offset == 9


def test_rate_limited_log_line(tmp_path, monkeypatch, caplog, fresh_rate_limiter):
    plog = make_log(tmp_path)
    fail = FailingWrites(monkeypatch, ".log", partial=False)
    with caplog.at_level(logging.ERROR, logger="tieredlog.log.storage_errors"):
        for _ in range(5):
            with pytest.raises(errors.KafkaStorageError):
                plog.append_as_leader(batch(), leader_epoch=0)
        assert len(caplog.records) == 1
        fresh_rate_limiter.t += 11
        with pytest.raises(errors.KafkaStorageError):
            plog.append_as_leader(batch(), leader_epoch=0)
    assert fail.failures == 6
    assert len(caplog.records) == 2
    assert caplog.records[1].getMessage().endswith("No space left on device (4 more since the last report)")


# ---- unit: roll and preallocation --------------------------------------------------------------------

def test_roll_failing_on_producer_snapshot(tmp_path, monkeypatch):
    plog = make_log(tmp_path, segment_bytes=2000)
    plog.append_as_leader(batch(), leader_epoch=0)
    plog.append_as_leader(batch(), leader_epoch=0)
    before_disk, before_state = disk_state(plog), log_state(plog)
    real = ProducerStateManager.take_snapshot

    def full(self, next_offset=None, sync=True):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ProducerStateManager, "take_snapshot", full)
    with pytest.raises(errors.KafkaStorageError):
        plog.append_as_leader(batch(5), leader_epoch=0)  # does not fit: rolls first
    assert disk_state(plog) == before_disk
    assert log_state(plog) == before_state
    assert plog.active_segment.offset_index.is_writable and plog.active_segment.time_index.is_writable
    monkeypatch.setattr(ProducerStateManager, "take_snapshot", real)
    info = plog.append_as_leader(batch(5), leader_epoch=0)
    assert info.first_offset == 6 and plog.num_segments == 2


def test_roll_failing_on_index_preallocation(tmp_path, monkeypatch):
    plog = make_log(tmp_path, segment_bytes=2000)
    plog.append_as_leader(batch(), leader_epoch=0)
    plog.append_as_leader(batch(), leader_epoch=0)
    before_disk, before_state = disk_state(plog), log_state(plog)
    real = _SparseIndex.make_writable

    def efbig(self):
        if self.path.name.startswith("00000000000000000006"):
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
        return real(self)

    monkeypatch.setattr(_SparseIndex, "make_writable", efbig)
    with pytest.raises(errors.KafkaStorageError, match="File too large"):
        plog.append_as_leader(batch(5), leader_epoch=0)
    assert disk_state(plog) == before_disk  # no half-made segment files or snapshot left behind
    assert log_state(plog) == before_state
    monkeypatch.setattr(_SparseIndex, "make_writable", real)
    assert plog.append_as_leader(batch(5), leader_epoch=0).first_offset == 6
    assert [s.base_offset for s in plog.segments] == [0, 6]


# ---- unit: background work ---------------------------------------------------------------------------

def test_checkpoints_and_retention_survive_a_full_disk(tmp_path, monkeypatch, caplog):
    mgr = LogManager([tmp_path / "d"], LogConfig(segment_bytes=2000, retention_bytes=0))
    logs = [mgr.get_or_create_log(TopicPartition("t", p)) for p in range(2)]
    for plog in logs:
        for _ in range(4):
            plog.append_as_leader(batch(), leader_epoch=0)
        plog.update_high_watermark(plog.log_end_offset)
    mgr.checkpoint_recovery_points()
    ckpt = tmp_path / "d" / RECOVERY_POINT_CHECKPOINT
    old = ckpt.read_bytes()
    for plog in logs:
        plog.flush()

    real_snapshot = ProducerStateManager.take_snapshot

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(log_manager_mod.OffsetCheckpointFile, "write", full)
    monkeypatch.setattr(ProducerStateManager, "take_snapshot", full)
    with caplog.at_level(logging.ERROR):
        assert mgr.checkpoint_recovery_points() is False  # no exception
        # retention rolls the active segment first (every segment expired): that fails, per log
        mgr.cleanup_logs()
        mgr.shutdown()
    assert ckpt.read_bytes() == old and not (tmp_path / "d" / (RECOVERY_POINT_CHECKPOINT + ".tmp")).exists()
    msgs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("cannot write checkpoint") and m.endswith("No space left on device") for m in msgs)
    assert sum("retention failed, retrying next run" in m for m in msgs) == 2  # one line per log
    assert not (tmp_path / "d" / CLEAN_SHUTDOWN_FILE).exists()  # next start recovers from the logs
    monkeypatch.setattr(ProducerStateManager, "take_snapshot", real_snapshot)
    monkeypatch.undo()
    again = LogManager([tmp_path / "d"], LogConfig(segment_bytes=2000))
    assert again.had_clean_shutdown[tmp_path / "d"] is False
    for plog in again.all_logs():
        assert plog.log_end_offset == 12
        assert [o for o, _ in read_all(plog)] == [0, 3, 6, 9]
    again.shutdown()


# ---- end to end: real broker, real client, a log dir that fills up ---------------------------------

SMALL_INTERNAL = {"offsets.topic.num.partitions": "1", "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}
FSIZE_LIMIT = 512 * 1024


def _try_mount_tmpfs(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def _limit_file_size() -> None:  # runs in the broker child before exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, resource.RLIM_INFINITY))


def _consume(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes]]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as TP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-full", "enable.auto.commit": False,
                  "fetch.max.bytes": 1 << 20})
    c.assign([TP(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    for _ in range(120):
        if len(out) >= n:
            break
        for m in c.consume(500, 0.5):
            assert m.error() is None, m.error()
            out.append((m.offset(), m.value()))
    c.close()
    return out


def _produce_ok(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    offsets, errs = [], []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda e, m: errs.append(e) if e else offsets.append(m.offset()))
        p.poll(0)
    assert p.flush(30) == 0
    assert not errs, errs
    return offsets


def _validate_partition_dir(d: Path) -> int:
    """Every .log file is whole batches with valid CRCs up to its last byte; returns the records seen."""
    n = 0
    for f in sorted(d.glob("*.log")):
        data = f.read_bytes()
        end = 0
        for pos, h in iter_headers(data):
            validate_batch(data, pos)
            end = pos + h.size
            n += h.records_count
        assert end == len(data), f"{f.name}: {len(data) - end} bytes after the last whole batch"
    return n


@pytest.mark.integration
def test_broker_survives_full_log_dir_end_to_end(broker_factory, tmp_path, monkeypatch):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import PRODUCE

    healthy, full = tmp_path / "disk", tmp_path / "full"
    mounted = _try_mount_tmpfs(full)
    overrides = {
        **SMALL_INTERNAL,
        "log.dirs": f"{healthy},{full}",
        "remote.log.storage.system.enable": "false",
        # small segments and indexes, so rolls and index preallocation happen while the disk fills
        "log.segment.bytes": str(64 * 1024) if mounted else str(4 * FSIZE_LIMIT),
        "log.index.size.max.bytes": "2048",
        "log.index.interval.bytes": "4096",
    }
    if not mounted:
        # No mount allowed: the broker runs with RLIMIT_FSIZE, so a segment file cannot pass FSIZE_LIMIT.
        real_popen = subprocess.Popen

        def popen(*a, **kw):
            return real_popen(*a, preexec_fn=_limit_file_size, **kw)

        monkeypatch.setattr(subprocess, "Popen", popen)
    b = broker_factory(overrides, data_dir=healthy)
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("fa", 1, 1), NewTopic("fb", 1, 1)]).values():
            f.result(30)
        in_full = [t for t in ("fa", "fb") if (full / f"{t}-0").is_dir()]
        assert len(in_full) == 1, f"expected one topic per log dir: {os.listdir(full)}"
        topic = in_full[0]
        other = "fb" if topic == "fa" else "fa"
        pdir = full / f"{topic}-0"

        acked: list[bytes] = [os.urandom(1000) for _ in range(60)]
        assert _produce_ok(b.bootstrap, topic, acked) == list(range(60))

        # fill the disk (or reach the file size limit)
        filler = full / "filler"
        big = os.urandom(20_000)
        if mounted:
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
        failures = 0
        with KafkaClient(b.bootstrap) as c:
            for _ in range(40):
                r = c.request(PRODUCE, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, big, [], NOW)])}]}]},
                    version=9).responses[0].partition_responses[0]
                if r.error_code.value == 0:
                    assert mounted is False  # only the size-limit mode fills up through produces
                    acked.append(big)
                    continue
                assert r.error_code.value == KAFKA_STORAGE_ERROR, r
                failures += 1
                if failures == 5:
                    break
        assert failures == 5, b.log_text()

        # a real client sees the retriable KAFKA_STORAGE_ERROR in its delivery report
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                      "message.timeout.ms": 10000})
        reports: list = []
        p.produce(topic, value=big, partition=0, on_delivery=lambda e, m: reports.append(e))
        p.flush(30)
        assert len(reports) == 1 and reports[0] is not None, reports
        assert reports[0].code() == KafkaError.KAFKA_STORAGE_ERROR  # retriable in Kafka's error table

        assert b.alive()
        text = b.log_text()
        lines = [ln for ln in text.splitlines() if f"partition {topic}-0: cannot append" in ln]
        reason = "No space left on device" if mounted else "File too large"
        assert lines and all(ln.endswith(reason) or "more since the last report" in ln for ln in lines), text
        assert len(lines) < failures + 1  # rate-limited: not one line per failed request
        assert "Traceback" not in text

        # the other log dir and reads of existing data keep working
        assert _produce_ok(b.bootstrap, other, [b"elsewhere"]) == [0]
        got = _consume(b.bootstrap, topic, len(acked))
        assert got == list(enumerate(acked))

        # free space: appends continue at the next offsets
        if mounted:
            filler.unlink()
        else:
            resource.prlimit(b.proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        more = [os.urandom(1000) for _ in range(40)]
        assert _produce_ok(b.bootstrap, topic, more) == list(range(len(acked), len(acked) + 40))
        acked += more

        assert b.stop() == 0
        assert _validate_partition_dir(pdir) == len(acked)  # no torn batch anywhere on disk
        b.start()
        got = _consume(b.bootstrap, topic, len(acked))
        assert [o for o, _ in got] == list(range(len(acked)))  # each acknowledged record once, in order
        assert [v for _, v in got] == acked
        assert "truncated" not in b.log_text()
    finally:
        b.stop()
        if mounted:
            subprocess.run(["umount", str(full)], check=False)
