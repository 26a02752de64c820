"""The asyncio listener and per-connection request pipeline.

Each connection has a reader coroutine and a writer coroutine joined by a bounded queue of handler
tasks. The reader keeps decoding requests while earlier ones wait (a Fetch parked for min bytes),
handler tasks start in arrival order, and the writer sends responses strictly in request order, as
Kafka clients match responses to requests FIFO. A frame we cannot read closes only its connection.
A Fetch's file regions go out with sendfile from the page cache (or read and written, see
``file_regions``); a region whose pages are not there is first faulted in on the cold-read pool, so
sending one never waits for a disk on the loop.
Each listener's acceptor admits connections within the limits of ``connection_quotas``, and a
connection with no request for ``connections.max.idle.ms`` is closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic

from tieredlog.protocol.api import API_VERSIONS, PRODUCE, PRODUCE_REJECTED_BELOW, api_name
from tieredlog.protocol.codec import InvalidRequest, UnsupportedVersion, decode_request, peek_header, warm_up
from tieredlog.security.principal import ANONYMOUS, KafkaPrincipal
from tieredlog.security.sasl.authenticator import Admit, SaslClose, SaslIllegalState, SaslServerAuthenticator
from tieredlog.security.ssl_principal import NoMatchingRule
from tieredlog.security.tls import ListenerTls
from tieredlog.security.tls_config import listener_tls
from tieredlog.server.connection_quotas import ConnectionQuotas, normalize_ip
from tieredlog.server.context import CLOSE_CONNECTION, NO_RESPONSE, RequestContext
from tieredlog.server.dynamic_tls import DynamicTls
from tieredlog.server.file_regions import (
    COLD_READ_THREADS,
    LOOPBACK_REGION,
    NOWAIT,
    SMALL_REGION,
    TLS_CHUNK,
    ColdRegions,
    OpenRegion,
    is_same_host,
    read_cached,
    read_on_pool,
)
from tieredlog.server.listen import BoundListener, ListenerBindError, bind_listeners, close, listen
from tieredlog.server.network_contracts import B, RequestDispatcher
from tieredlog.server.sasl_apis import (
    authenticator_answer,
    connection_authenticator,
    illegal_sasl_state_answer,
)
from tieredlog.server.socket_sendfile import (
    SocketSendfile,
    loop_has_sendfile,
    parts_after,
    sendfile_nonblocking,
    writev_nonblocking,
)

log = logging.getLogger(__name__)


_I32 = struct.Struct(">i")

# a StreamReader's buffer: a Produce of a 1 MB batch is read in a few large reads, not paused and resumed
# every 128 KiB (asyncio's default, 64 KiB, costs a loop turn and two epoll changes per pause)
STREAM_LIMIT = 1024 * 1024


class RawResponse:
    """A pre-encoded response: ``bytes`` parts and file regions (``OpenRegion``) sent in order."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Any], size: int) -> None:
        self.parts = parts
        self.size = size

    def close(self) -> None:
        for p in self.parts:
            if isinstance(p, OpenRegion):
                p.close()


