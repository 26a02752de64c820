"""The console of each broker of a two-broker ZooKeeper cluster: both show the cluster from their
metadata (brokers, controller, under-replicated partitions), the leader shows the partition's remote
tier and its follower, the follower its own local copy. Pages read over HTTP (the browser tests are in
test_console.py)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state
from helpers import free_port, wait_for
from tiered_cluster import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    create_metadata_topic,
    create_topic_in_zk,
    list_offset,
    produce_values,
    segment_bytes_for,
    tiered_member,
    value,
    wait_metadata_isr,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

pytestmark = pytest.mark.integration

TOPIC = "console-c"


def page(port: int, path: str) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).read().decode()


def fields(html: str, scope: str | None = None) -> dict[str, str]:
    """data-field values of a page, or of the element whose opening tag holds ``scope``."""
    if scope is not None:
        start = html.index(scope)
        html = html[start:html.index("</svg>", start)] if "data-partition" in scope else html[start:]
    return {m[1]: m[2] for m in re.finditer(r'data-field="([^"]+)"[^>]*>([^<]*)<', html)}


def test_each_broker_shows_the_cluster_and_the_leader_its_remote_tier(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    ports = {1: free_port(), 2: free_port()}
    brokers = {i: broker_factory(tiered_member(zk_connect, i, remote, {
        "metrics.port": str(ports[i]), "auto.leader.rebalance.enable": "false",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "2"})) for i in (1, 2)}
    create_metadata_topic(bootstrap(brokers), replication_factor=2)
    wait_metadata_isr(brokers[1], [1, 2])
    create_topic_in_zk(zk_connect, TOPIC, [1, 2], {"remote.storage.enable": "true", "min.insync.replicas": "2",
                                                   "segment.bytes": str(segment_bytes_for(3)),
                                                   "local.retention.bytes": "1"})
    wait_until(lambda: (s := partition_state(brokers[1], TOPIC)) and s[0][0] == 1 and s[0][3] == [1, 2],
               timeout=40, message="broker 1 leading with both in sync")
    produce_values(brokers[1].bootstrap, TOPIC, [value(o) for o in range(10)])
    wait_tiered_up_to(brokers[1], TOPIC, 8)  # [0, 2], [3, 5], [6, 8]; 9 is in the active segment

    views = {i: fields(page(ports[i], "/console")) for i in (1, 2)}
    for i in (1, 2):
        assert views[i]["brokers"] == "2", views[i]
        assert views[i]["under-replicated"] == views[i]["offline"] == "0"
    assert views[1]["controller"] == views[2]["controller"] in ("1", "2")

    def leader_view() -> dict[str, str] | None:
        f = fields(page(ports[1], f"/console/topic/{TOPIC}"), f'data-partition="{TOPIC}-0"')
        return f if f["local-start"] == str(list_offset(brokers[1], TOPIC, EARLIEST_LOCAL)[1]) else None

    lead = wait_for(leader_view, what="a stable local log start")
    assert (lead["leader"], lead["replicas"], lead["isr"]) == ("1", "1, 2", "1, 2")
    for field, ts in (("log-start", EARLIEST), ("high-watermark", LATEST), ("remote-end", LATEST_TIERED)):
        assert lead[field] == str(list_offset(brokers[1], TOPIC, ts)[1]), field
    assert int(lead["remote-segments"]) >= 2 and "2: log end" in lead["followers"]
    follower_page = page(ports[2], f"/console/topic/{TOPIC}")
    assert "follower here" in follower_page and "broker(s) 1" in follower_page
    assert fields(follower_page, f'data-partition="{TOPIC}-0"')["remote-segments"] == "0"

    # broker 2 goes: the partition is under-replicated and under min ISR, on the surviving broker's page
    brokers[2].stop()

    def flagged() -> bool:
        html = page(ports[1], "/console")
        f = fields(html)
        # the stat boxes list the partitions they count (the metadata topic's are under-replicated too)
        under_min = html[html.index('data-field="under-min-isr"'):html.index("<table")]
        return f["brokers"] == "1" and int(f["under-replicated"]) >= 1 and f"{TOPIC}-0" in under_min

    wait_until(flagged, timeout=40, message="the ISR to shrink to broker 1")
