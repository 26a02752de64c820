"""KIP-405's follower path while the object store is down, with real broker processes sharing one S3
bucket and key prefix (moto), the new follower's S3 behind a FaultyS3Proxy of its own.

The leader (broker 3, after a failover from broker 1) holds offsets 3-7 locally with the epochs
{LE-0: 0, LE-1: 3}; seg-0-2 {LE-0: 0} is only in the bucket. Broker 2 is a brand-new replica of that
tiered partition and of a non-tiered topic led by the same broker, and starts while its object store
answers 503 to everything; later its store stops answering at all for a while. Proven:

- the tiered partition stays in BUILDING_REMOTE_LOG_AUX_STATE and keeps retrying: the follower asks
  the object store for seg-0-2's leader-epoch index again and again, and
  ``buildremotelogauxstateerrors`` keeps growing on broker 2, while the leader is not affected (its
  own S3 is up) and broker 2 stays out of the tiered partition's ISR;
- meanwhile the non-tiered partition on the same fetcher catches up, joins the ISR and takes
  acks=all produces that need broker 2 (min.insync.replicas=2), also while a read of the tiered
  partition's remote index hangs unanswered: one partition's outage blocks no other, and the other
  partition never leaves the ISR;
- once the store is back, the tiered partition joins the ISR with the leader's leader-epoch
  checkpoint and a local log starting at the leader's local log start: the tiered history (no
  ``.log`` object) was never read from the bucket, only the remote leader-epoch index.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterator

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state
from helpers import free_port
from s3servers import BUCKET, FaultyS3Proxy, S3Endpoint, SeenRequest, moto_s3, unique_prefix  # noqa: F401
from tiered_cluster import (
    BATCH_SIZE,
    EARLIEST_LOCAL,
    create_metadata_topic,
    create_topic_in_zk,
    epoch_checkpoint,
    list_offset,
    local_base_offsets,
    metric_value,
    produce_values,
    s3_tiered_member,
    segment_bytes_for,
    value,
    wait_metadata_isr,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import METADATA

pytestmark = pytest.mark.integration

TIERED = "tiered"
PLAIN = "plain"
AUX_ERRORS = "kafka_server_brokertopicmetrics_buildremotelogauxstateerrors_total"
# one attempt per S3 request: while the store answers errors, each attempt to build the aux state fails
# at once instead of spending botocore's growing backoff, so the fetcher's own retries are what is seen;
# a request the store does not answer waits the S3 timeout (30 s)
FOLLOWER_S3 = {"rsm.config.storage.s3.retry.max.attempts": "1"}


def isr(b: BrokerProcess, topic: str) -> list[int] | None:
    s = partition_state(b, topic)
    return s[0][3] if s and s[0][0] >= 0 else None


def cluster_view(b: BrokerProcess) -> tuple[list[int], int]:
    """(the live brokers, the controller) as broker ``b``'s Metadata answers."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
    return sorted(x.node_id for x in r.brokers), r.controller_id


def wait_leader(b: BrokerProcess, topic: str, leader: int, epoch: int) -> None:
    wait_until(lambda: (s := partition_state(b, topic)) and s[0][0] == leader and s[0][1] == epoch, timeout=40,
               message=f"{topic}: leader {leader} at epoch {epoch}")


@pytest.fixture
def follower_proxy(moto_s3: S3Endpoint) -> Iterator[FaultyS3Proxy]:  # noqa: F811
    with FaultyS3Proxy(moto_s3.url) as proxy:
        yield proxy


def store_down(request: SeenRequest) -> int | None:
    # the broker checks its bucket once at start-up and refuses to start without it; every request
    # after that check fails as in an outage
    return None if request.method == "HEAD" and request.path.rstrip("/") == f"/{BUCKET}" else 503


