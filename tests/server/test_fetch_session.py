"""Incremental fetch sessions (KIP-227): the cache's eviction rules, then a real broker answering raw
Fetch requests (a session opened, incremental fetches that omit unchanged partitions, stale epochs and
unknown ids refused, forgotten partitions, closing, topic ids from v13) and kafka-python's consumer,
which fetches with sessions, reading everything produced while it fetches."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any, Callable

from broker_harness import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import free_port
from kafka import KafkaConsumer
from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import FETCH, METADATA
from tieredlog.server.fetch_session import FetchSessionCache, new_context

# ---- the cache ------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _sized(n: int) -> OrderedDict:
    return OrderedDict(((f"t{i}", 0), object()) for i in range(n))  # type: ignore[misc]


def test_cache_creates_until_full_then_refuses_a_peer_no_bigger() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock_ms=clock)
    a = cache.maybe_create(False, False, _sized(3))
    b = cache.maybe_create(False, False, _sized(3))
    assert a and b and a != b and len(cache) == 2
    # young consumer sessions are safe from other consumers
    assert cache.maybe_create(False, False, _sized(10)) == 0
    # a follower (privileged) takes the smallest consumer session's slot at any age
    f = cache.maybe_create(True, False, _sized(1))
    assert f and len(cache) == 2 and cache.evictions == 1


def test_cache_evicts_a_stale_session_then_an_old_smaller_one() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, eviction_ms=100, clock_ms=clock)
    a = cache.maybe_create(False, False, _sized(5))
    b = cache.maybe_create(False, False, _sized(2))
    clock.now += 50
    cache.touch(cache.get(a), clock.now)  # type: ignore[arg-type]
    clock.now += 60
    # b was last used 110 ms ago: stale, it goes first regardless of sizes
    c = cache.maybe_create(False, False, _sized(1))
    assert c and cache.get(b) is None and cache.get(a) is not None
    clock.now += 200
    cache.touch(cache.get(a), clock.now)  # type: ignore[arg-type]
    cache.touch(cache.get(c), clock.now)  # type: ignore[arg-type]
    # nothing stale; both are old enough for anyone: the smallest (c, 1 partition) goes to a bigger one
    assert cache.maybe_create(False, False, _sized(1)) == 0  # not bigger than its victim
    d = cache.maybe_create(False, False, _sized(4))
    assert d and cache.get(c) is None and cache.get(a) is not None


def test_no_slots_means_no_sessions() -> None:
    cache = FetchSessionCache(0)
    req = SimpleNamespace(session_id=0, session_epoch=0, topics=(), forgotten_topics_data=())
    ctx = new_context(cache, req, 12, False)
    assert ctx.finish([]) == ([], 0)


# ---- a broker, raw requests --------------------------------------------------------------------------------


def _part(p: int, offset: int) -> dict:
    return {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
            "log_start_offset": -1}


def _fetch(c: KafkaClient, session_id: int, epoch: int, topics: list[dict], forgotten: list[dict] | None = None,
           version: int = 12, max_wait: int = 50) -> Any:
    return c.request(FETCH, {"replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                             "topics": topics, "forgotten_topics_data": forgotten or []}, version=version)


def _answered(resp: Any) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, record bytes)"""
    return {p.partition_index: (p.high_watermark, len(p.records or b"")) for t in resp.responses for p in t.partitions}


def _produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(n):
        p.produce(topic, value=b"r%d" % i, partition=partition)
    assert p.flush(30) == 0


