"""No request frame can end the broker: hostile bodies behind valid headers, for every API and
version it advertises, while a well-behaved producer keeps writing beside them.

Bounded and seeded for ``make test``; ``make fuzz`` runs the same with more frames and a
hypothesis search over every request schema (tests/protocol/fuzz_deep.py).
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from frame_fuzz import (
    RecordingProxy,
    advertised,
    exact_twenty_bytes,
    hostile_frame,
    peak_rss_kib,
    probe,
)
from helpers import wait_for

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import METADATA

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("TIEREDLOG_FUZZ_SEED", "17"))
FRAMES = int(os.environ.get("TIEREDLOG_FUZZ_FRAMES", "3000"))


def _healthy(bootstrap: str) -> None:
    with KafkaClient(bootstrap) as c:
        md = c.request(METADATA, {"topics": None})
    assert md.brokers, "metadata lists no broker"


def test_the_twenty_byte_frame_closes_only_its_connection(broker_factory):
    b = broker_factory()
    assert probe(b.host, b.port, exact_twenty_bytes()) == "closed"
    assert b.alive(), b.log_text()
    _healthy(b.bootstrap)
    wait_for(lambda: "MetadataRequest.topics: array of 4294967294 items" in b.log_text(), "the warning line", 10)
    lines = [ln for ln in b.log_text().splitlines() if "MetadataRequest.topics" in ln]
    assert len(lines) == 1, lines
    assert "Traceback" not in b.log_text()


def _capture_client_requests(bootstrap: str) -> None:
    """Real confluent-kafka traffic: admin calls, an idempotent producer, a group consumer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic("fuzz-captured", 3, 1)]).values():
        fut.result(30)
    for fut in admin.describe_configs([ConfigResource("topic", "fuzz-captured")]).values():
        fut.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(200):
        producer.produce("fuzz-captured", value=b"v%d" % i, key=b"k%d" % (i % 7))
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fuzz-captured-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["fuzz-captured"])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 200 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == 200


class _GoodProducer(threading.Thread):
    """Writes one record at a time with acks=all and remembers every delivery error."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
        self.topic = topic
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.delivered = 0
        self.sent = 0

    def _report(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.producer.produce(self.topic, value=b"good-%d" % self.sent, on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0.01)
        self.producer.flush(30)


def test_hostile_frames_never_end_the_broker(broker_factory):
    b = broker_factory(start=False)
    proxy = RecordingProxy((b.host, b.port)).start()
    try:
        b.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        b.start()
        _capture_client_requests(f"127.0.0.1:{proxy.port}")
        corpus = dict(proxy.frames)
        assert {0, 1, 3, 11, 14} <= {k for k, _ in corpus}, sorted(corpus)

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{proxy.port}"})
        admin.create_topics([NewTopic("fuzz-good", 1, 1)])["fuzz-good"].result(30)
        good = _GoodProducer(f"127.0.0.1:{proxy.port}", "fuzz-good")
        good.start()

        targets = advertised(b.bootstrap)
        rng = random.Random(SEED)
        rss_before = peak_rss_kib(b.proc.pid)
        outcomes: collections.Counter[str] = collections.Counter()
        for i in range(FRAMES):
            api_key, version = rng.choice(targets)
            kind, frame = hostile_frame(rng, api_key, version, corpus)
            outcome = probe(b.host, b.port, frame, wait=1.0)
            outcomes[outcome] += 1
            assert b.alive(), f"frame {i} ({kind}, api {api_key} v{version}) {frame.hex()} ended the broker:\n{b.log_text()[-4000:]}"
        print(f"{FRAMES} frames, seed {SEED}: {dict(outcomes)}")
        good.stop_event.set()
        good.join(60)

        assert good.errors == [], good.errors[:5]
        assert good.delivered == good.sent > 0
        _healthy(b.bootstrap)
        assert outcomes["closed"] > 0 and outcomes["answered"] > 0, outcomes
        # bounded memory: the broker's peak resident size hardly moved over thousands of hostile frames
        grew_mib = (peak_rss_kib(b.proc.pid) - rss_before) / 1024
        assert grew_mib < 256, f"peak RSS grew by {grew_mib:.0f} MiB"
        log = b.log_text()
        assert "Traceback" not in log, log[log.index("Traceback") - 2000 : log.index("Traceback") + 3000]
    finally:
        proxy.stop()
