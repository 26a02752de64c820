"""Compacted topics in the remote tier, end to end: a real broker process with its local-folder remote
tier, confluent-kafka producers (idempotent updates and deletes, one transactional producer committing
and aborting) and a confluent-kafka consumer reading from offset 0, through the remote tier.

- Once remote cleaning has replaced segments, the key -> latest value map read from offset 0 equals a
  replay of everything acknowledged (aborted transactions left out), offsets strictly increase, and the
  remote tier holds far fewer bytes than were written; the cleaners' throttle, set low at start-up, is
  raised live through IncrementalAlterConfigs and the remote cleaner takes it.
- SIGKILL of the broker while remote cleaning runs (slowed by log.cleaner.io.max.bytes.per.second),
  once it has merged segments: after the restart the same map is read, and once the round is over
  the segments in the store hold each offset once (the orphans went through expiration).
- SIGKILL of the broker after its rounds: the restarted broker goes on from the cleaner offset kept
  in the tier, neither mapping nor rewriting what was clean.
- Three idempotent producers at once, on keys of their own and keys they share, into a tier on a
  real S3 server (moto): the same map from offset 0, each producer's records in its own order, and
  the remote bytes within 1.5x of the live keys' key and value bytes.
- Small records (30-byte values) over many small segments: the cleaned segments are merged, so the
  remote bytes stay within 1.5x of the live keys' bytes too (one empty batch per old segment would not).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from pathlib import Path

import pytest
from broker_harness import BrokerProcess
from compaction_harness import TOPIC, WAIT_S, consume, kept_cleaner_offset, local_log_start, produce
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from helpers import wait_for
from s3servers import S3Endpoint, moto_s3, unique_prefix  # noqa: F401  (the fixture)

from spark_readers import read_topic

pytestmark = pytest.mark.integration


def broker_overrides(remote: Path, **extra: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "rsm.config.dir": str(remote),
            "remote.log.manager.task.interval.ms": "200", "log.cleaner.backoff.ms": "200",
            "log.retention.check.interval.ms": "200",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "1", **extra}


def create_topic(b: BrokerProcess, segment_bytes: int = 16384) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "cleanup.policy": "compact", "remote.storage.enable": "true", "segment.bytes": str(segment_bytes),
        "local.retention.ms": "500", "min.cleanable.dirty.ratio": "0.01"})])[TOPIC].result(30)


def stored_ranges(remote: Path) -> list[tuple[int, int]]:
    """The (start, end) offsets of every committed segment in the store, by their manifests, sorted."""
    ranges = []
    for p in remote.rglob("*.manifest"):
        body = json.loads(p.read_bytes())
        ranges.append((int(body["start_offset"]), int(body["end_offset"])))
    return sorted(ranges)


def one_copy_per_offset(remote: Path) -> bool:
    """Whether the segments the store holds (by their manifests, and by their data objects for uploads that
    never committed) each hold offsets no other one holds: no orphan, neither an unfinished replacement nor
    a retired copy (a merged replacement's old segments start elsewhere than it)."""
    try:
        ranges = stored_ranges(remote)
    except FileNotFoundError:
        return False  # deleted since it was listed: still cleaning up
    return len(ranges) == len(list(remote.rglob("*.log"))) and all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))


def remote_log_bytes(remote: Path) -> int:
    total = 0
    for p in remote.rglob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            continue  # deleted (a retired copy) since it was listed
    return total


