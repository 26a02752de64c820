"""The broker's health metrics beside broker_metrics's: purgatories, remote-fetch expiries, log flush
time, leader imbalance, remote metadata readiness and the event loop's lag. Computed at scrape time,
on the HTTP server's thread, from copies of loop-owned containers (as broker_metrics does).

==========================================================================  ==========================================================  ================
Kafka MBean                                                                  Prometheus                                                  labels
==========================================================================  ==========================================================  ================
kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize               kafka_server_delayedoperationpurgatory_purgatorysize        delayedoperation
kafka.server:type=DelayedRemoteFetchMetrics,name=ExpiresPerSec               kafka_server_delayedremotefetchmetrics_expires_total
kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (histogram, ms)      kafka_log_logflushstats_logflushrateandtimems
kafka.controller:type=KafkaController,name=PreferredReplicaImbalanceCount    kafka_controller_kafkacontroller_preferredreplicaimbalancecount
(tieredlog's) tiered partitions here whose remote log metadata is loading    tieredlog_rlmm_not_ready_partitions
kafka.consumer:type=consumer-fetch-manager-metrics,client-id=...,topic=...,   kafka_consumer_consumer_fetch_manager_metrics_records_lag  client_id, topic, partition
  partition=... records-lag, of the RLMM's consumer __remote_log_metadata_client_<broker.id>_consumer
(tieredlog's) seconds from a metadata partition's first load request to ready  tieredlog_rlmm_partition_ready_time_seconds           partition
(tieredlog's) the event loop's wake-up delay (histogram, seconds)            tieredlog_event_loop_lag_seconds
(tieredlog's) its largest value over the last 30 to 60 seconds             tieredlog_event_loop_lag_max_seconds
(kafka-exporter's names) a group's committed offset, groups coordinated here   kafka_consumergroup_current_offset                          consumergroup, topic, partition
(kafka-exporter's names) its lag behind the HW, partitions also led here     kafka_consumergroup_lag                                     consumergroup, topic, partition
(tieredlog's) 1 when that next offset is only in the remote tier             tieredlog_consumergroup_reads_remote                        consumergroup, topic, partition
(KIP-827's TotalBytes / UsableBytes) each log dir's file system              tieredlog_log_dir_total_bytes, tieredlog_log_dir_usable_bytes  logdir
==========================================================================  ==========================================================  ================

The RLMM's lag and time to ready cover the ``__remote_log_metadata`` partitions this broker reads, with the
topic-based manager only; the lag is the partition's end offset as the manager's reads last learned it (a
scrape never asks a leader) minus the next offset it applies.

Purgatories: Fetch counts the partition watches of parked Fetch requests, Produce the parked acks=all
appends, RemoteFetch the remote reads a Fetch waits on now.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from tieredlog.log.flush_stats import FLUSH_TIME_BUCKETS_MS, LOG_FLUSH_STATS
from tieredlog.log.types import TopicPartition
from tieredlog.server.loop_lag import LAG_BUCKETS_S

if TYPE_CHECKING:
    from pathlib import Path

    from tieredlog.controller.controller import KafkaController
    from tieredlog.coordinator.group_coordinator import GroupCoordinator
    from tieredlog.replication.delayed_fetch import PartitionWatchers
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.loop_lag import EventLoopLag

_FLUSH_LABELS = [repr(float(b)) for b in FLUSH_TIME_BUCKETS_MS] + ["+Inf"]
_LAG_LABELS = [repr(float(b)) for b in LAG_BUCKETS_S] + ["+Inf"]


class HealthServer(Protocol):
    """What these families read of the broker (on the scrape thread, as the other families)."""

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def append_watchers(self) -> PartitionWatchers: ...

    @property
    def controller(self) -> KafkaController | None: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    @property
    def remote_log_manager(self) -> RemoteLogManager | None: ...

    @property
    def group_coordinator(self) -> GroupCoordinator | None: ...


class HealthMetrics(Protocol):
    """What these families read of the broker's metrics (tieredlog.server.broker_metrics.BrokerMetrics)."""

    @property
    def broker(self) -> HealthServer: ...

    @property
    def remote_fetch_waiting(self) -> int: ...

    @property
    def remote_fetch_expires(self) -> int: ...

    @property
    def loop_lag(self) -> EventLoopLag: ...


def cumulative(counts: list[int], labels: list[str]) -> tuple[list[tuple[str, int]], int]:
    out, running = [], 0
    for label, count in zip(labels, counts):
        running += count
        out.append((label, running))
    return out, running


def broker_health_families(metrics: HealthMetrics) -> Iterator[Any]:
    yield from _purgatory_families(metrics)
    yield from _flush_families()
    yield _imbalance_family(metrics)
    yield _rlmm_family(metrics)
    yield from _rlmm_consumer_families(metrics)
    yield from _loop_lag_families(metrics)
    yield from _group_families(metrics)
    yield from _log_dir_families(metrics)


def _purgatory_families(metrics: HealthMetrics) -> Iterator[Any]:
    broker = metrics.broker
    rm = broker.replica_manager
    size = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                             "PurgatorySize: requests parked in each purgatory", labels=["delayedoperation"])
    size.add_metric(["Fetch"], broker.append_watchers.size())
    size.add_metric(["Produce"], rm.delayed_produce.size() if rm is not None else 0)
    size.add_metric(["RemoteFetch"], metrics.remote_fetch_waiting)
    yield size
    yield CounterMetricFamily("kafka_server_delayedremotefetchmetrics_expires",
                              "ExpiresPerSec: remote reads that outlived remote.fetch.max.wait.ms",
                              value=metrics.remote_fetch_expires)


