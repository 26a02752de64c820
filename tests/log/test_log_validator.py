"""LogValidator's per-record rules: keys on compacted topics and timestamp bounds, every bad record
of a refused record set named (KIP-467's batch_index), nothing appended, and no record walked for a
batch whose topic and header need none."""

from __future__ import annotations

import random
import struct

import pytest

from tieredlog import errors
from tieredlog.formats.varint import encode_varint
from tieredlog.log import log_validator
from tieredlog.log.config import LogConfig
from tieredlog.log.log_validator import LogValidator
from tieredlog.log.types import AppendOrigin, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import CRC_OFFSET, MAX_TIMESTAMP_OFFSET, compute_crc
from tieredlog.records.record import build_batch, decode_batch
from tieredlog.records.scan import KEY_MISSING, TIMESTAMP_OUT_OF_RANGE, find_record_faults

NOW = 1_700_000_000_000
TP = TopicPartition("compacted", 0)
NO_KEY = f"Compacted topic cannot accept message without key in topic partition {TP}"
CODECS = [0, 1, 2, 3, 4]


def _validator(**cfg) -> LogValidator:
    return LogValidator(LogConfig(**cfg), AppendOrigin.CLIENT, TP)


def _check(v: LogValidator, records: bytes | bytearray, now: int = NOW) -> None:
    buf = bytearray(records)
    headers = v.validate_batches(buf)
    v.validate_records(buf, headers, now, v.find_missing_keys(buf, headers))


def _ts_message(ts: int, offset: int, before: int, after: int, now: int = NOW) -> str:
    return (f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp should be within "
            f"[{now - before}, {now + after}]")


def _keys(*keys: bytes | None, ts: int = NOW, codec: int = 0) -> bytes:
    return build_batch([(k, b"value", [], ts) for k in keys], codec=codec)


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topic_names_every_record_without_a_key(codec):
    v = _validator(cleanup_policy="compact")
    with pytest.raises(errors.InvalidRecordError) as e:
        _check(v, _keys(b"a", None, b"c", None, b"e", codec=codec))
    assert e.value.code.value == 87
    assert e.value.record_errors == [(1, NO_KEY), (3, NO_KEY)]
    assert str(e.value) == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{NO_KEY}'), "
        f"RecordError(batchIndex=3, message='{NO_KEY}')]"
    )


def test_partition_message_shows_at_most_three_record_errors():
    v = _validator(cleanup_policy="compact")
    with pytest.raises(errors.InvalidRecordError) as e:
        _check(v, _keys(None, None, None, None, b"k", None))
    assert [i for i, _ in e.value.record_errors] == [0, 1, 2, 3, 5]
    assert "due to 5 record errors in total" in str(e.value)
    assert str(e.value).count("RecordError(") == 3


@pytest.mark.parametrize("codec", CODECS)
def test_keyed_records_pass_a_compacted_topic_and_any_key_passes_a_deleting_one(codec):
    _check(_validator(cleanup_policy="compact"), _keys(b"a", b"", b"c" * 300, codec=codec))
    _check(_validator(cleanup_policy="delete"), _keys(None, None, b"c", codec=codec))
    # an empty key is a key; only a null one is missing
    with pytest.raises(errors.InvalidRecordError):
        _check(_validator(cleanup_policy="compact,delete"), _keys(b"", None, codec=codec))


def test_indexes_count_across_the_batches_of_a_record_set():
    v = _validator(cleanup_policy="compact")
    with pytest.raises(errors.InvalidRecordError) as e:
        _check(v, _keys(b"a", None) + _keys(b"b", b"c", None, codec=3) + _keys(None))
    assert [i for i, _ in e.value.record_errors] == [1, 4, 5]


def test_records_long_enough_for_multibyte_varints_are_walked():
    # record lengths, timestamp deltas and key lengths over one varint byte
    recs = [(None if i % 7 == 3 else b"k" * (i * 20), b"v" * 200, [("h", b"x")], NOW - 100_000 + i * 1000)
            for i in range(40)]
    v = _validator(cleanup_policy="compact", message_timestamp_before_max_ms=1 << 40)
    with pytest.raises(errors.InvalidRecordError) as e:
        _check(v, build_batch(recs))
    assert [i for i, _ in e.value.record_errors] == [i for i in range(40) if i % 7 == 3]


