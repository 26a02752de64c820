"""Hostile request frames for a running broker: what the fuzz tests send and how they watch it.

- ``advertised(bootstrap)``: every (api key, version) the broker advertises in ApiVersions.
- ``RecordingProxy``: a loopback TCP proxy that keeps every request frame a client sends through it,
  so real client requests (confluent-kafka's) can be mutated.
- ``hostile_frame(rng, api_key, version, corpus)``: a frame with a valid header for that API and
  version and a body made by one of the mutation kinds in ``MUTATIONS``.
- ``probe(host, port, frame)``: send one frame on a fresh connection followed by an ApiVersions
  request, and report whether the broker answered, closed the connection or kept it waiting.
"""

from __future__ import annotations

import random
import select
import socket
import struct
import threading
from dataclasses import dataclass, field

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import API_VERSIONS
from tieredlog.protocol.codec import _request_codec, encode_request

_I32 = struct.Struct(">i")
PROBE_CORRELATION_ID = 0x7E57
_PROBE = encode_request(API_VERSIONS, 0, PROBE_CORRELATION_ID, "probe", {})

MUTATIONS = ("random-body", "int32-length", "int16-length", "varint-run", "flip-valid-body", "mutate-captured")


def advertised(bootstrap: str) -> list[tuple[int, int]]:
    with KafkaClient(bootstrap) as c:
        resp = c.request(API_VERSIONS, {}, version=3)
    return [(k.api_key, v) for k in resp.api_keys for v in range(k.min_version, k.max_version + 1)]


def header_and_body(api_key: int, version: int, correlation_id: int = 1) -> tuple[bytes, bytes]:
    """(header, zero-valued body) of a valid request; kio has no schema for Produce v0-2, whose
    header is a v1 header, so those get a header only."""
    try:
        cls, check_header, *_ = _request_codec(api_key, version)
    except Exception:
        return struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz", b""
    frame = encode_request(api_key, version, correlation_id, "fuzz", {})[4:]
    n = check_header(frame, 0, len(frame))
    return frame[:n], frame[n:]


def _hostile_int(rng: random.Random, width: int) -> bytes:
    if width == 4:
        value = rng.choice([1 << 30, 0x7FFFFFFF, -2, -0x80000000, 1 << 20, 65535, 0x10000000])
        return _I32.pack(value)
    return struct.pack(">h", rng.choice([0x7FFF, -2, -0x8000, 0x4000]))


def _splice(rng: random.Random, body: bytearray, insert: bytes, overwrite: bool) -> bytearray:
    pos = rng.randrange(0, len(body) + 1)
    if overwrite:
        body[pos : pos + len(insert)] = insert
    else:
        body[pos:pos] = insert
    return body


def hostile_frame(rng: random.Random, api_key: int, version: int, corpus: dict[tuple[int, int], list[bytes]]) -> tuple[str, bytes]:
    """(mutation kind, complete frame with size prefix)."""
    header, body0 = header_and_body(api_key, version, rng.randrange(1, 1 << 31))
    captured = corpus.get((api_key, version))
    kinds = MUTATIONS if captured else MUTATIONS[:-1]
    kind = rng.choice(kinds)
    body = bytearray(body0)
    if kind == "random-body":
        body = bytearray(rng.randbytes(rng.randrange(0, 96)))
    elif kind == "int32-length":
        body = _splice(rng, body, _hostile_int(rng, 4), overwrite=rng.random() < 0.5)
    elif kind == "int16-length":
        body = _splice(rng, body, _hostile_int(rng, 2), overwrite=rng.random() < 0.5)
    elif kind == "varint-run":
        run = b"\xff" * rng.randrange(1, 10) + bytes([rng.randrange(0, 0x80)])
        body = _splice(rng, body, run, overwrite=rng.random() < 0.5)
    elif kind == "flip-valid-body":
        body += rng.randbytes(rng.randrange(0, 16))
        for _ in range(rng.randrange(1, 4)):
            if body:
                body[rng.randrange(len(body))] = rng.randrange(256)
    else:  # a real client's request with its body mutated
        whole = rng.choice(captured)
        check_header = _request_codec(api_key, version)[1]
        hlen = check_header(whole, 0, len(whole))
        header, body = whole[:hlen], bytearray(whole[hlen:])
        for _ in range(rng.randrange(1, 4)):
            what = rng.random()
            if what < 0.4 and body:
                body[rng.randrange(len(body))] = rng.randrange(256)
            elif what < 0.7:
                body = _splice(rng, body, _hostile_int(rng, 4), overwrite=True)
            elif what < 0.85:
                body = _splice(rng, body, b"\xff" * rng.randrange(1, 7), overwrite=True)
            else:
                del body[rng.randrange(len(body) + 1) :]
    payload = header + bytes(body)
    return kind, _I32.pack(len(payload)) + payload


def exact_twenty_bytes() -> bytes:
    """The frame that ended the broker before request lengths were checked: Metadata v9 whose
    topics array length is the varint 0xffffffff (a 2^32-entry array to kio's native reader)."""
    payload = struct.pack(">hhih", 3, 9, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x0f"
    frame = _I32.pack(len(payload)) + payload
    assert len(frame) == 20
    return frame


def probe(host: str, port: int, frame: bytes, wait: float = 2.0) -> str:
    """'answered' (the probe behind the frame was answered), 'closed' or 'pending' (a parked
    request, e.g. a Fetch waiting for data, still holds the connection's response order)."""
    with socket.create_connection((host, port), timeout=wait) as s:
        try:
            s.sendall(frame + _PROBE)
        except OSError:
            return "closed"
        buf = b""
        deadline_polls = int(wait / 0.05)
        for _ in range(deadline_polls):
            ready, _, _ = select.select([s], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = s.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return "closed"
            if not chunk:
                return "closed"
            buf += chunk
            while len(buf) >= 8:
                (size,) = _I32.unpack_from(buf, 0)
                if len(buf) < 4 + size:
                    break
                (cid,) = _I32.unpack_from(buf, 4)
                if cid == PROBE_CORRELATION_ID:
                    return "answered"
                buf = buf[4 + size :]
        return "pending"


@dataclass
class RecordingProxy:
    """Forwards 127.0.0.1:<port> to the broker and keeps each request frame clients send, keyed by
    (api key, version). Start the broker with ``advertised.listeners`` set to this proxy so
    clients send every request through it."""

    target: tuple[str, int]
    frames: dict[tuple[int, int], list[bytes]] = field(default_factory=dict)
    port: int = 0

    def __post_init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", self.port))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> "RecordingProxy":
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        for t in self._threads:
            t.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for src, dst, record in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, record), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        pending = b""
        try:
            src.settimeout(0.2)  # the other direction may already have closed both sockets
            while not self._stop.is_set():
                try:
                    chunk = src.recv(1 << 16)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                dst.sendall(chunk)
                if record:
                    pending += chunk
                    pending = self._split(pending)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _split(self, pending: bytes) -> bytes:
        while len(pending) >= 4:
            (size,) = _I32.unpack_from(pending, 0)
            if len(pending) < 4 + size:
                break
            frame, pending = pending[: 4 + size], pending[4 + size :]
            api_key, version = struct.unpack_from(">hh", frame, 4)
            with self._lock:
                self.frames.setdefault((api_key, version), []).append(frame[4:])
        return pending


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM")
