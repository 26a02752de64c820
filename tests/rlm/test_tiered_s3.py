"""A real broker process tiering into real S3 servers on loopback: SeaweedFS (``weed mini``) and moto's
server mode, configured the way a user would (``remote.log.storage.manager.class.name=s3`` and the
``rsm.config.storage.s3.*`` / ``rsm.config.storage.aws.*`` keys), with confluent-kafka clients.

Each test gets its own key prefix in the shared bucket of the session-scoped servers; the outage test
runs its own SeaweedFS (stopped and started again on the same port and data dir) and, for moto, a
FaultyS3Proxy that answers 503 to everything while "down" (moto's server keeps no state across a stop).
A background watcher checks, all test long, that no local segment is gone before the bucket holds
committed (manifest) copies of everything below the first local segment.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for as shared_wait_for
from s3servers import (  # noqa: F401  (fixtures)
    FaultyS3Proxy,
    S3Endpoint,
    any_s3,
    free_port,
    moto_s3,
    seaweed_command,
    seaweed_s3,
    unique_prefix,
    wait_for_bucket,
    write_seaweed_identity,
)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.protocol.api import LIST_OFFSETS, METADATA
from tieredlog.records.record import iter_batches_records

pytestmark = pytest.mark.integration

TS0 = int(time.time() * 1000) - 60_000  # recent: the 7-day retention.ms must not expire the data
SEGMENT_BYTES = 65536
SUFFIXES = {"log", "index", "timeindex", "txnindex", "snapshot", "leader_epoch_checkpoint", "manifest"}
REQUIRED = SUFFIXES - {"txnindex"}  # no transactions here, so no transaction index


# -- broker and client helpers -----------------------------------------------------------------------

def s3_overrides(url: str, endpoint: S3Endpoint, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.storage.s3.bucket.name": endpoint.bucket,
        "rsm.config.storage.s3.endpoint.url": url,
        "rsm.config.storage.s3.region": endpoint.region,
        "rsm.config.storage.s3.path.style.access.enabled": "true",
        "rsm.config.storage.aws.access.key.id": endpoint.access_key,
        "rsm.config.storage.aws.secret.access.key": endpoint.secret_key,
        "rsm.config.key.prefix": prefix,
        "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.fetch.max.wait.ms": "3000",
        **extra,
    }


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, str]) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"data{len(started)}", overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.stop()


def create_topic(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"remote.storage.enable": "true", **configs}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def key_of(i: int) -> bytes:
    return b"k%d" % i


def value_of(i: int) -> bytes:
    # part compressible, part not, of varying length: lz4 batches of different shapes
    rnd = random.Random(i)
    return b"value-%d|" % i * rnd.randint(1, 12) + rnd.randbytes(rnd.randint(0, 200))


def headers_of(i: int) -> list[tuple[str, bytes | None]]:
    return [("i", b"%d" % i), ("bin", bytes([i % 256, 0, 255])), ("none", None)]


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    """Idempotent, lz4, acks=all; every record acknowledged without error."""
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4",
                  "linger.ms": 5, "batch.size": 16384, "message.timeout.ms": 60000})
    for i in range(start, start + n):
        p.produce(topic, key=key_of(i), value=value_of(i), timestamp=TS0 + i, headers=headers_of(i),
                  on_delivery=lambda err, msg: errors.append(err) if err is not None else None)
        p.poll(0)
    assert p.flush(60) == 0
    assert errors == []


def consume(bootstrap: str, topic: str, offset: int, n: int, timeout_s: float = 60) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "s3-test", "enable.auto.commit": False,
                  "fetch.error.backoff.ms": 50, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, offset)])
    got: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    return got


def check_messages(got: list, start: int, end: int) -> None:
    """Exactly offsets start..end-1, each byte-identical to what was produced."""
    assert [m.offset() for m in got] == list(range(start, end))
    for m in got:
        i = m.offset()
        assert (m.key(), m.value(), m.timestamp(), m.headers()) == (
            key_of(i), value_of(i), (1, TS0 + i), headers_of(i)), i


def list_offset(bootstrap: str, topic: str, ts: int) -> int:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]})
        p = r.topics[0].partitions[0]
        assert p.error_code == 0, p
        return p.offset


def wait_for(cond: Callable[[], object], what: str, timeout_s: float = 90) -> object:
    # object stores on a loaded 2-core machine: a longer hang guard than the shared default
    return shared_wait_for(cond, what, timeout_s, interval_s=0.1)


def copy_errors(metrics_port: int, topic: str) -> float:
    """The broker's RemoteCopyErrors counter for ``topic`` (0 before the first failure)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    name = f'kafka_server_brokertopicmetrics_remotecopyerrors_total{{topic="{topic}"}}'
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ")[1])
    return 0.0


