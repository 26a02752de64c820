"""ListOffsets -3 (max timestamp) when the largest timestamp is only in the remote tier, and the KIP-950
disable flow (remote.storage.enable=false with remote.log.delete.on.disable=true), on a real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from helpers import wait_for
from tiered_broker_harness import FAST, PLUGINS, TS0, create, list_offset, produce, value_of

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS

pytestmark = pytest.mark.integration

LATE = 5  # this record carries the partition's largest timestamp, far below the local log start
MAX_TS = TS0 + 1_000_000


def max_timestamp(bootstrap: str, topic: str) -> tuple[int, int, int]:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -3, "current_leader_epoch": -1}]}]})
        p = r.topics[0].partitions[0]
        return p.error_code.value, p.offset, p.timestamp


def test_max_timestamp_in_the_remote_tier_then_disable_with_delete(broker_factory):
    b = broker_factory(FAST)
    topic = "lo-max"
    create(b.bootstrap, topic)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 8192})
    n = 3000
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=value_of(i), timestamp=MAX_TS if i == LATE else TS0 + i)
    assert p.flush(30) == 0
    # the segment holding LATE is tiered and gone from local disk
    wait_for(lambda: list_offset(b.bootstrap, topic, -4) > LATE + 100, what="local retention after tiering")
    assert list_offset(b.bootstrap, topic, -2) == 0
    assert max_timestamp(b.bootstrap, topic) == (0, LATE, MAX_TS)
    # a by-timestamp lookup agrees
    assert list_offset(b.bootstrap, topic, MAX_TS) == LATE

    remote_root = b.data_dir / "remote-storage"
    assert any(remote_root.rglob("*.log"))
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource("topic", topic, set_config={
        "remote.storage.enable": "false", "remote.log.delete.on.disable": "true",
        "segment.bytes": "32768", "local.retention.bytes": "1"})
    admin.alter_configs([res])[res].result(30)
    def remote_segments_left() -> bool:
        try:
            return any(remote_root.rglob("*.log"))
        except FileNotFoundError:  # a folder the broker removed while it was listed
            return True

    wait_for(lambda: not remote_segments_left(), what="remote segments deleted")
    local_start = list_offset(b.bootstrap, topic, -4)
    # the log starts where the local data starts: the remote-only offsets are gone
    assert list_offset(b.bootstrap, topic, -2) == local_start > LATE
    err, off, ts = max_timestamp(b.bootstrap, topic)
    assert err == 0 and off >= local_start and ts < MAX_TS


def _by_timestamp(bootstrap: str, topic: str, ts: int) -> tuple[int, int]:
    with KafkaClient(bootstrap, timeout=60) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]})
        p = r.topics[0].partitions[0]
        return p.error_code.value, p.offset


def test_remote_list_offsets_honour_their_timeout_and_leave_local_lookups_alone(broker_factory, tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    b = broker_factory({**FAST, "remote.log.storage.manager.class.name": "faulty_rsm:FaultyStorage",
                        "remote.log.storage.manager.class.path": str(PLUGINS),
                        "rsm.config.control.dir": str(control), "rsm.config.dir": str(tmp_path / "remote"),
                        "remote.list.offsets.request.timeout.ms": "1000"})
    topic = "lo-timeout"
    create(b.bootstrap, topic)
    produce(b.bootstrap, topic, 0, 1500)
    local_start = wait_for(lambda: list_offset(b.bootstrap, topic, -4), what="tiering and local retention")
    # the object store hangs: a lookup into the tier times out with REQUEST_TIMED_OUT (KIP-1075) ...
    (control / "hang").touch()
    assert _by_timestamp(b.bootstrap, topic, TS0 + 10) == (7, -1)
    assert any(control.glob("hung-fetch_*"))
    # ... while lookups the local log answers do not wait for it (the active segment's records: local
    # retention may still be moving the local start on)
    assert local_start < 1490
    assert _by_timestamp(b.bootstrap, topic, TS0 + 1490) == (0, 1490)
    assert list_offset(b.bootstrap, topic, -1) == 1500
    (control / "hang").unlink()
    assert wait_for(lambda: _by_timestamp(b.bootstrap, topic, TS0 + 10) == (0, 10), what="the lookup after recovery")
