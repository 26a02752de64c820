"""Disk waits stay off the event loop: a real broker process whose every fsync is made slow (a
``sitecustomize`` on its PYTHONPATH wraps ``os.fsync`` while a flag file exists), one partition rolling
segments as fast as it can, and produce requests to another, quiet partition timed meanwhile.

When the rolled segment's fsync ran inside the append (on the event loop, under the partition lock),
every request of the broker waited for it: the quiet partition's produces took up to one injected
fsync delay each. Now the flush runs on the log's scheduler threads and no quiet produce waits for one; nor
does the first append to a partition, whose leader-epoch checkpoint is fsynced by that flush too.

Also DeleteTopics: the partition directory is renamed ``<topic>-<partition>.<uuid hex>-delete`` when the
request returns and removed in the background; a restart finishes the deletes a crash interrupted.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CREATE_TOPICS, DELETE_TOPICS, PRODUCE
from tieredlog.records.record import build_batch

pytestmark = pytest.mark.integration

FSYNC_DELAY_S = 1.0
SEGMENT_BYTES = 128 * 1024
ROLL_BATCH = 60 * 1024  # two batches fill a segment: every other produce rolls
PROBE_SECONDS = 4.0

SHIM = '''
import os
import time

_flag = os.environ.get("TIEREDLOG_TEST_SLOW_FSYNC_FLAG")
if _flag:
    _delay = float(os.environ["TIEREDLOG_TEST_SLOW_FSYNC_S"])
    _count = _flag + ".count"
    _real_fsync = os.fsync

    def _slow_fsync(fd):
        if os.path.exists(_flag):
            time.sleep(_delay)
            with open(_count, "a") as f:
                f.write("x")
        return _real_fsync(fd)

    os.fsync = _slow_fsync
'''

BROKER = {"remote.log.storage.system.enable": "false", "offsets.topic.num.partitions": "1"}


def _create(c: KafkaClient, name: str, configs: dict[str, str]) -> None:
    r = c.request(CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                              "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                  "timeout": 30000, "validate_only": False}, version=5)
    assert r.topics[0].error_code.value == 0, r


def _produce(c: KafkaClient, topic: str, value: bytes) -> None:
    r = c.request(PRODUCE, {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}]},
        version=9).responses[0].partition_responses[0]
    assert r.error_code.value == 0, r


def test_quiet_partition_produce_never_waits_for_a_roll_fsync(broker_factory, tmp_path, monkeypatch):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)
    flag = tmp_path / "slow-fsync"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("TIEREDLOG_TEST_SLOW_FSYNC_FLAG", str(flag))
    monkeypatch.setenv("TIEREDLOG_TEST_SLOW_FSYNC_S", str(FSYNC_DELAY_S))
    b = broker_factory(BROKER)
    with KafkaClient(b.bootstrap) as c:
        _create(c, "roller", {"segment.bytes": str(SEGMENT_BYTES)})
        _create(c, "quiet", {})
    roller_dir = b.data_dir / "roller-0"
    segments_before = len(list(roller_dir.glob("*.log")))
    # From here every fsync of the broker is slow, the first appends to both partitions included (they
    # write the leader-epoch checkpoints).
    flag.touch()

    stop = threading.Event()
    roller_errors: list[BaseException] = []

    def roll() -> None:
        payload = os.urandom(ROLL_BATCH)
        try:
            with KafkaClient(b.bootstrap) as rc:
                while not stop.is_set():
                    _produce(rc, "roller", payload)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            roller_errors.append(e)

    roller = threading.Thread(target=roll, daemon=True)
    roller.start()
    latencies: list[float] = []
    try:
        with KafkaClient(b.bootstrap) as c:
            end = time.monotonic() + PROBE_SECONDS
            while time.monotonic() < end:
                t0 = time.monotonic()
                _produce(c, "quiet", b"probe")
                latencies.append(time.monotonic() - t0)
                time.sleep(0.01)
    finally:
        stop.set()
        roller.join(30)
    slowed = len(Path(str(flag) + ".count").read_text()) if Path(str(flag) + ".count").exists() else 0
    segments = len(list(roller_dir.glob("*.log"))) - segments_before
    b.kill9()  # a clean shutdown would fsync every segment at the injected speed
    assert not roller_errors, roller_errors
    # No quiet produce waited for an fsync. Had they waited, each would take up to a delay and the probes
    # would number a handful; a loaded machine may still stall one now and then, so the test counts them.
    # The first probe is the partition's first append, whose leader-epoch checkpoint is fsynced.
    slow = [round(t * 1000) for t in latencies if t >= FSYNC_DELAY_S / 2]
    assert latencies[0] < FSYNC_DELAY_S, f"the first produce to the quiet partition took {latencies[0] * 1000:.0f} ms"
    assert len(slow) <= len(latencies) // 100, (
        f"{len(slow)} of {len(latencies)} produces to the quiet partition took over half the fsync delay "
        f"({FSYNC_DELAY_S * 1000:.0f} ms): {slow} ms; {segments} rolls"
    )
    # ...while the roller rolled and the broker's fsyncs were slow.
    assert segments >= 2, f"only {segments} rolls during the probe"
    assert slowed >= 2, f"only {slowed} fsyncs were slowed"


def test_delete_topics_renames_now_deletes_in_the_background_and_restart_finishes(broker_factory):
    b = broker_factory(BROKER)
    with KafkaClient(b.bootstrap) as c:
        _create(c, "doomed", {})
        _produce(c, "doomed", b"x" * 1000)
        r = c.request(DELETE_TOPICS, {"topic_names": ["doomed"], "timeout": 30000}, version=4)
        assert r.responses[0].error_code.value == 0
        # Answered with the data still on disk, under the "-delete" name (file.delete.delay.ms is 60 s).
        [renamed] = [p for p in b.data_dir.iterdir() if p.name.startswith("doomed-0")]
        assert re.fullmatch(r"doomed-0\.[0-9a-f]{32}-delete", renamed.name)
        assert list(renamed.glob("*.log"))
        # The name is free again at once.
        _create(c, "doomed", {})
        _produce(c, "doomed", b"y")
    b.kill9()
    b.start()
    deadline = time.monotonic() + 30
    while renamed.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not renamed.exists(), "the restarted broker did not finish the pending delete"
    assert (b.data_dir / "doomed-0").is_dir()