def local_bases(data: Path, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in (data / f"{topic}-0").glob("*.log"))


# -- what is in the bucket -------------------------------------------------------------------------

class Bucket:
    """The objects under one prefix; manifests are cached (a committed manifest never changes)."""

    def __init__(self, endpoint: S3Endpoint, prefix: str, url: str | None = None) -> None:
        self.client = endpoint.client(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10)
        if url is not None:  # the direct URL, when the broker goes through a proxy
            self.client = S3Endpoint(endpoint.name, url).client(retries={"max_attempts": 1}, connect_timeout=2,
                                                              read_timeout=10)
        self.name = endpoint.bucket
        self.prefix = prefix
        self._manifests: dict[str, dict] = {}

    def objects(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=self.prefix):
            for item in page.get("Contents", []):
                out[item["Key"]] = item["Size"]
        return out

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def manifests(self, topic: str) -> list[dict]:
        import json

        keys = [k for k in self.objects() if k.endswith(".manifest") and k[len(self.prefix):].startswith(f"{topic}-")]
        for k in keys:
            if k not in self._manifests:
                self._manifests[k] = json.loads(self.get(k))
        return sorted((self._manifests[k] for k in keys), key=lambda m: m["start_offset"])

    def covered(self, topic: str) -> int:
        """One past the last offset of the committed remote segments contiguous from offset 0."""
        covered = 0
        for m in self.manifests(topic):
            if m["start_offset"] <= covered:
                covered = max(covered, m["end_offset"] + 1)
        return covered


class TierWatcher:
    """Samples local segments, then the bucket: the bucket only grows meanwhile, so a first local
    segment above the remote coverage is a segment deleted before it was committed remotely."""

    def __init__(self, data: Path, topic: str, bucket: Bucket) -> None:
        self.data, self.topic, self.bucket = data, topic, bucket
        self.checks = 0
        self.violations: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                bases = local_bases(self.data, self.topic)
                covered = self.bucket.covered(self.topic)
            except Exception:  # the object store is down, or a file vanished mid-listing
                pass
            else:
                self.checks += 1
                if bases and bases[0] > covered:
                    self.violations.append((bases[0], covered))
            self._stop.wait(0.1)

    def __enter__(self) -> "TierWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def assert_ok(self) -> None:
        assert self.checks > 0
        assert self.violations == []


# -- 1 + 2: tier, delete locally, read back byte-identical; Kafka's key layout ------------------------

