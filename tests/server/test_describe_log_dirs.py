"""DescribeLogDirs against a real broker with two log dirs: kafka-python's admin client and raw
requests of every advertised version."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from broker_harness import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import API_VERSIONS, DESCRIBE_LOG_DIRS


def _local_bytes(dirs: list[Path], topic: str, partition: int) -> int:
    for d in dirs:
        p = d / f"{topic}-{partition}"
        if p.is_dir():
            return sum(f.stat().st_size for f in p.glob("*.log"))
    raise AssertionError(f"{topic}-{partition} in no log dir")


def _by_dir(resp) -> dict[str, dict[tuple[str, int], tuple[int, int, bool]]]:
    return {r.log_dir: {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                        for t in r.topics for p in t.partitions} for r in resp.results}


def test_describe_log_dirs(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    b = broker_factory({"log.dirs": ",".join(map(str, dirs)), "remote.log.storage.system.enable": "false"},
                       data_dir=dirs[0])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("ld", 3, 1), NewTopic("other", 1, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(300):
        p.produce("ld", value=b"x" * 100, partition=i % 3)
    assert p.flush(30) == 0

    with KafkaClient(b.bootstrap, timeout=10) as c:
        advertised = {k.api_key: (k.min_version, k.max_version) for k in c.request(API_VERSIONS, {}).api_keys}
        assert advertised[DESCRIBE_LOG_DIRS] == (1, 4)
        for v in (1, 2, 3, 4):
            resp = c.request(DESCRIBE_LOG_DIRS, {"topics": None}, version=v)
            got = _by_dir(resp)
            assert set(got) == {os.path.abspath(d) for d in dirs}
            parts = {tp: info for per_dir in got.values() for tp, info in per_dir.items()}
            for i in range(3):
                assert parts[("ld", i)] == (_local_bytes(dirs, "ld", i), 0, False)
            assert parts[("ld", 0)][0] > 10_000
            assert ("other", 0) in parts
            # the partitions are spread over both dirs, each reported once under its own
            assert all(got.values())
            assert all(r.error_code == ErrorCode.none for r in resp.results)
            if v >= 4:
                st = os.statvfs(dirs[0])
                r0 = next(r for r in resp.results if r.log_dir == os.path.abspath(dirs[0]))
                assert r0.total_bytes == st.f_blocks * st.f_frsize
                assert 0 < r0.usable_bytes <= r0.total_bytes

        # a filter: only the partitions asked for, topics with none left out
        resp = c.request(DESCRIBE_LOG_DIRS, {"topics": [{"topic": "ld", "partitions": [1]},
                                                         {"topic": "missing", "partitions": [0]}]}, version=4)
        assert sorted(tp for per_dir in _by_dir(resp).values() for tp in per_dir) == [("ld", 1)]

    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        result = ka.describe_log_dirs()
    finally:
        ka.close()
    (answer,) = result
    sizes = {
        (t["name"], part["partition_index"]): part["partition_size"]
        for r in answer["log_dirs"] for t in r["topics"] for part in t["partitions"]}
    assert {("ld", 0), ("ld", 1), ("ld", 2), ("other", 0)} <= set(sizes)
    assert sizes[("ld", 2)] == _local_bytes(dirs, "ld", 2)
