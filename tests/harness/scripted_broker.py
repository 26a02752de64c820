"""A scripted broker for the client tests: a listener on 127.0.0.1 that runs a coroutine per connection
(``Peer`` reads request frames and writes answers), so a test decides every byte a client receives."""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Awaitable, Callable

from tieredlog.clients.connection import AsyncKafkaConnection
from tieredlog.protocol.api import API_VERSIONS, METADATA
from tieredlog.protocol.codec import RequestHeader, decode_request, encode_response

Handler = Callable[["Peer"], Awaitable[None]]


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, 60)  # a hang guard, never a performance bound

    return asyncio.run(guarded())


class Peer:
    """One accepted connection of a scripted broker: reads request frames, writes raw frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read_request(self) -> tuple[RequestHeader, Any]:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return decode_request(await self.reader.readexactly(size))

    async def answer(self, header: RequestHeader, body: dict) -> None:
        self.writer.write(encode_response(header.api_key, header.api_version, header.correlation_id, body))
        await self.writer.drain()

    async def handshake(self, versions: dict[int, tuple[int, int]] | None = None) -> None:
        header, _ = await self.read_request()
        assert header.api_key == API_VERSIONS
        keys = versions if versions is not None else {API_VERSIONS: (0, 3), METADATA: (0, 12)}
        await self.answer(header, {"error_code": 0, "throttle_time": 0, "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in keys.items()]})

    async def closed_by_client(self) -> bool:
        return await self.reader.read(1) == b""


class ScriptedBroker:
    """A listener on 127.0.0.1 (a free port the kernel picks) that runs ``script`` per connection."""

    def __init__(self, script: Handler) -> None:
        self.script = script
        self.done: asyncio.Future[None] | None = None
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> ScriptedBroker:
        self.done = asyncio.get_running_loop().create_future()
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.done is not None
        try:
            await self.script(Peer(reader, writer))
            if not self.done.done():
                self.done.set_result(None)
        except BaseException as exc:  # surfaced to the test through ``done``
            if not self.done.done():
                self.done.set_exception(exc)
        finally:
            writer.close()

    async def open(self, **kw: Any) -> AsyncKafkaConnection:
        return await AsyncKafkaConnection.open("127.0.0.1", self.port, client_id="test", timeout_s=kw.pop("timeout_s", 10),
                                               **kw)


def metadata_request(topic: str) -> dict:
    return {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
