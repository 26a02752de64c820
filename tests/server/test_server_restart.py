"""Data and topic ids survive a clean restart; acknowledged, flushed data survives kill -9; SIGTERM exits 0."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

# one-partition internal topics: recovery after kill -9 scans every partition, and these tests are
# about the user topic
SMALL_INTERNAL = {"offsets.topic.num.partitions": "1", "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    offsets: list[int] = []
    p_errors: list = []

    def cb(err, msg):
        (p_errors.append(err) if err else offsets.append(msg.offset()))

    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=cb)
    assert p.flush(30) == 0
    assert not p_errors
    return offsets


def _consume_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "none", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    for _ in range(100):
        if len(out) >= n:
            break
        for m in c.consume(1000, 0.5):
            assert m.error() is None, m.error()
            out.append(m.value())
    c.close()
    return out


def _topic_id(bootstrap: str, topic: str):
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import METADATA

    with KafkaClient(bootstrap) as c:
        return c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, version=12).topics[0].topic_id


def test_clean_restart_keeps_data_and_topic_id(broker_factory):
    b = broker_factory(SMALL_INTERNAL)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # must outlive the future
    admin.create_topics([NewTopic("keep", 1, 1)])["keep"].result(30)
    values = [b"v%d" % i for i in range(500)]
    _produce(b.bootstrap, "keep", values)
    tid = _topic_id(b.bootstrap, "keep")
    assert b.stop() == 0  # SIGTERM: clean exit
    assert "shut down cleanly" in b.log_text()
    b.start()
    assert _topic_id(b.bootstrap, "keep") == tid
    assert _consume_all(b.bootstrap, "keep", 500) == values
    # appends continue after the recovered end
    assert _produce(b.bootstrap, "keep", [b"after"]) == [500]


def test_kill9_recovers_acknowledged_flushed_data(broker_factory):
    b = broker_factory({**SMALL_INTERNAL, "log.flush.interval.messages": "1"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("durable", 1, 1)])["durable"].result(30)
    values = [b"d%d" % i for i in range(300)]
    offsets = _produce(b.bootstrap, "durable", values)
    assert sorted(offsets) == list(range(300))
    b.kill9()
    b.start()
    assert _consume_all(b.bootstrap, "durable", 300) == values


def _raw_connection(bootstrap: str):
    import socket

    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_frame(sock) -> bytes:
    import struct

    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise EOFError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def test_sigterm_with_open_connections_logs_no_traceback(broker_factory):
    """Idle, mid-request, parked-Fetch and consuming connections at SIGTERM: the parked Fetch is
    answered, every connection is closed, the broker exits 0 and logs no traceback."""
    import struct

    from tieredlog.protocol.codec import encode_request

    b = broker_factory(SMALL_INTERNAL)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("open", 1, 1)])["open"].result(30)
    _produce(b.bootstrap, "open", [b"x%d" % i for i in range(10)])
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "open", "enable.auto.commit": False})
    consumer.assign([TopicPartition("open", 0, 0)])
    assert len(_consume_all(b.bootstrap, "open", 10)) == 10
    got = 0
    for _ in range(40):
        got += len(consumer.consume(100, 0.25))
        if got >= 10:
            break
    assert got == 10  # the consumer now keeps a long-poll Fetch parked on the broker

    idle = _raw_connection(b.bootstrap)
    partial = _raw_connection(b.bootstrap)
    partial.sendall(struct.pack(">i", 100) + b"\0\x12")  # half a request frame
    parked = _raw_connection(b.bootstrap)
    fetch = encode_request(1, 12, 77, "parked", {
        "replica_id": -1, "max_wait": 60_000, "min_bytes": 1 << 20, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "open", "partitions": [{"partition": 0, "fetch_offset": 10, "partition_max_bytes": 1 << 20,
                                                       "current_leader_epoch": -1, "log_start_offset": -1}]}],
    })
    parked.sendall(fetch)
    # ApiVersions on the idle connection proves the broker has read everything sent so far
    idle.sendall(encode_request(18, 0, 5, "idle", {}))
    assert struct.unpack(">i", _read_frame(idle)[:4]) == (5,)

    rc = b.stop()
    text = b.log_text()
    assert rc == 0, text
    assert "shut down cleanly" in text
    assert "Traceback" not in text, text
    assert "CancelledError" not in text, text
    assert "client connection(s)" in text, text  # one line for the connections, not one per connection
    # the parked Fetch was answered (empty: the log end did not move) before its connection closed
    assert struct.unpack(">i", _read_frame(parked)[:4]) == (77,)
    for s in (idle, partial, parked):
        assert s.recv(1) == b""  # closed by the broker
        s.close()
    consumer.close()


@pytest.mark.parametrize("name, damage", [
    ("partition.metadata", b"version: 0\ntopic_id: not-a-uuid\n"),
    ("partition.metadata", b"\xff\xfe garbage"),
    ("leader-epoch-checkpoint", b"garbage"),
    ("leader-epoch-checkpoint", b"0\n1\n-4 0\n"),
], ids=["metadata-bad-id", "metadata-binary", "epochs-garbage", "epochs-negative"])
def test_a_damaged_partition_file_does_not_stop_the_broker(broker_factory, name, damage):
    """Hostile or torn files in a partition dir must not keep the broker down: it starts, serves the
    partition, says so in one line, and writes the file again from what it knows."""
    from tieredlog.log.checkpoints import LeaderEpochCheckpointFile, PartitionMetadataFile

    b = broker_factory(SMALL_INTERNAL)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("scarred", 1, 1)])["scarred"].result(30)
    values = [b"s%d" % i for i in range(200)]
    _produce(b.bootstrap, "scarred", values)
    tid = _topic_id(b.bootstrap, "scarred")
    pdir = b.data_dir / "scarred-0"
    epochs = LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read()
    assert epochs
    b.kill9()
    (pdir / name).write_bytes(damage)
    seen = len(b.log_text())
    b.start()
    assert _consume_all(b.bootstrap, "scarred", 200) == values
    assert _topic_id(b.bootstrap, "scarred") == tid
    assert _produce(b.bootstrap, "scarred", [b"after"]) == [200]
    lines = [line for line in b.log_text()[seen:].splitlines() if name in line]
    assert len(lines) == 1 and "WARNING" in lines[0], lines
    assert PartitionMetadataFile(pdir / "partition.metadata").read() == tid  # rewritten
    assert LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read() == epochs
