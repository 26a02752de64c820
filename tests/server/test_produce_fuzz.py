"""Hostile record batches inside otherwise valid Produce requests, sent to a real broker process.

Every frame carries two partitions: partition 0 gets a real batch (tieredlog's builder or
kafka-python's) with one mutation, its CRC recomputed unless the mutation is the CRC itself, so the
mutation reaches whatever reads past the header; partition 1 gets a good batch. After each frame:
the connection is still open, partition 1 was appended at the expected offset, and partition 0's
answer agrees with a strict reader (records.decode_batch over every batch plus Kafka's
LogValidator header rules):
- a batch the strict reader accepts is appended (no false rejections);
- a bad batch whose fault the broker can see in constant time per batch (header fields, CRC,
  sizes, codec, compressed framing, the first record) gets an error code;
- a bad batch whose fault lies deeper among the records gets CORRUPT_MESSAGE, INVALID_RECORD, or
  is appended: the broker never decodes records on produce (docs/internals.md, records);
- never UNKNOWN_SERVER_ERROR, never a closed connection, never a traceback in the broker's log.
Seeded and bounded (FRAMES or TIME_BUDGET_S, whichever ends first).
"""

from __future__ import annotations

import random
import struct
import time
from collections import Counter

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tieredlog.clients.blocking import KafkaClient
from tieredlog.formats.errors import RecordError
from tieredlog.formats.varint import encode_varint, read_varint
from tieredlog.protocol.api import CREATE_TOPICS, FETCH, LIST_OFFSETS, METADATA, PRODUCE
from tieredlog.records.batch import CRC_OFFSET, HEADER_SIZE, compute_crc, iter_headers, peek_size, read_header
from tieredlog.records.codecs import compress, decompress
from tieredlog.records.record import build_batch, decode_batch, iter_batches_records

pytestmark = pytest.mark.integration

SEED = 405_2024
FRAMES = 4000
TIME_BUDGET_S = 20.0
TOPIC = "fuzz-produce"
BAD, GOOD = 0, 1
AFTER_MAX_MS = 3_600_000  # message.timestamp.after.max.ms default

# Kafka's answers to a batch it refuses: CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP,
# UNSUPPORTED_FOR_MESSAGE_FORMAT (magic 0/1), INVALID_RECORD.
REFUSALS = {2, 10, 32, 43, 87}
# Mutations of fields the broker checks per batch: a batch they make invalid must be refused.
HEADER_KINDS = {"count_vs_delta", "magic", "codec", "control", "crc", "batch_length", "truncate",
                "timestamp", "first_record_length_single", "compressed_framing"}


# ---------------------------------------------------------------------------------------------
# batches


def _base_batch(rng: random.Random, now: int) -> bytes:
    codec = rng.choice([0, 0, 1, 2, 3, 4])
    n = rng.choice([1, 1, 2, 3, rng.randint(4, 25)])
    recs = []
    for _i in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 12))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, rng.choice([8, 60, 300])))
        headers = [(f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 6)))
                   for j in range(rng.choice([0, 0, 1, 3]))]
        recs.append((key, value, headers, now - rng.randint(0, 5000)))
    if rng.random() < 0.5:
        return build_batch(recs, codec=codec)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (key, value, headers, ts) in enumerate(recs):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(b.build())