def test_tiering_into_s3_and_consuming_from_zero(any_s3, brokers):
    prefix = unique_prefix()
    b = brokers(s3_overrides(any_s3.url, any_s3, prefix))
    topic = "e2e"
    # time-based local retention: the records are a minute old, so every segment (the active one is
    # rolled) goes as soon as it is remote
    create_topic(b.bootstrap, topic, **{"local.retention.ms": "500"})
    bucket = Bucket(any_s3, prefix)
    n = 3000
    with TierWatcher(b.data_dir, topic, bucket) as watcher:
        for chunk in range(3):
            produce(b.bootstrap, topic, chunk * 1000, 1000)
        wait_for(lambda: list_offset(b.bootstrap, topic, -4) == n, "every segment to be tiered and deleted locally")
        # the local start moves at once; the segment files are renamed .deleted off the event loop just after
        wait_for(lambda: local_bases(b.data_dir, topic) in ([], [n]), "the deleted segments' files renamed")
        check_messages(consume(b.bootstrap, topic, 0, n), 0, n)
    watcher.assert_ok()
    assert list_offset(b.bootstrap, topic, -2) == 0  # earliest: still offset 0, in the bucket
    assert list_offset(b.bootstrap, topic, -5) == n - 1  # latest tiered
    assert list_offset(b.bootstrap, topic, TS0 + 1234) == 1234  # by timestamp, from the remote tier
    check_messages(consume(b.bootstrap, topic, 1777, 5)[:5], 1777, 1782)  # a remote read in mid-segment

    # the object layout is Kafka's, and the topic id in the keys is the broker's
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    with KafkaClient(b.bootstrap) as c:
        md = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    topic_id = uuid_to_kafka_str(md.topics[0].topic_id)
    # librdkafka prints ids in standard base64 ('+', '/'), Kafka in URL-safe: compare the 128 bits
    bits = ((described.topic_id.get_most_significant_bits() % 2**64) << 64) | (
        described.topic_id.get_least_significant_bits() % 2**64)
    assert bits == md.topics[0].topic_id.int
    objects = bucket.objects()
    key_re = re.compile(rf"{re.escape(prefix)}{topic}-{topic_id}/0/(\d{{20}})-([A-Za-z0-9_-]{{22}})\.([a-z_]+)")
    segments: dict[tuple[str, str], dict[str, int]] = {}
    for key, size in objects.items():
        match = key_re.fullmatch(key)
        assert match, key
        offset, segment_id, suffix = match.groups()
        assert suffix in SUFFIXES, key
        segments.setdefault((offset, segment_id), {})[suffix] = size
    assert len(segments) >= 5  # 3000 records of ~200 bytes in 64 KiB segments
    manifests = bucket.manifests(topic)
    assert len(manifests) == len(segments)  # one manifest per segment, no orphans
    expected_start = 0
    for m in manifests:
        stem = (f"{m['start_offset']:020d}", m["segment_id"])
        files = segments[stem]
        assert REQUIRED <= set(files) and set(files) <= SUFFIXES, files
        assert m["start_offset"] == expected_start  # contiguous, no gaps or overlaps
        expected_start = m["end_offset"] + 1
        assert (m["topic"], m["topic_id"], m["partition"]) == (topic, topic_id, 0)
        assert m["tx_index_present"] == ("txnindex" in files)
        assert {s: f["size"] for s, f in m["files"].items()} == {s: z for s, z in files.items() if s != "manifest"}
        assert all(f["name"] == f"{stem[0]}-{stem[1]}.{s}" for s, f in m["files"].items())
        assert m["segment_size_in_bytes"] == files["log"] <= SEGMENT_BYTES
        # the .log object is the Kafka segment itself: CRC-checked v2 batches covering the range
        log_bytes = bucket.get(f"{prefix}{topic}-{topic_id}/0/{stem[0]}-{stem[1]}.log")
        offsets = [r.offset for _, records in iter_batches_records(log_bytes) for r in records]
        assert offsets == list(range(m["start_offset"], m["end_offset"] + 1))
    assert expected_start == n


# -- 3: restarts, clean and kill -9 ----------------------------------------------------------------

