"""The log's disk waits happen off the append path and outside the partition lock.

- A roll schedules the rolled segment's flush; the append itself never fsyncs, and the recovery point
  moves only once that flush ran.
- ``flush`` and retention pick their work under the lock and fsync / rename without it: an append (what
  the event loop does) goes through while one of them is stuck on the disk.
- A flush overtaken by a truncation does not move the recovery point past the new end, and truncation
  waits for retention's renames (a segment re-created at the same base must keep its files).
- The LogManager's scheduler runs the background work on its own threads.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from tieredlog.log.config import LogConfig
from tieredlog.log.log_manager import LogManager
from tieredlog.log.scheduler import KafkaScheduler
from tieredlog.log.types import FetchIsolation, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.record import build_batch

TS = 1_700_000_000_000
WAIT_S = 10.0  # how long a test waits for a background thread: a hang guard, not a speed bound


def batch(n: int = 2) -> bytes:
    return build_batch([(b"k", b"v" * 100, [], TS + i) for i in range(n)])


ONE = len(batch())


class ManualScheduler:
    """Keeps what the log schedules until the test runs it."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, object, int]] = []

    def schedule_once(self, name, fn, delay_ms=0) -> None:
        self.tasks.append((name, fn, delay_ms))

    def run(self, prefix: str) -> int:
        due = [t for t in self.tasks if t[0].startswith(prefix)]
        self.tasks = [t for t in self.tasks if not t[0].startswith(prefix)]
        for _, fn, _ in due:
            fn()
        return len(due)


class Gate:
    """Wraps an os function: the first call matching ``when`` blocks until ``release``."""

    def __init__(self, monkeypatch, name: str, when=lambda *a: True) -> None:
        self.real = getattr(os, name)
        self.entered = threading.Event()
        self.released = threading.Event()
        self.calls = 0

        def gated(*a, **kw):
            self.calls += 1
            if when(*a) and not self.entered.is_set():
                self.entered.set()
                assert self.released.wait(WAIT_S)
            return self.real(*a, **kw)

        monkeypatch.setattr(os, name, gated)

    def release(self) -> None:
        self.released.set()


def in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def make_log(tmp_path, scheduler=None, **cfg) -> UnifiedLog:
    return UnifiedLog(tmp_path / "t-0", LogConfig(segment_bytes=ONE * 2, **cfg), clock=lambda: TS, scheduler=scheduler)


def test_roll_flushes_in_the_background_and_the_recovery_point_follows(tmp_path, monkeypatch):
    sched = ManualScheduler()
    plog = make_log(tmp_path, sched)

    def no_fsync(fd):
        raise AssertionError("an fsync on the append path")

    monkeypatch.setattr(os, "fsync", no_fsync)
    # The first append writes the leader-epoch checkpoint; the third rolls at offset 4 (a segment
    # holds two batches) and writes the producer snapshot: neither waits for the disk.
    for _ in range(3):
        plog.append_as_leader(batch(), 0)
    assert [s.base_offset for s in plog.segments] == [0, 4]
    assert plog.recovery_point == 0  # nothing flushed yet: the recovery point only follows an fsync
    assert (plog.dir / "00000000000000000004.snapshot").exists()
    assert (plog.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    monkeypatch.undo()
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    assert sched.run("flush-log") == 1
    assert plog.recovery_point == 4
    names = {os.path.basename(p) for p in synced}
    assert {"00000000000000000000.log", "00000000000000000004.snapshot", "leader-epoch-checkpoint", "t-0"} <= names


def test_rolls_share_one_pending_flush(tmp_path):
    sched = ManualScheduler()
    plog = make_log(tmp_path, sched)
    for _ in range(6):
        plog.append_as_leader(batch(), 0)  # rolls at 4 and 8
    assert [t[0] for t in sched.tasks] == ["flush-log t-0"]
    sched.run("flush-log")
    assert plog.recovery_point == 8
    plog.append_as_leader(batch(), 0)
    plog.append_as_leader(batch(), 0)  # rolls at 12: a new flush is scheduled
    assert [t[0] for t in sched.tasks] == ["flush-log t-0"]


def test_flush_fsyncs_outside_the_lock(tmp_path, monkeypatch):
    plog = make_log(tmp_path, ManualScheduler())
    plog.append_as_leader(batch(), 0)
    gate = Gate(monkeypatch, "fsync")
    t, out = in_thread(plog.flush)
    assert gate.entered.wait(WAIT_S)
    # The flush is stuck on the disk; appends and reads still go through.
    done, res = in_thread(lambda: plog.append_as_leader(batch(), 0))
    done.join(WAIT_S)
    assert not done.is_alive() and res[0].first_offset == 2
    assert plog.read(0, 1 << 20, FetchIsolation.LOG_END).first_offset == 0
    assert plog.recovery_point == 0
    gate.release()
    t.join(WAIT_S)
    assert out == [None]
    assert plog.recovery_point == 2  # what the flush started with, not the append made meanwhile


def test_flush_overtaken_by_truncation_keeps_the_recovery_point_below_the_end(tmp_path, monkeypatch):
    plog = make_log(tmp_path, ManualScheduler(), flush_ms=0)
    for _ in range(3):
        plog.append_as_leader(batch(), 0)
    assert plog.log_end_offset == 6
    gate = Gate(monkeypatch, "fsync")
    t, out = in_thread(plog.flush)
    assert gate.entered.wait(WAIT_S)
    assert plog.truncate_to(2)
    gate.release()
    t.join(WAIT_S)
    assert out == [None]
    assert plog.recovery_point <= plog.log_end_offset == 2


def test_retention_renames_outside_the_lock_and_truncation_waits_for_it(tmp_path, monkeypatch):
    plog = make_log(tmp_path, ManualScheduler(), retention_bytes=0, file_delete_delay_ms=60_000)
    for _ in range(6):
        plog.append_as_leader(batch(), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert [s.base_offset for s in plog.segments] == [0, 4, 8]
    gate = Gate(monkeypatch, "replace", when=lambda src, dst: str(src).endswith(".log"))
    t, out = in_thread(plog.delete_old_segments)
    assert gate.entered.wait(WAIT_S)
    # Mid-rename: the segments are already out of the map (every one expired: the active one rolled
    # first) and the offsets moved; appends go through.
    assert plog.log_start_offset == 12 and [s.base_offset for s in plog.segments] == [12]
    done, res = in_thread(lambda: plog.append_as_leader(batch(), 0))
    done.join(WAIT_S)
    assert not done.is_alive() and res[0].first_offset == 12
    # A truncation that re-creates a segment at base 0 must not run before the renames are done.
    trunc, _ = in_thread(lambda: plog.truncate_fully_and_start_at(0))
    trunc.join(0.2)
    assert trunc.is_alive()
    gate.release()
    t.join(WAIT_S)
    trunc.join(WAIT_S)
    assert out == [3] and not trunc.is_alive()
    names = sorted(os.listdir(plog.dir))
    assert "00000000000000000000.log" in names and "00000000000000000000.log.deleted" in names
    assert plog.active_segment.base_offset == 0 and plog.active_segment.log_path.exists()
    assert plog.delete_expired_files(TS + 60_000) == 3
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".deleted")]
    assert (plog.dir / "00000000000000000000.log").exists()  # the new segment's file survived


