"""Thread pools resized live through IncrementalAlterConfigs on the BROKER resource, as Kafka's
DynamicThreadPool and DynamicRemoteLogConfig do: ``num.replica.fetchers`` and the remote tier's
reader, copier and expiration pools, on a running two-broker cluster, with confluent-kafka's
AdminClient. The effect is read where an operator reads it: DescribeConfigs (DYNAMIC_BROKER_CONFIG)
and the broker's Prometheus endpoint (one FetcherStats series per replica fetcher, the threads of
each remote pool). Counts beyond half to double of the current one are refused with Kafka's words."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import partition_state
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from helpers import free_port
from metrics_harness import scrape
from tiered_cluster import tiered_member
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient

pytestmark = pytest.mark.integration

BROKER = ConfigResource.Type.BROKER
TOPIC = "fan"
PARTITIONS = 4  # consecutive partitions fill every fetcher id below 4 (hash * 31 + partition)
POOLS = "kafka_storage_remotestoragethreadpool_threads"


def set_configs(admin: AdminClient, broker_id: int, **configs: str) -> None:
    res = ConfigResource(BROKER, str(broker_id), incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def fetchers(port: int) -> list[str]:
    """The replica fetchers running on the broker: one FetcherStats series each."""
    return sorted(dict(labels)["clientid"] for (name, labels) in scrape(port)
                  if name == "kafka_server_fetcherstats_requests_total")


def pool_threads(port: int) -> dict[str, int]:
    return {dict(labels)["pool"]: int(v) for (name, labels), v in scrape(port).items() if name == POOLS}


def read_ahead_bound(port: int) -> int:
    return int(scrape(port)[("tieredlog_remote_read_ahead_max_bytes", ())])


def test_thread_pools_resize_live_and_refuse_jumps_beyond_double(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    ports = {i: free_port() for i in (1, 2)}
    static = {"remote.log.reader.threads": "2", "remote.log.manager.copier.thread.pool.size": "2",
              "remote.log.manager.expiration.thread.pool.size": "2",
              "rlmm.config.remote.log.metadata.topic.replication.factor": "2",
              # the last broker standing stops at once instead of retrying to hand leadership over
              "controlled.shutdown.max.retries": "1", "controlled.shutdown.retry.backoff.ms": "100"}
    brokers = {i: broker_factory({**tiered_member(zk_connect, i, tmp_path / "remote", static),
                                  "metrics.port": str(ports[i])}) for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], message="both brokers registered")
    admin = AdminClient({"bootstrap.servers": brokers[2].bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=[[1, 2]] * PARTITIONS)])[
        TOPIC].result(30)
    wait_until(lambda: (s := partition_state(brokers[1], TOPIC)) and all(p[0] == 1 and p[3] == [1, 2] for p in s),
               message="broker 1 leads every partition with broker 2 in sync")
    # the ISR starts full: broker 2's fetcher may start a moment after the leader's metadata says so
    wait_until(lambda: fetchers(ports[2]) == ["ReplicaFetcherThread-0-1"], message="broker 2 fetching from broker 1")
    assert pool_threads(ports[2]) == {"reader": 2, "copier": 2, "expiration": 2}

    # grow the fetchers and two pools, shrink one: at once, without a restart
    set_configs(admin, 2, num_replica_fetchers="2", remote_log_reader_threads="4",
                remote_log_manager_copier_thread_pool_size="4", remote_log_manager_expiration_thread_pool_size="1",
                remote_log_reader_read_ahead_max_bytes="268435456")
    res = ConfigResource(BROKER, "2")
    described = admin.describe_configs([res])[res].result(30)
    for name, value in (("num.replica.fetchers", "2"), ("remote.log.reader.threads", "4"),
                        ("remote.log.manager.copier.thread.pool.size", "4"),
                        ("remote.log.manager.expiration.thread.pool.size", "1")):
        entry = described[name]
        assert (entry.value, entry.source, entry.is_read_only) == \
            (value, ConfigSource.DYNAMIC_BROKER_CONFIG.value, False), name
    wait_until(lambda: fetchers(ports[2]) == ["ReplicaFetcherThread-0-1", "ReplicaFetcherThread-1-1"],
               message="a second replica fetcher")
    wait_until(lambda: pool_threads(ports[2]) == {"reader": 4, "copier": 4, "expiration": 1},
               message="the remote pools at their new sizes")
    assert pool_threads(ports[1]) == {"reader": 2, "copier": 2, "expiration": 2}  # a per-broker change
    # the read-ahead bound in force follows too (tieredlog's own config)
    assert read_ahead_bound(ports[2]) == 268435456 and read_ahead_bound(ports[1]) == 134217728

    # the partitions moved between fetchers keep replicating: acks=all with both brokers in the ISR
    p = Producer({"bootstrap.servers": brokers[1].bootstrap, "acks": "all"})
    for i in range(PARTITIONS * 5):
        p.produce(TOPIC, b"v%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    wait_until(lambda: all(p[3] == [1, 2] for p in partition_state(brokers[1], TOPIC)), message="ISR intact")

    # a jump beyond double (or below half) is refused with Kafka's message and changes nothing
    res = ConfigResource(BROKER, "2", incremental_configs=[
        ConfigEntry("num.replica.fetchers", "5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(30)
    err = info.value.args[0]
    assert err.name() == "INVALID_CONFIG"
    assert "Dynamic thread count update validation failed for num.replica.fetchers=5, value should not be " \
           "greater than double the current value 2" in err.str()
    res = ConfigResource(BROKER, "2", incremental_configs=[
        ConfigEntry("remote.log.reader.threads", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(30)
    assert "value should be at least half the current value 4" in info.value.args[0].str()
    assert admin.describe_configs([ConfigResource(BROKER, "2")])[ConfigResource(BROKER, "2")].result(30)[
        "num.replica.fetchers"].value == "2"

    # back to one fetcher: the second stops, its partitions go back to the first
    set_configs(admin, 2, num_replica_fetchers="1")
    wait_until(lambda: fetchers(ports[2]) == ["ReplicaFetcherThread-0-1"], message="one replica fetcher again")
    for i in range(PARTITIONS):
        p.produce(TOPIC, b"after", partition=i)
    assert p.flush(30) == 0
    assert all(p[3] == [1, 2] for p in partition_state(brokers[1], TOPIC))