def test_the_compacted_view_read_through_the_remote_tier_equals_a_replay(broker_factory, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    b = broker_factory(broker_overrides(remote, **{"log.cleaner.io.max.bytes.per.second": "1000"}))
    create_topic(b)
    # raised live, before any round: at 1 kB/s the remote round would take most of an hour; at 60 kB/s a
    # round lasts a few seconds, which the reads below land in
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[ConfigEntry(
        "log.cleaner.io.max.bytes.per.second", "60000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    expected, written = produce(b, seed=1)
    # read from offset 0 again and again while the local cleaner, the copies and the remote rounds run:
    # every read, at whatever point of them it lands, is the replay's view
    deadline = time.monotonic() + WAIT_S
    while not (local_log_start(b) > 0 and "compacted remote segment" in b.log_text()
               and remote_log_bytes(remote) < written / 3):
        assert time.monotonic() < deadline, "the remote tier was not compacted"
        view, offsets = consume(b)
        assert view == expected
        assert offsets == sorted(set(offsets))
    view, offsets = consume(b)
    assert view == expected
    assert offsets == sorted(set(offsets))
    # the Spark reader's planner and decoder (read_topic) straight from the compacted tier, the part
    # not tiered yet from the broker: the same view (cleaning may have gone on since the consumer read,
    # so its offsets may be fewer, never out of order)
    rows = read_topic(TOPIC, {"path": remote.as_uri(), "kafka.bootstrap.servers": b.bootstrap}).read_all()
    read_offsets = rows.column("offset").to_pylist()
    assert read_offsets == sorted(set(read_offsets)) and set(read_offsets) <= set(offsets)
    assert dict(zip(rows.column("key").to_pylist(), rows.column("value").to_pylist())) == expected
    assert not [line for line in b.log_text().splitlines() if " ERROR " in line]


def test_a_kill_9_mid_remote_cleaning_leaves_a_consistent_view(broker_factory, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    b = broker_factory(broker_overrides(remote, **{"log.cleaner.io.max.bytes.per.second": "60000"}))
    create_topic(b)
    expected, _ = produce(b, seed=2)
    wait_for(lambda: local_log_start(b) > 0, "nothing moved to the remote tier only", WAIT_S)
    scratch = b.data_dir / "remote-log-cleaner"

    def mid_round() -> bool:
        """A throttled round is running (its scratch files are there): the kill comes while it cleans or
        merges. (Waiting for a group's upload too missed the round whose one group is its whole tier.)"""
        return scratch.is_dir() and any(scratch.iterdir())

    wait_for(mid_round, "no remote cleaning round in progress", WAIT_S, interval_s=0.01)
    b.kill9()
    mark = len(b.log_text())
    b.overrides["log.cleaner.io.max.bytes.per.second"] = "100000000"
    b.start()
    view, offsets = consume(b)  # at once: whatever the crash left is one consistent view
    assert view == expected and offsets == sorted(set(offsets))
    wait_for(lambda: "cleaned the remote tier" in b.log_text()[mark:], "no remote cleaning after the restart", WAIT_S)
    wait_for(lambda: one_copy_per_offset(remote), "an orphaned copy is left", WAIT_S)
    wait_for(lambda: not any(scratch.iterdir()), "the killed round's scratch files are left", WAIT_S)
    view, offsets = consume(b)
    assert view == expected and offsets == sorted(set(offsets))
    assert not [line for line in b.log_text()[mark:].splitlines() if " ERROR " in line]


ROUND = re.compile(r"cleaned the remote tier from offset (\d+) up to offset (\d+): \d+ segment\(s\) read, (\d+) replaced")


def test_a_restarted_broker_goes_on_from_the_cleaner_offset_kept_in_the_tier(broker_factory, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    b = broker_factory(broker_overrides(remote))
    create_topic(b)
    expected, _ = produce(b, seed=3, transactions=False, records=2000)
    # every record is remote and clean (local retention rolls the active segment once it is all older
    # than local.retention.ms, as Kafka's does): the kept offset is the log end
    wait_for(lambda: local_log_start(b) == 2000 and kept_cleaner_offset(remote) == 2000,
             "the remote tier was not cleaned up to the local log", WAIT_S)
    kept = kept_cleaner_offset(remote)
    clean_objects = {p.name for p in remote.rglob("*.log")}
    b.kill9()
    mark = len(b.log_text())
    b.start()
    # new keys only: they supersede nothing, so the already-clean segments have nothing to lose
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                  "batch.size": 4096})
    for i in range(400):
        p.produce(TOPIC, key=b"fresh-%d" % i, value=b"v%d-" % i * 25, partition=0,
                  on_delivery=lambda err, msg: err is None or errors.append(err))
        expected[b"fresh-%d" % i] = b"v%d-" % i * 25
    assert p.flush(60) == 0 and not errors, errors[:3]
    wait_for(lambda: ROUND.search(b.log_text()[mark:]), "no remote cleaning round after the restart", WAIT_S)
    first = ROUND.search(b.log_text()[mark:])
    assert first is not None
    # the first round of the new incarnation maps from the kept offset on (without it: from 0), and
    # rewrites none of the segments that were clean before the kill, but to merge the last of them with
    # the first new records when they fit one segment together
    assert int(first.group(1)) == kept, first.group(0)
    wait_for(lambda: one_copy_per_offset(remote), "the round's retired copies are left", WAIT_S)
    gone = clean_objects - {p.name for p in remote.rglob("*.log")}
    ranges = stored_ranges(remote)
    assert len(gone) <= 1, (gone, ranges)
    for name in gone:
        start = int(name.split("-")[0])
        assert [end for s, end in ranges if s <= start <= end] > [kept - 1], (name, ranges)
    view, offsets = consume(b)
    assert view == expected and offsets == sorted(set(offsets))
    assert not [line for line in b.log_text()[mark:].splitlines() if " ERROR " in line]


def produce_concurrently(b: BrokerProcess, producers: int, records: int) -> tuple[dict[bytes, bytes | None], int]:
    """``producers`` idempotent producers at once, each updating (and now and then deleting) 40 keys of its
    own and 20 keys all of them share, with 200-byte values naming the producer and its sequence. The key ->
    latest value map of a replay of every acknowledged record in offset order (the partition's one order:
    for a shared key the last write acknowledged wins), and the key and value bytes of its live keys."""
    acked: list[tuple[int, bytes, bytes | None]] = []
    order_kept: list[bool] = []
    errors: list[KafkaError] = []
    start = threading.Barrier(producers)

    def run(n: int) -> None:
        rnd = random.Random(n)
        mine: list[int] = []

        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)
            else:
                mine.append(msg.offset())
                acked.append((msg.offset(), msg.key(), msg.value()))

        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                      "batch.size": 4096, "linger.ms": 2})
        start.wait(30)
        for i in range(records):
            key = b"shared-%d" % rnd.randrange(20) if rnd.random() < 0.3 else b"p%d-%d" % (n, rnd.randrange(40))
            value = None if rnd.random() < 0.05 else (b"p%d-seq-%06d|" % (n, i)).ljust(200, b".")
            p.produce(TOPIC, key=key, value=value, partition=0, on_delivery=report)
            p.poll(0)
        left = p.flush(60)
        order_kept.append(left == 0 and mine == sorted(mine))  # delivery reports come in send order

    threads = [threading.Thread(target=run, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(acked) == producers * records, errors[:3]
    assert order_kept == [True] * producers  # all delivered, each producer's in its own order in the log
    view: dict[bytes, bytes | None] = {}
    for _, key, value in sorted(acked):
        view[key] = value
    return view, sum(len(k) + len(v or b"") for k, v in view.items())


def s3_objects(s3: S3Endpoint, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        out.update((o["Key"], o["Size"]) for o in page.get("Contents", []))
    return out


def test_concurrent_producers_into_a_compacted_tier_on_s3(broker_factory, moto_s3: S3Endpoint) -> None:  # noqa: F811
    prefix = unique_prefix()
    rsm = {f"rsm.config.{k}": str(v) for k, v in moto_s3.rsm_configs(prefix=prefix).items()}
    overrides = {k: v for k, v in broker_overrides(Path("unused")).items() if k != "rsm.config.dir"}
    b = broker_factory({**overrides, "remote.log.storage.manager.class.name": "s3", **rsm})
    create_topic(b, segment_bytes=65536)  # few segments: each round reads the tier from its start
    producers, records = 3, 400
    expected, live_bytes = produce_concurrently(b, producers, records)

    def kept() -> int | None:
        for key in s3_objects(moto_s3, prefix):
            if key.endswith("/cleaner-offset-checkpoint.json"):
                body = moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read()
                return int(json.loads(body)["cleaner_offset"])
        return None

    # every record is remote (local retention rolls the active segment too) and clean
    end = producers * records
    wait_for(lambda: local_log_start(b) == end and kept() == end,
             "the remote tier was not cleaned up to the local log", WAIT_S)
    remote_bytes = sum(size for key, size in s3_objects(moto_s3, prefix).items() if key.endswith(".log"))
    view, offsets = consume(b)
    assert view == expected and offsets == sorted(set(offsets))
    # docs/compaction.md's bound: the remote tier within 1.5x of the key and value bytes of the live keys
    assert remote_bytes <= 1.5 * live_bytes, (remote_bytes, live_bytes)
    assert not [line for line in b.log_text().splitlines() if " ERROR " in line]


def test_small_records_over_many_segments_are_merged_within_the_space_bound(broker_factory, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    b = broker_factory(broker_overrides(remote))
    create_topic(b, segment_bytes=4096)
    keys, sweeps = 200, 20
    rnd = random.Random(5)
    acked: list[tuple[int, bytes, bytes | None]] = []
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                  "batch.size": 1024, "linger.ms": 5})
    for sweep in range(sweeps):  # every key updated once a sweep, in an order of its own, some deleted between
        for k in rnd.sample(range(keys), keys):
            value = None if sweep < sweeps - 1 and rnd.random() < 0.05 else (b"s%02d-%03d|" % (sweep, k)).ljust(30, b"v")
            p.produce(TOPIC, key=b"k%03d" % k, value=value, partition=0, on_delivery=lambda err, msg: errors.append(
                err) if err is not None else acked.append((msg.offset(), msg.key(), msg.value())))
            p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]
    expected: dict[bytes, bytes | None] = {}
    for _, key, value in sorted(acked):
        expected[key] = value
    live_bytes = sum(len(k) + len(v or b"") for k, v in expected.items())  # as the S3 test counts them
    end = keys * sweeps
    wait_for(lambda: local_log_start(b) == end and kept_cleaner_offset(remote) == end,
             "the remote tier was not cleaned up to the local log", WAIT_S)
    assert "merged" in b.log_text()
    view, offsets = consume(b)
    assert view == expected and offsets == sorted(set(offsets))
    remote_bytes = remote_log_bytes(remote)
    assert remote_bytes <= 1.5 * live_bytes, (remote_bytes, live_bytes, len(list(remote.rglob("*.log"))))
    assert not [line for line in b.log_text().splitlines() if " ERROR " in line]