class StoreStopsAnswering:
    """A fault holding each request unanswered until ``release``, then failing it: a store that stopped
    answering."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self._released = threading.Event()

    def __call__(self, request: SeenRequest) -> int | None:
        self.holding.set()
        self._released.wait(120)
        return 503

    def release(self) -> None:
        self._released.set()


def test_follower_building_aux_state_retries_through_an_object_store_outage_without_blocking_other_partitions(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, moto_s3: S3Endpoint,  # noqa: F811
        follower_proxy: FaultyS3Proxy) -> None:
    prefix = unique_prefix()
    conf = {"auto.leader.rebalance.enable": "false",
            # the broker standing at the end stops without waiting 3 x 5 s for a controlled shutdown
            # with nowhere to move its leaderships
            "controlled.shutdown.retry.backoff.ms": "200"}
    b1 = broker_factory(s3_tiered_member(zk_connect, 1, moto_s3.url, moto_s3.bucket, prefix, conf))
    b3 = broker_factory(s3_tiered_member(zk_connect, 3, moto_s3.url, moto_s3.bucket, prefix, conf))
    # the admin client sends CreateTopics to the controller its broker names, and two replicas need
    # both brokers known there
    wait_until(lambda: all((v := cluster_view(b))[0] == [1, 3] and v[1] >= 0 for b in (b1, b3)), timeout=30,
               message="brokers 1 and 3 know each other and the controller")
    # broker 2 reads the remote log metadata as a client of its leader, broker 3 once broker 1 is gone
    create_metadata_topic(bootstrap({1: b1, 3: b3}), replication_factor=2)
    wait_metadata_isr(b1, [1, 3])
    create_topic_in_zk(zk_connect, TIERED, [1, 3, 2], {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes_for(3)),  # seg-0-2, seg-3-5, then the active one
        # local retention keeps one rolled segment besides the active one: offsets 3-7 stay local
        "local.retention.bytes": str(3 * BATCH_SIZE),
        "min.insync.replicas": "1",
    })
    # acks=all produces to it succeed only with broker 2 in the ISR
    create_topic_in_zk(zk_connect, PLAIN, [3, 2], {"min.insync.replicas": "2"})

    # LE-0 on broker 1: offsets 0-2; LE-1 on broker 3: offsets 3-7, seg-0-2 and seg-3-5 tiered under it
    wait_until(lambda: isr(b1, TIERED) == [1, 3], timeout=30, message=f"{TIERED} in sync on brokers 1 and 3")
    produce_values(b1.bootstrap, TIERED, [value(o) for o in range(0, 3)])
    b1.stop()
    wait_leader(b3, TIERED, 3, 1)
    produce_values(b3.bootstrap, TIERED, [value(o) for o in range(3, 8)])
    wait_tiered_up_to(b3, TIERED, 5)
    wait_until(lambda: local_base_offsets(b3, TIERED)[0] == 3, timeout=30, message="seg-0-2 gone from the leader")
    assert list_offset(b3, TIERED, EARLIEST_LOCAL) == (0, 3, 1)
    leader_epochs = epoch_checkpoint(b3, TIERED)
    assert leader_epochs == [(0, 0), (1, 3)]
    # what broker 2 has to catch up on (acks=1: min.insync.replicas=2 needs broker 2 for acks=all)
    produce_values(b3.bootstrap, PLAIN, [value(o, "p") for o in range(0, 20)], acks="1")

    # broker 2 starts with its object store down
    follower_proxy.fault = store_down
    metrics_port = free_port()
    b2 = broker_factory(s3_tiered_member(zk_connect, 2, follower_proxy.url, moto_s3.bucket, prefix,
                                         {**conf, **FOLLOWER_S3, "metrics.port": str(metrics_port)}))
    wait_until(lambda: metric_value(metrics_port, AUX_ERRORS) >= 1, timeout=30,
               message="a failed attempt to build the remote log aux state")
    # the other partition replicates meanwhile: it joins the ISR and acks=all needs broker 2
    wait_until(lambda: isr(b3, PLAIN) == [2, 3], timeout=30, message=f"broker 2 in the ISR of {PLAIN}")
    produce_values(b3.bootstrap, PLAIN, [value(o, "p") for o in range(20, 25)])
    errors = metric_value(metrics_port, AUX_ERRORS)
    wait_until(lambda: metric_value(metrics_port, AUX_ERRORS) >= errors + 3, timeout=30,
               message="more failed attempts after the other partition joined the ISR")
    assert isr(b3, TIERED) == [3]
    index_reads = follower_proxy.seen("GET", "leader_epoch_checkpoint")
    assert len(index_reads) >= 3 and all(f"{TIERED}-" in r.path and "/0/00000000000000000000-" in r.path
                                         for r in index_reads), index_reads
    text = b2.log_text()
    assert "offset 0 is only in the leader's remote tier" in text
    assert "remote log aux state for epoch 0 at offset 2 is not available yet" in text
    assert "rebuilt from the remote tier" not in text

    # the store stops answering: broker 2's next read of the index hangs, and the other partition
    # still replicates while it does (an acks=all produce needs broker 2's fetches to complete)
    hang = StoreStopsAnswering()
    follower_proxy.fault = hang
    try:
        wait_until(hang.holding.is_set, timeout=30, message="a read of the remote index held by the store")
        errors = metric_value(metrics_port, AUX_ERRORS)
        produce_values(b3.bootstrap, PLAIN, [value(o, "p") for o in range(25, 30)])
        # the held read has neither failed nor been given up on (the S3 timeout): the produce above
        # was acknowledged while it was in flight
        assert metric_value(metrics_port, AUX_ERRORS) == errors
        assert isr(b3, PLAIN) == [2, 3] and isr(b3, TIERED) == [3]
        # the store comes back: the held read fails, the next one succeeds, and the tiered partition
        # rebuilds and joins the ISR
        follower_proxy.fault = lambda _request: None
    finally:
        hang.release()
    wait_until(lambda: isr(b3, TIERED) == [2, 3], timeout=30, message=f"broker 2 in the ISR of {TIERED}")
    wait_until(lambda: epoch_checkpoint(b2, TIERED) == leader_epochs, timeout=10,
               message="the follower's lineage is the leader's")
    assert "rebuilt from the remote tier: log start 0, local log start 3, leader epochs [(0, 0)]" in b2.log_text()
    assert local_base_offsets(b2, TIERED)[0] == list_offset(b3, TIERED, EARLIEST_LOCAL)[1] == 3
    assert follower_proxy.seen("GET", ".log") == []  # the tiered history was never copied
    assert isr(b3, PLAIN) == [2, 3]
    assert f"{PLAIN}-0: proposing ISR [3]" not in b3.log_text()  # it never left the ISR meanwhile