def _reseal(buf: bytearray, pos: int = 0) -> bytearray:
    """Recompute the CRC of the batch at ``pos`` over the bytes its length declares, if they are there."""
    size = peek_size(buf, pos)
    if HEADER_SIZE <= size and pos + size <= len(buf):
        struct.pack_into(">I", buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
    return buf


def _varint_fields(plain: bytes) -> list[tuple[str, int, int]]:
    """(name, position, width) of every varint of the (valid) records section ``plain``."""
    out = []
    pos = 0
    while pos < len(plain):
        def field(name: str, p: int) -> tuple[int, int]:
            v, q = read_varint(plain, p)
            out.append((name, p, q - p))
            return v, q

        length, p = field("record_length", pos)
        end = p + length
        p += 1  # attributes
        _, p = field("timestamp_delta", p)
        _, p = field("offset_delta", p)
        klen, p = field("key_length", p)
        p += max(klen, 0)
        vlen, p = field("value_length", p)
        p += max(vlen, 0)
        hcount, p = field("header_count", p)
        for _ in range(hcount):
            hk, p = field("header_key_length", p)
            p += hk
            hv, p = field("header_value_length", p)
            p += max(hv, 0)
        pos = end
    return out


def _with_records(batch: bytes, plain: bytes) -> bytes:
    """``batch`` with its records section replaced by ``plain`` (compressed with the batch's codec)."""
    h = read_header(batch, 0)
    data = compress(h.compression, plain) if h.compression else plain
    out = bytearray(batch[:HEADER_SIZE]) + data
    struct.pack_into(">i", out, 8, len(out) - 12)
    return bytes(_reseal(out))


def _mutate(rng: random.Random, batch: bytes, now: int) -> tuple[str, bytes]:
    h = read_header(batch, 0)
    buf = bytearray(batch)
    kinds = ["count_vs_delta", "count_consistent", "magic", "codec", "control", "crc", "batch_length",
             "truncate", "timestamp", "record_varint", "record_varint", "record_varint", "record_bytes",
             "record_bytes"]
    if h.compression:
        kinds.append("compressed_bytes")
    if h.compression in (1, 3, 4):  # snappy's raw blocks (librdkafka) have no magic to check
        kinds.append("compressed_framing")
    kind = rng.choice(kinds)
    if kind == "count_vs_delta":
        struct.pack_into(">i", buf, 57, rng.choice([0, -1, h.records_count + rng.randint(1, 9), 1 << 30, -(1 << 31)]))
    elif kind == "count_consistent":
        count = rng.choice([0, 1, max(1, h.records_count - 1), h.records_count + 1, h.records_count + 50, 1 << 30])
        if count == h.records_count:
            count += 1
        struct.pack_into(">i", buf, 57, count)
        struct.pack_into(">i", buf, 23, count - 1)
    elif kind == "magic":
        buf[16] = rng.choice([0, 1, 3, 127, 255])
    elif kind == "codec":
        buf[22] = (buf[22] & ~7) | rng.choice([5, 6, 7])
    elif kind == "control":
        buf[22] |= 0x20
    elif kind == "crc":
        buf[rng.randrange(CRC_OFFSET, len(buf))] ^= rng.randrange(1, 256)
        return kind, bytes(buf)  # no reseal: the CRC is the point
    elif kind == "batch_length":
        delta = rng.choice([-len(buf), -len(buf) + 10, -1, 1, 7, 1 << 20, (1 << 31) - 13, -(1 << 31)])
        struct.pack_into(">i", buf, 8, max(-(1 << 31), min((1 << 31) - 1, len(buf) - 12 + delta)))
    elif kind == "truncate":
        return kind, bytes(buf[: rng.randrange(1, len(buf))])
    elif kind == "timestamp":
        struct.pack_into(">q", buf, 35, now + AFTER_MAX_MS + rng.randint(60_000, 1 << 40))
    elif kind == "compressed_bytes":
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(HEADER_SIZE, len(buf))] ^= rng.randrange(1, 256)
    elif kind == "compressed_framing":
        buf[HEADER_SIZE + rng.randrange(min(3, len(buf) - HEADER_SIZE))] ^= rng.randrange(1, 256)
    else:
        plain = bytearray(decompress(h.compression, memoryview(batch)[HEADER_SIZE:]))
        if kind == "record_bytes":
            for _ in range(rng.randint(1, 3)):
                plain[rng.randrange(len(plain))] = rng.randrange(256)
        else:
            name, p, width = rng.choice(_varint_fields(bytes(plain)))
            old, _ = read_varint(plain, p)
            new = rng.choice([-2, -1, 0, 1, old - 1, old + 1, 2 * old + 3, 1 << 31, -(1 << 31), rng.randint(-300, 300)])
            if new == old:
                new += 1
            enc = encode_varint(new) if rng.random() < 0.9 else b"\xff" * 11  # or no varint at all
            plain[p : p + width] = enc
            single = h.compression == 0 and h.records_count == 1 and p == 0
            kind = "first_record_length_single" if single and name == "record_length" else f"record_{name}"
        return kind, _with_records(batch, bytes(plain))
    return kind, bytes(_reseal(buf))


def strict_verdict(records: bytes, now: int) -> str | None:
    """None when a strict reader accepts every batch of a produce's records, else why not: each
    batch decodes (CRC, sizes, codec, every record), and Kafka's LogValidator header rules hold."""
    try:
        pos = 0
        if not records:
            return "empty"
        while pos < len(records):
            if len(records) - pos < HEADER_SIZE or pos + peek_size(records, pos) > len(records):
                return f"partial batch at byte {pos}"
            h, recs = decode_batch(records, pos)
            if h.records_count <= 0 or h.last_offset_delta + 1 != h.records_count:
                return "record count does not match lastOffsetDelta"
            if h.is_control:
                return "control batch from a client"
            if h.has_producer_id and h.base_sequence < 0:
                return "producer id without a sequence"
            if h.max_timestamp > now + AFTER_MAX_MS:
                return "timestamp too far in the future"
            pos += h.size
    except RecordError as e:
        return str(e)
    return None


# ---------------------------------------------------------------------------------------------


def _produce(c: KafkaClient, bad: bytes, good: bytes):
    r = c.request(PRODUCE, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": BAD, "records": bad}, {"index": GOOD, "records": good}]}]},
        version=9)
    return {p.index: p for p in r.responses[0].partition_responses}