def test_kafka_scheduler_runs_once_and_periodic_tasks_on_its_own_threads():
    sched = KafkaScheduler(threads=2, name="test-scheduler")
    ran: list[str] = []
    threads: set[str] = set()
    done = threading.Event()

    def once() -> None:
        threads.add(threading.current_thread().name)
        ran.append("once")

    def periodic() -> None:
        ran.append("tick")
        if ran.count("tick") == 3:
            done.set()

    def failing() -> None:
        raise OSError(28, "No space left on device")

    sched.schedule_once("fails", failing)  # reported, and the scheduler keeps going
    sched.schedule_once("once", once, delay_ms=10)
    sched.schedule("tick", periodic, delay_ms=0, period_ms=5)
    assert done.wait(WAIT_S)
    sched.shutdown(timeout_s=WAIT_S)
    assert "once" in ran and threads and all(n.startswith("test-scheduler-") for n in threads)
    count = len(ran)
    time.sleep(0.05)
    assert len(ran) == count  # nothing runs after shutdown


def test_log_manager_flushes_rolled_segments_on_its_scheduler(tmp_path):
    mgr = LogManager([tmp_path], LogConfig(segment_bytes=ONE * 2))
    plog = mgr.get_or_create_log(TopicPartition("t", 0))
    for _ in range(3):
        plog.append_as_leader(batch(), 0)
    deadline = time.monotonic() + WAIT_S
    while plog.recovery_point < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert plog.recovery_point == 4
    mgr.shutdown()


@pytest.mark.parametrize("delay_ms", [0, 60_000])
def test_deleted_segment_files_go_after_the_delay_on_the_scheduler(tmp_path, delay_ms):
    mgr = LogManager([tmp_path], LogConfig(segment_bytes=ONE * 2, retention_bytes=0, file_delete_delay_ms=delay_ms))
    plog = mgr.get_or_create_log(TopicPartition("t", 0))
    for _ in range(4):
        plog.append_as_leader(batch(), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_old_segments() == 2
    deadline = time.monotonic() + (WAIT_S if delay_ms == 0 else 0.3)
    while list(plog.dir.glob("*.deleted")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bool(list(plog.dir.glob("*.deleted"))) == (delay_ms > 0)
    mgr.shutdown()


def test_a_fetch_holding_a_deleted_segment_reads_it_until_the_delay_passed(tmp_path):
    plog = make_log(tmp_path, ManualScheduler(), retention_bytes=0, file_delete_delay_ms=60_000)
    for _ in range(3):
        plog.append_as_leader(batch(), 0)
    plog.update_high_watermark(plog.log_end_offset)
    fslice = plog.read(0, 1 << 20).records
    expected = fslice.read_bytes()
    assert plog.delete_old_segments() == 2  # every segment expired: the active one rolled first
    assert fslice.read_bytes() == expected  # renamed, not closed
    with fslice.open() as f:
        assert f.read()[: len(expected)] == expected
    assert plog.delete_expired_files(TS + 60_000) == 2
    assert not list(plog.dir.glob("*.deleted"))
