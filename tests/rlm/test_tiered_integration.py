"""Tiered storage on a real broker process, with confluent-kafka clients.

Small segments and local.retention.bytes=1 make every rolled segment go to the remote tier (the
default LocalTieredStorage under <log dir>/remote-storage, or the faulty plugin in tests/harness/rsm_plugins/).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import free_port, wait_for
from tiered_broker_harness import FAST, PLUGINS, TIERED, TS0, consume, create, list_offset, produce, value_of

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import FETCH, LIST_OFFSETS

pytestmark = pytest.mark.integration


def local_bases(data: Path, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in (data / f"{topic}-0").glob("*.log"))


def remote_ranges(remote_root: Path, topic: str) -> list[tuple[int, int]]:
    out = []
    for m in remote_root.glob(f"{topic}-*/0/*.manifest"):
        try:
            d = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        out.append((int(d["start_offset"]), int(d["end_offset"])))
    return sorted(out)


def assert_local_gone_only_if_remote(data: Path, remote_root: Path, topic: str) -> None:
    """Local listing first, remote after: the remote tier only grows meanwhile, so a hole here is real."""
    bases = local_bases(data, topic)
    ranges = remote_ranges(remote_root, topic)
    covered = 0
    for s, e in ranges:
        if s <= covered:
            covered = max(covered, e + 1)
    assert not bases or bases[0] <= covered, (bases[:3], ranges[:3])


def check_messages(got: list, start: int, n: int) -> None:
    assert [m.offset() for m in got[:n]] == list(range(start, start + n))
    for m in got[:n]:
        i = m.offset()
        assert (m.key(), m.value(), m.timestamp()[1], m.headers()) == (
            b"k%d" % i, value_of(i), TS0 + i, [("i", b"%d" % i)])


def test_tiering_end_to_end_with_metrics(broker_factory, tmp_path):
    port = free_port()
    b = broker_factory({**FAST, "metrics.port": str(port)})
    data, remote = b.data_dir, b.data_dir / "remote-storage"
    create(b.bootstrap, "e2e")
    for chunk in range(6):
        produce(b.bootstrap, "e2e", chunk * 500, 500)
        assert_local_gone_only_if_remote(data, remote, "e2e")
    local_start = wait_for(lambda: list_offset(b.bootstrap, "e2e", -4), what="local segments to be tiered")
    for _ in range(10):
        assert_local_gone_only_if_remote(data, remote, "e2e")
        time.sleep(0.1)
    assert local_start > 0 and list_offset(b.bootstrap, "e2e", -2) == 0
    assert list_offset(b.bootstrap, "e2e", -5) >= local_start - 1  # latest tiered
    got = consume(b.bootstrap, "e2e", 0, 3000)
    check_messages(got, 0, 3000)
    # ListOffsets by timestamp answered from the remote tier
    assert list_offset(b.bootstrap, "e2e", TS0 + 17) == 17
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    metrics = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert metrics['kafka_server_brokertopicmetrics_remotecopybytes_total{topic="e2e"}'] > 0
    assert metrics['kafka_server_brokertopicmetrics_remotefetchbytes_total{topic="e2e"}'] > 0
    assert metrics["kafka_storage_remoteindexcache_misses_total"] >= 1
    assert "kafka_storage_remotestoragethreadpool_remotelogreadertaskqueuesize" in metrics


def test_restart_in_the_middle_of_copying(broker_factory):
    # a slow copy quota keeps the copier busy so the kill lands mid-way
    b = broker_factory({**FAST, "remote.log.manager.copy.max.bytes.per.second": "40000"})
    remote = b.data_dir / "remote-storage"
    create(b.bootstrap, "crash")
    produce(b.bootstrap, "crash", 0, 2000)
    wait_for(lambda: remote_ranges(remote, "crash"), what="a first remote segment")
    b.kill9()
    b.overrides.pop("remote.log.manager.copy.max.bytes.per.second")
    b.start()
    produce(b.bootstrap, "crash", 2000, 500)
    wait_for(lambda: list_offset(b.bootstrap, "crash", -4) > 2000, what="tiering to resume")
    assert_local_gone_only_if_remote(b.data_dir, remote, "crash")
    check_messages(consume(b.bootstrap, "crash", 0, 2500), 0, 2500)


def failures(control: Path, method: str) -> int:
    """How many calls of ``method`` the faulty RSM failed on purpose so far."""
    try:
        return (control / "failures").read_text().split().count(method)
    except FileNotFoundError:
        return 0


def consume_nothing_until(bootstrap: str, topic: str, offset: int, until, what: str, timeout_s: float = 40) -> None:
    """Fetch from ``offset`` until ``until()`` holds; not one record may arrive meanwhile."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False,
                  "fetch.error.backoff.ms": 50, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, offset)])
    deadline = time.monotonic() + timeout_s
    try:
        while not until():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            got = [m for m in c.consume(500, 0.2) if m.error() is None]
            assert got == [], [m.offset() for m in got]
    finally:
        c.close()