def test_restarts_keep_remote_data_and_copying_continues(any_s3, brokers):
    prefix = unique_prefix()
    b = brokers(s3_overrides(any_s3.url, any_s3, prefix))
    topic = "restart"
    create_topic(b.bootstrap, topic, **{"local.retention.bytes": "1"})
    bucket = Bucket(any_s3, prefix)
    with TierWatcher(b.data_dir, topic, bucket) as watcher:
        produce(b.bootstrap, topic, 0, 1500)
        first = wait_for(lambda: list_offset(b.bootstrap, topic, -4), "the first segments to be tiered")
        # their files are renamed off the event loop just after the local start moves; killed before
        # that, the broker would find them again at start-up
        wait_for(lambda: local_bases(b.data_dir, topic)[0] >= first, "the deleted segments' files renamed")

        b.kill9()  # before any log-start checkpoint was written
        b.start()
        assert list_offset(b.bootstrap, topic, -4) >= first
        check_messages(consume(b.bootstrap, topic, 0, 1500), 0, 1500)
        produce(b.bootstrap, topic, 1500, 1500)
        second = wait_for(lambda: (lambda o: o if o > 1500 else 0)(list_offset(b.bootstrap, topic, -4)),
                          "tiering of the segments produced after kill -9")

        b.restart()  # SIGTERM, clean shutdown
        assert list_offset(b.bootstrap, topic, -4) >= second
        check_messages(consume(b.bootstrap, topic, 0, 3000), 0, 3000)
        produce(b.bootstrap, topic, 3000, 1500)
        wait_for(lambda: list_offset(b.bootstrap, topic, -4) > 3000, "tiering after a clean restart")
        check_messages(consume(b.bootstrap, topic, 0, 4500), 0, 4500)
    watcher.assert_ok()
    assert bucket.covered(topic) >= list_offset(b.bootstrap, topic, -4)


# -- 4: the object store goes down for a while --------------------------------------------------------

