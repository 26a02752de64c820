"""Broker metrics under Kafka's names, exported with prometheus-client beside the remote tier's.

The mapping is tieredlog.rlm.metrics's (the JMX-exporter convention): ``<domain>_<type>_<name>``
lower-cased, a ``PerSec`` meter becomes a ``_total`` counter (Prometheus derives the rate), and the
MBean's ``topic`` / ``request`` keys become labels.

==========================================================================  ==========================================================  =======
Kafka MBean                                                                  Prometheus                                                  labels
==========================================================================  ==========================================================  =======
kafka.server:type=ReplicaManager,name=PartitionCount                         kafka_server_replicamanager_partitioncount
kafka.server:type=ReplicaManager,name=LeaderCount                            kafka_server_replicamanager_leadercount
kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions              kafka_server_replicamanager_underreplicatedpartitions
kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount              kafka_server_replicamanager_underminisrpartitioncount
kafka.server:type=ReplicaManager,name=AtMinIsrPartitionCount                 kafka_server_replicamanager_atminisrpartitioncount
kafka.server:type=ReplicaManager,name=IsrShrinksPerSec                       kafka_server_replicamanager_isrshrinks_total
kafka.server:type=ReplicaManager,name=IsrExpandsPerSec                       kafka_server_replicamanager_isrexpands_total
kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount   kafka_server_replicamanager_partitionswithlatetransactionscount
kafka.server:type=FetcherStats,name=RequestsPerSec (one series per fetcher)  kafka_server_fetcherstats_requests_total                    clientid, brokerhost, brokerport
kafka.log:type=Log,name=OpenTransactionCount (tieredlog's)                   kafka_log_log_opentransactioncount                          topic, partition
kafka.log:type=Log,name=OldestOpenTransactionAgeMs (tieredlog's)             kafka_log_log_oldestopentransactionagems                    topic, partition
kafka.log:type=LogCleaner,name=cleaner-recopy-percent                         kafka_log_logcleaner_cleaner_recopy_percent
kafka.log:type=LogCleaner,name=max-clean-time-secs                            kafka_log_logcleaner_max_clean_time_secs
kafka.log:type=LogCleaner,name=max-buffer-utilization-percent                 kafka_log_logcleaner_max_buffer_utilization_percent
kafka.log:type=LogCleaner,name=DeadThreadCount                                kafka_log_logcleaner_deadthreadcount
kafka.log:type=LogCleanerManager,name=max-dirty-percent                       kafka_log_logcleanermanager_max_dirty_percent
kafka.log:type=LogCleanerManager,name=time-since-last-run-ms                  kafka_log_logcleanermanager_time_since_last_run_ms
kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count            kafka_log_logcleanermanager_uncleanable_partitions_count
kafka.controller:type=KafkaController,name=ActiveControllerCount             kafka_controller_kafkacontroller_activecontrollercount
kafka.controller:type=KafkaController,name=OfflinePartitionsCount            kafka_controller_kafkacontroller_offlinepartitionscount
kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec                      kafka_server_brokertopicmetrics_bytesin_total               topic
kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec                   kafka_server_brokertopicmetrics_messagesin_total            topic
kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec                     kafka_server_brokertopicmetrics_bytesout_total              topic
kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesOutPerSec          kafka_server_brokertopicmetrics_replicationbytesout_total   topic
kafka.network:type=RequestMetrics,name=RequestsPerSec                        kafka_network_requestmetrics_requests_total                 request
kafka.network:type=RequestMetrics,name=TotalTimeMs (a histogram, in ms)      kafka_network_requestmetrics_totaltimems                    request
kafka.network:type=RequestMetrics,name=RequestQueueTimeMs (histogram, ms)    kafka_network_requestmetrics_requestqueuetimems             request
==========================================================================  ==========================================================  =======

tieredlog.server.broker_health adds the purgatories, remote-fetch expiries, log flush time, leader
imbalance, remote metadata readiness and the event loop's lag.

Hanging transactions: PartitionsWithLateTransactionsCount is Kafka's (KIP-664: partitions led here whose
oldest open transaction's producer has been silent for transaction.max.timeout.ms plus 5 minutes). The two
per-partition gauges are tieredlog's, for partitions led here that hold an open transaction (absent
otherwise, so a broker with thousands of partitions exports no series for them): how many transactions
are open and how long ago the oldest began (tieredlog.server.open_transactions). An oldest age beyond
transaction.max.timeout.ms is a transaction no coordinator will end; `tieredlog transactions
find-hanging` names it and `abort` ends it.

Nothing here is maintained on the request path beyond a dict add: the produce and fetch handlers add
one number per partition, the connection one observation per request (all on the event loop), and
the gauges are computed when Prometheus scrapes, on the HTTP server's thread, from snapshots of the
replica manager's and the controller's state. Python ints and dicts are read whole under the GIL, so
the scrape copies each container once (``list(...)``) before walking it and never takes a lock the
event loop or the controller's thread waits on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Iterator, Protocol
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import REGISTRY, Counter, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from tieredlog.console.app import ConsoleApp
from tieredlog.console.contracts import BrokerState
from tieredlog.console.cost import prices_of
from tieredlog.console.history import History
from tieredlog.console.snapshot import rlm_usage
from tieredlog.console.source import LoopSnapshotSource
from tieredlog.controller.context import PartitionState
from tieredlog.protocol.api import api_name
from tieredlog.rlm.metrics import metrics as remote_storage_metrics
from tieredlog.server.broker_health import HealthServer, broker_health_families, cumulative
from tieredlog.server.consumer_protocol import ConsumerProtocolCodec
from tieredlog.server.loop_lag import EventLoopLag
from tieredlog.server.open_transactions import has_late_transaction, open_transactions

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from tieredlog.cluster.membership import ZkClusterMembership
    from tieredlog.config import BrokerConfig
    from tieredlog.log.log_manager import LogManager
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.fetch_session import FetchSessionCache

# TotalTimeMs upper bounds. Kafka's histogram gives percentiles; a Prometheus histogram gives them
# through histogram_quantile(). The range covers an in-memory Metadata (well under 1 ms) up to a
# Fetch parked for fetch.max.wait.ms and an acks=all Produce waiting out request.timeout.ms.
TOTAL_TIME_BUCKETS_MS: tuple[float, ...] = (
    0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)
_BUCKET_LABELS = [repr(float(b)) for b in TOTAL_TIME_BUCKETS_MS] + ["+Inf"]
# Kafka's transaction.max.timeout.ms default, for a broker configured without it
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000


class MetricsServer(HealthServer, BrokerState, Protocol):
    """What the metrics and the console read of the broker."""

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    @property
    def log_manager(self) -> LogManager | None: ...

    @property
    def cluster(self) -> ZkClusterMembership | None: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...


class _ApiStats:
    """One API's TotalTimeMs: per-bucket counts (not cumulative: the scrape sums them) and the sum."""

    __slots__ = ("buckets", "sum_ms")

    def __init__(self) -> None:
        self.buckets = [0] * (len(TOTAL_TIME_BUCKETS_MS) + 1)
        self.sum_ms = 0.0


