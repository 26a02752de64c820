"""Helpers of the SASL tests: a broker's SASL listener overrides (PLAIN with short re-authentication,
SCRAM), a produce and consume round through librdkafka, the authentication error it reports, the
``users`` tool, and ``Raw``, a socket that sends requests the clients would not."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from typing import Any

from broker_harness import REPO
from confluent_kafka import Consumer, KafkaError, Producer
from helpers import wait_for

from tieredlog.protocol.codec import decode_response, encode_request

ADMIN_SECRET = "admin-s3cret-never-logged"

ALICE_SECRET = "alice-s3cret-never-logged"


PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              f'username="admin" password="{ADMIN_SECRET}" user_admin="{ADMIN_SECRET}" user_alice="{ALICE_SECRET}";')

REAUTH_MS = 2500


def sasl_overrides(sasl_port: int, plain_port: int, listener: str = "SASL_PLAINTEXT") -> dict[str, str]:
    name = listener.lower()
    return {
        "listeners": f"{listener}://127.0.0.1:{sasl_port},PLAINTEXT://127.0.0.1:{plain_port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"listener.name.{name}.plain.sasl.jaas.config": PLAIN_JAAS,
        # PLAIN sessions are short here, so KIP-368 re-authentication is exercised; SCRAM's last forever
        f"listener.name.{name}.plain.connections.max.reauth.ms": str(REAUTH_MS),
        "remote.log.storage.system.enable": "false",
        "num.partitions": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


def produce_and_consume(conf: dict[str, Any], topic: str, n: int = 5) -> list[bytes]:
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    for i in range(n):
        p.produce(topic, f"{topic}-{i}".encode())
    assert p.flush(30) == 0, errors
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "error_cb": errors.append})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION], errors
    return got


def auth_error(conf: dict[str, Any]) -> str:
    """The authentication error librdkafka reports for ``conf``."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    try:
        # error_cb runs inside poll()
        wait_for(lambda: p.poll(0.1) is not None and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
                 "an authentication error", 20)
    finally:
        p.purge()
        p.flush(0)
    return next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)


def users_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tieredlog.cli", "users", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


class Raw:
    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.cid = 0

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.cid += 1
        self.sock.sendall(encode_request(api_key, version, self.cid, "raw", body))

    def recv(self) -> bytes | None:
        """A response frame, or None once the broker closed the connection."""
        head = self._exact(4)
        return None if head is None else self._exact(struct.unpack(">i", head)[0])

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send(api_key, version, body)
        frame = self.recv()
        assert frame is not None, "the broker closed the connection"
        return decode_response(api_key, version, frame)[1]

    def _exact(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


METADATA_ALL = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
