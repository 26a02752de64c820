"""TLS and SASL_SSL beside PLAINTEXT, in one run against one broker process with the three listeners.

confluent-kafka produces ``TLS_BENCH_RECORDS`` (default 200,000) records of 1 KiB random bytes (acks=1,
no compression, one partition) over the PLAINTEXT listener to one topic and over the SSL listener
(server authentication, TLS 1.3, an ECDSA P-256 key) to another, then consumes each topic back from
offset 0 over the same listener; and over a SASL_SSL listener (the same TLS, then a SCRAM-SHA-512
login, the user made with AlterUserScramCredentials at 8192 iterations) to a third topic. PLAINTEXT
consumes are served with sendfile; SSL and SASL_SSL ones read each file region into memory and write
it through the TLS transport. Each measurement is repeated
``TLS_BENCH_REPEATS`` times (default 3), PLAINTEXT and SSL in turn, and the best is kept: on a shared
machine the slower runs measure the neighbours. Records/s, MB/s and each protocol's rate against
PLAINTEXT's are printed per direction.

    .venv/bin/python -m bench bench_tls      # or: make bench-tls
    TLS_BENCH_RECORDS=50000 TLS_BENCH_REPEATS=1 .venv/bin/python -m bench bench_tls
"""

from __future__ import annotations

import os
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RECORDS = int(os.environ.get("TLS_BENCH_RECORDS", "200000"))
REPEATS = int(os.environ.get("TLS_BENCH_REPEATS", "3"))
VALUE_SIZE = 1024


def produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> float:
    from confluent_kafka import Producer

    p = Producer({**conf, "acks": 1, "linger.ms": 5, "compression.type": "none", "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 1 << 20})
    p.produce(topic, value=b"warm-up")  # connections and metadata before the clock starts
    p.flush(30)
    t0 = time.perf_counter()
    for v in values:
        while True:
            try:
                p.produce(topic, value=v)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise RuntimeError("records not delivered")
    return time.perf_counter() - t0


def consume(conf: dict[str, Any], topic: str, count: int) -> float:
    """Seconds to read the first ``count`` records after the warm-up one."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20})
    c.assign([TopicPartition(topic, 0, 1)])  # after the warm-up record
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        for m in c.consume(num_messages=10000, timeout=0.5):
            if m.error() is None:
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count} records")
    return dt


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "tests" / "harness"))
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from helpers import free_port
    from tls_certs import Pki

    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import METADATA

    print(f"command: .venv/bin/python -m bench bench_tls  (TLS_BENCH_RECORDS={RECORDS}, TLS_BENCH_REPEATS={REPEATS}); "
          f"{VALUE_SIZE} B random records, one partition per topic, acks=1, no compression, confluent-kafka, "
          f"one broker, {os.cpu_count()} cores, {ssl.OPENSSL_VERSION}; best of {REPEATS}")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as d:
        tmp = Path(d)
        pki = Pki.create(tmp / "pki")
        broker = BrokerProcess(tmp / "data", {
            "remote.log.storage.system.enable": "false", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.broker_pem), "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
            extra_listeners={"SSL": free_port(), "SASL_SSL": free_port()}).start()
        try:
            plaintext = {"bootstrap.servers": broker.bootstrap}
            tls = {"bootstrap.servers": broker.address("SSL"), "security.protocol": "SSL",
                   "ssl.ca.location": str(pki.ca_pem)}
            # each listener must hand out its own endpoints, or a client is sent to the other one
            ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
            with KafkaClient(broker.address("SSL"), ssl_context=ctx, timeout=10) as c:
                port = c.request(METADATA, {"topics": None}).brokers[0].port
            if port != broker.extra_listeners["SSL"]:
                raise RuntimeError("Metadata on the SSL listener names the PLAINTEXT one: per-listener "
                                   "endpoints are needed (tieredlog/server/metadata_apis.py)")
            admin = AdminClient(plaintext)
            for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("plaintext", "ssl", "sasl_ssl")]).values():
                f.result(30)
            password = os.urandom(12).hex()
            upsert = UserScramCredentialUpsertion("bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                                  password.encode())
            for f in admin.alter_user_scram_credentials([upsert]).values():
                f.result(30)
            sasl_ssl = {"bootstrap.servers": broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
                        "ssl.ca.location": str(pki.ca_pem), "sasl.mechanism": "SCRAM-SHA-512",
                        "sasl.username": "bench", "sasl.password": password}
            cases = (("PLAINTEXT", plaintext), ("SSL", tls), ("SASL_SSL", sasl_ssl))
            values = [os.urandom(VALUE_SIZE) for _ in range(RECORDS)]
            mb = RECORDS * VALUE_SIZE / 1e6
            rows = []
            for direction in ("produce", "consume"):
                times: dict[str, float] = {}
                for _ in range(REPEATS):
                    for name, conf in cases:
                        s = (produce(conf, name.lower(), values) if direction == "produce"
                             else consume(conf, name.lower(), RECORDS))
                        times[name] = min(times.get(name, s), s)
                rows.append((direction, times))
            print(f"\n  {'':<20}{'seconds':>9}{'records/s':>12}{'MB/s':>9}{'/ PLAINTEXT':>13}")
            for direction, times in rows:
                for name, _ in cases:
                    s = times[name]
                    ratio = f"{times['PLAINTEXT'] / s:12.2f}x" if name != "PLAINTEXT" else ""
                    print(f"  {direction + ' ' + name:<20}{s:9.2f}{RECORDS / s:12.0f}{mb / s:9.1f}{ratio}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