class Connection(Generic[B]):
    def __init__(self, server: KafkaServer[B], reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT") -> None:
        self.server = server
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        # set by the connection's authentication (SASL, a client certificate); ACLs match on it
        self.principal: KafkaPrincipal = ANONYMOUS
        # on a SASL listener: the connection's SASL state, which admits nothing but authentication until done
        self.sasl: SaslServerAuthenticator | None = connection_authenticator(server, listener_name, security_protocol)
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.host, self.port = str(peer[0]), int(peer[1])
        self.name = f"{self.host}:{self.port}"
        # the size up to which a Fetch's file region is read and written rather than sent with sendfile
        local = writer.get_extra_info("sockname") or ("?", 0)
        self.in_memory_region = LOOPBACK_REGION if is_same_host(self.host, str(local[0])) else SMALL_REGION
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=server.broker.config["queued.max.requests"])
        self.closing = False
        self._read_task: asyncio.Task | None = None
        # (api key, time read) of each handler task in the queue, in the same order: the writer pops
        # one per task and records RequestsPerSec / TotalTimeMs once the response is written
        self._received: deque[tuple[int, float]] = deque()
        # connections.max.idle.ms: the last request read or response written; a timer closes the
        # connection once nothing happened for that long and nothing is in flight
        self.last_active = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._busy = False  # the writer holds a request: waiting for its handler, or sending its response
        self._sendfile: SocketSendfile | None = None  # where the loop has no sendfile (uvloop)

    async def run(self) -> None:
        """Read requests until the peer leaves or ``shutdown()`` is called, write every response
        already started, close. Ends normally even when cancelled (see ``KafkaServer._accept``)."""
        loop = asyncio.get_running_loop()
        writer_task = loop.create_task(self._write_loop())
        self._read_task = loop.create_task(self._read_loop())
        idle_s = self.server.broker.config["connections.max.idle.ms"] / 1000
        self.last_active = time.monotonic()
        self._idle_timer = loop.call_later(idle_s, self._check_idle, idle_s)
        try:
            # asyncio.wait: a read loop cancelled by shutdown() does not cancel run() itself
            await asyncio.wait([self._read_task])
            if not self._read_task.cancelled():
                exc = self._read_task.exception()
                if exc is not None and not isinstance(exc, (ConnectionError, asyncio.IncompleteReadError)):
                    log.error("connection %s failed", self.name, exc_info=exc)
            await self.queue.put(None)  # writer finishes the in-flight responses, then stops
            await writer_task
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            if not self._read_task.done():
                self._read_task.cancel()
            if not writer_task.done():
                # cancelled before the responses were written: drop them, do not wait for the peer
                writer_task.cancel()
                self._abort()
                self._discard_queued()
            if self._sendfile is not None:
                self._sendfile.close()
            self.writer.close()

    def _check_idle(self, idle_s: float) -> None:
        loop = asyncio.get_running_loop()
        idle_for = time.monotonic() - self.last_active
        if idle_for < idle_s or self._received or self._busy:
            # active since, or a request still in flight (a Fetch parked for its min bytes)
            self._idle_timer = loop.call_later(max(idle_s - idle_for, 0.001) if idle_for < idle_s else idle_s,
                                               self._check_idle, idle_s)
            return
        self._idle_timer = None
        log.info("closing %s: no request for %d ms (connections.max.idle.ms)", self.name, int(idle_for * 1000))
        self.shutdown()

    def shutdown(self) -> None:
        """Broker stopping: read no further requests; the responses already started are still written."""
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()

    def _discard_queued(self) -> None:
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, asyncio.Task):
                if not item.done():
                    item.cancel()
                elif not item.cancelled() and item.exception() is None and isinstance(item.result(), RawResponse):
                    item.result().close()

    async def _read_loop(self) -> None:
        max_bytes = self.server.broker.config["socket.request.max.bytes"]
        loop = asyncio.get_running_loop()
        while not self.closing and not self.server.stopping:
            try:
                prefix = await self.reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial and not self.server.stopping:
                    log.warning("closing %s: connection ended inside a size prefix", self.name)
                return
            (size,) = _I32.unpack(prefix)
            sasl = self.sasl
            if sasl is not None and sasl.max_receive_size is not None and size > sasl.max_receive_size:
                log.info("closing %s: failed authentication on listener %s (Failing SASL authentication due to "
                         "invalid receive size %d > sasl.server.max.receive.size %d)", self.name, self.listener_name,
                         size, sasl.max_receive_size)
                return
            if sasl is not None and sasl.expects_raw_token:
                # after a SaslHandshake v0 the mechanism's tokens come bare, without a request header
                if not await self._sasl_raw_token(sasl, size):
                    return
                continue
            if size < 8 or size > max_bytes:
                log.warning(
                    "closing %s: request size %d outside [8, socket.request.max.bytes=%d]", self.name, size, max_bytes
                )
                return
            try:
                payload = await self.reader.readexactly(size)
                received = self.last_active = time.monotonic()
            except asyncio.IncompleteReadError:
                if not self.server.stopping:
                    log.warning("closing %s: connection ended inside a %d-byte request", self.name, size)
                return
            api_key, version, correlation_id = peek_header(payload)
            admit = Admit.SERVE
            illegal: SaslIllegalState | None = None
            if sasl is not None:
                try:
                    admit = sasl.admit(api_key, version)
                except SaslIllegalState as exc:
                    illegal = exc  # answered once the request is read, as Kafka parses it first
                except SaslClose as exc:
                    log.info("closing %s: failed authentication on listener %s (%s)", self.name, self.listener_name, exc)
                    return
            try:
                header, body = decode_request(payload)
            except UnsupportedVersion:
                if illegal is not None:
                    log.info("closing %s: failed authentication on listener %s (%s)", self.name, self.listener_name,
                             illegal)
                    return
                if api_key == API_VERSIONS:
                    # Kafka answers an unknown ApiVersions version in v0 format so the client learns the table
                    await self.queue.put(self.server.dispatcher.unsupported_api_versions(correlation_id))
                    continue
                if api_key == PRODUCE and 0 <= version < PRODUCE_REJECTED_BELOW:
                    try:
                        answer = self.server.dispatcher.reject_old_produce(payload, version, correlation_id)
                    except (struct.error, ValueError) as exc:
                        log.warning("closing %s: malformed Produce v%d: %s", self.name, version, exc)
                        return
                    await self.queue.put(answer)
                    continue
                log.warning(
                    "closing %s: unsupported %s v%d (correlation id %d)", self.name, api_name(api_key), version, correlation_id
                )
                return
            except InvalidRequest as exc:
                log.warning("closing %s: %s", self.name, exc)
                return
            if sasl is not None and admit is Admit.AUTHENTICATOR:
                frame, failure = authenticator_answer(sasl, api_key, version, correlation_id, body)
                if not await self._sasl_reply(sasl, frame, failure):
                    return
                continue
            ctx = RequestContext(
                api_key, version, correlation_id, header.client_id, self.host, self.port, self.server.broker, self.name,
                self.server.cold_reads, self.principal, self.listener_name, self.security_protocol,
            )
            if illegal is not None and sasl is not None:
                refusal = illegal_sasl_state_answer(ctx, body)
                log.info("closing %s: failed authentication on listener %s (%s)", self.name, self.listener_name, illegal)
                if refusal is not None:
                    await asyncio.sleep(sasl.settings.failed_authentication_delay_ms / 1000)
                    await self.queue.put(refusal)
                return
            handler = self.server.dispatcher.handler_for(api_key, version)
            if handler is None:
                log.warning("closing %s: %s v%d is not served", self.name, api_name(api_key), version)
                return
            # Tasks start in creation order, so handlers' synchronous parts (e.g. a Produce's
            # append) run in request order even though later requests need not wait.
            task = loop.create_task(self.server.dispatcher.run(handler, ctx, body, received))
            self.server.track(task)
            self._received.append((api_key, received))
            await self.queue.put(task)

    async def _sasl_reply(self, sasl: SaslServerAuthenticator, frame: bytes, failure: str | None) -> bool:
        """Queue the authenticator's answer; False when the authentication failed and the connection
        closes once it is written (Kafka's connection.failed.authentication.delay.ms first)."""
        if failure is not None:
            log.info("closing %s: failed authentication on listener %s (%s)", self.name, self.listener_name, failure)
            await asyncio.sleep(sasl.settings.failed_authentication_delay_ms / 1000)
        await self.queue.put(frame)
        if failure is None and sasl.principal is not None:
            self.principal = sasl.principal
        return failure is None

    async def _sasl_raw_token(self, sasl: SaslServerAuthenticator, size: int) -> bool:
        if size < 0:
            log.info("closing %s: failed authentication on listener %s (negative token size)", self.name,
                     self.listener_name)
            return False
        try:
            token = await self.reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return False
        try:
            answer = sasl.raw_token(token)
        except SaslClose as exc:
            log.info("closing %s: failed authentication on listener %s (%s)", self.name, self.listener_name, exc)
            await asyncio.sleep(sasl.settings.failed_authentication_delay_ms / 1000)
            return False
        return await self._sasl_reply(sasl, _I32.pack(len(answer)) + answer, None)

    async def _write_loop(self) -> None:
        record_request = self.server.broker.metrics.record_request
        while True:
            if self._busy:
                self._busy = False
                self.last_active = time.monotonic()  # a response written (or dropped): activity
            item = await self.queue.get()
            if item is None:
                return
            self._busy = True
            timing = None
            if isinstance(item, bytes) or item is NO_RESPONSE:
                result: Any = item
            else:
                timing = self._received.popleft()
                try:
                    result = await item
                except asyncio.CancelledError:
                    self._abort()
                    continue
                except Exception:
                    log.exception("closing %s: request handler failed", self.name)
                    self._abort()
                    continue
            if result is NO_RESPONSE:
                if timing is not None:
                    record_request(*timing)  # acks=0: complete once handled, nothing to write
                continue
            if self.closing:
                if isinstance(result, RawResponse):
                    result.close()
                continue
            if result is CLOSE_CONNECTION:
                self._abort()
                continue
            try:
                if isinstance(result, RawResponse):
                    await self._send_raw(result)
                else:
                    self.writer.write(result)
                    await self.writer.drain()
            except (ConnectionError, OSError):
                self._abort()
                continue
            if timing is not None:
                record_request(*timing)

    def _abort(self) -> None:
        """Stop reading and drop later responses; the socket closes when run() ends."""
        self.closing = True
        transport = self.writer.transport
        if transport is not None and not transport.is_closing():
            transport.abort()

    async def _send_raw(self, resp: RawResponse) -> None:
        loop = asyncio.get_running_loop()
        transport = self.writer.transport
        # Direct os.sendfile on a plain TCP socket whose transport buffer is empty: the bytes go in
        # order, and a region the socket takes at once costs one syscall instead of loop.sendfile's
        # reader pause, writer registration and extra loop turn. The rest goes through loop.sendfile.
        # TLS must encrypt what it sends: its regions are read into memory and written (_write_region).
        tls = transport.get_extra_info("sslcontext") is not None
        sock = transport.get_extra_info("socket")
        out_fd = sock.fileno() if sock is not None and not tls else -1
        cold = ColdRegions(self.server.cold_reads, resp.parts, self.in_memory_region) if NOWAIT else None
        try:
            pending: list[Any] = []  # parts in memory not written yet: they go out together
            for part in resp.parts:
                if not isinstance(part, OpenRegion):
                    pending.append(part)
                    continue
                if cold is not None:
                    data = await cold.next_region()
                    if data is not None:
                        pending.append(data)
                        self._write_parts(pending, out_fd)
                        pending = []
                        await self.writer.drain()  # many small regions: no more than the high-water mark queued
                        continue
                self._write_parts(pending, out_fd)
                pending = []
                if tls:
                    await self._write_region(part)
                    continue
                # the region's pages are in the page cache (or nothing can tell): sendfile
                position, size = part.position, part.size
                if out_fd >= 0 and not transport.is_closing() and transport.get_write_buffer_size() == 0:
                    sent = sendfile_nonblocking(out_fd, part.file.fileno(), position, size)
                    position += sent
                    size -= sent
                if not size:
                    continue
                await self.writer.drain()
                if out_fd < 0 or loop_has_sendfile(loop):
                    # zero-copy from the page cache; asyncio falls back to read+write where it cannot
                    await loop.sendfile(transport, part.file, position, size)
                    continue
                if self._sendfile is None:
                    self._sendfile = SocketSendfile(out_fd)
                await self._sendfile.send(part.file.fileno(), position, size)
            self._write_parts(pending, out_fd)
            await self.writer.drain()
        finally:
            resp.close()

    def _write_parts(self, parts: list[Any], out_fd: int) -> None:
        """``parts`` in order: straight to a plain TCP socket with one writev while the transport
        buffers nothing (a frame header and its records in one system call, where a write each cost
        two), the rest through the transport."""
        transport = self.writer.transport
        if parts and out_fd >= 0 and not transport.is_closing() and transport.get_write_buffer_size() == 0:
            parts = parts_after(parts, writev_nonblocking(out_fd, parts))
        for part in parts:
            self.writer.write(part)

    async def _write_region(self, region: OpenRegion) -> None:
        """A region through a TLS transport, TLS_CHUNK bytes at a time: each chunk read from the page
        cache on the loop (RWF_NOWAIT: it fails instead of waiting for the disk), what is not cached read
        on the cold-read pool, then written and drained before the next is read, so a connection holds
        at most a chunk beside its transport buffer."""
        fd = region.file.fileno()
        position, end = region.position, region.position + region.size
        while position < end:
            buf = bytearray(min(TLS_CHUNK, end - position))
            got = read_cached(fd, buf, position)
            if got < len(buf):
                got += await read_on_pool(self.server.cold_reads, fd, memoryview(buf)[got:], position + got)
            if got < len(buf):
                # the size prefix is out: the connection cannot go on (as sendfile's short file)
                raise ConnectionError(f"segment file ended {end - position - got} bytes short of a fetch region")
            self.writer.write(buf)
            await self.writer.drain()
            position += got


