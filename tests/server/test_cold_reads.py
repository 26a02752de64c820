"""Fetch regions whose pages are not in the page cache are faulted in off the event loop.

The send path (``Connection._send_raw``) of a response holding a file region, over a real loopback
socket, with a ticker coroutine measuring how long the loop goes without running it. A cold file is
simulated for one inode (no FUSE here), page by page as the kernel does it: a read of pages not yet
"cached" that may wait (``os.sendfile``, a ``preadv`` without RWF_NOWAIT) takes ``DELAY_S`` and caches
them; an RWF_NOWAIT ``preadv`` fails with EAGAIN at an uncached first page and stops short at a later
one. When the region was sent with sendfile on the loop, the ticker stalled for the whole delay; now
the pages are faulted in on the cold-read pool, then sent, and the loop keeps running.

Also: a warm region still goes out with sendfile (a small one, or one up to LOOPBACK_REGION to a
loopback peer, in one RWF_NOWAIT read) and nothing reaches the pool; the cold regions of one response are faulted in in parallel; a file really evicted from the page cache (fsync + POSIX_FADV_DONTNEED) is found not
resident and faulted in; a connection cancelled during a cold read leaks no descriptor.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tieredlog.server import file_regions
from tieredlog.server.file_regions import OpenRegion
from tieredlog.server.network import Connection, RawResponse

pytestmark = pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="needs os.RWF_NOWAIT (Linux 4.14+)")

DELAY_S = 0.5
LARGE = 3 * 1024 * 1024 + 12345  # above LOOPBACK_REGION: probed, then sendfile or the pool
MEDIUM = 700_000  # above SMALL_REGION, below LOOPBACK_REGION: read and written over loopback only
SMALL = 20000  # read at once with RWF_NOWAIT, the rest on the pool

_real_preadv = os.preadv
_real_sendfile = os.sendfile


def _write_file(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


PAGE = 4096


def _on_loop() -> bool:
    return threading.current_thread() is threading.main_thread()  # asyncio.run's loop; the pool is not


class ColdFile:
    """os.preadv / os.sendfile doubles: one inode's pages start out of the page cache."""

    def __init__(self, path: Path) -> None:
        self.ino = path.stat().st_ino
        self.cached: set[int] = set()
        self.loop_waits = 0  # reads that waited for the "disk" on the event loop's thread
        self.pool_waits = 0  # ... on another (the cold-read pool)

    def _cold(self, fd: int) -> bool:
        return os.fstat(fd).st_ino == self.ino

    def _pages(self, offset: int, count: int) -> range:
        return range(offset // PAGE, (offset + max(count, 1) - 1) // PAGE + 1)

    def _wait_for_disk(self, fd: int, offset: int, count: int) -> None:
        """A read of pages not cached waits, and the kernel reads ahead: to the end of the file here."""
        size = os.fstat(fd).st_size
        count = min(count, size - offset)
        if count <= 0 or all(p in self.cached for p in self._pages(offset, count)):
            return
        if _on_loop():
            self.loop_waits += 1
        else:
            self.pool_waits += 1
        time.sleep(DELAY_S)
        self.cached.update(self._pages(offset, size - offset))

    def preadv(self, fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        if not self._cold(fd):
            return _real_preadv(fd, buffers, offset, flags)
        count = sum(memoryview(b).nbytes for b in buffers)
        if flags & os.RWF_NOWAIT:
            cached_bytes = 0
            for p in self._pages(offset, count):
                if p not in self.cached:
                    break
                cached_bytes = min(count, (p + 1) * PAGE - offset)
            if cached_bytes == 0:
                raise BlockingIOError(errno.EAGAIN, "not in the page cache")
            view = memoryview(buffers[0])[:cached_bytes] if len(buffers) == 1 else None
            return _real_preadv(fd, [view] if view is not None else buffers, offset, flags)
        self._wait_for_disk(fd, offset, count)
        return _real_preadv(fd, buffers, offset, flags)

    def sendfile(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        if self._cold(in_fd) and offset is not None:
            self._wait_for_disk(in_fd, offset, count)
        return _real_sendfile(out_fd, in_fd, offset, count)


class Spy:
    """Counts one inode's reads by thread and kind; changes nothing."""

    def __init__(self, path: Path) -> None:
        self.ino = path.stat().st_ino
        self.nowait_reads = 0  # RWF_NOWAIT preadv on the loop
        self.blocking_reads = 0  # other preadv on the loop
        self.loop_sendfiles = 0
        self.pool_calls = 0  # preadv or sendfile on another thread

    def preadv(self, fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        if os.fstat(fd).st_ino == self.ino:
            if not _on_loop():
                self.pool_calls += 1
            elif flags & os.RWF_NOWAIT:
                self.nowait_reads += 1
            else:
                self.blocking_reads += 1
        return _real_preadv(fd, buffers, offset, flags)

    def sendfile(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        if os.fstat(in_fd).st_ino == self.ino:
            if _on_loop():
                self.loop_sendfiles += 1
            else:
                self.pool_calls += 1
        return _real_sendfile(out_fd, in_fd, offset, count)


def _install(monkeypatch: pytest.MonkeyPatch, double: Any) -> None:
    monkeypatch.setattr(os, "preadv", double.preadv)
    monkeypatch.setattr(os, "sendfile", double.sendfile)


async def _send(path: Path, position: int, size: int, *, cancel_after: float | None = None,
                remote_peer: bool = False) -> tuple[bytes, float]:
    """Send b"head" + the region + b"tail" through Connection._send_raw to a loopback client.
    Returns what the client received and the longest the loop went without running a ticker."""
    received, longest, _ = await _send_regions([(path, position, size)], cancel_after=cancel_after,
                                               remote_peer=remote_peer)
    return received, longest


async def _send_regions(
    regions: list[tuple[Path, int, int]], *, cancel_after: float | None = None, remote_peer: bool = False
) -> tuple[bytes, float, float]:
    """Send b"head", each region followed by b"|", and b"tail"; also returns the seconds it took."""
    accepted: asyncio.Future = asyncio.get_running_loop().create_future()
    finished = asyncio.Event()

    async def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))
        await finished.wait()  # ends normally (Python 3.11 logs a cancelled connection callback)

    server = await asyncio.start_server(on_accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client_reader, client_writer = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await accepted
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-cold-read")
    stub = SimpleNamespace(broker=SimpleNamespace(config={"queued.max.requests": 16}), cold_reads=pool)
    conn = Connection(stub, reader, writer)  # type: ignore[arg-type]
    assert conn.in_memory_region == file_regions.LOOPBACK_REGION
    if remote_peer:  # what a connection from another host gets (the test's sockets are loopback)
        conn.in_memory_region = file_regions.SMALL_REGION
    parts: list[object] = [b"head"]
    for path, position, size in regions:
        parts += [OpenRegion(open(path, "rb"), position, size), b"|"]
    parts.append(b"tail")
    total = 4 + sum(size + 1 for _, _, size in regions) + 4
    done = False
    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.monotonic()
        while not done:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    t0 = time.monotonic()
    send = asyncio.create_task(conn._send_raw(RawResponse(parts, total)))
    try:
        if cancel_after is not None:
            await asyncio.sleep(cancel_after)
            send.cancel()
            await asyncio.gather(send, return_exceptions=True)
            return b"", longest, time.monotonic() - t0
        received = await asyncio.wait_for(client_reader.readexactly(total), 30)
        await send
        return received, longest, time.monotonic() - t0
    finally:
        done = True
        finished.set()
        await tick
        client_writer.close()
        writer.close()
        server.close()
        pool.shutdown(wait=True)


@pytest.mark.parametrize(("size", "cached_pages"), [(LARGE, 0), (LARGE, 3), (SMALL, 0), (SMALL, 2)],
                         ids=["large", "large-partly-cached", "small", "small-partly-cached"])
def test_cold_region_is_read_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, cached_pages: int
) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = _write_file(path, size + 1000)
    cold = ColdFile(path)
    cold.cached.update(range(cached_pages))  # a RWF_NOWAIT read of the region stops short
    _install(monkeypatch, cold)
    received, longest = asyncio.run(_send(path, 1000, size))
    assert longest < DELAY_S / 2, f"the event loop stalled {longest * 1000:.0f} ms on a cold region"
    assert received == b"head" + data[1000:] + b"|tail"
    assert (cold.loop_waits, cold.pool_waits) == (0, 1)


@pytest.mark.parametrize(("size", "remote_peer"), [(LARGE, False), (MEDIUM, True), (MEDIUM, False), (SMALL, True)],
                         ids=["large", "medium-remote-peer", "medium-loopback", "small"])
def test_warm_region_is_sent_from_the_page_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int,
                                                 remote_peer: bool) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = _write_file(path, size + 1000)  # just written: in the page cache
    spy = Spy(path)
    _install(monkeypatch, spy)
    received, _ = asyncio.run(_send(path, 1000, size, remote_peer=remote_peer))
    assert received == b"head" + data[1000:] + b"|tail"
    assert spy.blocking_reads == 0 and spy.pool_calls == 0
    if size > (file_regions.SMALL_REGION if remote_peer else file_regions.LOOPBACK_REGION):
        assert spy.loop_sendfiles >= 1
        # first byte, last byte, one every PROBE_STEP between: a few syscalls, no copy
        assert spy.nowait_reads == -(-(size - 1) // file_regions.PROBE_STEP) + 1
    else:
        assert spy.loop_sendfiles == 0 and spy.nowait_reads == 1  # one read is the probe and the data


class ColdFiles:
    """ColdFile for several files at once."""

    def __init__(self, paths: list[Path]) -> None:
        self.files = {p.stat().st_ino: ColdFile(p) for p in paths}

    def _of(self, fd: int) -> ColdFile | None:
        return self.files.get(os.fstat(fd).st_ino)

    def preadv(self, fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        f = self._of(fd)
        return f.preadv(fd, buffers, offset, flags) if f else _real_preadv(fd, buffers, offset, flags)

    def sendfile(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        f = self._of(in_fd)
        return f.sendfile(out_fd, in_fd, offset, count) if f else _real_sendfile(out_fd, in_fd, offset, count)


def test_cold_regions_of_one_response_are_read_in_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch of two cold partitions waits for the disk about once, not once per partition."""
    paths = [tmp_path / f"p{i}.log" for i in range(2)]
    datas = [_write_file(p, LARGE) for p in paths]
    cold = ColdFiles(paths)
    _install(monkeypatch, cold)
    received, longest, took = asyncio.run(_send_regions([(p, 0, LARGE) for p in paths]))
    assert received == b"head" + b"|".join(datas) + b"|tail"
    assert longest < DELAY_S / 2
    assert all((f.loop_waits, f.pool_waits) == (0, 1) for f in cold.files.values())
    assert took < 1.5 * DELAY_S, f"two cold regions took {took:.2f} s: read one after the other"


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_really_evicted_file_is_read_on_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = _write_file(path, LARGE)
    _evict(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        # the project's machines (Linux, a disk-backed /tmp) evict and probe pages; a machine that
        # cannot is told so here rather than passing a test that proved nothing
        resident = file_regions.resident(fd, 0, LARGE)
        assert not resident, "the file system kept the evicted pages in memory (tmpfs?): cold reads cannot be tested"
    finally:
        os.close(fd)
    _evict(path)  # the probes may have brought a page in
    spy = Spy(path)
    _install(monkeypatch, spy)
    received, _ = asyncio.run(_send(path, 0, LARGE))
    assert received == b"head" + data + b"|tail"
    assert spy.pool_calls >= 1 and spy.loop_sendfiles >= 1  # faulted in on the pool, then sent
    assert spy.blocking_reads == 0
    fd = os.open(path, os.O_RDONLY)
    try:
        assert file_regions.resident(fd, 0, LARGE)  # the pool's reads brought it in
    finally:
        os.close(fd)


def test_cancelled_during_cold_read_leaks_no_descriptor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "00000000000000000000.log"
    _write_file(path, LARGE)
    file_regions.devnull()  # opened once per process: not a leak
    gc.collect()  # descriptors earlier tests in this process left to the collector close now, not mid-test
    before = len(os.listdir("/proc/self/fd"))
    cold = ColdFile(path)
    _install(monkeypatch, cold)
    asyncio.run(_send(path, 0, LARGE, cancel_after=DELAY_S / 5))  # waits for the pool's read to end
    assert (cold.loop_waits, cold.pool_waits) == (0, 1)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


def test_fetch_start_header_scan_not_cached_runs_on_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's header scan at a fetch's start position (LogSegment.translate_offset, up to 64 KiB)
    reads with RWF_NOWAIT on the loop; when the pages are not cached (EAGAIN) the same read runs,
    blocking, on the cold-read pool while the loop keeps serving, and returns what a warm read does."""
    from tieredlog.log import segment
    from tieredlog.log.config import LogConfig
    from tieredlog.log.types import FetchIsolation
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.records.record import build_batch
    from tieredlog.replication.data_path import FetchParams, PartitionRead
    from tieredlog.replication.fetcher import FetcherConfig
    from tieredlog.replication.replica_manager import ReplicaManager

    plog = UnifiedLog(tmp_path / "t-0", LogConfig())
    for i in range(50):
        plog.append_as_leader(build_batch([(b"k", b"v" * 500, [], 1_700_000_000_000 + i)] * 3), leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    from tieredlog.log.types import TopicPartition

    logs: Any = SimpleNamespace(get_log=lambda tp: plog)
    rm = ReplicaManager(0, logs, log_config_for=lambda t: LogConfig(), fetcher_config=FetcherConfig(),
                        replica_lag_time_max_ms=30_000, on_high_watermark_moved=lambda tp: None)
    rm.add_sole_replica(TopicPartition("t", 0), plog)
    params = FetchParams(-1, 0, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    fetch_offset = 100

    def fetch(pool: ThreadPoolExecutor) -> tuple[PartitionRead, int]:
        pr = PartitionRead("t", 0, fetch_offset, 8000)
        added = asyncio.run(_with_ticker(rm.read_from_local_log(pr, params, 1 << 20, True, pool)))
        return pr, added

    reads: list[str] = []  # which thread read through the blocking path
    real_read = segment.LogFile.read

    def slow_read(self: segment.LogFile, position: int, size: int) -> bytes:
        reads.append("loop" if _on_loop() else "pool")
        time.sleep(DELAY_S)  # the "disk"
        return real_read(self, position, size)

    monkeypatch.setattr(segment.LogFile, "read", slow_read)
    pool = ThreadPoolExecutor(1, thread_name_prefix="cold-read")
    try:
        warm, warm_added = fetch(pool)
        assert reads == []  # cached: one RWF_NOWAIT read on the loop, nothing for the pool
        nowait_calls = 0

        def preadv(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
            nonlocal nowait_calls
            nowait_calls += 1
            if nowait_calls == 1:
                raise BlockingIOError(errno.EAGAIN, "not cached")
            return _real_preadv(fd, buffers, offset, flags)

        monkeypatch.setattr(os, "preadv", preadv)
        t0 = time.monotonic()
        cold, cold_added = fetch(pool)
        elapsed = time.monotonic() - t0
    finally:
        pool.shutdown()
        plog.close()
    # every read of the header scans (the fetch's first batch, then its last whole one) on the pool
    assert nowait_calls == 1 and reads and set(reads) == {"pool"}
    assert elapsed >= DELAY_S
    assert _LAST_GAP[0] < DELAY_S / 4, f"the loop stalled {_LAST_GAP[0]:.3f}s"
    assert cold.data.error_code == warm.data.error_code == 0
    assert cold_added == warm_added > 0
    assert cold.data.records.read_bytes() == warm.data.records.read_bytes()
    assert cold.data.high_watermark == warm.data.high_watermark == plog.log_end_offset


_LAST_GAP = [0.0]


async def _with_ticker(coro: Any) -> Any:
    """Await ``coro`` while a ticker coroutine runs every 10 ms; its longest gap goes to _LAST_GAP."""
    gap = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal gap
        last = time.monotonic()
        while not stop:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gap = max(gap, now - last)
            last = now

    t = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        return await coro
    finally:
        stop = True
        await t
        _LAST_GAP[0] = gap


@pytest.mark.parametrize(("peer", "local", "same_host"), [
    ("127.0.0.1", "127.0.0.1", True), ("127.3.2.1", "127.0.0.1", True), ("::1", "::1", True),
    ("::ffff:127.0.0.1", "::ffff:127.0.0.1", True),
    ("10.0.0.7", "10.0.0.7", True),  # a client on this host that connected to its own address
    ("::ffff:10.0.0.7", "10.0.0.7", True),
    ("10.0.0.7", "10.0.0.8", False), ("::ffff:10.0.0.7", "::ffff:10.0.0.8", False), ("fe80::1%eth0", "fe80::2%eth0", False),
    ("2001:db8::1", "2001:db8::2", False), ("?", "?", False)])
def test_connections_from_the_same_host_are_told_apart(peer: str, local: str, same_host: bool) -> None:
    assert file_regions.is_same_host(peer, local) is same_host
