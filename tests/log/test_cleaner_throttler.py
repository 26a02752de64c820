"""The cleaners' Throttler (log.cleaner.io.max.bytes.per.second) on a fake clock, and the remote
cleaner's downloads paced by it."""

from __future__ import annotations

import io

from tieredlog.log.cleaner.throttler import UNLIMITED, Throttler
from tieredlog.rlm.remote_cleaner import DOWNLOAD_CHUNK, download


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def throttler(rate: float) -> tuple[Throttler, FakeTime]:
    t = FakeTime()
    return Throttler(rate, clock=t.clock, sleep=t.sleep), t


def test_bytes_faster_than_the_rate_are_slept_down_to_it() -> None:
    th, t = throttler(1_000_000)
    for _ in range(100):  # 10 MB offered in 1 s of work: ten times the rate
        t.now += 0.01
        th.maybe_throttle(100_000)
    assert 9.0 <= t.now <= 10.0  # 10 MB at 1 MB/s, the last check period's bytes not yet paid for
    assert th.throttled_s == sum(t.slept) and th.throttled_s >= 8.0


def test_bytes_slower_than_the_rate_never_sleep() -> None:
    th, t = throttler(1_000_000)
    for _ in range(100):
        t.now += 0.5
        th.maybe_throttle(100_000)  # 0.2 MB/s
    assert t.slept == [] and th.throttled_s == 0


def test_unlimited_never_sleeps_and_a_new_rate_applies_at_once() -> None:
    th, t = throttler(UNLIMITED)
    for _ in range(10):
        th.maybe_throttle(1 << 30)
    assert t.slept == []
    th.rate = 1_000_000  # as LogCleaner.reconfigure sets it
    for _ in range(10):
        t.now += 0.1
        th.maybe_throttle(1_000_000)
    assert sum(t.slept) > 5.0


def test_a_download_is_paced_chunk_by_chunk() -> None:
    th, t = throttler(1_000_000)
    data = bytes(range(256)) * (300 * DOWNLOAD_CHUNK // 256)  # 300 chunks, 19.7 MB
    out = io.BytesIO()
    charged: list[int] = []

    def throttle(n: int) -> None:
        charged.append(n)
        t.now += 0.01  # the network: 6.5 MB/s, faster than the rate
        th.maybe_throttle(n)

    assert download(io.BytesIO(data), out, throttle) == len(data)
    assert out.getvalue() == data
    assert sum(charged) == len(data) and max(charged) <= DOWNLOAD_CHUNK
    # paced while it runs (a sleep per 0.3 s check period of 30 chunks), not one wait after it, and the
    # whole at the rate but for the last period's bytes
    assert len(t.slept) >= 9
    assert (len(data) - 30 * DOWNLOAD_CHUNK) / 1e6 <= t.now <= len(data) / 1e6


def test_a_deferred_wait_is_owed_and_taken_between_steps() -> None:
    """defer_s: a wait up to it is left owed where the bytes are charged; take_debt hands it to the caller
    (to wait out off its thread) and counts it as waited; beyond defer_s it is slept as usual."""
    t = FakeTime()
    th = Throttler(1_000_000, clock=t.clock, sleep=t.sleep, defer_s=2.0)
    for _ in range(100):  # 2 MB in 1 s of work at 1 MB/s: a second ahead of the rate
        t.now += 0.01
        th.maybe_throttle(20_000)  # 2 MB in all
    assert t.slept == []
    owed = th.take_debt()
    assert abs(owed - 1.0) < 1e-9 and th.throttled_s == owed and th.take_debt() == 0.0
    t.now += owed  # waited out elsewhere: charging goes on at the rate without a sleep
    for _ in range(100):
        t.now += 0.01
        th.maybe_throttle(10_000)
    assert t.slept == [] and th.take_debt() < 1e-9
    for _ in range(100):  # 50 MB in 1 s: 49 s owed, past defer_s: slept where charged
        t.now += 0.01
        th.maybe_throttle(500_000)
    assert t.slept and sum(t.slept) + th.take_debt() >= 48.0