def test_hanging_then_failing_rsm_never_blocks_local_traffic(broker_factory, tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    (control / "hang").touch()
    b = broker_factory({**FAST, "remote.log.storage.manager.class.name": "faulty_rsm:FaultyStorage",
                        "remote.log.storage.manager.class.path": str(PLUGINS),
                        "rsm.config.control.dir": str(control), "rsm.config.dir": str(tmp_path / "remote")})
    create(b.bootstrap, "hang")
    produce(b.bootstrap, "hang", 0, 1500)
    # the copier is stuck in the RSM: nothing local may go, and local produce/consume still work
    wait_for(lambda: (control / "hung-copy_log_segment_data").exists(), what="the copier to hang in the RSM")
    check_messages(consume(b.bootstrap, "hang", 0, 1500), 0, 1500)
    assert list_offset(b.bootstrap, "hang", -4) == 0
    assert local_bases(b.data_dir, "hang")[0] == 0
    # failing instead of hanging: still nothing deleted locally, however often the copier retries
    (control / "fail").touch()
    (control / "hang").unlink()
    wait_for(lambda: failures(control, "copy_log_segment_data") >= 2, what="the copier to fail twice")
    assert list_offset(b.bootstrap, "hang", -4) == 0
    assert local_bases(b.data_dir, "hang")[0] == 0
    (control / "fail").unlink()
    local_start = wait_for(lambda: list_offset(b.bootstrap, "hang", -4), what="tiering after recovery")
    # remote fetches while the RSM hangs time out cleanly: empty, and the broker keeps serving
    (control / "hang").touch()
    consume_nothing_until(b.bootstrap, "hang", 0, lambda: any(control.glob("hung-fetch_*")),
                          "a remote read to hang in the RSM")
    # a Fetch below the local start is answered (after remote.fetch.max.wait.ms): no error, no records
    with KafkaClient(b.bootstrap, timeout=60) as c:
        r = c.request(FETCH, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                              "topics": [{"topic": "hang", "partitions": [
                                  {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}, version=12)
    part = r.responses[0].partitions[0]
    assert (part.error_code.value, bytes(part.records or b"")) == (0, b""), part
    produce(b.bootstrap, "hang", 1500, 10)
    check_messages(consume(b.bootstrap, "hang", 1500, 10), 1500, 10)
    (control / "hang").unlink()
    check_messages(consume(b.bootstrap, "hang", 0, local_start), 0, local_start)


def test_remote_retention_and_topic_deletion_across_restart(broker_factory, tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    remote = tmp_path / "remote"
    b = broker_factory({**FAST, "remote.log.storage.manager.class.name": "faulty_rsm:FaultyStorage",
                        "remote.log.storage.manager.class.path": str(PLUGINS),
                        "rsm.config.control.dir": str(control), "rsm.config.dir": str(remote)})
    create(b.bootstrap, "ret", **{"retention.bytes": "40000"})
    produce(b.bootstrap, "ret", 0, 3000)
    start = wait_for(lambda: list_offset(b.bootstrap, "ret", -2), what="remote retention to move the log start")
    wait_for(lambda: remote_ranges(remote, "ret") and remote_ranges(remote, "ret")[0][0] >= start, what="remote deletes")
    got = consume(b.bootstrap, "ret", 0, 5)  # auto.offset.reset: from the new log start
    assert got and got[0].offset() >= start
    # topic deletion while the RSM hangs, then a crash: the restarted broker finishes the job
    assert remote_ranges(remote, "ret")
    (control / "hang").touch()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics(["ret"])["ret"].result(30)
    wait_for(lambda: (control / "hung-delete_log_segment_data").exists(), what="the remote delete to hang in the RSM")
    b.kill9()
    (control / "hang").unlink()
    b.start()
    wait_for(lambda: not list(remote.glob("ret-*/0/*.log")), what="remote data of the deleted topic to go")


def test_fetch_max_bytes_bounds_remote_partitions_together(broker_factory):
    """Remote partitions of one Fetch are read in parallel, but the response still honours its
    max_bytes: before, each remote partition read its own partition_max_bytes."""
    b = broker_factory(FAST)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mb", 3, 1, config=TIERED)])["mb"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 8192})
    for i in range(3 * 1200):
        p.produce("mb", value=value_of(i), partition=i % 3, timestamp=TS0 + i)
    assert p.flush(30) == 0

    def local_start(part: int) -> int:
        with KafkaClient(b.bootstrap) as c:
            r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "mb", "partitions": [{"partition_index": part, "timestamp": -4, "current_leader_epoch": -1}]}]})
            return r.topics[0].partitions[0].offset

    wait_for(lambda: all(local_start(part) > 300 for part in range(3)), what="every partition tiered")

    def fetch(max_bytes: int) -> list[int]:
        with KafkaClient(b.bootstrap, timeout=60) as c:
            r = c.request(FETCH, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes,
                                  "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                  "topics": [{"topic": "mb", "partitions": [
                                      {"partition": part, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                      for part in range(3)]}]}, version=12)
        return [len(bytes(pt.records or b"")) for pt in r.responses[0].partitions]

    def fetched(max_bytes: int) -> list[int] | None:
        sizes = fetch(max_bytes)
        return sizes if sum(sizes) else None  # a remote read may time out empty: ask again

    batch_max = 8192 + 1024  # one producer batch (batch.size) with its overhead
    sizes = wait_for(lambda: fetched(40_000), what="a remote read")
    assert 0 < sum(sizes) <= 40_000 + batch_max, sizes
    # partitions take the budget in request order, as in Kafka; with room for all, all are read
    everything = wait_for(lambda: (s := fetched(3 << 20)) and all(s) and s, what="all three partitions read")
    assert all(0 < n <= 1 << 20 for n in everything), everything
    # a budget too small for one batch still returns the first batch of the first partition only
    tiny = wait_for(lambda: fetched(10), what="a remote read")
    assert tiny[0] > 0 and tiny[1:] == [0, 0], tiny