class BrokerMetrics:
    """One broker's metrics. The ``record_*`` methods run on the event loop; ``collect`` on the
    scrape thread."""

    def __init__(self, broker: MetricsServer) -> None:
        self._broker = broker
        self.bytes_in: dict[str, int] = {}
        self.messages_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.replication_bytes_out: dict[str, int] = {}
        self.requests: dict[int, _ApiStats] = {}
        self.queue_time: dict[int, _ApiStats] = {}
        self.loop_lag = EventLoopLag()

    @property
    def broker(self) -> MetricsServer:
        return self._broker

    @property
    def remote_fetch_waiting(self) -> int:
        """Remote reads a Fetch waits on now."""
        rm = self._broker.replica_manager
        return rm.remote_fetch_stats.waiting if rm is not None else 0

    @property
    def remote_fetch_expires(self) -> int:
        """Remote reads that outlived remote.fetch.max.wait.ms."""
        rm = self._broker.replica_manager
        return rm.remote_fetch_stats.expires if rm is not None else 0

    # ---- the request path (event loop) -------------------------------------------------------------

    def record_produce(self, topic: str, nbytes: int, messages: int) -> None:
        """A successful append of ``nbytes`` record bytes holding ``messages`` records (the batch
        headers' counts, as Kafka's numMessages)."""
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + nbytes
        self.messages_in[topic] = self.messages_in.get(topic, 0) + messages

    def record_fetch(self, topic: str, nbytes: int, follower: bool) -> None:
        """``nbytes`` of records in one partition of a Fetch response. Followers' fetches count apart,
        as Kafka's ReplicationBytesOutPerSec, so BytesOutPerSec is what consumers read."""
        d = self.replication_bytes_out if follower else self.bytes_out
        d[topic] = d.get(topic, 0) + nbytes

    def record_request(self, api_key: int, received: float) -> None:
        """A request read at ``received`` (time.monotonic()) whose response has just been written."""
        ms = (time.monotonic() - received) * 1000.0
        stats = self.requests.get(api_key)
        if stats is None:
            stats = self.requests[api_key] = _ApiStats()
        stats.buckets[bisect_left(TOTAL_TIME_BUCKETS_MS, ms)] += 1
        stats.sum_ms += ms

    def record_queue_time(self, api_key: int, received: float) -> None:
        """A request read at ``received`` has just started (Kafka's RequestQueueTimeMs: on one event
        loop, the wait behind the work ahead of it)."""
        ms = (time.monotonic() - received) * 1000.0
        stats = self.queue_time.get(api_key)
        if stats is None:
            stats = self.queue_time[api_key] = _ApiStats()
        stats.buckets[bisect_left(TOTAL_TIME_BUCKETS_MS, ms)] += 1
        stats.sum_ms += ms

    def history_totals(self) -> dict[str, float]:
        """On the event loop, every 10 s: the totals the console charts (tieredlog.console.history)."""
        rsm = remote_storage_metrics()
        return {
            "bytes_in": float(sum(list(self.bytes_in.values()))),
            "bytes_out": float(sum(list(self.bytes_out.values()))),
            "remote_copy_bytes": _counter_total(rsm.copy_bytes),
            "remote_fetch_bytes": _counter_total(rsm.fetch_bytes),
            "remote_errors": sum(_counter_total(c) for c in (rsm.copy_errors, rsm.fetch_errors, rsm.delete_errors)),
            "loop_lag": self.loop_lag.max_s,
        }

    # ---- the scrape (HTTP server thread) -----------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        yield from self._replica_manager_families()
        yield from self._transaction_families()
        yield from self._cleaner_families()
        yield from self._controller_families()
        yield from self._topic_families()
        yield from self._request_families()
        yield from self._fetch_session_families()
        yield from broker_health_families(self)

    def _replica_manager_families(self) -> Iterator[Any]:
        rm = self._broker.replica_manager
        partitions = list(rm.partitions.values()) if rm is not None else []
        leaders = under_replicated = under_min_isr = at_min_isr = 0
        for p in partitions:
            if not p.is_leader:
                continue  # as Kafka: only a leader knows its ISR, so only leaders count below
            leaders += 1
            isr = len(p.isr)
            if isr < len(p.replicas):
                under_replicated += 1
            min_isr = p.log.config.min_insync_replicas
            if isr < min_isr:
                under_min_isr += 1
            elif isr == min_isr:
                at_min_isr += 1
        g = "kafka_server_replicamanager_"
        yield GaugeMetricFamily(g + "partitioncount", "PartitionCount: partitions hosted here", value=len(partitions))
        yield GaugeMetricFamily(g + "leadercount", "LeaderCount: partitions led here", value=leaders)
        yield GaugeMetricFamily(g + "underreplicatedpartitions",
                                "UnderReplicatedPartitions: led here with an ISR smaller than the replicas",
                                value=under_replicated)
        yield GaugeMetricFamily(g + "underminisrpartitioncount",
                                "UnderMinIsrPartitionCount: led here with an ISR below min.insync.replicas",
                                value=under_min_isr)
        yield GaugeMetricFamily(g + "atminisrpartitioncount",
                                "AtMinIsrPartitionCount: led here with an ISR of exactly min.insync.replicas",
                                value=at_min_isr)
        shrinks = rm.isr_shrinks if rm is not None else 0
        expands = rm.isr_expands if rm is not None else 0
        yield CounterMetricFamily(g + "isrshrinks", "IsrShrinksPerSec: ISR shrinks the controller accepted",
                                  value=shrinks)
        yield CounterMetricFamily(g + "isrexpands", "IsrExpandsPerSec: ISR expansions the controller accepted",
                                  value=expands)
        # one series per running replica fetcher (ReplicaFetcherThread-<fetcher id>-<leader id>), as
        # Kafka's clientId key: num.replica.fetchers resized live shows here
        fetches = CounterMetricFamily("kafka_server_fetcherstats_requests", "FetcherStats RequestsPerSec: Fetch "
                                      "requests of each replica fetcher", labels=["clientid", "brokerhost", "brokerport"])
        for f in rm.fetchers.fetchers() if rm is not None else []:
            fetches.add_metric([f.name, f.endpoint[0], str(f.endpoint[1])], f.requests)
        yield fetches

    def _transaction_families(self) -> Iterator[Any]:
        rm = self._broker.replica_manager
        partitions = list(rm.partitions.values()) if rm is not None else []
        max_timeout_ms = int(self._broker.config.get("transaction.max.timeout.ms", DEFAULT_TRANSACTION_MAX_TIMEOUT_MS))
        now_ms = time.time_ns() // 1_000_000
        late = 0
        count = GaugeMetricFamily("kafka_log_log_opentransactioncount",
                                  "OpenTransactionCount: transactions open on a partition led here",
                                  labels=["topic", "partition"])
        oldest = GaugeMetricFamily("kafka_log_log_oldestopentransactionagems",
                                   "OldestOpenTransactionAgeMs: ms since the oldest open transaction of a partition "
                                   "led here began", labels=["topic", "partition"])
        for p in partitions:
            if not p.is_leader:
                continue  # as Kafka's late count: a follower mirrors its leader's transactions
            txns = open_transactions(p.log.producer_state)
            if not txns:
                continue
            labels = [p.tp.topic, str(p.tp.partition)]
            count.add_metric(labels, len(txns))
            oldest.add_metric(labels, max(t.age_ms(now_ms) for t in txns))
            late += has_late_transaction(txns, now_ms, max_timeout_ms)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitionswithlatetransactionscount",
                                "PartitionsWithLateTransactionsCount: led here with a transaction open past "
                                "transaction.max.timeout.ms plus 5 minutes", value=late)
        yield count
        yield oldest

    def _cleaner_families(self) -> Iterator[Any]:
        lm = self._broker.log_manager
        cleaner = lm.cleaner if lm is not None else None
        if cleaner is None:
            return
        m = cleaner.metrics()
        c, cm = "kafka_log_logcleaner_", "kafka_log_logcleanermanager_"
        yield GaugeMetricFamily(c + "cleaner_recopy_percent", "cleaner-recopy-percent: share of the bytes read "
                                "that the last rounds wrote back", value=m.cleaner_recopy_percent)
        yield GaugeMetricFamily(c + "max_clean_time_secs", "max-clean-time-secs: the longest last round of a "
                                "cleaner thread", value=m.max_clean_time_secs)
        yield GaugeMetricFamily(c + "max_buffer_utilization_percent", "max-buffer-utilization-percent: how full "
                                "the fullest key map got in the last rounds", value=m.max_buffer_utilization_percent)
        yield GaugeMetricFamily(c + "deadthreadcount", "DeadThreadCount: cleaner threads that died",
                                value=m.dead_thread_count)
        yield GaugeMetricFamily(cm + "max_dirty_percent", "max-dirty-percent: the dirty share of the log chosen "
                                "last", value=m.max_dirty_percent)
        yield GaugeMetricFamily(cm + "time_since_last_run_ms", "time-since-last-run-ms: since a cleaner last "
                                "finished a round", value=m.time_since_last_run_ms)
        yield GaugeMetricFamily(cm + "uncleanable_partitions_count", "uncleanable-partitions-count: partitions a "
                                "round failed on (bad data), no longer cleaned", value=m.uncleanable_partitions_count)

    def _fetch_session_families(self) -> Iterator[Any]:
        cache = self._broker.fetch_sessions
        f = "kafka_server_fetchsessioncache_"
        yield GaugeMetricFamily(f + "numincrementalfetchsessions", "NumIncrementalFetchSessions: sessions cached",
                                value=len(cache.sessions))
        yield GaugeMetricFamily(f + "numincrementalfetchpartitionscached", "NumIncrementalFetchPartitionsCached: "
                                "partitions of all cached sessions", value=cache.partitions_cached)
        yield CounterMetricFamily(f + "incrementalfetchsessionevictions", "IncrementalFetchSessionEvictionsPerSec: "
                                  "sessions evicted to make room for new ones", value=cache.evictions)

    def _controller_families(self) -> Iterator[Any]:
        broker = self._broker
        controller = broker.controller
        if broker.cluster is None:
            # alone, the broker is its own controller (Metadata names it), and every partition it
            # hosts has it as leader
            active, offline = 1, 0
        elif controller is None or not controller.is_active:
            active, offline = 0, 0  # as Kafka: only the active controller reports offline partitions
        else:
            ctx = controller.ctx
            deleting = set(ctx.topics_to_be_deleted)
            states = list(ctx.partition_states.items())
            active = 1
            offline = sum(1 for tp, s in states if s is PartitionState.OFFLINE and tp.topic not in deleting)
        c = "kafka_controller_kafkacontroller_"
        yield GaugeMetricFamily(c + "activecontrollercount", "ActiveControllerCount: 1 on the active controller",
                                value=active)
        yield GaugeMetricFamily(c + "offlinepartitionscount",
                                "OfflinePartitionsCount: partitions without a live leader (active controller only)",
                                value=offline)

    def _topic_families(self) -> Iterator[Any]:
        p = "kafka_server_brokertopicmetrics_"
        for name, doc, counts in (
            ("bytesin", "BytesInPerSec: record bytes appended by producers", self.bytes_in),
            ("messagesin", "MessagesInPerSec: records appended by producers", self.messages_in),
            ("bytesout", "BytesOutPerSec: record bytes sent to consumers", self.bytes_out),
            ("replicationbytesout", "ReplicationBytesOutPerSec: record bytes sent to followers",
             self.replication_bytes_out),
        ):
            family = CounterMetricFamily(p + name, doc, labels=["topic"])
            for topic, value in list(counts.items()):
                family.add_metric([topic], value)
            yield family

    def _request_families(self) -> Iterator[Any]:
        n = "kafka_network_requestmetrics_"
        requests = CounterMetricFamily(n + "requests", "RequestsPerSec: requests answered, per API",
                                       labels=["request"])
        total_time = HistogramMetricFamily(n + "totaltimems",
                                           "TotalTimeMs: from the request read to its response written, in ms",
                                           labels=["request"])
        for api_key, stats in sorted(list(self.requests.items())):
            # one copy of the counts: +Inf and _count agree even mid-update
            buckets, running = cumulative(list(stats.buckets), _BUCKET_LABELS)
            name = api_name(api_key)
            requests.add_metric([name], running)
            total_time.add_metric([name], buckets, sum_value=stats.sum_ms)
        yield requests
        yield total_time
        queue_time = HistogramMetricFamily(n + "requestqueuetimems", "RequestQueueTimeMs: from the request read to "
                                           "its handler started, in ms", labels=["request"])
        for api_key, stats in sorted(list(self.queue_time.items())):
            queue_time.add_metric([api_name(api_key)], cumulative(list(stats.buckets), _BUCKET_LABELS)[0],
                                  sum_value=stats.sum_ms)
        yield queue_time