class KafkaServer(Generic[B]):
    def __init__(self, broker: B, dispatcher: RequestDispatcher[B], tls: dict[str, ListenerTls] | None = None) -> None:
        self.broker = broker
        self.dispatcher = dispatcher
        # the TLS side of each SSL and SASL_SSL listener, by name (serve() builds it before the broker
        # starts, so a key store that cannot be used stops start-up at once)
        self.tls = tls if tls is not None else listener_tls(broker.config)
        self._listen_sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task] = []
        # every accepted connection's task, from its accept (TLS handshake included) to its close
        self._accepted: set[asyncio.Task] = set()
        self.connections: dict[asyncio.Task, Connection[B]] = {}
        self.inflight: set[asyncio.Task] = set()
        self.stopping = False
        self.cold_reads = ThreadPoolExecutor(COLD_READ_THREADS, thread_name_prefix="cold-read")
        # Kafka's order: the listeners accept from the start (a cluster registration advertises them),
        # requests are read once start-up is over, so no client learns a half-started broker's view
        self._processing = asyncio.Event()
        config = broker.config
        self.quotas = ConnectionQuotas(config, [l.name for l in config.listeners], config.inter_broker_listener[0])
        broker.dynamic_config.reconfigurables.append(self.quotas.reconfigure)
        DynamicTls(self.tls, config).register(broker.dynamic_config)  # key stores changed live

    def enable_request_processing(self) -> None:
        self._processing.set()

    def track(self, task: asyncio.Task) -> None:
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def start(self, listeners: list[BoundListener] | None = None) -> list[tuple[str, int]]:
        """Listen on ``listeners`` (bound by :func:`bind_listeners` before the broker started; bound here
        when not given) and accept connections. ListenerBindError when a socket cannot listen."""
        loop = asyncio.get_running_loop()
        if listeners is None:
            listeners = await bind_listeners(self.broker.config.listeners)
        try:
            listen(listeners)
        except ListenerBindError:
            close(listeners)
            raise
        bound = []
        for b in listeners:
            listener = b.listener
            self._listen_sockets += b.sockets
            for sock in b.sockets:
                bound.append(sock.getsockname()[:2])
                self._acceptors.append(loop.create_task(self._acceptor(
                    listener.name, listener.security_protocol, self.tls.get(listener.name), sock)))
        # load the kio codecs clients will ask for off the loop, so no first request pays for it
        versions = dict(self.dispatcher.versions)
        threading.Thread(target=self._warm_up, args=(versions,), name="protocol-warm-up", daemon=True).start()
        return bound

    @staticmethod
    def _warm_up(versions: dict[int, tuple[int, int]]) -> None:
        try:
            warm_up(versions)
        except Exception:  # noqa: BLE001 - an optimisation only: the first request loads what it needs
            log.debug("protocol codec warm-up failed", exc_info=True)

    async def _acceptor(self, listener: str, security_protocol: str, tls: ListenerTls | None,
                        sock: socket.socket) -> None:
        """Kafka's Acceptor: accept a connection, wait while the broker or the listener holds its
        max.connections (new ones wait in the backlog meanwhile), close it at once when its address
        holds max.connections.per.ip, else serve it."""
        loop = asyncio.get_running_loop()
        quotas = self.quotas
        failing = False
        while not self.stopping:
            try:
                client, address = await loop.sock_accept(sock)
            except OSError as exc:
                # out of file descriptors (EMFILE) or buffers: the backlog keeps the peers a moment
                if not failing:
                    log.warning("listener %s cannot accept connections: %s", listener, exc)
                failing = True
                await asyncio.sleep(0.1)
                continue
            failing = False
            try:
                await quotas.wait_for_slot(listener)
            except asyncio.CancelledError:
                client.close()
                raise
            ip = normalize_ip(str(address[0]))
            if not quotas.inc(listener, ip):
                client.close()
                continue
            # self.tls, not the listener's TLS side at start: a key store changed live serves new connections
            current = self.tls.get(listener, tls)
            task = loop.create_task(self._connection(listener, security_protocol, current, client, ip))
            self._accepted.add(task)
            task.add_done_callback(self._accepted.discard)

    async def _connection(self, listener: str, security_protocol: str, tls: ListenerTls | None,
                          client: socket.socket, ip: str) -> None:
        try:
            opened = await open_accepted(listener, tls, client, ip)
            if opened is not None:
                await self._accept(listener, security_protocol, *opened)
        finally:
            self.quotas.dec(listener, ip)

    async def _accept(self, listener: str, security_protocol: str, principal: KafkaPrincipal,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.stopping:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        conn = Connection(self, reader, writer, listener, security_protocol)
        if security_protocol == "SSL":
            conn.principal = principal  # SASL_SSL: the SASL authentication names it
        self.connections[task] = conn
        try:
            if not self._processing.is_set():
                await self._processing.wait()
                if self.stopping:
                    writer.close()
                    return
            await conn.run()
        except asyncio.CancelledError:
            # Python 3.11's start_server callback calls task.exception() on this task, which raises
            # (and logs a traceback) for a cancelled task: a connection task always ends normally.
            pass
        finally:
            self.connections.pop(task, None)

    async def stop(self, grace: float = 10.0) -> None:
        """Stop accepting and reading, let in-flight requests finish and their responses go out
        (bounded by ``grace``), then close every connection."""
        self.stopping = True
        self._processing.set()  # connections still waiting for start-up to end are closed
        for acceptor in self._acceptors:
            acceptor.cancel()
        if self._acceptors:
            await asyncio.wait(self._acceptors)
        for sock in self._listen_sockets:
            sock.close()
        count = len(self.connections)
        for conn in list(self.connections.values()):
            conn.shutdown()
        # parked fetches wake on notify and return what they have
        self.broker.append_watchers.notify_all()
        if self.inflight:
            await asyncio.wait(list(self.inflight), timeout=grace)
        pending: set[asyncio.Task] = set()
        if self._accepted:
            _, pending = await asyncio.wait(list(self._accepted), timeout=grace)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=grace)
        # reads still queued run and close their descriptors; nothing waits for them
        self.cold_reads.shutdown(wait=False)
        log.info(
            "stopped listening, closed %d client connection(s)%s",
            count, f" ({len(pending)} cut off after {grace:g} s)" if pending else "",
        )


async def open_accepted(listener: str, tls: ListenerTls | None, client: socket.socket, ip: str
                        ) -> tuple[KafkaPrincipal, asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The accepted socket as a stream, after the TLS handshake on a TLS listener (done by the
    transport before any byte reaches the reader); None once a failed handshake closed it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STREAM_LIMIT)
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, client, ssl=tls.context if tls is not None else None)
    except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
        client.close()
        if tls is not None:
            reason = getattr(exc, "reason", None) or exc.__class__.__name__
            log.info("Failed authentication with /%s on listener %s (SSL handshake failed: %s)", ip, listener,
                     reason)
        return None
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    if tls is None:
        return ANONYMOUS, reader, writer
    try:
        return tls.principal(writer.get_extra_info("ssl_object")), reader, writer
    except (NoMatchingRule, ValueError) as exc:
        log.info("Failed authentication with /%s on listener %s (%s)", ip, listener, exc)
        transport.abort()
        return None