def _cached(port: int) -> tuple[int, int]:
    """(sessions, partitions) in the broker's session cache, from its Prometheus endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
              if ln.startswith("kafka_server_fetchsessioncache_num")}
    return (int(values["kafka_server_fetchsessioncache_numincrementalfetchsessions"]),
            int(values["kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"]))


def test_sessions_with_raw_fetches(broker_factory: Callable[..., BrokerProcess]) -> None:
    port = free_port()
    b = broker_factory({"remote.log.storage.system.enable": "false", "metrics.port": str(port)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("fs", 2, 1)])["fs"].result(30)
    _produce(b.bootstrap, "fs", 0, 10)
    _produce(b.bootstrap, "fs", 1, 10)
    with KafkaClient(b.bootstrap, timeout=10) as c:
        # a full fetch at epoch 0 opens a session and answers every partition
        full = _fetch(c, 0, 0, [{"topic": "fs", "partitions": [_part(0, 0), _part(1, 0)]}])
        sid = full.session_id
        assert full.error_code == ErrorCode.none and sid != 0
        assert {p: hw for p, (hw, _) in _answered(full).items()} == {0: 10, 1: 10}
        assert all(size > 0 for _, size in _answered(full).values())
        assert _cached(port) == (1, 2)

        # incremental: the client moves both offsets to the end; nothing new, nothing answered
        inc = _fetch(c, sid, 1, [{"topic": "fs", "partitions": [_part(0, 10), _part(1, 10)]}])
        assert inc.error_code == ErrorCode.none and inc.session_id == sid and _answered(inc) == {}

        # new records on partition 1 only: the fetch names no partition and gets partition 1 alone
        _produce(b.bootstrap, "fs", 1, 5)
        inc = _fetch(c, sid, 2, [])
        got = _answered(inc)
        assert list(got) == [1] and got[1][0] == 15 and got[1][1] > 0

        # the same epoch again, and an id never handed out
        assert _fetch(c, sid, 2, []).error_code == ErrorCode.invalid_fetch_session_epoch
        assert _fetch(c, sid, 9, []).error_code == ErrorCode.invalid_fetch_session_epoch
        assert _fetch(c, sid ^ 0x5A5A5A, 1, []).error_code == ErrorCode.fetch_session_id_not_found
        # a session opened by names is not continued with topic ids
        assert _fetch(c, sid, 3, [], version=13).error_code == ErrorCode.fetch_session_topic_id_error

        # the session goes on at the epoch it expects; partition 1 forgotten, its new records not sent
        inc = _fetch(c, sid, 3, [{"topic": "fs", "partitions": [_part(1, 15)]}])
        assert _answered(inc) == {}
        _fetch(c, sid, 4, [], forgotten=[{"topic": "fs", "partitions": [1]}])
        assert _cached(port) == (1, 1)
        _produce(b.bootstrap, "fs", 1, 3)
        assert _answered(_fetch(c, sid, 5, [])) == {}
        _produce(b.bootstrap, "fs", 0, 2)
        assert list(_answered(_fetch(c, sid, 6, []))) == [0]

        # epoch -1 closes it: answered in full without a session, and the id is gone
        closed = _fetch(c, sid, -1, [{"topic": "fs", "partitions": [_part(0, 12)]}])
        assert closed.error_code == ErrorCode.none and closed.session_id == 0 and list(_answered(closed)) == [0]
        assert _fetch(c, sid, 7, []).error_code == ErrorCode.fetch_session_id_not_found
        assert _cached(port) == (0, 0)

        # v13: the session is keyed by topic id
        md = c.request(METADATA, {"topics": [{"name": "fs"}], "allow_auto_topic_creation": False}, version=12)
        tid = md.topics[0].topic_id
        assert isinstance(tid, uuid.UUID)
        full = _fetch(c, 0, 0, [{"topic_id": tid, "partitions": [_part(0, 12), _part(1, 18)]}], version=13)
        sid = full.session_id
        assert sid != 0 and full.responses[0].topic_id == tid
        assert _answered(_fetch(c, sid, 1, [], version=13)) == {}
        _produce(b.bootstrap, "fs", 0, 1)
        inc = _fetch(c, sid, 2, [], version=13)
        assert [t.topic_id for t in inc.responses] == [tid] and list(_answered(inc)) == [0]
        _fetch(c, sid, 3, [], forgotten=[{"topic_id": tid, "partitions": [0]}], version=13)
        _produce(b.bootstrap, "fs", 0, 1)
        assert _answered(_fetch(c, sid, 4, [], version=13)) == {}


def test_kafka_python_consumer_reads_everything_through_its_session(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({"remote.log.storage.system.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("fsk", 3, 1)])["fsk"].result(30)
    c = KafkaConsumer("fsk", bootstrap_servers=b.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      fetch_max_wait_ms=100, enable_incremental_fetch_sessions=True)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
    seen: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60  # a guard against hangs, not a threshold
    try:
        # records arrive while the consumer fetches, one partition at a time, so most of its fetches
        # are incremental ones answering a single partition
        for round_ in range(6):
            for i in range(5):
                p.produce("fsk", value=b"%d-%d" % (round_, i), partition=round_ % 3)
            assert p.flush(30) == 0
            want = 5 * (round_ + 1)
            while sum(map(len, seen.values())) < want:
                assert time.monotonic() < deadline, seen
                for tp, msgs in c.poll(timeout_ms=200).items():
                    seen.setdefault(tp.partition, []).extend(m.offset for m in msgs)
        # the consumer's session with the broker is open and has moved past its first epochs
        (handler,) = c._fetcher._session_handlers.values()
        assert handler.next_metadata.session_id != 0 and handler.next_metadata.epoch > 3
    finally:
        c.close()
    assert {part: offs for part, offs in seen.items()} == {0: list(range(10)), 1: list(range(10)),
                                                           2: list(range(10))}
