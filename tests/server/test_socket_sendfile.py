"""sendfile to a connection's socket on a loop without loop.sendfile (uvloop), and the loop choice."""

from __future__ import annotations

import asyncio
import os

import uvloop  # a dependency on Linux, where these tests run

from tieredlog.server import event_loop
from tieredlog.server.socket_sendfile import SocketSendfile, loop_has_sendfile


async def _send_region_to_slow_reader(path: str, position: int, size: int) -> bytes:
    received = bytearray()
    done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.transport.get_extra_info("socket")
        sender = SocketSendfile(sock.fileno())
        try:
            with open(path, "rb") as f:
                await sender.send(f.fileno(), position, size)
        finally:
            sender.close()
        await done.wait()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while len(received) < size:
        chunk = await reader.read(64 * 1024)
        assert chunk, "connection closed early"
        received += chunk
        await asyncio.sleep(0)  # the reader lags: the sender's socket fills and must wait
    done.set()
    writer.close()
    server.close()
    await server.wait_closed()
    return bytes(received)


def test_region_larger_than_the_socket_buffer_arrives_whole_on_uvloop(tmp_path):
    data = os.urandom(1 << 20) * 12  # more than loopback's socket buffers take at once
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    loop = uvloop.new_event_loop()
    try:
        assert not loop_has_sendfile(loop)
        got = loop.run_until_complete(_send_region_to_slow_reader(str(path), 1000, len(data) - 2000))
    finally:
        loop.close()
    assert got == data[1000:-1000]


def test_uvloop_is_the_loop_on_linux_unless_asked_otherwise(monkeypatch):
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.loop_factory() is uvloop.new_event_loop
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.loop_factory() is None
    loop = asyncio.new_event_loop()
    try:
        assert loop_has_sendfile(loop)
    finally:
        loop.close()


def test_writev_stops_where_the_socket_is_full_and_the_rest_follows_in_order():
    import socket
    import threading

    from tieredlog.server.socket_sendfile import parts_after, writev_nonblocking

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    a.setblocking(False)
    parts = [b"head", os.urandom(300_000), memoryview(os.urandom(500_000))[7:], bytearray(b"tail")]
    whole = b"".join(parts)
    try:
        sent = writev_nonblocking(a.fileno(), parts)
        assert 0 < sent < len(whole)  # the socket took some, not all
        rest = parts_after(parts, sent)
        assert sum(memoryview(p).nbytes for p in rest) == len(whole) - sent
        got = bytearray()

        def drain() -> None:
            while chunk := b.recv(1 << 20):
                got.extend(chunk)

        reader = threading.Thread(target=drain)
        reader.start()
        a.setblocking(True)
        for p in rest:
            a.sendall(p)
        a.close()
        reader.join(30)
        assert bytes(got) == whole
    finally:
        a.close()
        b.close()
    assert parts_after([b"ab", b"cd"], 2) == [b"cd"] and parts_after([b"ab"], 2) == []
    assert bytes(parts_after([b"ab", b"cd"], 3)[0]) == b"d"
