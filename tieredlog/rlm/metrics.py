"""Tiered-storage metrics under Kafka's names, exported with prometheus-client.

Kafka publishes JMX MBeans; Prometheus names must match ``[a-zA-Z_:][a-zA-Z0-9_:]*``. The mapping
follows the JMX-exporter convention: ``<domain>_<type>_<name>`` lower-cased, dots to underscores,
a ``PerSec`` meter becomes a ``_total`` counter (Prometheus derives the rate with ``rate()``),
and the ``topic`` / ``partition`` MBean keys become labels.

==================================================================================  ====================================================================  =======
Kafka MBean                                                                          Prometheus                                                            labels
==================================================================================  ====================================================================  =======
kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec                      kafka_server_brokertopicmetrics_remotecopybytes_total                 topic
kafka.server:type=BrokerTopicMetrics,name=RemoteCopyRequestsPerSec                   kafka_server_brokertopicmetrics_remotecopyrequests_total              topic
kafka.server:type=BrokerTopicMetrics,name=RemoteCopyErrorsPerSec                     kafka_server_brokertopicmetrics_remotecopyerrors_total                topic
kafka.server:type=BrokerTopicMetrics,name=RemoteFetchBytesPerSec                     kafka_server_brokertopicmetrics_remotefetchbytes_total                topic
kafka.server:type=BrokerTopicMetrics,name=RemoteFetchRequestsPerSec                  kafka_server_brokertopicmetrics_remotefetchrequests_total             topic
kafka.server:type=BrokerTopicMetrics,name=RemoteFetchErrorsPerSec                    kafka_server_brokertopicmetrics_remotefetcherrors_total               topic
kafka.server:type=BrokerTopicMetrics,name=RemoteDeleteRequestsPerSec                 kafka_server_brokertopicmetrics_remotedeleterequests_total            topic
kafka.server:type=BrokerTopicMetrics,name=RemoteDeleteErrorsPerSec                   kafka_server_brokertopicmetrics_remotedeleteerrors_total              topic
kafka.server:type=BrokerTopicMetrics,name=RemoteCopyLagBytes                         kafka_server_brokertopicmetrics_remotecopylagbytes                    topic, partition
kafka.server:type=BrokerTopicMetrics,name=RemoteCopyLagSegments                      kafka_server_brokertopicmetrics_remotecopylagsegments                 topic, partition
kafka.server:type=BrokerTopicMetrics,name=RemoteLogSizeBytes                         kafka_server_brokertopicmetrics_remotelogsizebytes                    topic, partition
kafka.server:type=BrokerTopicMetrics,name=RemoteLogMetadataCount                     kafka_server_brokertopicmetrics_remotelogmetadatacount                topic, partition
org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,
    name=RemoteLogReaderTaskQueueSize                                                kafka_storage_remotestoragethreadpool_remotelogreadertaskqueuesize
    name=RemoteLogReaderAvgIdlePercent                                               kafka_storage_remotestoragethreadpool_remotelogreaderavgidlepercent
kafka.log.remote:type=RemoteLogManager,name=RemoteLogManagerTasksAvgIdlePercent      kafka_log_remote_remotelogmanager_remotelogmanagertasksavgidlepercent
kafka.server:type=RemoteLogManager,name=remote-copy-throttle-time (ms, summed)       kafka_server_remotelogmanager_remote_copy_throttle_time_ms_total
kafka.server:type=RemoteLogManager,name=remote-fetch-throttle-time (ms, summed)      kafka_server_remotelogmanager_remote_fetch_throttle_time_ms_total
RemoteIndexCache hits / misses / evictions (KAFKA-15094, proposed in Kafka)          kafka_storage_remoteindexcache_{hits,misses,evictions}_total
object-store requests the RLM made, per topic (tieredlog's)                          tieredlog_remote_storage_requests_total                               topic, operation
object-store bytes written and read, per topic (tieredlog's)                         tieredlog_remote_storage_bytes_total                                  topic, direction
worker threads of each remote pool (tieredlog's; follows dynamic resizes)              kafka_storage_remotestoragethreadpool_threads                          pool
bytes catch-up readers hold or read ahead, and their bound (tieredlog's)               tieredlog_remote_read_ahead_bytes, tieredlog_remote_read_ahead_max_bytes
==================================================================================  ====================================================================  =======

Object-store requests are counted where the RLM calls the RSM, so every backend and plugin is counted
alike: a copy is one PUT per part of the segment it hands over (log, offset, time and transaction
indexes, producer snapshot, leader-epoch index; the built-in backends add a manifest), a delete one
DELETE per part, a remote read or an index fetch one GET. The RLM never lists the bucket (the remote
log metadata topic is its index), so LIST stays 0 here; tools and the Spark reader list. The console
prices these counts (remote.log.cost.*).

The metric objects live in the process-wide default registry and are created once, so several
RemoteLogManagers in one process (tests) share them; labels keep their series apart.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

from prometheus_client import REGISTRY, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily

_lock = threading.Lock()
_metrics: "RemoteStorageMetrics | None" = None

OPERATIONS = ("PUT", "GET", "LIST", "DELETE")


class ObjectStoreUsage:
    """Object-store requests and bytes per topic. ``record`` runs on the RLM's threads, ``snapshot``
    and ``collect`` on the scrape or console thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = {}
        self._bytes: dict[tuple[str, str], int] = {}

    def record(self, topic: str, operation: str, requests: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            key = (topic, operation)
            self._requests[key] = self._requests.get(key, 0) + requests
            if nbytes:
                d = (topic, "out" if operation == "PUT" else "in")
                self._bytes[d] = self._bytes.get(d, 0) + nbytes

    def snapshot(self) -> dict[str, dict[str, int]]:
        """topic -> {"PUT": n, "GET": n, "LIST": n, "DELETE": n, "bytes_out": n, "bytes_in": n}."""
        with self._lock:
            requests, nbytes = dict(self._requests), dict(self._bytes)
        out: dict[str, dict[str, int]] = {}
        for (topic, op), n in requests.items():
            out.setdefault(topic, {})[op] = n
        for (topic, direction), n in nbytes.items():
            out.setdefault(topic, {})["bytes_" + direction] = n
        return out

    def collect(self) -> Iterator[Any]:
        with self._lock:
            requests, nbytes = dict(self._requests), dict(self._bytes)
        r = CounterMetricFamily("tieredlog_remote_storage_requests", "Object-store requests the remote log "
                                "manager made, per topic and operation (PUT, GET, LIST, DELETE)",
                                labels=["topic", "operation"])
        for (topic, op), n in sorted(requests.items()):
            r.add_metric([topic, op], n)
        yield r
        b = CounterMetricFamily("tieredlog_remote_storage_bytes", "Object-store bytes written (out) and read (in), "
                                "per topic", labels=["topic", "direction"])
        for (topic, direction), n in sorted(nbytes.items()):
            b.add_metric([topic, direction], n)
        yield b

    def describe(self) -> list[Any]:
        return []


class RemoteStorageMetrics:
    def __init__(self) -> None:
        p = "kafka_server_brokertopicmetrics_"
        t = ["topic"]
        tp = ["topic", "partition"]
        self.copy_bytes = Counter(p + "remotecopybytes", "RemoteCopyBytesPerSec: segment bytes copied", t)
        self.copy_requests = Counter(p + "remotecopyrequests", "RemoteCopyRequestsPerSec: RSM copy attempts", t)
        self.copy_errors = Counter(p + "remotecopyerrors", "RemoteCopyErrorsPerSec: failed copies", t)
        self.fetch_bytes = Counter(p + "remotefetchbytes", "RemoteFetchBytesPerSec: bytes read remotely", t)
        self.fetch_requests = Counter(p + "remotefetchrequests", "RemoteFetchRequestsPerSec: remote reads", t)
        self.fetch_errors = Counter(p + "remotefetcherrors", "RemoteFetchErrorsPerSec: failed remote reads", t)
        self.delete_requests = Counter(p + "remotedeleterequests", "RemoteDeleteRequestsPerSec", t)
        self.delete_errors = Counter(p + "remotedeleteerrors", "RemoteDeleteErrorsPerSec", t)
        self.build_aux_state_requests = Counter(
            p + "buildremotelogauxstaterequests", "BuildRemoteLogAuxStateRequestsPerSec: follower rebuilds from the remote tier")
        self.build_aux_state_errors = Counter(
            p + "buildremotelogauxstateerrors", "BuildRemoteLogAuxStateErrorsPerSec: rebuild attempts that failed (retried)")
        self.copy_lag_bytes = Gauge(p + "remotecopylagbytes", "RemoteCopyLagBytes: local-only bytes not yet copied", tp)
        self.copy_lag_segments = Gauge(p + "remotecopylagsegments", "RemoteCopyLagSegments", tp)
        self.remote_log_size_bytes = Gauge(p + "remotelogsizebytes", "RemoteLogSizeBytes", tp)
        self.remote_log_metadata_count = Gauge(p + "remotelogmetadatacount", "RemoteLogMetadataCount", tp)
        q = "kafka_storage_remotestoragethreadpool_"
        self.reader_queue_size = Gauge(q + "remotelogreadertaskqueuesize", "RemoteLogReaderTaskQueueSize")
        self.reader_avg_idle = Gauge(q + "remotelogreaderavgidlepercent", "RemoteLogReaderAvgIdlePercent")
        # reader / copier / expiration: the threads running now, so a live resize can be watched
        self.pool_threads = Gauge(q + "threads", "Worker threads of a remote thread pool (tieredlog's)", ["pool"])
        self.read_ahead_bytes = Gauge("tieredlog_remote_read_ahead_bytes",
                                      "Bytes the remote tier's catch-up readers hold or read ahead (tieredlog's)")
        self.read_ahead_max_bytes = Gauge("tieredlog_remote_read_ahead_max_bytes",
                                          "remote.log.reader.read.ahead.max.bytes in force (tieredlog's)")
        self.tasks_avg_idle = Gauge(
            "kafka_log_remote_remotelogmanager_remotelogmanagertasksavgidlepercent",
            "RemoteLogManagerTasksAvgIdlePercent: copier pool idle fraction",
        )
        self.copy_throttle_ms = Counter(
            "kafka_server_remotelogmanager_remote_copy_throttle_time_ms", "remote-copy-throttle-time, summed"
        )
        self.fetch_throttle_ms = Counter(
            "kafka_server_remotelogmanager_remote_fetch_throttle_time_ms", "remote-fetch-throttle-time, summed"
        )
        c = "kafka_storage_remoteindexcache_"
        self.index_cache_hits = Counter(c + "hits", "RemoteIndexCache hits")
        self.index_cache_misses = Counter(c + "misses", "RemoteIndexCache misses (index fetched from the RSM)")
        self.index_cache_evictions = Counter(c + "evictions", "RemoteIndexCache evictions")
        self.object_store = ObjectStoreUsage()
        REGISTRY.register(self.object_store)

    def touch_topic(self, topic: str) -> None:
        """Create a topic's counters at 0, as Kafka creates a topic's BrokerTopicMetrics meters whole: a
        rate or an alert over errors has a series before the first error."""
        for c in (self.copy_bytes, self.copy_requests, self.copy_errors, self.fetch_bytes, self.fetch_requests,
                  self.fetch_errors, self.delete_requests, self.delete_errors):
            c.labels(topic)

    def remove_partition(self, topic: str, partition: int) -> None:
        for g in (self.copy_lag_bytes, self.copy_lag_segments, self.remote_log_size_bytes, self.remote_log_metadata_count):
            try:
                g.remove(topic, str(partition))
            except KeyError:
                pass


def metrics() -> RemoteStorageMetrics:
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = RemoteStorageMetrics()
        return _metrics


def bind_gauge(gauge: Gauge, fn: Callable[[], float]) -> None:
    """Point an unlabelled gauge at a live value (the newest RemoteLogManager wins)."""
    gauge.set_function(fn)


def start_metrics_server(port: int, addr: str = "127.0.0.1") -> None:
    """Serve /metrics for Prometheus on ``metrics.port``; the broker calls this when it is set."""
    metrics()
    start_http_server(int(port), addr=addr, registry=REGISTRY)
