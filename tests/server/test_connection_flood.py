"""A flood of bad and surplus connections against one broker with small connection limits, while a
good confluent-kafka producer keeps producing: the producer sees no error and every record is read
back, the broker stays up, and max.connections.per.ip(.overrides), listener.name.<l>.max.connections
and connections.max.idle.ms are enforced (dynamic changes included).

The flood comes from other loopback addresses than the good clients (127.0.0.2-127.0.0.6), so the
per-address limits are exercised without touching the good producer's own address.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from helpers import free_port, wait_for

from tieredlog.protocol.api import API_VERSIONS
from tieredlog.protocol.codec import encode_request

pytestmark = pytest.mark.integration

IDLE_MS = 1500
PER_IP = 5  # 127.0.0.2's limit (override)
FLOOD_LISTENER_MAX = 4
TOPIC = "flood-good"


def _connect(port: int, source: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST: no TIME_WAIT
    return s


def _closed_by_broker(s: socket.socket, timeout: float = 20) -> bool:
    """The broker closed the connection (EOF or reset) within ``timeout``; False if it kept it open."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _served(s: socket.socket, timeout: float = 10) -> bool:
    """An ApiVersions on ``s`` is answered within ``timeout``."""
    s.settimeout(timeout)
    try:
        s.sendall(encode_request(API_VERSIONS, 0, 7, "flood", {}))
        head = s.recv(8)
    except (socket.timeout, OSError):
        return False
    return len(head) == 8 and struct.unpack(">i", head[4:])[0] == 7


def _bad_connection(port: int, source: str, kind: str, rnd: random.Random) -> bool:
    s = _connect(port, source)
    try:
        if kind == "garbage":
            s.sendall(struct.pack(">i", 40) + rnd.randbytes(40))
        elif kind == "oversized":
            s.sendall(struct.pack(">i", rnd.choice([0x7FFFFFFF, 200 << 20, -1, 3])) + rnd.randbytes(16))
        elif kind == "random":
            s.sendall(rnd.randbytes(rnd.randint(1, 300)))
            s.shutdown(socket.SHUT_WR)
        return _closed_by_broker(s)
    finally:
        s.close()


class GoodProducer(threading.Thread):
    """Produces numbered records with acks=1 until stopped; counts deliveries and errors."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.errors: list[str] = []
        self.delivered = 0
        self.sent = 0
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 2,
                                  "error_cb": lambda e: self.errors.append(f"client: {e}")})

    def _report(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.errors.append(f"delivery: {err}")
        else:
            self.delivered += 1

    def run(self) -> None:
        while not self.stop.is_set():
            self.producer.produce(TOPIC, value=str(self.sent).encode(), callback=self._report)
            self.sent += 1
            self.producer.poll(0.002)
        self.producer.flush(30)


def _read_back(bootstrap: str, count: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "flood-check", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[int] = []
    deadline_polls = 600
    while len(values) < count and deadline_polls:
        deadline_polls -= 1
        for m in c.consume(num_messages=10000, timeout=0.1):
            assert m.error() is None, m.error()
            values.append(int(m.value()))
    c.close()
    return values


def test_flood_of_bad_connections_leaves_a_good_producer_untouched(broker_factory):
    flood_port = free_port()
    b = broker_factory({
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,FLOOD:PLAINTEXT",
        "max.connections.per.ip.overrides": f"127.0.0.2:{PER_IP},127.0.0.3:100",
        "listener.name.flood.max.connections": str(FLOOD_LISTENER_MAX),
        "connections.max.idle.ms": str(IDLE_MS),
        "num.partitions": "1",
    }, extra_listeners={"FLOOD": flood_port})
    good = GoodProducer(b.bootstrap)
    good.start()
    wait_for(lambda: good.delivered > 0, "the good producer's first delivery")
    rnd = random.Random(15)  # seeded: a failure replays
    held: list[socket.socket] = []
    try:
        # -- garbage, oversized and negative size prefixes, random bytes: each closes only its connection
        kinds = ["garbage", "oversized", "random"] * 40
        with ThreadPoolExecutor(8) as pool:
            closed = list(pool.map(lambda k: _bad_connection(b.port, "127.0.0.5", k, random.Random(rnd.random())),
                                   kinds))
        assert all(closed), f"{closed.count(False)} bad connection(s) left open"

        # -- more connections from one address than max.connections.per.ip allows: the surplus is
        # closed at once; the others are served
        for _ in range(PER_IP + 7):
            held.append(_connect(b.port, "127.0.0.2"))
        kept = [s for s in held if _served(s)]  # a refused one answers with its end, at once
        assert len(kept) == PER_IP
        wait_for(lambda: b.log_text().count("Rejected connection from 127.0.0.2, address already has the configured "
                                            f"maximum of {PER_IP} connections.") == 7, "one log line per refusal")

        # -- the override changed live to 0 (IncrementalAlterConfigs on the BROKER resource of broker
        # 0): every new connection from that address is refused at once
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[ConfigEntry(
            "max.connections.per.ip.overrides", "127.0.0.2:0,127.0.0.3:100",
            incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)
        extra = _connect(b.port, "127.0.0.2")
        assert not _served(extra)
        extra.close()
        wait_for(lambda: "Rejected connection from 127.0.0.2, address already has the configured maximum of 0 "
                         "connections." in b.log_text(), "the refusal under the new limit")

        # -- the FLOOD listener holds at most FLOOD_LISTENER_MAX: its acceptor waits (one log line) and
        # the next connection is not served until one closes, then it is
        on_flood = [_connect(flood_port, "127.0.0.3") for _ in range(FLOOD_LISTENER_MAX)]
        assert all(_served(s) for s in on_flood)
        held += on_flood
        waiting = _connect(flood_port, "127.0.0.3")
        held.append(waiting)
        waiting.sendall(encode_request(API_VERSIONS, 0, 7, "flood", {}))
        wait_for(lambda: f"listener FLOOD holds {FLOOD_LISTENER_MAX} connection(s)" in b.log_text(),
                 "the acceptor waiting for a free slot")
        waiting.setblocking(False)
        with pytest.raises(BlockingIOError):
            waiting.recv(8)
        on_flood[0].close()
        waiting.settimeout(10)
        assert struct.unpack(">i", waiting.recv(8)[4:])[0] == 7

        # -- idle connections, and frames sent in part, are closed after connections.max.idle.ms
        idle = [_connect(b.port, "127.0.0.4") for _ in range(3)]
        half = _connect(b.port, "127.0.0.6")
        half.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x00")
        assert all(_closed_by_broker(s) for s in [*idle, half])
        for s in [*idle, half]:
            s.close()
    finally:
        good.stop.set()
        good.join(60)
        for s in held:
            s.close()
    assert b.alive()
    assert good.errors == []
    assert good.delivered == good.sent
    assert sorted(_read_back(b.bootstrap, good.sent)) == list(range(good.sent))
    text = b.log_text()
    assert "Traceback" not in text
    assert "no request for" in text  # the idle closes' log line