def _counter_total(counter: Counter) -> float:
    """A labelled counter's sum over its series (its _total samples)."""
    return float(sum(s.value for f in counter.collect() for s in f.samples if s.name.endswith("_total")))


class _BoundCollector:
    """The one collector in prometheus-client's process-wide registry; it reports the newest broker
    (a process runs one, tests may start several in turn)."""

    def __init__(self) -> None:
        self.source: BrokerMetrics | None = None

    def collect(self) -> Iterator[Any]:
        source = self.source
        if source is not None:
            yield from source.collect()

    def describe(self) -> list[Any]:
        return []  # the names depend on the bound broker: the registry must not collect to learn them


_lock = threading.Lock()
_collector: _BoundCollector | None = None


def bind(metrics: BrokerMetrics) -> None:
    """Export ``metrics`` from the default registry (the one the remote tier's metrics are in)."""
    global _collector
    with _lock:
        if _collector is None:
            _collector = _BoundCollector()
            REGISTRY.register(_collector)
        _collector.source = metrics


def start_metrics_endpoint(metrics: BrokerMetrics, config: BrokerConfig) -> MetricsEndpoint | None:
    """The ``/metrics`` endpoint on ``metrics.host:metrics.port`` (9404 by default; -1: none). An
    address that cannot be bound (the port is taken, say by a second broker on the same host) is
    one ERROR line naming it and the broker goes on without the endpoint: metrics are a view of the
    broker, not part of its service, and a Kafka broker's metrics reporters do not stop it either."""
    port = config.get("metrics.port", -1)
    if port is None or port < 0:
        return None
    host = config.get("metrics.host") or "127.0.0.1"
    try:
        endpoint = MetricsEndpoint(metrics, port, host)
    except OSError as exc:
        log.error("metrics endpoint not started: cannot bind %s:%d (metrics.host, metrics.port): %s; set "
                  "metrics.port to a free port, or -1 for no endpoint", host, port, exc.strerror or exc)
        return None
    log.info("Prometheus metrics at http://%s:%d/metrics, the console at http://%s:%d/console", host, endpoint.port,
             host, endpoint.port)
    return endpoint


