"""The file regions of a Fetch response, made ready to send without the event loop waiting for a disk.

A region of a segment file goes out with sendfile from the page cache when its pages are there; one
whose pages are not is first faulted in on the cold-read pool. Residency is probed with RWF_NOWAIT
reads, which fail instead of waiting for the disk. On a connection from the same host (over the
loopback device) a region up to LOOPBACK_REGION is read into memory with one such read and written
instead: there a consumer reading responses as they arrive costs the broker less CPU and comes
faster this way, and the consumer itself spends about half the CPU receiving a copy rather than
sendfile's page references.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

# Regions whose pages are not in the page cache are faulted in on a small pool of their own, never
# on the event loop: a sendfile of uncached pages reads the disk inside the call, and every
# connection of the broker would wait for it. Residency is probed with RWF_NOWAIT reads (Linux
# 4.14+), which fail with EAGAIN instead of waiting for the disk. Without os.RWF_NOWAIT (another OS),
# or on a file system that refuses it (EOPNOTSUPP), regions are sent as before: sendfile on the loop.
NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)
COLD_READ_THREADS = 4
# A response's regions are probed, and the cold ones faulted in, up to this many ahead of the one
# being sent: the partitions of one fetch are read in parallel, and while earlier ones are sent.
COLD_READ_AHEAD = COLD_READ_THREADS
# A region up to this size is read with one RWF_NOWAIT preadv and written from memory: the probe
# and the read are one syscall. A larger one is probed and sent with sendfile.
SMALL_REGION = 64 * 1024
# The same on a connection from this host, up to a consumer's default max.partition.fetch.bytes: a
# response holds at most COLD_READ_AHEAD + 1 of them in memory. The broker serving a librdkafka
# consumer of uncompressed records over loopback: 0.60-0.73 ms of its CPU per MB with sendfile,
# 0.39-0.57 this way (bench/bench_loopback_send.py shows how it depends on the client's reads).
LOOPBACK_REGION = 1024 * 1024
# Probes of a large region: its first and last byte and one every PROBE_STEP bytes between, so a
# page the probes miss costs the loop at most one PROBE_STEP of disk read.
PROBE_STEP = 256 * 1024
# A cold region is faulted in with this much after it: a sequential reader's next fetch starts at
# or before the region's end, and the log finds its first batch by reading headers from there, up
# to 64 KiB at a time (RWF_NOWAIT on the loop; on this pool when they are not cached).
FAULT_IN_AFTER = 64 * 1024
_PROBE = bytearray(1)  # what probes read is never looked at
# A TLS connection cannot sendfile: a region is read and written through the transport this much at a
# time, from the page cache on the loop, or on the cold-read pool for the pages that are not there.
TLS_CHUNK = 256 * 1024


class OpenRegion:
    """A region of a segment file on a file object the server owns and closes: ``loop.sendfile``
    moves its file position, and the log only uses positional I/O, so nothing else is disturbed.
    Opened when the response is built, so a segment deleted by retention meanwhile stays readable."""

    __slots__ = ("file", "position", "size")

    def __init__(self, file: Any, position: int, size: int) -> None:
        self.file = file
        self.position = position
        self.size = size

    def close(self) -> None:
        self.file.close()


class ColdRegions:
    """The regions of one response, in order, made ready to send without the event loop waiting for
    the disk. ``next_region()`` returns a small region's bytes when they were all in the page cache
    (one RWF_NOWAIT read), else None once the region's pages are in the page cache, faulted in on the
    cold-read pool when they were not: send it then with sendfile. Regions are probed, and cold ones
    submitted, up to COLD_READ_AHEAD ahead of the one asked for. ``in_memory`` is the size up to which a
    region is read rather than sent with sendfile (SMALL_REGION, or LOOPBACK_REGION)."""

    __slots__ = ("pool", "in_memory", "regions", "ready", "taken")

    def __init__(self, pool: ThreadPoolExecutor, parts: list[Any], in_memory: int = SMALL_REGION) -> None:
        self.pool = pool
        self.in_memory = in_memory
        self.regions = [p for p in parts if isinstance(p, OpenRegion)]
        self.ready: list[bytearray | Future[None] | None] = []
        self.taken = 0

    async def next_region(self) -> bytearray | None:
        i = self.taken
        self.taken += 1
        for region in self.regions[len(self.ready) : i + 1 + COLD_READ_AHEAD]:
            self.ready.append(self._probe(region))
        state = self.ready[i]
        self.ready[i] = None
        if isinstance(state, Future):
            await asyncio.wrap_future(state)
            return None
        return state

    def _probe(self, region: OpenRegion) -> bytearray | Future[None] | None:
        fd, position, size = region.file.fileno(), region.position, region.size
        if size <= self.in_memory:
            data = bytearray(size)
            try:
                got = os.preadv(fd, [data], position, NOWAIT)
            except BlockingIOError:
                got = 0
            except OSError as exc:
                if exc.errno == errno.EOPNOTSUPP:
                    return None
                raise
            if got == size:
                return data
            # a short read stopped at a page not cached (or at the end of the file: sendfile says so)
        elif resident(fd, position, size):
            return None
        # The pool reads a dup, closed when the read ends or is cancelled: a connection cancelled
        # meanwhile closes the region's file, and its descriptor number may be reused.
        dup = os.dup(fd)
        try:
            future = self.pool.submit(fault_in, dup, position, size + FAULT_IN_AFTER)
        except BaseException:
            os.close(dup)  # refused: the pool is shut down
            raise
        future.add_done_callback(functools.partial(_close_fd, dup))
        return future


def resident(fd: int, position: int, size: int) -> bool:
    """Whether a region's pages are in the page cache, probed without waiting for the disk: one-byte
    RWF_NOWAIT reads of its first byte, one every PROBE_STEP bytes and its last byte (EAGAIN: that
    page is not cached, or is being read; the kernel may start reading it). True where the file
    system cannot tell."""
    end = position + size - 1
    try:
        for off in range(position, end, PROBE_STEP):
            os.preadv(fd, [_PROBE], off, NOWAIT)
        os.preadv(fd, [_PROBE], end, NOWAIT)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            return True
        raise
    return True


def _close_fd(fd: int, _done: Future[Any]) -> None:
    os.close(fd)


def read_cached(fd: int, buf: bytearray, position: int) -> int:
    """Bytes of ``buf`` read from the page cache without waiting for the disk: up to the first page not
    cached; 0 where RWF_NOWAIT is missing or refused (the pool reads it all then)."""
    if not NOWAIT:
        return 0
    try:
        return os.preadv(fd, [buf], position, NOWAIT)
    except BlockingIOError:
        return 0
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            return 0
        raise


async def read_on_pool(pool: ThreadPoolExecutor, fd: int, view: memoryview, position: int) -> int:
    # a dup, closed when the read ends: a connection cancelled meanwhile closes the region's file
    dup = os.dup(fd)
    try:
        future = pool.submit(read_fully, dup, view, position)
    except BaseException:
        os.close(dup)  # refused: the pool is shut down
        raise
    future.add_done_callback(functools.partial(_close_fd, dup))
    return await asyncio.wrap_future(future)


def read_fully(fd: int, view: memoryview, position: int) -> int:
    """Read into ``view`` from ``position`` until it is full or the file ends (on the cold-read pool:
    this waits for the disk)."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], position + got)
        if n == 0:
            break
        got += n
    return got