def _flush_families() -> Iterator[Any]:
    counts, sum_ms = LOG_FLUSH_STATS.snapshot()
    buckets, _ = cumulative(counts, _FLUSH_LABELS)
    flush = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                  "LogFlushRateAndTimeMs: log flushes and the time their fsyncs took, in ms")
    flush.add_metric([], buckets, sum_value=sum_ms)
    yield flush


def _imbalance_family(metrics: HealthMetrics) -> Any:
    """Partitions not led by their preferred (first) replica, from the metadata every broker holds;
    reported by the active controller only, as Kafka's. Alone, every leader is the preferred one."""
    broker = metrics.broker
    controller, node = broker.controller, broker.cluster_node
    count = 0
    if node is not None and controller is not None and controller.is_active:
        for entry in list(node.metadata.topics.values()):
            for pm in list(entry.partitions.values()):
                count += pm.leader >= 0 and bool(pm.replicas) and pm.leader != pm.replicas[0]
    return GaugeMetricFamily("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                             "PreferredReplicaImbalanceCount: partitions not led by their preferred replica "
                             "(active controller only)", value=count)


def _rlmm_family(metrics: HealthMetrics) -> Any:
    broker = metrics.broker
    rlm, rm = broker.remote_log_manager, broker.replica_manager
    waiting = 0
    if rlm is not None and rm is not None:
        from tieredlog.rsm.api import TopicIdPartition

        for p in list(rm.partitions.values()):
            plog = p.log
            if plog.remote_enabled and plog.topic_id is not None:
                waiting += not rlm.rlmm_ready(TopicIdPartition(plog.topic_id, p.tp.topic, p.tp.partition))
    return GaugeMetricFamily("tieredlog_rlmm_not_ready_partitions",
                             "Tiered partitions hosted here whose remote log metadata is not loaded yet: they "
                             "neither copy nor serve remote reads meanwhile", value=waiting)


def _rlmm_consumer_families(metrics: HealthMetrics) -> Iterator[Any]:
    from tieredlog.rlmm.topic import METADATA_TOPIC
    from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager

    lag = GaugeMetricFamily("kafka_consumer_consumer_fetch_manager_metrics_records_lag",
                            "records-lag: the remote log metadata manager's lag behind the end of each "
                            "__remote_log_metadata partition it reads", labels=["client_id", "topic", "partition"])
    ready = GaugeMetricFamily("tieredlog_rlmm_partition_ready_time_seconds",
                              "Seconds a __remote_log_metadata partition took from its first load request to "
                              "ready (snapshot restored and tail replayed)", labels=["partition"])
    rlm = metrics.broker.remote_log_manager
    rlmm = rlm.rlmm if rlm is not None else None
    if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
        client_id = rlmm.consumer_client_id
        for state in rlmm.metadata_partition_states():
            lag.add_metric([client_id, METADATA_TOPIC, str(state.partition)], state.lag)
            if state.ready_time_s is not None:
                ready.add_metric([str(state.partition)], state.ready_time_s)
    yield lag
    yield ready


def _loop_lag_families(metrics: HealthMetrics) -> Iterator[Any]:
    lag = metrics.loop_lag
    buckets, _ = cumulative(list(lag.buckets), _LAG_LABELS)
    family = HistogramMetricFamily("tieredlog_event_loop_lag_seconds",
                                   "How late the event loop woke a task that sleeps a fixed interval: every "
                                   "request waits this long behind the work ahead of it")
    family.add_metric([], buckets, sum_value=lag.sum_s)
    yield family
    yield GaugeMetricFamily("tieredlog_event_loop_lag_max_seconds",
                            "The largest event-loop lag of the last 30 to 60 seconds", value=lag.max_s)


def _group_families(metrics: HealthMetrics) -> Iterator[Any]:
    """Committed offsets of the groups coordinated here; lag and remote reads where this broker also
    leads the partition (it knows the high watermark and the local log start of those only)."""
    broker = metrics.broker
    gc, rm = broker.group_coordinator, broker.replica_manager
    labels = ["consumergroup", "topic", "partition"]
    current = GaugeMetricFamily("kafka_consumergroup_current_offset", "A group's committed offset", labels=labels)
    lag = GaugeMetricFamily("kafka_consumergroup_lag", "The high watermark minus a group's committed offset",
                            labels=labels)
    remote = GaugeMetricFamily("tieredlog_consumergroup_reads_remote", "1 when a group's next offset is below the "
                               "local log start: its reads are served from the remote tier", labels=labels)
    if gc is not None and gc.active:
        partitions = dict(rm.partitions) if rm is not None else {}
        for gid, group in list(gc.state.groups.items()):
            for (topic, index), om in list(group.offsets.items()):
                key = [gid, topic, str(index)]
                current.add_metric(key, om.offset)
                p = partitions.get(TopicPartition(topic, index))
                if p is not None and p.is_leader:
                    lag.add_metric(key, max(0, p.log.high_watermark - om.offset))
                    remote.add_metric(key, int(om.offset < p.log.local_log_start_offset))
    yield current
    yield lag
    yield remote


def _log_dir_families(metrics: HealthMetrics) -> Iterator[Any]:
    """statvfs of each log dir, on the scrape thread (a hung disk delays a scrape, never the loop)."""
    total = GaugeMetricFamily("tieredlog_log_dir_total_bytes", "Size of the file system holding a log dir",
                              labels=["logdir"])
    usable = GaugeMetricFamily("tieredlog_log_dir_usable_bytes", "Bytes a log dir may still grow by",
                               labels=["logdir"])
    for d in metrics.broker.log_dirs:
        try:
            st = os.statvfs(d)
        except OSError:
            continue  # an offline log dir: no series, as Kafka reports none for it
        total.add_metric([str(d)], st.f_blocks * st.f_frsize)
        usable.add_metric([str(d)], st.f_bavail * st.f_frsize)
    yield total
    yield usable
