"""An asyncio Kafka connection for broker-to-broker traffic: replica fetchers, requests to the controller.

    conn = await AsyncKafkaConnection.open("127.0.0.1", 9092, client_id="broker-1-fetcher", timeout_s=30)
    md, av = await asyncio.gather(conn.request(METADATA, {"topics": None}), conn.request(API_VERSIONS, {}))
    await conn.close()

Requests are pipelined: each is written as soon as it is made and a reader task hands every response
to the request with its correlation id, as Kafka's NetworkClient does. Bodies are dicts of kio field
names (or entities); answers are kio response entities.

Failure is all-or-nothing for the connection. A dropped connection, a frame over the size bound or a
response nobody asked for fails every pending request with ``ConnectionError`` and closes. A request
that times out raises ``TimeoutError`` and also closes: its response may still arrive later, and the
caller cannot tell it from the next one's. A response that does not decode fails only its own request
(``KafkaProtocolError``): the frame boundaries are intact, so the stream is still in sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from tieredlog import __version__
from tieredlog.clients.errors import InvalidReceive, KafkaProtocolError
from tieredlog.clients.sasl import authenticate_async
from tieredlog.clients.versions import highest_local_version
from tieredlog.protocol.api import API_VERSIONS, api_name
from tieredlog.protocol.codec import decode_response, encode_request
from tieredlog.protocol.guard import entity_checker
from tieredlog.protocol.schemas import load_response_schema
from tieredlog.security.sasl.client import SaslClientCredentials

__all__ = ["AsyncKafkaConnection", "InvalidReceive", "KafkaProtocolError"]

_I32 = struct.Struct(">i")

# socket.request.max.bytes's default: no response a tieredlog broker sends to a peer comes near it
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


@dataclass(slots=True)
class _InFlight:
    api_key: int
    version: int
    future: asyncio.Future[Any]


class AsyncKafkaConnection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        host: str,
        port: int,
        client_id: str,
        timeout_s: float,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        """Use ``open``; this only wraps an already connected stream pair."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.versions: dict[int, tuple[int, int]] = {}
        self._reader = reader
        self._writer = writer
        self._correlation = 0
        self._in_flight: dict[int, _InFlight] = {}
        self._closed = False
        self._common_versions: dict[int, int | None] = {}
        self._read_task = asyncio.get_running_loop().create_task(
            self._read_responses(), name=f"kafka-responses-{host}:{port}")

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str,
        timeout_s: float,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslClientCredentials | None = None,
    ) -> AsyncKafkaConnection:
        """Connect (with TLS when given ``ssl_context``: the peer's listener is SSL), then learn the
        peer's version ranges with ApiVersions, then log in with ``sasl`` (the peer's listener is SASL;
        SaslClientError, a ConnectionError, when refused); ``timeout_s`` bounds these steps together and
        is the default timeout of every request."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with asyncio.timeout_at(deadline):
            if ssl_context is None:
                reader, writer = await asyncio.open_connection(host, port)
            else:
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context, server_hostname=host)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # fetch requests are small and latency-bound; never hold one back for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = cls(reader, writer, host=host, port=port, client_id=client_id, timeout_s=timeout_s,
                   max_frame_bytes=max_frame_bytes)
        try:
            api = await conn.request(
                API_VERSIONS, {"client_software_name": "tieredlog", "client_software_version": __version__}, version=3,
                timeout_s=max(deadline - loop.time(), 0.0))
            if api.error_code.value != 0:
                raise KafkaProtocolError(f"ApiVersions to {host}:{port} failed: {api.error_code.name}")
            conn.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in api.api_keys}
            if sasl is not None:
                await authenticate_async(
                    lambda key, body, version: conn.request(key, body, version=version,
                                                            timeout_s=max(deadline - loop.time(), 0.0)),
                    sasl, conn.versions)
        except BaseException:
            await conn.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._closed

    def version_for(self, api_key: int) -> int:
        """The highest version both the peer and kio (or our inter-broker schemas) speak."""
        rng = self.versions.get(api_key)
        if rng is None:
            raise KafkaProtocolError(f"{self.host}:{self.port} does not serve {api_name(api_key)}")
        if api_key not in self._common_versions:
            self._common_versions[api_key] = highest_local_version(api_key, rng[1])
        v = self._common_versions[api_key]
        if v is None or v < rng[0]:
            raise KafkaProtocolError(f"no common version of {api_name(api_key)} with {self.host}:{self.port}")
        return v

    async def request(self, api_key: int, body: Any, version: int | None = None, timeout_s: float | None = None) -> Any:
        """Send one request and wait for its response (``timeout_s`` defaults to the connection's)."""
        if self._closed:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        if version is None:
            version = self.version_for(api_key)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation_id = self._correlation
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # registered before the write, so a response can never arrive for an unknown id; the write
        # itself only buffers, so a frame is never half sent when this task is cancelled
        self._in_flight[correlation_id] = _InFlight(api_key, version, future)
        self._writer.write(frame)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout):
                await self._writer.drain()
                return await future
        except TimeoutError:
            self._abort(ConnectionError(
                f"connection to {self.host}:{self.port} closed: {api_name(api_key)} v{version} timed out"))
            raise
        except ConnectionError:
            raise
        except OSError as exc:  # drain on a reset socket
            self._abort(ConnectionError(f"connection to {self.host}:{self.port} lost: {exc}"))
            raise ConnectionError(f"connection to {self.host}:{self.port} lost: {exc}") from exc

    async def close(self) -> None:
        self._abort(ConnectionError(f"connection to {self.host}:{self.port} closed"))
        await asyncio.wait([self._read_task])  # unlike awaiting it, never raises the task's cancellation
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def __aenter__(self) -> AsyncKafkaConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _abort(self, exc: ConnectionError) -> None:
        """Close at once and fail everything in flight (each waiter gets its own exception object)."""
        if self._closed:
            return
        self._closed = True
        in_flight, self._in_flight = self._in_flight, {}
        for call in in_flight.values():
            if not call.future.done():
                call.future.set_exception(type(exc)(*exc.args))
        self._writer.close()
        if asyncio.current_task() is not self._read_task:
            self._read_task.cancel()

    async def _read_responses(self) -> None:
        try:
            while True:
                (size,) = _I32.unpack(await self._reader.readexactly(4))
                if size < 4 or size > self.max_frame_bytes:
                    raise InvalidReceive(
                        f"{self.host}:{self.port} sent a frame of {size} bytes (bound {self.max_frame_bytes})")
                payload = await self._reader.readexactly(size)
                (correlation_id,) = _I32.unpack_from(payload, 0)  # first field of every response header
                call = self._in_flight.pop(correlation_id, None)
                if call is None:
                    raise InvalidReceive(
                        f"{self.host}:{self.port} answered correlation id {correlation_id}, which no request has")
                if not call.future.done():  # its caller may have been cancelled: the answer is dropped
                    self._complete(call, payload)
        except asyncio.IncompleteReadError:
            self._abort(ConnectionError(f"connection to {self.host}:{self.port} closed by the peer"))
        except InvalidReceive as exc:
            self._abort(exc)
        except OSError as exc:
            self._abort(ConnectionError(f"connection to {self.host}:{self.port} lost: {exc}"))

    def _complete(self, call: _InFlight, payload: bytes) -> None:
        try:
            cls = load_response_schema(call.api_key, call.version)
            # kio's native reader trusts array lengths and can abort the process on a hostile one:
            # a peer's response gets the same length check as a client's request
            end = len(payload)
            entity_checker(cls)(payload, entity_checker(cls.__header_schema__)(payload, 0, end), end)
            _, body = decode_response(call.api_key, call.version, payload)
        except Exception as exc:  # the guard's FrameError, or any of the types kio raises on a garbled frame
            call.future.set_exception(KafkaProtocolError(
                f"cannot decode {api_name(call.api_key)} v{call.version} response from {self.host}:{self.port}: "
                f"{exc.__class__.__name__}: {exc}"))
            return
        call.future.set_result(body)
