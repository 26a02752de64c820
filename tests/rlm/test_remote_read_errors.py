"""A remote read that fails answers the partition error Kafka's broker sends, not an empty partition.

Kafka's RemoteLogReader hands the read's exception to DelayedRemoteFetch, which answers it as the
partition's error through Errors.forException: a RemoteStorageException (RemoteResourceNotFound
included) is no Kafka ApiException, so the code is UNKNOWN_SERVER_ERROR (-1), which clients surface
(librdkafka hands it to the application; KAFKA_STORAGE_ERROR, which tieredlog answered before, makes
it refresh metadata and fetch again silently, forever). Transient store errors are retried within
remote.fetch.max.wait.ms; the log says each partition's failure once per interval, in one line.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from helpers import wait_for
from remote_read_harness import FAST, create_tiered_topic, local_log_start_of, produce_to_partitions
from rlm_harness import tiered_log  # noqa: F401 - the fixture, shared
from s3servers import (  # noqa: F401  (fixtures)
    FaultyS3Proxy,
    S3Endpoint,
    faulty_moto,
    moto_s3,
    store_down,
    unique_prefix,
)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.errors import UnknownServerError
from tieredlog.protocol.api import FETCH
from tieredlog.records.batch import iter_headers
from tieredlog.rlm import manager as rlm_manager
from tieredlog.rsm.api import RemoteLogSegmentState, RemoteResourceNotFoundException, RetriableRemoteStorageException

UNKNOWN_SERVER_ERROR = -1
# the RLM's failure lines: one per partition per this interval (the task interval here is shorter)
LOG_INTERVAL_S = rlm_manager.FAILURE_LOG_MIN_INTERVAL_S


def _fetch(c: KafkaClient, topic: str, partition: int, offset: int = 0) -> Any:
    r = c.request(FETCH, {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                          "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                                      "partition_max_bytes": 1 << 16}]}]},
                  version=12)
    return r.responses[0].partitions[0]


def _warnings(text: str, about: str) -> list[str]:
    return [line for line in text.splitlines() if (" WARNING " in line or " ERROR " in line) and about in line]


def _bound(started: float) -> int:
    """The most lines one key may write since ``started``: one per interval begun."""
    return 1 + int((time.monotonic() - started) // LOG_INTERVAL_S) + 1


@pytest.mark.integration
def test_a_removed_remote_segment_reaches_the_consumer_as_an_error(broker_factory, tmp_path: Path) -> None:
    b = broker_factory(FAST)
    topic = "gone"
    with KafkaClient(b.bootstrap) as c:
        create_tiered_topic(c, topic)
        produce_to_partitions(b.bootstrap, topic, 1)
        wait_for(lambda: local_log_start_of(c, topic, 0) > 200, what="segments tiered and deleted locally")
        first, second = sorted((b.data_dir / "remote-storage").glob(f"{topic}-*/0/*.log"))[:2]
        assert first.name.startswith("0" * 20)
        first.unlink()  # an object lost from the store (or a broker pointed at another tier)
        before = len(b.log_text())
        started = time.monotonic()
        part = _fetch(c, topic, 0)
        assert (part.error_code.value, bytes(part.records or b"")) == (UNKNOWN_SERVER_ERROR, b""), part
        # a real client surfaces it instead of waiting forever on empty fetches
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "enable.auto.commit": False,
                             "fetch.error.backoff.ms": 50})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + 30
            error = None
            while error is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None:
                    assert msg.error() is not None, f"a record at {msg.offset()} from a removed segment"
                    error = msg.error()
            assert error is not None and error.code() == KafkaError.UNKNOWN, error
            assert "not found in remote storage" in b.log_text()[before:]
        finally:
            consumer.close()
        # the segments after the removed one are served
        later = _fetch(c, topic, 0, int(second.name[:20]))
        assert later.error_code.value == 0 and later.records, later
        lines = _warnings(b.log_text()[before:], f"{topic}-0")
        assert 1 <= len(lines) <= _bound(started), lines
        assert all("RemoteResourceNotFoundException" in line and "not found in remote storage" in line
                   for line in lines), lines
    assert "Traceback" not in b.log_text()
    assert b.alive()


def _s3_broker(broker_factory: Callable[..., Any], moto_s3: S3Endpoint, faulty_moto: FaultyS3Proxy,  # noqa: F811
               **extra: str) -> Any:
    rsm = moto_s3.rsm_configs(prefix=unique_prefix(), **{"storage.s3.endpoint.url": faulty_moto.url,
                                                         "storage.s3.retry.max.attempts": "1"})
    return broker_factory({**FAST, "remote.log.storage.manager.class.name": "s3",
                           **{f"rsm.config.{k}": str(v) for k, v in rsm.items()}, **extra})


@pytest.mark.integration
def test_an_object_store_outage_fails_reads_past_the_wait_and_a_brief_one_is_retried(
        broker_factory, moto_s3: S3Endpoint, faulty_moto: FaultyS3Proxy) -> None:  # noqa: F811
    b = _s3_broker(broker_factory, moto_s3, faulty_moto, **{"remote.fetch.max.wait.ms": "3000"})
    topic = "outage"
    with KafkaClient(b.bootstrap, timeout=60) as c:
        create_tiered_topic(c, topic, 2)
        produce_to_partitions(b.bootstrap, topic, 2)
        wait_for(lambda: min(local_log_start_of(c, topic, p) for p in (0, 1)) > 200, what="both partitions tiered")
        before = len(b.log_text())
        started = time.monotonic()
        faulty_moto.fault = store_down
        # partition 1: the store comes back while the fetch waits; the read is retried and succeeds
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.append(_fetch(c, topic, 1)))
        reader.start()
        wait_for(lambda: f"{topic}-1: remote read at 0 failed" in b.log_text()[before:],
                 what="the first failed try of the read")
        faulty_moto.fault = lambda r: None
        reader.join(60)
        assert got and got[0].error_code.value == 0, got
        assert list(iter_headers(bytes(got[0].records)))[0][1].base_offset == 0
        assert f"{topic}-1: remote reads succeed again after" in b.log_text()[before:]
    # partition 0: a store that stays down past remote.fetch.max.wait.ms answers the read's error
    with KafkaClient(b.bootstrap, timeout=60) as c:
        faulty_moto.fault = store_down
        part = _fetch(c, topic, 0)
        assert (part.error_code.value, bytes(part.records or b"")) == (UNKNOWN_SERVER_ERROR, b""), part
        faulty_moto.fault = lambda r: None
    text = b.log_text()[before:]
    assert "Traceback" not in b.log_text()
    for p in (0, 1):
        lines = _warnings(text, f"{topic}-{p}")
        assert 1 <= len(lines) <= 2 * _bound(started), lines  # the reads' lines and the tasks' lines
        assert all("503" in line or "SlowDown" in line for line in lines), lines


# ---- the RLM's retry, in process ------------------------------------------------------------------

def _flaky(rsm: Any, monkeypatch: pytest.MonkeyPatch, failures: list[Exception]) -> list[int]:
    """Make ``rsm.fetch_log_segment`` raise each of ``failures`` once, then work; returns the call count."""
    calls = [0]
    real = rsm.fetch_log_segment

    def fetch(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if failures:
            raise failures.pop(0)
        return real(*args, **kwargs)

    monkeypatch.setattr(rsm, "fetch_log_segment", fetch)
    return calls


def _first_segment(rlm: Any, plog: Any) -> Any:
    tip = rlm._tip(plog.topic_partition, plog)
    return min((m for m in rlm.list_segments(tip) if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
               key=lambda m: m.start_offset)


def test_transient_store_errors_are_retried_within_the_wait_and_logged_once(tiered_log, monkeypatch,  # noqa: F811
                                                                             caplog) -> None:
    plog, rlm, _, _ = tiered_log
    md = _first_segment(rlm, plog)
    rlm.remote_fetch_max_wait_s = 10.0  # room for three pauses (Kafka's default, 500 ms, has room for two)
    calls = _flaky(rlm.rsm, monkeypatch, [RetriableRemoteStorageException(f"GetObject: 503 SlowDown {i}")
                                          for i in range(3)])
    with caplog.at_level(logging.INFO, logger="tieredlog.rlm.manager"):
        data = rlm.read(plog.topic_partition, md.start_offset, 4096, timeout=30)
    assert [h for _, h in iter_headers(data)][0].base_offset == md.start_offset
    assert calls[0] >= 4  # three failures, then the read (and its read-ahead)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "GetObject: 503 SlowDown 0" in warnings[0], warnings
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(re.search(r"remote reads succeed again after 3 failed attempt", m) for m in infos), infos


def test_a_missing_object_fails_at_once_and_a_failing_store_once_the_wait_is_spent(tiered_log, monkeypatch) -> None:  # noqa: F811
    plog, rlm, _, _ = tiered_log
    md = _first_segment(rlm, plog)
    calls = _flaky(rlm.rsm, monkeypatch, [RemoteResourceNotFoundException("00000.log not found in remote storage")])
    with pytest.raises(UnknownServerError, match="not found in remote storage"):
        rlm.read(plog.topic_partition, md.start_offset, 4096, timeout=30)
    assert calls[0] == 1  # nothing to wait for: the object is gone
    rlm.remote_fetch_max_wait_s = 0.3
    calls = _flaky(rlm.rsm, monkeypatch, [RetriableRemoteStorageException("GetObject: 503") for _ in range(1000)])
    with pytest.raises(UnknownServerError, match="GetObject: 503"):
        rlm.read(plog.topic_partition, md.start_offset, 4096, timeout=30)
    assert 1 < calls[0] < 1000
    # a later fetch that outlasts the wait gets the same error instead of an empty answer
    failure = wait_for(lambda: rlm.read_failure(plog.topic_partition), what="the failure outlasting the wait")
    assert isinstance(failure, UnknownServerError) and "GetObject: 503" in str(failure)