def _fetch_all(c: KafkaClient, partition: int, end: int) -> bytes:
    out = bytearray()
    offset = 0
    while offset < end:
        r = c.request(FETCH, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 22,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                              "topics": [{"topic": TOPIC, "partitions": [
                                  {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 22}]}]},
                      version=12)
        part = r.responses[0].partitions[0]
        assert part.error_code.value == 0, part
        data = bytes(part.records or b"")
        assert data, f"no data at offset {offset} of {end}"
        last = offset
        pos = 0
        while pos + HEADER_SIZE <= len(data) and pos + peek_size(data, pos) <= len(data):
            h = read_header(data, pos)
            if h.last_offset >= offset:
                out += data[pos : pos + h.size]
                last = h.last_offset
            pos += h.size
        offset = last + 1
    return bytes(out)


def test_mutated_batches_get_error_codes_and_never_hurt_the_broker(broker):
    rng = random.Random(SEED)
    outcomes: Counter = Counter()
    appended_bad = 0  # frames whose bad batch was appended: the records the broker does not decode
    bad_next = 0
    good_next = 0
    good_sent = 0
    with KafkaClient(broker.bootstrap) as c:
        r = c.request(CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 1,
                                                  "configs": []}], "timeout": 10000})
        assert r.topics[0].error_code.value == 0
        t0 = time.monotonic()
        frames = 0
        while frames < FRAMES and time.monotonic() - t0 < TIME_BUDGET_S:
            frames += 1
            now = int(time.time() * 1000)
            kind, bad = _mutate(rng, _base_batch(rng, now), now)
            if rng.random() < 0.15:  # a good batch before the bad one: the whole request is refused
                bad = _base_batch(rng, now) + bad
            good = _base_batch(rng, now)
            verdict = strict_verdict(bad, now)
            parts = _produce(c, bad, good)  # a closed connection raises here
            g, b = parts[GOOD], parts[BAD]
            assert (g.error_code.value, g.base_offset) == (0, good_next), (kind, g)
            good_next += read_header(good, 0).records_count
            good_sent += 1
            code = b.error_code.value
            assert code != -1, (kind, b.error_message)
            if verdict is None:
                assert code == 0, f"{kind}: a batch a strict reader accepts was refused: {b.error_message}"
                bad_next = b.base_offset + sum(h.records_count for _, h in iter_headers(bad))
                continue
            if kind in HEADER_KINDS:
                assert code in REFUSALS, f"{kind}: {verdict!r} answered {code}"
            else:
                assert code in {0, 2, 87}, f"{kind}: {verdict!r} answered {code} {b.error_message}"
            outcomes[(kind, "refused" if code else "appended")] += 1
            if code == 0:
                appended_bad += 1
                bad_next = b.base_offset + sum(h.records_count for _, h in iter_headers(bad))
            if frames % 100 == 0:
                assert c.request(METADATA, {"topics": None}).brokers[0].port == broker.port
                assert broker.alive()
        print(f"\n{frames} frames in {time.monotonic() - t0:.1f} s; outcomes of bad batches:")
        for (kind, what), n in sorted(outcomes.items()):
            print(f"  {kind:32s} {what:9s} {n}")
        assert frames >= 200, "too few frames to mean anything"
        assert sum(n for (k, w), n in outcomes.items() if w == "refused") > frames // 3
        # Everything partition 1 was sent is there; partition 0 holds, byte for byte, what it was
        # answered for: the bad batches among them are exactly the appended ones.
        assert sum(1 for _ in iter_batches_records(_fetch_all(c, GOOD, good_next))) == good_sent
        corrupt: list = []
        list(iter_batches_records(_fetch_all(c, BAD, bad_next), on_corrupt=lambda *a: corrupt.append(a)))
        assert len(corrupt) == appended_bad
        # ListOffsets by timestamp decodes a stored batch (bounded even if it is one of the bad ones
        # appended): an answer, never a dead broker.
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": BAD, "timestamp": 0, "current_leader_epoch": -1}]}]})
        assert r.topics[0].partitions[0].error_code.value in {0, 2, 87}
    assert broker.alive()
    assert "Traceback" not in broker.log_text()


def test_clients_cannot_append_to_internal_topics(broker):
    # The group coordinator and the remote log metadata manager load these at start-up; as in
    # Kafka, only the broker writes them (INVALID_TOPIC_EXCEPTION, nothing appended).
    batch = build_batch([(b"\x00\x01\x00\x01g", b"garbage")])
    with KafkaClient(broker.bootstrap) as c:
        for topic in ("__consumer_offsets", "__remote_log_metadata"):
            def end(topic: str = topic) -> int:
                r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
                p = r.topics[0].partitions[0]
                assert p.error_code.value == 0, (topic, p)
                return p.offset

            before = end()
            r = c.request(PRODUCE, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
            p = r.responses[0].partition_responses[0]
            assert (p.error_code.value, p.error_message) == (17, f"Cannot append to internal topic {topic}")
            assert end() == before
