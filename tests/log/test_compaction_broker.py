"""Log compaction end to end: real broker processes, confluent-kafka clients and kcat.

- A compacted topic holding 2000 keys updated five times by producers using every codec (none, gzip,
  lz4, zstd, snappy), some rounds deleting keys (tombstones in the middle of compressed batches), some
  reviving them: once the cleaner has run, a reader from offset 0 (confluent-kafka and kcat alike) sees
  exactly one record per key, its latest value at the very offset and timestamp the producer's
  delivery report gave. The first cleaning keeps the tombstones and stamps their batches with a
  delete horizon (KIP-534); a later cleaning after the horizon drops them and nothing else. Altering
  delete.retention.ms afterwards does not move a horizon already stamped, as in Kafka.
- Keys rewritten so often that whole segments hold only superseded records: after a cleaning both
  readers still get through (no run of segments holding nothing but an empty batch, which makes
  librdkafka report MSG_SIZE_TOO_LARGE and kcat stop).
- SIGKILL of the broker while it cleans (rounds slowed by log.cleaner.io.max.bytes.per.second), at
  different moments, several times: every restart loads a consistent log, and once cleaning is over
  no .cleaned or .swap file is left and every key's latest acknowledged (acks=all) value is there.
- __consumer_offsets, compacted with offsets.topic.segment.bytes segments, stays small however many
  times a group commits, and the last commit survives a restart.
- __transaction_state likewise under hundreds of transactions of one transactional id, and the
  coordinator reloads the id from it after a restart.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterable

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from helpers import wait_for

from tieredlog.log.checkpoints import OffsetCheckpointFile
from tieredlog.log.types import TopicPartition as TP

pytestmark = pytest.mark.integration

CLEANER_OVERRIDES = {"log.cleaner.backoff.ms": "200"}
SEGMENT_BYTES = 16384
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES), "min.cleanable.dirty.ratio": "0.01"}
ROLL_KEY = b"~roll"
WAIT_S = 90.0

# (offset, key, value, timestamp) of one record as a reader or the producer's delivery report saw it
Rec = tuple[int, bytes, bytes | None, int]


# ---- clients ------------------------------------------------------------------------------------
def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _create(b: BrokerProcess, topic: str, **configs: str) -> None:
    admin = _admin(b)  # referenced until the answer: a destroyed handle fails its futures
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def _alter(b: BrokerProcess, topic: str, **configs: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = _admin(b)
    admin.incremental_alter_configs([res])[res].result(30)


def _producer(b: BrokerProcess, codec: str = "none") -> Producer:
    # batches well under segment.bytes: the broker refuses a batch larger than a segment
    return Producer({"bootstrap.servers": b.bootstrap, "compression.type": codec, "acks": "all",
                     "enable.idempotence": True, "batch.size": 8192, "linger.ms": 5})


def _produce(p: Producer, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> list[Rec]:
    """Send and flush; the delivery reports, every one of them a success."""
    acked: list[Rec] = []
    errors: list[KafkaError] = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))

    n = 0
    for key, value in records:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
        p.poll(0)
    assert p.flush(60) == 0, "records still unsent after 60 s"
    assert not errors, errors[:5]
    assert len(acked) == n
    return acked


def _consume(b: BrokerProcess, topic: str) -> list[Rec]:
    """Every record of partition 0 from offset 0 up to the high watermark, with confluent-kafka."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[Rec] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() >= high:
                    return out
                continue
            out.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
        raise AssertionError(f"{topic}: read {len(out)} records in {WAIT_S} s without reaching offset {high}")
    finally:
        c.close()