def fault_in(fd: int, position: int, size: int) -> None:
    """Bring ``size`` bytes at ``position`` of ``fd`` (less at the end of the file) into the page
    cache, waiting for the disk; on the cold-read pool. A sendfile to /dev/null: the kernel reads the
    pages and copies nothing. Never raises: a read error is left to the loop's sendfile that
    follows, which reports it as it always has."""
    end = position + size
    try:
        out = devnull()
        while position < end:
            n = os.sendfile(out, fd, position, end - position)
            if n == 0:
                return
            position += n
    except OSError:
        return


_devnull_fd = -1
_devnull_lock = threading.Lock()


def devnull() -> int:
    global _devnull_fd
    if _devnull_fd < 0:
        with _devnull_lock:
            if _devnull_fd < 0:
                _devnull_fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    return _devnull_fd


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None  # not an IP address (a Unix socket's, a test double's)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_same_host(peer: str, local: str) -> bool:
    """Whether a connection runs over the loopback device: its peer's address is a loopback one
    (127.0.0.0/8, ::1, ::ffff:127.x.y.z), or the connection's own local address (a client on this
    host that connected to one of its other addresses: the kernel routes that through loopback too)."""
    address = _address(peer)
    if address is None:
        return False  # the general path
    return address.is_loopback or address == _address(local)
