"""A tiered partition's broker killed before its first log-start checkpoint (written every
``log.flush.offset.checkpoint.interval.ms``, 60 s) comes back with its whole history.

Its first segments are tiered and gone locally, so its first local segment starts at 4 while its log
starts at 0. In a cluster the broker learns topics from the controller after its logs load; as
Kafka's LogManager does, it reads the configs of the topics on disk from ZooKeeper before loading,
so the log loads as tiered: its start stays 0 (not the first local segment), its leader-epoch cache
keeps epoch 0 from offset 0, and consumers read offsets 0-3 from the remote tier after the restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import consume_all
from tiered_cluster import (
    BATCH_SIZE,
    EARLIEST,
    create_topic_in_zk,
    epoch_checkpoint,
    list_offset,
    local_base_offsets,
    produce_values,
    segment_bytes_for,
    tiered_member,
    value,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient

pytestmark = pytest.mark.integration

TOPIC = "rs"


def test_a_tiered_log_killed_before_its_first_checkpoint_restarts_with_its_remote_history(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    conf = {"rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "controlled.shutdown.max.retries": "1", "controlled.shutdown.retry.backoff.ms": "100"}
    b = broker_factory(tiered_member(zk_connect, 1, tmp_path / "remote", conf))
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_controller_id() == 1, timeout=30, message="broker 1 is the controller")
    create_topic_in_zk(zk_connect, TOPIC, [1], {
        "remote.storage.enable": "true", "segment.bytes": str(segment_bytes_for(2)),
        "local.retention.bytes": str(BATCH_SIZE // 2)})
    wait_until(lambda: list_offset(b, TOPIC, EARLIEST)[0] == 0, timeout=30, message="the partition led")
    produce_values(b.bootstrap, TOPIC, [value(n) for n in range(5)])
    wait_tiered_up_to(b, TOPIC, 3)
    wait_until(lambda: local_base_offsets(b, TOPIC) == [4], timeout=30, message="segments 0-1 and 2-3 gone locally")
    assert not (b.data_dir / "log-start-offset-checkpoint").exists() or \
        TOPIC not in (b.data_dir / "log-start-offset-checkpoint").read_text()

    b.kill9()
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: 1 not in zk.get_all_broker_ids(), timeout=40, message="broker 1's session expires")
    b.start()
    wait_until(lambda: list_offset(b, TOPIC, EARLIEST)[0] == 0, timeout=30, message="the partition led again")
    assert list_offset(b, TOPIC, EARLIEST)[1] == 0
    assert epoch_checkpoint(b, TOPIC)[0] == (0, 0)
    assert [m.value() for m in consume_all(b.bootstrap, TOPIC, 5)] == [value(n) for n in range(5)]
