"""KIP-405's follower path with real broker processes (seeds digest §3.8.4 and §3.8.9).

Scenario 1, a brand-new follower: the leader holds offsets 3-7 locally with the epochs
{LE-0: 0, LE-1: 3, LE-2: 5, LE-3: 7}, the remote tier seg-0-2 {LE-0: 0} and seg-3-5 {LE-1: 3, LE-2: 5}.
The new replica fetches offset 0, gets OFFSET_MOVED_TO_TIERED_STORAGE, learns the leader's earliest
local offset 3 (epoch 1), rebuilds its lineage {LE-0: 0} from seg-0-2's leader-epoch index, fetches
3-7 and ends with the leader's full lineage, without ever copying offsets 0-2.

Then the follower becomes the leader (§3.8.9): it serves offset 0 from the remote tier, walks its
epochs back to find what is already remote on its lineage, and uploads only what is not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, consume_all, partition_state
from tiered_cluster import (
    BATCH_SIZE,
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    create_metadata_topic,
    create_topic_in_zk,
    epoch_checkpoint,
    list_offset,
    local_base_offsets,
    produce_values,
    remote_segments,
    segment_bytes_for,
    segment_ranges,
    tiered_member,
    value,
    wait_metadata_isr,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

pytestmark = pytest.mark.integration

TOPIC = "s1"


def wait_state(b: BrokerProcess, leader: int, epoch: int, isr: list[int]) -> None:
    wait_until(lambda: (s := partition_state(b, TOPIC)) and s[0][0] == leader and s[0][1] == epoch
               and s[0][3] == sorted(isr), timeout=40,
               message=f"leader {leader} at epoch {epoch} with ISR {isr}")


def test_brand_new_follower_rebuilds_from_the_remote_tier_then_leads_and_resumes_copying(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    # no automatic preferred-leader elections: every epoch below is one the test chose
    conf = {"auto.leader.rebalance.enable": "false"}
    b1 = broker_factory(tiered_member(zk_connect, 1, remote, conf))
    b2 = broker_factory(tiered_member(zk_connect, 2, remote, conf))
    b3 = broker_factory(tiered_member(zk_connect, 3, remote, conf))
    # the remote log metadata lives on all three brokers, whichever two of them are down
    create_metadata_topic(bootstrap({1: b1, 2: b2, 3: b3}), replication_factor=3)
    wait_metadata_isr(b1, [1, 2, 3])
    # broker 2 leaves before the topic exists: it will be a brand-new replica of it
    b2.stop()
    create_topic_in_zk(zk_connect, TOPIC, [1, 3, 2], {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes_for(3)),  # seg-0-2, seg-3-5, then the active one
        # local retention keeps one rolled segment besides the active one: offsets 3-7 stay local
        "local.retention.bytes": str(3 * BATCH_SIZE),
        "min.insync.replicas": "1",
    })

    # LE-0 on broker 1: offsets 0-2
    wait_state(b1, 1, 0, [1, 3])
    produce_values(b1.bootstrap, TOPIC, [value(o) for o in range(0, 3)])
    # LE-1 on broker 3: offsets 3-4; seg-0-2 is tiered under it
    b1.stop()
    wait_state(b3, 3, 1, [3])
    produce_values(b3.bootstrap, TOPIC, [value(o) for o in range(3, 5)])
    wait_tiered_up_to(b3, TOPIC, 2)
    # LE-2 on broker 1: offsets 5-6; seg-3-5 is tiered under it
    b1.restart()
    wait_state(b3, 3, 1, [1, 3])
    wait_metadata_isr(b3, [1, 3])
    b3.stop()
    wait_state(b1, 1, 2, [1])
    produce_values(b1.bootstrap, TOPIC, [value(o) for o in range(5, 7)])
    wait_tiered_up_to(b1, TOPIC, 5)
    # LE-3 on broker 3: offset 7
    b3.restart()
    wait_state(b1, 1, 2, [1, 3])
    wait_metadata_isr(b1, [1, 3])
    b1.stop()
    wait_state(b3, 3, 3, [3])
    produce_values(b3.bootstrap, TOPIC, [value(7)])

    # the leader's side of the scenario, as the digest draws it
    assert segment_ranges(remote, TOPIC) == [(0, 2, {0: 0}), (3, 5, {1: 3, 2: 5})]
    assert epoch_checkpoint(b3, TOPIC) == [(0, 0), (1, 3), (2, 5), (3, 7)]
    wait_until(lambda: local_base_offsets(b3, TOPIC)[0] == 3, timeout=30, message="seg-0-2 gone from the leader")
    assert list_offset(b3, TOPIC, EARLIEST_LOCAL) == (0, 3, 1)
    assert list_offset(b3, TOPIC, EARLIEST) == (0, 0, 0)
    assert list_offset(b3, TOPIC, LATEST)[:2] == (0, 8)

    # Step 1 and 2: broker 2 starts with nothing and joins the ISR
    b2.start()
    wait_state(b3, 3, 3, [2, 3])
    wait_metadata_isr(b3, [2, 3])
    text = b2.log_text()
    assert "offset 0 is only in the leader's remote tier" in text
    assert "rebuilt from the remote tier: log start 0, local log start 3, leader epochs [(0, 0)]" in text
    assert local_base_offsets(b2, TOPIC)[0] == 3  # offsets 0-2 were never copied to it
    wait_until(lambda: epoch_checkpoint(b2, TOPIC) == [(0, 0), (1, 3), (2, 5), (3, 7)], timeout=10,
               message="the follower's lineage is the leader's")

    # §3.8.9: the follower leads (LE-4), serves the tiered history, and resumes copying after what its
    # lineage already has remote (offset 5, found through LE-2 after LE-4 and LE-3 gave nothing)
    b3.stop()
    wait_state(b2, 2, 4, [2])
    assert list_offset(b2, TOPIC, EARLIEST) == (0, 0, 0)
    assert list_offset(b2, TOPIC, EARLIEST_LOCAL) == (0, 3, 1)
    got = consume_all(b2.bootstrap, TOPIC, 8)
    assert [(m.offset(), m.value()) for m in got] == [(o, value(o)) for o in range(8)]
    produce_values(b2.bootstrap, TOPIC, [value(o) for o in range(8, 11)])  # 9 rolls the segment 6-8
    wait_tiered_up_to(b2, TOPIC, 8)
    # nothing re-uploaded: the next segment starts right after offset 5, with its epochs as they are
    assert segment_ranges(remote, TOPIC) == [(0, 2, {0: 0}), (3, 5, {1: 3, 2: 5}), (6, 8, {2: 6, 3: 7, 4: 8})]
    assert remote_segments(remote, TOPIC)[2]["broker_id"] == 2
