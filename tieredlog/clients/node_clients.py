"""A connection per node, kept open between requests and dropped when it fails.

``NodeConnections`` is the asyncio form (the broker's senders on the event loop: replica fetchers,
the controller channel, transaction markers); ``BlockingNodeConnection`` is one node's connection for
worker threads (the controller's send threads, the replicated metadata topic client);
``BlockingNodeClients`` is a blocking client per node for the tools (one thread, no locks). Both connect
with the listener's ``ListenerSecurity`` and reconnect on the next request after a failure: a
request that fails or times out closes its connection, since a late answer would be read as the
next request's.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, TypeVar

from tieredlog.clients.blocking import KafkaClient
from tieredlog.clients.connection import AsyncKafkaConnection
from tieredlog.clients.versions import format_address
from tieredlog.security.sasl.client import SaslClientCredentials

N = TypeVar("N", bound=Hashable)

Endpoint = tuple[str, int]


@dataclass(frozen=True)
class ListenerSecurity:
    """How to reach a listener: TLS when it is SSL or SASL_SSL, a SASL login when it is SASL_*."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslClientCredentials | None = field(default=None, repr=False)


PLAINTEXT = ListenerSecurity()


@dataclass(frozen=True)
class ConnectSettings:
    """How a connection is opened: the client id it announces, the bound on connecting (and each
    request's default timeout), the listener's security."""

    client_id: str
    timeout_s: float
    security: ListenerSecurity = PLAINTEXT


class NodeConnections(Generic[N]):
    """One ``AsyncKafkaConnection`` per node, opened on first use (``endpoint_of(node)`` says where;
    None: ConnectionError) and dropped when it fails. Requests to one node share its connection and
    are pipelined on it."""

    def __init__(self, endpoint_of: Callable[[N], Endpoint | None], settings: Callable[[], ConnectSettings], *,
                 describe: Callable[[N], str] = str) -> None:
        """``settings`` is asked at each connect (the owner's configuration may not exist before its
        first request); ``describe(node)`` names the node in errors."""
        self._endpoint_of = endpoint_of
        self._settings = settings
        self._describe = describe
        self._conns: dict[N, AsyncKafkaConnection] = {}
        self._locks: dict[N, asyncio.Lock] = {}

    async def get(self, node: N, timeout_s: float | None = None) -> AsyncKafkaConnection:
        """The node's open connection, connecting (within ``timeout_s``, else the settings') when there is none."""
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return conn  # the per-request path: no lock, no await
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node)
            if conn is None or conn.closed:
                endpoint = self._endpoint_of(node)
                if endpoint is None:
                    raise ConnectionError(f"{self._describe(node)} has no known endpoint")
                settings = self._settings()
                conn = self._conns[node] = await AsyncKafkaConnection.open(
                    endpoint[0], endpoint[1], client_id=settings.client_id,
                    timeout_s=settings.timeout_s if timeout_s is None else timeout_s,
                    ssl_context=settings.security.ssl_context, sasl=settings.security.sasl)
            return conn

    async def request(self, node: N, api_key: int, body: Any, version: int | None = None,
                      timeout_s: float | None = None) -> Any:
        """One request to ``node``; a connection that fails (or times out) is dropped and the error raised."""
        conn = await self.get(node, timeout_s)
        try:
            return await conn.request(api_key, body, version=version, timeout_s=timeout_s)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            await self.drop(node)
            raise

    async def drop(self, node: N) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        for node in list(self._conns):
            await self.drop(node)


class BlockingNodeConnection:
    """One blocking connection to one node. ``lock`` makes its users take turns (one request at a
    time on the wire); ``close`` may come from any thread and fails a request in flight at once."""

    def __init__(self, endpoint: Endpoint, *, client_id: str, security: ListenerSecurity = PLAINTEXT) -> None:
        self.endpoint = endpoint
        self.client_id = client_id
        self.security = security
        self.lock = threading.Lock()
        self._client: KafkaClient | None = None
        self._guard = threading.Lock()  # guards _client and _closed; never held while waiting on the network
        self._closed = False

    @property
    def address(self) -> str:
        return format_address(self.endpoint)

    def request(self, api_key: int, body: Any, version: int | None, timeout_s: float) -> Any:
        """Send one request and wait up to ``timeout_s`` for its answer, connecting first when needed
        (within ``timeout_s`` too). Any failure closes the connection; the next request reconnects."""
        try:
            with self._guard:
                if self._closed:
                    raise ConnectionError(f"the connection to {self.address} is closed")
                client = self._client
            if client is None:
                client = KafkaClient(self.address, client_id=self.client_id, timeout=timeout_s,
                                     ssl_context=self.security.ssl_context, sasl=self.security.sasl)
                client.connect()
                with self._guard:
                    if self._closed:
                        client.close()
                        raise ConnectionError(f"the connection to {self.address} is closed")
                    self._client = client
            elif client.sock is not None:
                client.sock.settimeout(timeout_s)
            return client.request(api_key, body, version=version)
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """Close the current connection (the next request opens another)."""
        with self._guard:
            client, self._client = self._client, None
        _shut(client)

    def close(self) -> None:
        """Close for good; a request in flight on another thread fails now rather than at its timeout."""
        with self._guard:
            self._closed = True
            client, self._client = self._client, None
        _shut(client)


class BlockingNodeClients(Generic[N]):
    """A blocking client per node for a tool, opened on first use and kept until ``close`` (the tool
    closes them all after a connection fails, so each is opened again on its next use)."""

    def __init__(self, client_of: Callable[[N], KafkaClient]) -> None:
        """``client_of(node)``: a client of that node, not connected yet."""
        self._client_of = client_of
        self._clients: dict[N, KafkaClient] = {}

    def get(self, node: N) -> KafkaClient:
        client = self._clients.get(node)
        if client is None:
            client = self._clients[node] = self._client_of(node).connect()
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def _shut(client: KafkaClient | None) -> None:
    if client is None:
        return
    sock = client.sock
    if sock is not None:
        # shutdown wakes a thread blocked reading this socket (close alone would leave it waiting); the
        # socket object stays in place, closed, so that thread fails with an OSError wherever it is
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