def _kcat_read(b: BrokerProcess, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.fail("kcat is not installed: run `make system-deps` (apt-get install -y kcat)")
    r = subprocess.run([kcat, "-C", "-b", b.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z",
                        "-f", "%o\t%k\t%s\n"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = []
    for line in r.stdout.decode().splitlines():
        offset, key, value = line.split("\t")
        out.append((int(offset), key.encode(), None if value == "NULL" else value.encode()))
    return out


# ---- the partition on disk ----------------------------------------------------------------------
def _pdir(b: BrokerProcess, topic: str) -> Path:
    return b.data_dir / f"{topic}-0"


def _bases(pdir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in pdir.glob("*.log"))


def _log_bytes(pdir: Path) -> int:
    total = 0
    for p in pdir.glob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:  # swapped out meanwhile
            pass
    return total


def _checkpoint(b: BrokerProcess, topic: str) -> int | None:
    """Where the cleaner's last finished round on the partition ended (cleaner-offset-checkpoint)."""
    path = b.data_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return None
    return OffsetCheckpointFile(path).read().get(TP(topic, 0))


def _leftovers(pdir: Path) -> list[str]:
    return sorted(p.name for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap")))


def _roll(p: Producer, topic: str, pdir: Path, past: int) -> list[Rec]:
    """Records of one key, one batch each, until the active segment starts after offset ``past``:
    everything up to ``past`` is then in rolled segments, which the cleaner may clean."""
    acked: list[Rec] = []
    while not _bases(pdir) or _bases(pdir)[-1] <= past:
        assert len(acked) < 100, f"{topic}: no segment roll after {len(acked)} records"
        acked += _produce(p, topic, [(ROLL_KEY, b"r" * 2048)])
    return acked


def _wait_cleaned(b: BrokerProcess, topic: str, past: int) -> int:
    """Wait for a cleaning round of ``topic`` that ended after offset ``past``; its end."""
    def done() -> int | None:
        cp = _checkpoint(b, topic)
        return cp if cp is not None and cp > past else None
    try:
        return wait_for(done, f"{topic} cleaned past offset {past}", timeout_s=WAIT_S, interval_s=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{b.log_text()[-5000:]}") from None


def _assert_healthy(b: BrokerProcess) -> None:
    text = b.log_text()
    for bad in ("uncleanable", "unexpected failure", "Traceback"):
        assert bad not in text, f"broker log has {bad!r}:\n{text[-5000:]}"


def _latest(acked: Iterable[Rec]) -> dict[bytes, Rec]:
    """Each key's latest acknowledged record."""
    latest: dict[bytes, Rec] = {}
    for rec in sorted(acked):
        latest[rec[1]] = rec
    return latest


def _check_compacted(read: list[Rec], latest: dict[bytes, Rec], *, tombstones: bool) -> None:
    """``read`` (everything from offset 0) holds, for every key but the roll key, only its latest
    record, exactly as acknowledged; a deleted key's tombstone when ``tombstones``, else nothing."""
    offsets = [r[0] for r in read]
    assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
    data = [r for r in read if r[1] != ROLL_KEY]
    expected = sorted(r for k, r in latest.items() if k != ROLL_KEY and (tombstones or r[2] is not None))
    if data != expected:
        got = {r[1]: r for r in data}
        missing = [r for r in expected if got.get(r[1]) != r]
        extra = sorted(set(data) - set(expected))
        raise AssertionError(f"{len(data)} records read, {len(expected)} expected; missing or different "
                             f"{len(missing)}: {missing[:5]}; not expected {len(extra)}: {extra[:5]}")
    assert read[-1][1] == ROLL_KEY or read[-1] == latest[read[-1][1]]
    assert latest[ROLL_KEY] in read, "the roll key's latest record is gone"


# ---- 1. a compacted topic, every codec, tombstones ------------------------------------------------
CODECS = ("none", "gzip", "lz4", "zstd", "snappy")
KEYS = 2000


def _round(r: int) -> list[tuple[bytes, bytes | None]]:
    """Round r's records: 0 and 1 set every key; 2 deletes keys 5n; 3 revives keys 10n; 4 deletes
    keys 7n (some of them deleted already) and leaves keys 3n alone."""
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(KEYS):
        key = b"k%05d" % i
        value = b"%s-round%d-%s" % (key, r, b"v" * (i % 40))
        if r == 2 and i % 5 == 0 or r == 4 and i % 7 == 0:
            out.append((key, None))
        elif r == 3 and i % 5 == 0 and i % 10 != 0 or r == 4 and (i % 3 == 0 or i % 5 == 0 and i % 10 != 0):
            continue
        else:
            out.append((key, value))
    return out


def test_compacted_topic_keeps_latest_record_of_every_key(broker_factory):
    b = broker_factory(CLEANER_OVERRIDES)
    keep, purge = "compacted-keep", "compacted-purge"
    # min.compaction.lag.ms holds the cleaner off until everything is written: then one round cleans
    # all of it, the first cleaning every tombstone sees, and the bytes before it are all written
    lag = {"min.compaction.lag.ms": "3600000"}
    _create(b, keep, **COMPACTED, **lag, **{"delete.retention.ms": "86400000"})
    _create(b, purge, **COMPACTED, **lag, **{"delete.retention.ms": "0"})
    acked: dict[str, list[Rec]] = {keep: [], purge: []}
    for r, codec in enumerate(CODECS):
        p = _producer(b, codec)
        for topic in (keep, purge):
            acked[topic] += _produce(p, topic, _round(r))
    p = _producer(b)
    for topic in (keep, purge):
        acked[topic] += _roll(p, topic, _pdir(b, topic), max(a[0] for a in acked[topic]))
    latest = {topic: _latest(recs) for topic, recs in acked.items()}
    deleted = {k for k, r in latest[keep].items() if r[2] is None}
    assert 0 < len(deleted) < KEYS // 2
    written = {topic: _log_bytes(_pdir(b, topic)) for topic in acked}
    assert "cleaned compacted-" not in b.log_text()
    ends = {topic: _checkpoint(b, topic) or 0 for topic in acked}

    for topic in acked:
        _alter(b, topic, **{"min.compaction.lag.ms": "0"})
    for topic in acked:
        ends[topic] = _wait_cleaned(b, topic, ends[topic])
        assert f"Cleaner 0: cleaned {topic}-0: " in b.log_text()
        after = _log_bytes(_pdir(b, topic))
        assert after < written[topic] / 2, (topic, written[topic], after)
    _assert_healthy(b)

    # the first cleaning kept every tombstone (their delete horizon is stamped now)
    reads = {topic: _consume(b, topic) for topic in acked}
    for topic, read in reads.items():
        _check_compacted(read, latest[topic], tombstones=True)
    assert _kcat_read(b, keep) == [r[:3] for r in reads[keep]]

    # a later cleaning after the horizon: the tombstones of delete.retention.ms=0 go, nothing else.
    # The other topic's horizon was stamped a day ahead by the first cleaning: making the retention
    # 0 now does not bring it nearer (KIP-534, as Kafka), its tombstones stay.
    _alter(b, keep, **{"delete.retention.ms": "0"})
    for topic in acked:
        acked[topic] += _roll(p, topic, _pdir(b, topic), max(a[0] for a in acked[topic]))
        latest[topic][ROLL_KEY] = max(a for a in acked[topic] if a[1] == ROLL_KEY)
    for topic in acked:
        _wait_cleaned(b, topic, ends[topic])
    _assert_healthy(b)
    read_purge = _consume(b, purge)
    _check_compacted(read_purge, latest[purge], tombstones=False)
    assert not any(r[2] is None for r in read_purge)
    assert _kcat_read(b, purge) == [r[:3] for r in read_purge]
    _check_compacted(_consume(b, keep), latest[keep], tombstones=True)


def test_readers_cross_segments_whose_records_were_all_superseded(broker_factory):
    """Keys rewritten many times: every segment but the last few holds only superseded records. A
    round must not leave each of them as a segment of its own holding nothing but an empty batch: a
    fetch there answers with no record, and after ten such answers librdkafka reports
    MSG_SIZE_TOO_LARGE, which stops kcat (its exit code is 1 and it prints nothing)."""
    b = broker_factory(CLEANER_OVERRIDES)
    topic = "rewritten"
    pdir = _pdir(b, topic)
    _create(b, topic, **COMPACTED, **{"min.compaction.lag.ms": "3600000"})
    p = _producer(b)
    acked: list[Rec] = []
    for n in range(40):
        acked += _produce(p, topic, [(b"key%02d" % i, b"%d-" % n + b"w" * 1000) for i in range(20)])
    acked += _roll(p, topic, pdir, max(a[0] for a in acked))
    segments = len(_bases(pdir))
    assert segments > 30
    end = _checkpoint(b, topic) or 0
    _alter(b, topic, **{"min.compaction.lag.ms": "0"})
    _wait_cleaned(b, topic, end)
    _assert_healthy(b)
    read = _consume(b, topic)
    _check_compacted(read, _latest(acked), tombstones=True)
    assert _kcat_read(b, topic) == [r[:3] for r in read]


# ---- 2. SIGKILL while cleaning -------------------------------------------------------------------
CRASH_KEYS = 1500


def _updates(n: int) -> list[tuple[bytes, bytes | None]]:
    return [(b"c%04d" % i, b"%d:%d:" % (i, n) + b"u" * 200) for i in range(CRASH_KEYS)]


def _count(pdir: Path, suffix: str) -> int:
    return sum(1 for p in pdir.iterdir() if p.name.endswith(suffix))


def _check_latest_present(read: list[Rec], latest: dict[bytes, Rec]) -> None:
    """Whatever a cleaning has done so far: offsets increase and each key's last record is its latest
    acknowledged one."""
    offsets = [r[0] for r in read]
    assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
    last = {r[1]: r for r in read}
    lost = [r for k, r in latest.items() if last.get(k) != r]
    assert not lost, f"{len(lost)} keys lost their latest acknowledged record: {lost[:5]}"


def test_sigkill_while_cleaning_leaves_a_consistent_log(broker_factory):
    # The cleaner's reads and writes are held to 300 KB/s (after each 0.3 s burst, as Kafka's
    # Throttler): a round over the log's MB lasts seconds, in steps, so the kills below find it at
    # different points: mapping keys, writing a .cleaned segment, between two swaps, late in a round.
    b = broker_factory({**CLEANER_OVERRIDES, "log.cleaner.io.max.bytes.per.second": "300000"})
    topic = "crashy"
    pdir = _pdir(b, topic)
    _create(b, topic, **COMPACTED)
    started = f"Cleaner 0: cleaning {topic}-0 up to offset"
    finished = f"Cleaner 0: cleaned {topic}-0: "

    def in_round() -> bool:
        text = b.log_text()
        last = text.rfind(started)
        return last >= 0 and finished not in text[last:]

    def after_round_start(s: float):
        seen: list[float] = []

        def cond() -> bool:
            if not seen and in_round():
                seen.append(time.monotonic())
            return bool(seen) and time.monotonic() - seen[0] >= s
        return cond

    # when to kill: each condition is polled until it holds, or for at most 20 s
    moments = [
        ("a .cleaned segment is being written", lambda: _count(pdir, ".cleaned") > 0),
        ("two groups were swapped in", lambda: _count(pdir, ".log.deleted") >= 2),
        ("0.2 s after the restart", None),
        ("a .swap segment exists", lambda: _count(pdir, ".swap") > 0),
        ("1 s into a round", after_round_start(1.0)),
        ("six groups were swapped in", lambda: _count(pdir, ".log.deleted") >= 6),
    ]
    acked: list[Rec] = []
    mid_round = []
    leftovers = 0
    for n, (what, cond) in enumerate(moments):
        p = _producer(b)
        acked += _produce(p, topic, _updates(n))
        acked += _roll(p, topic, pdir, max(a[0] for a in acked))
        del p
        if cond is None:
            b.kill9()
            b.start()
            time.sleep(0.2)
        else:
            deadline = time.monotonic() + 20
            while not cond() and time.monotonic() < deadline:
                time.sleep(0.002)
        b.kill9()
        if in_round():
            mid_round.append(what)
        leftovers += bool(_leftovers(pdir))
        b.start()
        _check_latest_present(_consume(b, topic), _latest(acked))
    assert mid_round, "no kill landed in a cleaning round"

    # after the last restart cleaning finishes: it reaches the active segment
    def cleaned_to_active() -> bool:
        cp = _checkpoint(b, topic)
        return cp is not None and cp == _bases(pdir)[-1]
    wait_for(cleaned_to_active, "cleaning up to the active segment", timeout_s=WAIT_S * 2, interval_s=0.2)
    assert _leftovers(pdir) == []
    _assert_healthy(b)
    latest = _latest(acked)
    read = _consume(b, topic)
    _check_compacted(read, latest, tombstones=True)
    assert {r[1] for r in read} == {b"c%04d" % i for i in range(CRASH_KEYS)} | {ROLL_KEY}
    # and a clean restart loads the same
    b.restart()
    assert _leftovers(pdir) == []
    assert _consume(b, topic) == read
    print(f"kills in a round: {mid_round}; kills leaving .cleaned/.swap files: {leftovers}")


# ---- 3. __consumer_offsets stays small ----------------------------------------------------------
COMMITS = 3000


def test_consumer_offsets_is_compacted(broker_factory):
    b = broker_factory({**CLEANER_OVERRIDES, "offsets.topic.segment.bytes": str(SEGMENT_BYTES),
                        "offsets.topic.num.partitions": "1"})
    topic, group = "committed", "g-compact"
    _create(b, topic)
    pdir = _pdir(b, "__consumer_offsets")
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for n in range(1, COMMITS + 1):
            c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
    finally:
        c.close()
    # each commit wrote at least a batch header (61 bytes) and a record whose key holds the group and
    # the topic: far more than the one record per key the cleaner keeps
    written = COMMITS * (61 + len(group) + len(topic))
    wait_for(lambda: _log_bytes(pdir) < written / 5 and "cleaned __consumer_offsets-0" in b.log_text(),
             "__consumer_offsets compacted", timeout_s=WAIT_S, interval_s=0.2)
    _assert_healthy(b)

    def committed() -> int:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            return c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
        finally:
            c.close()
    assert committed() == COMMITS
    b.restart()
    assert committed() == COMMITS
    assert re.search(r"cleaned __consumer_offsets-0: .* messages read", b.log_text())


TRANSACTIONS = 300


def test_transaction_state_is_compacted_and_reloads(broker_factory):
    """Every transaction writes its state to __transaction_state several times (ongoing, prepare,
    complete); compacted, one record per transactional id stays, and after a restart the coordinator
    knows the id's producer id and epoch: a new producer with it is fenced in as the next epoch."""
    b = broker_factory({**CLEANER_OVERRIDES, "transaction.state.log.segment.bytes": str(SEGMENT_BYTES),
                        "transaction.state.log.num.partitions": "1", "transaction.state.log.min.isr": "1"})
    topic, tid = "txn-out", "compact-txn"
    _create(b, topic)
    pdir = _pdir(b, "__transaction_state")
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(30)
    for i in range(TRANSACTIONS):
        p.begin_transaction()
        p.produce(topic, key=b"k", value=b"%d" % i)
        p.commit_transaction(30)
    # at least three state records (ongoing, prepare-commit, complete-commit) of a batch header each
    written = TRANSACTIONS * 3 * 61
    wait_for(lambda: "cleaned __transaction_state-0" in b.log_text() and _log_bytes(pdir) < written / 5,
             "__transaction_state compacted", timeout_s=WAIT_S, interval_s=0.2)
    _assert_healthy(b)
    del p
    b.restart()
    again = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    again.init_transactions(30)  # the reloaded state: the id exists, its epoch is bumped
    again.begin_transaction()
    again.produce(topic, key=b"k", value=b"after restart")
    again.commit_transaction(30)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < TRANSACTIONS + 1 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                values.append(m.value())
    finally:
        c.close()
    assert values == [b"%d" % i for i in range(TRANSACTIONS)] + [b"after restart"]
