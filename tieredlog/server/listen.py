"""The listeners' sockets, bound before the broker starts.

Binding is how a port in use is found; it happens before anything is written to the log dirs, so a
broker that cannot listen stops with one line and leaves no trace. The sockets only start listening
(and so accepting into their backlog) when the server starts, once the logs are loaded.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from tieredlog.config import Listener

# the listening sockets' backlog (asyncio's default): connections a listener stopped at max.connections
# leaves there wait in the kernel, as Kafka's do (its socket.listen.backlog.size)
LISTEN_BACKLOG = 100


class ListenerBindError(Exception):
    """A listener cannot bind its address: one line naming the setting, the listener and ``host:port``."""


@dataclass
class BoundListener:
    listener: Listener
    sockets: list[socket.socket]


async def bind_listeners(listeners: list[Listener]) -> list[BoundListener]:
    """Every listener's sockets, bound and not yet listening; on a failure none stays open."""
    loop = asyncio.get_running_loop()
    bound: list[BoundListener] = []
    try:
        for listener in listeners:
            bound.append(BoundListener(listener, await _bind(loop, listener)))
    except BaseException:
        close(bound)
        raise
    return bound


def listen(bound: list[BoundListener]) -> None:
    for b in bound:
        for sock in b.sockets:
            try:
                sock.listen(LISTEN_BACKLOG)
            except OSError as exc:  # another socket bound the port too and listened first
                raise _bind_error(b.listener, sock.getsockname(), exc) from None


def close(bound: list[BoundListener]) -> None:
    for b in bound:
        for sock in b.sockets:
            sock.close()


async def _bind(loop: asyncio.AbstractEventLoop, listener: Listener) -> list[socket.socket]:
    """Sockets for ``host:port`` as asyncio's start_server binds them (every address of the host; no
    host: every interface), non-blocking; the server's acceptors take connections from them."""
    host = listener.host or None
    try:
        infos = await loop.getaddrinfo(host, listener.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise _bind_error(listener, (listener.host, listener.port), exc) from None
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise _bind_error(listener, address, exc) from None
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _bind_error(listener: Listener, address: tuple[object, ...], exc: OSError) -> ListenerBindError:
    host = str(address[0])
    shown = f"[{host}]:{listener.port}" if ":" in host else f"{host}:{listener.port}"
    reason = exc.strerror or str(exc)
    # Kafka's SocketServer: "Socket server failed to bind to host:port: <reason>."
    return ListenerBindError(f"listeners={listener.name}://{listener.host}:{listener.port}: "
                             f"Socket server failed to bind to {shown}: {reason}.")
