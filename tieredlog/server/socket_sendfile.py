"""sendfile from a segment file straight to a connection's socket, for loops without ``loop.sendfile``,
and writev of a response's parts in memory straight to it.

asyncio's loop implements ``loop.sendfile``; uvloop's does not (it raises NotImplementedError). There,
a region the socket does not take at once is sent by ``os.sendfile`` each time the socket can take
more. The transport owns the socket's descriptor in the loop (a second watcher on it is refused), so
writability is watched on a duplicate of it: the same socket, another descriptor number.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

IOV_MAX = 1024  # Linux's limit on the buffers of one writev


def sendfile_nonblocking(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    """Send from ``in_fd`` at ``offset`` until ``count`` bytes went or the socket would block."""
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(out_fd, in_fd, offset + sent, count - sent)
        except (BlockingIOError, InterruptedError):
            break
        if n == 0:
            # the file ended inside the region: the frame's size prefix is already out, so the
            # connection cannot continue
            raise ConnectionError(f"segment file ended {count - sent} bytes short of a fetch region")
        sent += n
    return sent


def writev_nonblocking(out_fd: int, parts: list[Any]) -> int:
    """Write ``parts`` (bytes-like, in order) with writev until all went or the socket would block;
    the bytes written. A response's frame header and its records go in one system call."""
    sent = 0
    for i in range(0, len(parts), IOV_MAX):
        batch = parts[i:i + IOV_MAX]
        try:
            n = os.writev(out_fd, batch)
        except (BlockingIOError, InterruptedError):
            break
        sent += n
        if n < sum(memoryview(p).nbytes for p in batch):
            break
    return sent


def parts_after(parts: list[Any], sent: int) -> list[Any]:
    """What is left of ``parts`` once their first ``sent`` bytes were written."""
    for i, part in enumerate(parts):
        size = memoryview(part).nbytes
        if sent < size:
            return [memoryview(part)[sent:], *parts[i + 1:]] if sent else parts[i:]
        sent -= size
    return []


def loop_has_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    return type(loop).sendfile is not asyncio.AbstractEventLoop.sendfile


class SocketSendfile:
    """A connection socket's duplicate descriptor, to send on and to wait on for writability. The
    caller sends only while the transport's own write buffer is empty, so the bytes stay in order."""

    __slots__ = ("fd",)

    def __init__(self, sock_fd: int) -> None:
        self.fd = os.dup(sock_fd)

    async def send(self, in_fd: int, position: int, size: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            sent = sendfile_nonblocking(self.fd, in_fd, position, size)
            position += sent
            size -= sent
            if not size:
                return
            writable = loop.create_future()
            loop.add_writer(self.fd, _set_writable, writable)
            try:
                await writable
            finally:
                loop.remove_writer(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _set_writable(writable: asyncio.Future[None]) -> None:
    if not writable.done():
        writable.set_result(None)
