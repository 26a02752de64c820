"""A small blocking Kafka client for tools and tests: one socket, one request at a time.

    with KafkaClient("127.0.0.1:9092") as c:
        md = c.request(METADATA, {"topics": None})          # highest version both sides speak
        r = c.request(CREATE_TOPICS, {...}, version=7)       # or a fixed version

Bodies are dicts of kio field names (or kio entities); answers are kio response entities.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.clients.sasl import authenticate_blocking
from tieredlog.clients.versions import highest_local_version, parse_bootstrap, parse_bootstrap_list
from tieredlog.protocol.api import API_VERSIONS
from tieredlog.protocol.codec import decode_response, encode_request
from tieredlog.security.sasl.client import SaslClientCredentials

__all__ = ["KafkaClient", "KafkaProtocolError", "parse_bootstrap"]

_I32 = struct.Struct(">i")


class KafkaClient:
    def __init__(self, bootstrap: str, client_id: str = "tieredlog-tools", timeout: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslClientCredentials | None = None) -> None:
        """``ssl_context``: TLS to an SSL listener (the broker's own connections to an SSL inter-broker
        listener pass theirs). ``sasl``: log in on a SASL listener once connected (SaslClientError, a
        ConnectionError, when the broker refuses)."""
        self.addresses = parse_bootstrap_list(bootstrap)
        self.host, self.port = self.addresses[0]
        self.client_id = client_id
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.sock: socket.socket | None = None
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}

    def connect(self) -> "KafkaClient":
        sock = self._connect_any()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        api = self.request(API_VERSIONS, {"client_software_name": "tieredlog", "client_software_version": "0.1"}, version=3)
        if api.error_code.value != 0:
            raise KafkaProtocolError(f"ApiVersions failed: {api.error_code.name}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in api.api_keys}
        if self.sasl is not None:
            try:
                authenticate_blocking(lambda key, body, version: self.request(key, body, version=version),
                                      self.sasl, self.versions)
            except BaseException:
                self.close()
                raise
        return self

    def for_node(self, address: str) -> "KafkaClient":
        """A client of another broker (the controller, a leader, a coordinator) with this one's id,
        timeout and security, not connected yet: what goes for the bootstrap broker goes for all."""
        return KafkaClient(address, client_id=self.client_id, timeout=self.timeout, ssl_context=self.ssl_context,
                           sasl=self.sasl)

    def _connect_any(self) -> socket.socket:
        """The first address of the bootstrap list that accepts a connection, as Kafka's clients try
        each bootstrap server in turn: a tool keeps working while the first one listed is down."""
        last: OSError | None = None
        for host, port in self.addresses:
            try:
                sock = socket.create_connection((host, port), timeout=self.timeout)
            except OSError as exc:
                last = exc
                continue
            self.host, self.port = host, port
            return sock
        assert last is not None
        raise last

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> "KafkaClient":
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def version_for(self, api_key: int) -> int:
        rng = self.versions.get(api_key)
        if rng is None:
            raise KafkaProtocolError(f"broker does not serve API key {api_key}")
        v = highest_local_version(api_key, rng[1])
        if v is None or v < rng[0]:
            raise KafkaProtocolError(f"no common version for API key {api_key}")
        return v

    def _recv_exact(self, n: int) -> bytes:
        assert self.sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def send_raw(self, frame: bytes) -> None:
        assert self.sock is not None
        self.sock.sendall(frame)

    def recv_frame(self) -> bytes:
        (size,) = _I32.unpack(self._recv_exact(4))
        return self._recv_exact(size)

    def request(self, api_key: int, body: Any, version: int | None = None, expect_response: bool = True) -> Any:
        if self.sock is None:
            self.connect()
        if version is None:
            version = self.version_for(api_key)
        self._correlation += 1
        cid = self._correlation
        self.send_raw(encode_request(api_key, version, cid, self.client_id, body))
        if not expect_response:
            return None
        payload = self.recv_frame()
        got, resp = decode_response(api_key, version, payload)
        if got != cid:
            raise KafkaProtocolError(f"correlation id {got} does not match request {cid}")
        return resp
