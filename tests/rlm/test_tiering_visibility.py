"""Tiering is visible without looking in folders: INFO lines for each copied segment, each local
copy deleted after tiering and each remote segment deleted by retention; the metrics endpoint on by
default (a port taken is one ERROR line, the broker serves on); an object-store outage is one line
per partition per interval, never a traceback, and one line when the partition recovers."""

from __future__ import annotations

import logging
import re
import socket
import time

import pytest
from helpers import FakeClock, wait_for
from remote_read_harness import FAST, TIERED, create_tiered_topic, local_log_start_of, produce_to_partitions
from s3servers import (  # noqa: F401  (fixtures)
    FaultyS3Proxy,
    S3Endpoint,
    faulty_moto,
    moto_s3,
    store_down,
    unique_prefix,
)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.config import BrokerConfig
from tieredlog.rate_limited_log import RateLimitedLog
from tieredlog.rlm import manager as rlm_manager


def test_the_metrics_endpoint_is_on_by_default() -> None:
    assert BrokerConfig.load(None, []).get("metrics.port") == 9404
    assert BrokerConfig.load(None, ["metrics.port=-1"]).get("metrics.port") == -1
    assert BrokerConfig.load(None, []).get("metrics.host") == "127.0.0.1"


def test_a_rate_limited_log_writes_a_burst_per_interval_then_says_what_it_left_out(caplog) -> None:
    clock = FakeClock()
    rl = RateLimitedLog(logging.getLogger("t.rl"), 60.0, burst=2, clock=clock)
    with caplog.at_level(logging.INFO, logger="t.rl"):
        assert [rl.log("p", logging.INFO, "copied %d", i) for i in range(5)] == [True, True, False, False, False]
        clock.t = 61
        assert rl.log("p", logging.INFO, "copied %d", 5) and rl.log("q", logging.INFO, "other")
        failures = RateLimitedLog(logging.getLogger("t.rl"), 60.0, clock=clock)
        assert failures.failed("f", OSError("store\ndown"), "copy of %s failed", "f")
        assert not failures.failed("f", OSError("still down"), "copy of %s failed", "f")
        clock.t = 62
        since, last = failures.failing("f") or (None, None)
        assert since == 61 and str(last) == "still down"
        failures.succeeded("f", "copy of %s succeeded", "f")
        failures.succeeded("q", "never failed")
    assert failures.failing("f") is None
    assert [r.getMessage() for r in caplog.records] == [
        "copied 0", "copied 1", "copied 5 (3 more in the last 60 s)", "other",
        "copy of f failed: OSError: store down",
        "copy of f succeeded again after 2 failed attempt(s) over 1.0 s"]
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.integration
def test_tiering_says_what_it_copied_and_deleted_and_a_taken_metrics_port_is_one_line(broker_factory) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = broker_factory({**FAST, "metrics.port": str(port)})
        topic, kept = "vis", "vis-retention"
        with KafkaClient(b.bootstrap) as c:
            create_tiered_topic(c, topic)
            create_tiered_topic(c, kept, configs=[*TIERED, {"name": "retention.bytes", "value": "40000"}])
            produce_to_partitions(b.bootstrap, topic, 1)
            produce_to_partitions(b.bootstrap, kept, 1)
            wait_for(lambda: local_log_start_of(c, topic, 0) > 200, what="segments tiered and deleted locally")
            wait_for(lambda: f"{kept}-0: deleted remote segment [0, " in b.log_text(), what="remote retention")
    text = b.log_text()
    copied = re.search(rf"INFO \S+: {topic}-0: copied segment \[0, (\d+)\] \((\d+) bytes\) to the remote tier "
                       r"in \d+\.\d\d s as \S+", text)
    assert copied, text
    end = int(copied.group(1))
    assert re.search(rf"INFO \S+: {topic}-0: deleted local segment \[0, {end}\] \(\d+ bytes\), in the remote "
                     r"tier; local log starts at \d+", text), text
    assert re.search(rf"INFO \S+: {kept}-0: deleted remote segment \[0, \d+\] \(\d+ bytes, \S+\): remote retention",
                     text), text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert errors == [line for line in errors if f"cannot bind 127.0.0.1:{port} (metrics.host, metrics.port)" in line]
    assert len(errors) == 1, errors
    assert "Traceback" not in text and b.alive()


@pytest.mark.integration
def test_an_object_store_outage_is_one_line_per_partition_per_interval(broker_factory, moto_s3: S3Endpoint,  # noqa: F811
                                                                       faulty_moto: FaultyS3Proxy) -> None:
    rsm = moto_s3.rsm_configs(prefix=unique_prefix(), **{"storage.s3.endpoint.url": faulty_moto.url,
                                                         "storage.s3.retry.max.attempts": "1"})
    b = broker_factory({**FAST, "remote.log.storage.manager.class.name": "s3",
                        "remote.log.manager.task.retry.backoff.ms": "50",
                        **{f"rsm.config.{k}": str(v) for k, v in rsm.items()}})
    topic, partitions = "down", 3
    with KafkaClient(b.bootstrap) as c:
        create_tiered_topic(c, topic, partitions)
        before = len(b.log_text())
        started = time.monotonic()
        faulty_moto.fault = store_down
        produce_to_partitions(b.bootstrap, topic, partitions)
        wait_for(lambda: all(f"segment copy of {topic}-{p} failed" in b.log_text()[before:] for p in range(partitions)),
                 what="every partition's copy failing")
        # and retried many times over while the store stays down
        tries = len(faulty_moto.seen())
        wait_for(lambda: len(faulty_moto.seen()) > tries + 40 * partitions, what="copies retried during the outage")
        faulty_moto.fault = lambda r: None
        wait_for(lambda: min(local_log_start_of(c, topic, p) for p in range(partitions)) > 200,
                 what="tiering catching up once the store is back")
        # a copy run that tiers the backlog ends after its last segment: then it says it recovered
        wait_for(lambda: all(f"segment copy of {topic}-{p} succeeded again after" in b.log_text()[before:]
                             for p in range(partitions)), what="every partition's copy recovering")
    text = b.log_text()[before:]
    assert "Traceback" not in b.log_text()
    intervals = 2 + int((time.monotonic() - started) // rlm_manager.FAILURE_LOG_MIN_INTERVAL_S)
    for p in range(partitions):
        failed = [line for line in text.splitlines() if f"segment copy of {topic}-{p} failed" in line]
        assert 1 <= len(failed) <= intervals, failed
        assert all(" WARNING " in line and "SlowDown" in line for line in failed), failed
    warnings = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(warnings) <= partitions * 3 * intervals, warnings  # copy, retention, reads: a line each at most