@pytest.mark.parametrize("codec", CODECS)
def test_every_record_beyond_the_timestamp_bounds_is_named(codec):
    before = after = 60_000
    v = _validator(message_timestamp_before_max_ms=before, message_timestamp_after_max_ms=after)
    stamps = [NOW, NOW + 5 * after, NOW - 10, NOW + after + 1, NOW - before - 1, NOW + after]
    with pytest.raises(errors.InvalidTimestampError) as e:
        _check(v, build_batch([(b"k", b"v", [], ts) for ts in stamps], base_offset=0, codec=codec))
    assert e.value.code.value == 32
    assert str(e.value) == "One or more records have been rejected due to invalid timestamp"
    assert e.value.record_errors == [(i, _ts_message(stamps[i], i, before, after)) for i in (1, 3, 4)]


def test_records_older_than_the_bound_behind_a_first_record_that_is_too():
    # the header bounds the past by the first record only; once it fails, every record is looked at
    before = 1000
    v = _validator(message_timestamp_before_max_ms=before)
    stamps = [NOW - 5000, NOW, NOW - 4000, NOW - 999]
    with pytest.raises(errors.InvalidTimestampError) as e:
        _check(v, build_batch([(b"k", b"v", [], ts) for ts in stamps]))
    assert [i for i, _ in e.value.record_errors] == [0, 2]


def test_missing_keys_and_bad_timestamps_together_answer_invalid_timestamp():
    after = 1000
    v = _validator(cleanup_policy="compact", message_timestamp_after_max_ms=after)
    recs = [(b"a", b"v", [], NOW), (None, b"v", [], NOW), (b"c", b"v", [], NOW + 9000), (None, b"v", [], NOW + 9000)]
    with pytest.raises(errors.InvalidTimestampError) as e:
        _check(v, build_batch(recs))
    # a record with neither a key nor a good timestamp is reported for its key, as Kafka checks it first
    assert [(i, m.split(" ")[0]) for i, m in e.value.record_errors] == [(1, "Compacted"), (2, "Timestamp"),
                                                                        (3, "Compacted")]


def test_log_append_time_topics_check_keys_but_not_timestamps():
    v = _validator(cleanup_policy="compact", message_timestamp_type="LogAppendTime",
                   message_timestamp_after_max_ms=1)
    _check(v, _keys(b"a", ts=NOW + 10**9))
    with pytest.raises(errors.InvalidRecordError) as e:
        _check(v, _keys(b"a", None, ts=NOW + 10**9))
    assert [i for i, _ in e.value.record_errors] == [1]


def test_a_header_out_of_range_with_no_record_out_of_range_is_refused_without_record_errors():
    b = bytearray(_keys(b"a", b"b"))
    struct.pack_into(">q", b, MAX_TIMESTAMP_OFFSET, NOW + 10**9)
    struct.pack_into(">I", b, CRC_OFFSET, compute_crc(b, 0, len(b)))
    with pytest.raises(errors.InvalidTimestampError) as e:
        _check(_validator(message_timestamp_after_max_ms=1000), b)
    assert e.value.record_errors == []
    assert "message.timestamp.after.max.ms" in str(e.value)


def test_a_compacted_topics_records_that_do_not_parse_are_invalid():
    # the constant-time checks pass (count fits, first record fits), the third record's length is cut
    good = _keys(b"a", b"b", b"c")
    body = bytearray(good)
    recs = [bytes(build_batch([(k, b"value", [], NOW)])[61:]) for k in (b"a", b"b", b"c")]
    third = 61 + len(recs[0]) + len(recs[1])
    body[third:third + 1] = encode_varint(len(recs[2]) + 5)[:1]
    struct.pack_into(">I", body, CRC_OFFSET, compute_crc(body, 0, len(body)))
    _check(_validator(), body)  # a deleting topic reads headers only, and takes it as Kafka would not
    with pytest.raises(errors.InvalidRecordError) as e:  # INVALID_RECORD, as Kafka's record reader answers
        _check(_validator(cleanup_policy="compact"), body)
    assert e.value.record_errors == []