class RestartableSeaweed:
    """A SeaweedFS of its own that can be stopped and started again on the same ports and data dir."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="tieredlog-weed-outage-"))
        (self.workdir / "data").mkdir()
        config = self.workdir / "s3.json"
        write_seaweed_identity(config)
        port = free_port()
        self.command = seaweed_command(self.workdir / "data", port, config)
        self.endpoint = S3Endpoint("seaweedfs-outage", f"http://127.0.0.1:{port}")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with (self.workdir / "weed.log").open("ab") as logfile:
            self.proc = subprocess.Popen(self.command, stdout=logfile, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for_bucket(self.endpoint, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class Outage:
    """What the broker talks to (``url``), how the test reads the bucket, and a switch."""

    def __init__(self, url: str, endpoint: S3Endpoint, direct_url: str, down: Callable[[], None],
                 up: Callable[[], None]) -> None:
        self.url, self.endpoint, self.direct_url, self.down, self.up = url, endpoint, direct_url, down, up


@pytest.fixture(params=["moto", "seaweedfs"])
def outage(request) -> Iterator[Outage]:
    if request.param == "seaweedfs":
        server = RestartableSeaweed()
        try:
            server.start()
            # down: the server process is gone (connection refused); up: same port, same data dir
            yield Outage(server.endpoint.url, server.endpoint, server.endpoint.url, server.stop, server.start)
        finally:
            server.close()
    else:
        endpoint: S3Endpoint = request.getfixturevalue("moto_s3")
        with FaultyS3Proxy(endpoint.url) as proxy:
            def down() -> None:
                proxy.fault = lambda r: 503

            def up() -> None:
                proxy.fault = lambda r: None

            yield Outage(proxy.url, endpoint, endpoint.url, down, up)


def test_object_store_outage_never_blocks_local_traffic_nor_loses_data(outage, brokers):
    prefix = unique_prefix()
    metrics_port = free_port()
    # two attempts per S3 request (not five, with botocore's growing backoff): a failed copy ends
    # within a second or two, so the outage spans several copy tasks, each failed and retried by the RLM
    b = brokers(s3_overrides(outage.url, outage.endpoint, prefix, **{
        "metrics.port": str(metrics_port), "rsm.config.storage.s3.retry.max.attempts": "2"}))
    topic = "outage"
    create_topic(b.bootstrap, topic, **{"local.retention.bytes": "1"})
    bucket = Bucket(outage.endpoint, prefix, url=outage.direct_url)
    with TierWatcher(b.data_dir, topic, bucket) as watcher:
        produce(b.bootstrap, topic, 0, 1000)
        wait_for(lambda: list_offset(b.bootstrap, topic, -4), "tiering before the outage")
        checks_before = watcher.checks

        errors_before = copy_errors(metrics_port, topic)
        outage.down()
        # local traffic is unaffected: produce acks (acks=all, idempotent) ...
        produce(b.bootstrap, topic, 1000, 1000)
        # A copy in flight when the store went down may still have finished, and local retention may
        # still be deleting segments tiered before the outage. Once a copy has failed and the local log
        # starts right after the last tiered offset, the local log start cannot move until the store is
        # back, so the reads below are local reads.
        wait_for(lambda: copy_errors(metrics_port, topic) > errors_before, "a failed copy during the outage")
        wait_for(lambda: list_offset(b.bootstrap, topic, -4) == list_offset(b.bootstrap, topic, -5) + 1,
                 "local retention to catch up with what was tiered before the outage")
        # ... and so are local reads
        local_starts = [list_offset(b.bootstrap, topic, -4)]
        check_messages(consume(b.bootstrap, topic, local_starts[-1], 2000 - local_starts[-1]), local_starts[-1], 2000)
        produce(b.bootstrap, topic, 2000, 1000)
        start = list_offset(b.bootstrap, topic, -4)
        assert start == local_starts[0]  # nothing was deleted locally while the store was down
        local_starts.append(start)
        check_messages(consume(b.bootstrap, topic, start, 3000 - start), start, 3000)
        # nothing new can be remote, so the segments produced meanwhile all stay local
        # (the files of segments retention deleted just before are renamed off the event loop: wait for that)
        wait_for(lambda: local_bases(b.data_dir, topic)[0] == start, "the retained segments' files renamed")
        bases = local_bases(b.data_dir, topic)
        assert bases[0] == start and bases[0] < 1000 and len(bases) >= 5, bases
        # the copier keeps failing (each failure counted after the start was sampled), and local
        # retention keeps waiting for it
        errors = copy_errors(metrics_port, topic)
        wait_for(lambda: copy_errors(metrics_port, topic) >= errors + 2, "two more failed copies during the outage")
        local_starts.append(list_offset(b.bootstrap, topic, -4))
        assert local_starts[-1] == start and local_bases(b.data_dir, topic)[0] == start

        outage.up()
        wait_for(lambda: list_offset(b.bootstrap, topic, -4) > 2500, "copying to resume after the outage")
        assert bucket.covered(topic) >= max(local_starts)
        check_messages(consume(b.bootstrap, topic, 0, 3000), 0, 3000)
        produce(b.bootstrap, topic, 3000, 500)
        wait_for(lambda: list_offset(b.bootstrap, topic, -4) > 3000, "tiering of new segments after the outage")
        check_messages(consume(b.bootstrap, topic, 0, 3500), 0, 3500)
    watcher.assert_ok()
    assert watcher.checks > checks_before  # it sampled after the outage too


# -- 5: a bucket or endpoint the broker cannot use at start-up ------------------------------------------

def failed_start(tmp_path: Path, overrides: dict[str, str]) -> tuple[int, str]:
    """Run the broker as a user would; it must exit by itself. Returns (exit code, output)."""
    b = BrokerProcess(tmp_path / "data", overrides)
    done = subprocess.run(b.command(), cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          timeout=120, text=True)
    return done.returncode, done.stdout + done.stderr


def error_lines(output: str) -> list[str]:
    assert "Traceback" not in output, output
    return [line for line in output.splitlines() if " ERROR " in line or "CRITICAL" in line]


def test_missing_bucket_stops_the_broker_with_one_line(any_s3, tmp_path):
    secret = any_s3.secret_key
    rc, output = failed_start(tmp_path, s3_overrides(any_s3.url, any_s3, "", **{
        "rsm.config.storage.s3.bucket.name": "no-such-bucket-here"}))
    assert rc != 0
    lines = error_lines(output)
    assert len(lines) == 1, output
    assert "no-such-bucket-here" in lines[0] and "does not exist" in lines[0], lines[0]
    assert "rsm.config.storage.s3.bucket.name" in lines[0]
    assert secret not in output


def test_unreachable_endpoint_and_wrong_secret_stop_the_broker_with_one_line(seaweed_s3, tmp_path):
    secret = "unique-Secret-Value-9f3e"
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rc, output = failed_start(tmp_path / "a", s3_overrides(nobody, seaweed_s3, "", **{
        "rsm.config.storage.aws.secret.access.key": secret}))
    assert rc != 0
    lines = error_lines(output)
    assert len(lines) == 1, output
    assert "cannot reach" in lines[0] and nobody in lines[0] and "'tieredlog'" in lines[0], lines[0]
    assert secret not in output

    # SeaweedFS checks signatures: a wrong secret is refused, and the line says which configs to check
    rc, output = failed_start(tmp_path / "b", s3_overrides(seaweed_s3.url, seaweed_s3, "", **{
        "rsm.config.storage.aws.secret.access.key": secret}))
    assert rc != 0
    lines = error_lines(output)
    assert len(lines) == 1, output
    assert "refused access" in lines[0] and "secret.access.key" in lines[0], lines[0]
    assert secret not in output


def test_rsm_that_cannot_load_stops_the_broker_with_one_line(tmp_path):
    # no S3 needed: the start-up failure path of tieredlog/server/main.py itself
    rc, output = failed_start(tmp_path, {"remote.log.storage.manager.class.name": "no_such_module_xyz:Nope"})
    assert rc == 1
    lines = error_lines(output)
    assert len(lines) == 1 and "no_such_module_xyz" in lines[0], output


# -- unit tests of the log-start fixes the restart scenario found (tieredlog/log) ------------------------

def _tiered_log_with_local_start_above_zero(tmp_path: Path):
    from tieredlog.log.config import LogConfig
    from tieredlog.log.log_manager import LogManager
    from tieredlog.log.types import TopicPartition as TP
    from tieredlog.records.record import build_batch

    cfg = LogConfig(segment_bytes=1024, remote_storage_enable=True, local_retention_bytes=1)
    mgr = LogManager([tmp_path], cfg, topic_configs={"t": cfg})
    plog = mgr.get_or_create_log(TP("t", 0), None, cfg)
    for _i in range(20):
        plog.append_as_leader(build_batch([(b"k", b"v" * 200)]), 0)
    plog.update_high_watermark(plog.log_end_offset)
    # as after tiering: everything is remote, so local retention deletes the rolled segments
    plog.update_highest_offset_in_remote_storage(plog.log_end_offset - 1)
    assert plog.delete_old_segments() > 0
    assert plog.log_start_offset == 0 and plog.local_log_start_offset > 0
    return mgr, plog, TP, cfg, LogManager


def test_tiered_log_start_offset_is_checkpointed_and_reloaded_at_zero(tmp_path):
    mgr, plog, TP, cfg, LogManager = _tiered_log_with_local_start_above_zero(tmp_path)
    mgr.shutdown()
    from tieredlog.log.checkpoints import OffsetCheckpointFile

    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read() == {TP("t", 0): 0}
    reloaded = LogManager([tmp_path], cfg, topic_configs={"t": cfg}).get_log(TP("t", 0))
    assert reloaded.log_start_offset == 0 and reloaded.local_log_start_offset > 0


def test_tiered_log_without_checkpoint_starts_at_zero_like_kafka(tmp_path):
    mgr, plog, TP, cfg, LogManager = _tiered_log_with_local_start_above_zero(tmp_path)
    local_start = plog.local_log_start_offset
    mgr.shutdown()
    (tmp_path / "log-start-offset-checkpoint").unlink()  # as after a kill -9 before the first checkpoint
    reloaded = LogManager([tmp_path], cfg, topic_configs={"t": cfg}).get_log(TP("t", 0))
    assert (reloaded.log_start_offset, reloaded.local_log_start_offset) == (0, local_start)