class MetricsEndpoint:
    """``/metrics`` and the console (``/console``, tieredlog.console) on ``metrics.host:metrics.port``, on
    an HTTP server thread of their own; built on the event loop, whose broker state the console reads."""

    def __init__(self, metrics: BrokerMetrics, port: int, host: str) -> None:
        bind(metrics)
        broker = metrics.broker
        self._loop = asyncio.get_running_loop()
        history = History(metrics.history_totals)
        source = LoopSnapshotSource(broker, self._loop, prices_of(broker.config), rlm_usage, history,
                                    decode_assignment=ConsumerProtocolCodec().assignment)
        app = ConsoleApp(source, make_wsgi_app(REGISTRY))
        server = make_server(host, int(port), app, ThreadingWSGIServer, handler_class=_QuietHandler)
        self._thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        self._server: WSGIServer = server
        # the samplers run on the loop they measure, once the port is bound
        self._lag_task = self._loop.create_task(metrics.loop_lag.run(), name="event-loop-lag")
        self._history_task = self._loop.create_task(history.run(), name="console-history")

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Blocks until the server thread has stopped (up to its poll interval): call it off the loop."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._lag_task.cancel)
            self._loop.call_soon_threadsafe(self._history_task.cancel)
        self._server.shutdown()
        self._server.server_close()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Scrapes and page views are not logged."""