def test_passing_batches_of_a_deleting_topic_are_never_walked(monkeypatch):
    def walked(*a, **kw):
        raise AssertionError("records walked")

    monkeypatch.setattr(log_validator, "find_record_faults", walked)
    v = _validator(message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=1000)
    _check(v, _keys(None, b"b", None, codec=1) + _keys(None))
    with pytest.raises(AssertionError):  # a failing header is walked, to name its records
        _check(v, _keys(None, ts=NOW + 5000))


def test_a_refused_record_set_leaves_the_log_untouched(tmp_path):
    plog = UnifiedLog(tmp_path / "compacted-0", LogConfig(cleanup_policy="compact"), clock=lambda: NOW)
    plog.append_as_leader(_keys(b"a"), 0)
    with pytest.raises(errors.InvalidRecordError) as e:
        plog.append_as_leader(_keys(b"b", b"c") + _keys(b"d", None), 0)
    assert [i for i, _ in e.value.record_errors] == [3]
    assert "topic partition compacted-0" in e.value.record_errors[0][1]
    assert plog.log_end_offset == 1
    assert plog.append_as_leader(_keys(b"b", b"c"), 0).first_offset == 1


def test_batch_level_refusals_name_no_record():
    b = bytearray(_keys(b"a", b"b"))
    struct.pack_into(">h", b, 21, 0x20)  # a control batch from a client
    struct.pack_into(">I", b, CRC_OFFSET, compute_crc(b, 0, len(b)))
    with pytest.raises(errors.InvalidRecordError) as e:
        _check(_validator(cleanup_policy="compact"), b)
    assert e.value.record_errors == []


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_agrees_with_the_record_decoder(seed):
    # random records (sizes across the one-, two- and three-byte length varints, null keys, timestamps
    # either side of the bounds): the walk names exactly the records decode_batch says break a rule
    rng = random.Random(seed)
    lo, hi = NOW - 50_000, NOW + 50_000
    recs = []
    for _ in range(rng.randint(1, 60)):
        key = None if rng.random() < 0.15 else rng.randbytes(rng.choice([0, 3, 70, 300]))
        value = rng.randbytes(rng.choice([0, 10, 100, 9000])) if rng.random() < 0.9 else None
        headers = [("h", rng.randbytes(rng.randint(0, 5)))] * rng.choice([0, 0, 2])
        recs.append((key, value, headers, NOW + rng.choice([0, 1, -1]) * rng.randint(0, 100_000)))
    batch = build_batch(recs, codec=rng.choice(CODECS), base_offset=rng.choice([0, 7]))
    h, decoded = decode_batch(batch)
    for keys_required, bounds in ((True, (None, None)), (False, (lo, hi)), (True, (lo, hi))):
        want = []
        for i, r in enumerate(decoded):
            if keys_required and r.key is None:
                want.append((i, KEY_MISSING, r.timestamp, r.offset))
            elif bounds[0] is not None and not lo <= r.timestamp <= hi:
                want.append((i, TIMESTAMP_OUT_OF_RANGE, r.timestamp, r.offset))
        got = find_record_faults(batch, 0, h, keys_required=keys_required, min_timestamp=bounds[0],
                                 max_timestamp=bounds[1])
        assert got == want


@pytest.mark.parametrize("seed", range(30))
def test_garbage_records_of_a_compacted_topic_raise_only_kafka_errors(seed):
    # bytes mutated behind a valid CRC: the walk refuses or passes them, it never fails otherwise
    rng = random.Random(seed)
    codec = rng.choice([0, 0, 0, 1, 4])
    batch = bytearray(build_batch([(rng.choice([b"k", b"key" * 30, None]), rng.randbytes(rng.randint(0, 200)), [],
                                    NOW) for _ in range(rng.randint(1, 20))], codec=codec))
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(61, len(batch))
        batch[at] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    try:
        _check(_validator(cleanup_policy="compact"), batch)
    except (errors.InvalidRecordError, errors.CorruptMessageError, errors.InvalidTimestampError):
        pass
