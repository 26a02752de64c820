"""Fetch (1): local reads as file regions sent with sendfile, remote reads through the RLM.

A fetch that has fewer than ``min_bytes`` parks on its partitions until an append wakes it or
``max_wait`` passes (never blocking the loop). Incremental fetch sessions (KIP-227) are kept by
tieredlog.server.fetch_session: it says which partitions a request reads and which of them the
answer carries.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import time
import uuid
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tieredlog.errors import KafkaError, OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from tieredlog.log.segment import PagesNotCached
from tieredlog.log.types import FetchDataInfo, FetchIsolation, TopicPartition
from tieredlog.protocol.api import FETCH
from tieredlog.protocol.fetch_encoder import FetchPartitionData, FetchTopicData, encode_fetch_response
from tieredlog.rate_limited_log import RateLimitedLog
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import authorize, authorize_cluster
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.fetch_session import new_context as new_fetch_context
from tieredlog.server.network import OpenRegion, RawResponse
from tieredlog.server.produce_api import error_code_of

if TYPE_CHECKING:
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.replication.partition import Partition
    from tieredlog.server.broker import Broker

log = logging.getLogger(__name__)
# a remote read failing on something that is not a Kafka error (the RLM reports its own failures)
_remote_bugs = RateLimitedLog(log, 30.0)

READ_COMMITTED = 1


def _ms(value: datetime.timedelta) -> float:
    return value.total_seconds() * 1000


def _records_size(records: Any) -> int:
    if records is None:
        return 0
    if isinstance(records, (bytes, bytearray, memoryview)):
        return len(records)
    return int(records.size)


def _aborted(info: FetchDataInfo) -> list[tuple[int, int]] | None:
    if info.aborted_transactions is None:
        return None
    return [(a.producer_id, a.first_offset) for a in info.aborted_transactions]


class _PartitionRead:
    __slots__ = ("topic", "partition", "fetch_offset", "max_bytes", "data", "remote", "current_leader_epoch",
                 "replica_log_start", "leader_end_offset", "last_fetched_epoch")

    def __init__(self, topic: str, partition: int, fetch_offset: int, max_bytes: int,
                 current_leader_epoch: int = -1, replica_log_start: int = -1, last_fetched_epoch: int = -1) -> None:
        self.topic = topic
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.data = FetchPartitionData(partition)
        self.remote = False
        self.current_leader_epoch = current_leader_epoch
        self.replica_log_start = replica_log_start  # a follower's log start offset
        self.leader_end_offset = -1  # the log end offset when a follower's fetch was first served
        self.last_fetched_epoch = last_fetched_epoch  # the epoch of the batch before fetch_offset (v12+)


def _diverging_epoch(pr: _PartitionRead, plog: UnifiedLog) -> tuple[int, int] | None:
    """KIP-320's check of a fetch naming ``last_fetched_epoch``, as Kafka's Partition.readRecords:
    (largest epoch <= it, where that epoch ends) when the fetcher's log diverges from ours before
    ``fetch_offset`` (we never had its epoch, or ours ends earlier); None when it does not.
    OffsetOutOfRangeError when we cannot tell (an epoch above all ours) or the offset is below
    the log start."""
    epoch, end_offset = plog.leader_epoch_cache.end_offset_for(pr.last_fetched_epoch, plog.log_end_offset)
    if epoch < 0 or end_offset < 0:
        raise OffsetOutOfRangeError(
            f"could not determine the end offset of the last fetched epoch {pr.last_fetched_epoch}")
    if pr.fetch_offset < plog.log_start_offset:
        raise OffsetOutOfRangeError(f"offset {pr.fetch_offset} is below the log start {plog.log_start_offset}")
    if epoch < pr.last_fetched_epoch or end_offset < pr.fetch_offset:
        return epoch, end_offset
    return None


def _fill_offsets(d: FetchPartitionData, plog: UnifiedLog) -> None:
    d.high_watermark = plog.high_watermark
    d.last_stable_offset = plog.last_stable_offset
    d.log_start_offset = plog.log_start_offset


async def _read_local(
    broker: Broker, pr: _PartitionRead, isolation: FetchIsolation, budget: int, first: bool, follower: bool,
    cold_reads: Executor | None, replica_id: int = -1, client_rack: str | None = None,
) -> int:
    """Read one partition into ``pr.data``; returns the bytes it adds to the response.

    The log reads the batch headers at the fetch offset without waiting for the disk; when they are
    not in the page cache (a seek to old data, a catch-up's first fetch in a segment) the same read
    runs, blocking, on ``cold_reads`` while the loop serves others. The partition's offsets are
    taken again after it: the high watermark may have moved while the thread read."""
    d = pr.data
    d.records = b""
    plog = broker.get_partition_log(pr.topic, pr.partition)
    rm = broker.replica_manager
    partition = rm.get_partition(TopicPartition(pr.topic, pr.partition)) if rm is not None else None
    if plog is None or partition is None:
        d.error_code = ErrorCode.unknown_topic_or_partition
        return 0
    try:
        # followers fetch from the leader; a consumer's Fetch v11+ (client_rack not None) may read a
        # follower up to its high watermark (KIP-392); at the epoch the client believes current (KIP-320)
        partition.check_leader_epoch(pr.current_leader_epoch, require_leader=follower or client_rack is None)
    except KafkaError as exc:
        d.error_code = exc.code
        if partition.leader_id >= 0:
            d.current_leader = (partition.leader_id, partition.leader_epoch)
        return 0
    if client_rack is not None and (preferred := _preferred_read_replica(broker, partition, pr, client_rack)) >= 0:
        # no records: the consumer fetches from that follower from now on (answered at once)
        _fill_offsets(d, plog)
        d.preferred_read_replica = preferred
        return 0
    _fill_offsets(d, plog)
    if pr.last_fetched_epoch >= 0:
        try:
            d.diverging_epoch = _diverging_epoch(pr, plog)
        except OffsetOutOfRangeError:
            d.error_code = ErrorCode.offset_out_of_range
            return 0
        if d.diverging_epoch is not None:
            return 0  # no records: the fetcher truncates to the epoch's end first
    if follower and pr.leader_end_offset < 0:
        pr.leader_end_offset = plog.log_end_offset
    max_bytes = min(pr.max_bytes, budget)
    if max_bytes <= 0 and not first:
        return 0
    if follower and rm is not None and rm.leader_quota.should_throttle(
            partition.tp, plog.config, replica_id in partition.isr):
        return 0  # KIP-73: no records for an out-of-sync throttled replica while the leader's quota is spent
    try:
        try:
            info = plog.read(pr.fetch_offset, max(max_bytes, 0), isolation, min_one_message=first, nowait=True)
        except PagesNotCached:
            read = functools.partial(plog.read, pr.fetch_offset, max(max_bytes, 0), isolation, min_one_message=first)
            info = await asyncio.get_running_loop().run_in_executor(cold_reads, read)
            _fill_offsets(d, plog)
    except OffsetMovedToTieredStorageError:
        if follower:
            d.error_code = ErrorCode.offset_moved_to_tiered_storage
        elif broker.remote_log_manager is not None:
            pr.remote = True
        else:
            d.error_code = ErrorCode.offset_out_of_range
        return 0
    except OffsetOutOfRangeError:
        d.error_code = ErrorCode.offset_out_of_range
        return 0
    except Exception as exc:  # noqa: BLE001
        d.error_code = error_code_of(exc)
        if d.error_code == ErrorCode.unknown_server_error:
            log.exception("read of %s-%d at %d failed", pr.topic, pr.partition, pr.fetch_offset)
        return 0
    d.error_code = ErrorCode.none
    d.records = info.records
    d.aborted_transactions = _aborted(info) if isolation is FetchIsolation.TXN_COMMITTED else None
    return _records_size(info.records)


def _preferred_read_replica(broker: Broker, partition: Partition, pr: _PartitionRead, client_rack: str) -> int:
    rm, node = broker.replica_manager, broker.cluster_node
    if rm is None or node is None or rm.replica_selector is None:
        return -1
    live_racks = {b: n.rack for b, n in node.metadata.brokers.items()}
    return rm.preferred_read_replica(partition, client_rack, pr.fetch_offset, live_racks)


def _record_throttled(broker: Broker, reads: list[_PartitionRead]) -> None:
    """KIP-73: the record bytes a follower's fetch took of leader-throttled partitions count against
    the leader's quota (Kafka records them once the response is made)."""
    rm = broker.replica_manager
    if rm is None:
        return
    quota, nbytes = rm.leader_quota, 0
    for pr in reads:
        p = rm.get_partition(TopicPartition(pr.topic, pr.partition))
        if p is not None and quota.is_throttled(p.tp, p.log.config):
            nbytes += _records_size(pr.data.records)
    quota.record(nbytes)


def _start_remote(
    broker: Broker, pr: _PartitionRead, max_bytes: int, min_one: bool, isolation: FetchIsolation
) -> Future | None:
    """Start the KIP-405 consumer read of ``pr`` below the local log start, of at most
    ``max_bytes`` (at least one batch when ``min_one``): the RLM's future, or None when the RLM
    answered at once (bytes a sequential reader had read ahead into memory, a throttled fetch, a
    full reader queue), already put in ``pr.data``. A read_committed fetch also gets the aborted
    transactions of what it returns."""
    rlm = broker.remote_log_manager
    assert rlm is not None  # only partitions _read_local marked remote get here
    read = rlm.read_committed_async if isolation is FetchIsolation.TXN_COMMITTED else rlm.read_async
    try:
        fut = read(TopicPartition(pr.topic, pr.partition), pr.fetch_offset, max_bytes, min_one_message=min_one)
    except Exception as exc:  # noqa: BLE001
        _remote_failed(pr, exc)
        return None
    if not fut.done():
        return fut
    try:
        _remote_done(pr, fut.result())
    except Exception as exc:  # noqa: BLE001
        _remote_failed(pr, exc)
    return None


def _remote_done(pr: _PartitionRead, result: bytes | memoryview | FetchDataInfo) -> None:
    """A remote read's answer into ``pr.data``: the batches (bytes or a view of read-ahead memory,
    sent uncopied), and for read_committed (a FetchDataInfo) their aborted transactions."""
    d = pr.data
    if isinstance(result, FetchDataInfo):
        d.records = result.records or b""
        d.aborted_transactions = _aborted(result)
    else:
        d.records = result or b""
        d.aborted_transactions = None


def _remote_empty(pr: _PartitionRead, isolation: FetchIsolation) -> None:
    """No remote bytes this time (a spent fetch.max.bytes, a read past remote.fetch.max.wait.ms):
    the client asks again."""
    pr.data.records = b""
    pr.data.aborted_transactions = [] if isolation is FetchIsolation.TXN_COMMITTED else None


def _remote_failed(pr: _PartitionRead, exc: BaseException) -> None:
    """The partition answers the read's error (Kafka's DelayedRemoteFetch: the remote read's exception
    as the partition's error code; a failed remote read is UNKNOWN_SERVER_ERROR)."""
    d = pr.data
    d.error_code = error_code_of(exc)
    if not isinstance(exc, KafkaError):
        _remote_bugs.failed((pr.topic, pr.partition), exc, "remote read of %s-%d at %d failed",
                            pr.topic, pr.partition, pr.fetch_offset)
    d.records = b""
    d.aborted_transactions = None


def _remote_budgets(
    remote: list[_PartitionRead], budget: int, nothing_yet: bool
) -> list[tuple[_PartitionRead, int, bool]]:
    """(partition, max bytes, at least one batch) for each remote read of one fetch. The reads run
    in parallel, so the response's ``max_bytes`` left after the local partitions is shared out
    before any of them returns: each takes up to its ``partition_max_bytes`` in request order, and
    only the first may exceed its share by one batch, and only when nothing was read locally
    (Kafka's rule for the first partition of a response)."""
    out = []
    for i, pr in enumerate(remote):
        share = max(min(pr.max_bytes, budget), 0)
        out.append((pr, share, nothing_yet and i == 0))
        budget -= share
    return out


async def _read_remote(broker: Broker, pr: _PartitionRead, fut: Future, isolation: FetchIsolation) -> None:
    """Wait for the remote read ``fut`` of ``pr``, bounded by remote.fetch.max.wait.ms. On timeout
    the partition comes back empty without an error, so the client simply fetches again, unless the
    partition's remote reads have kept failing for longer than that wait: then it gets their error."""
    wait_s = broker.config["remote.fetch.max.wait.ms"] / 1000
    metrics = broker.metrics
    metrics.remote_fetch_waiting += 1
    try:
        result = await asyncio.wait_for(asyncio.wrap_future(fut), wait_s)
    except asyncio.TimeoutError:
        metrics.remote_fetch_expires += 1
        rlm = broker.remote_log_manager
        failure = None if rlm is None else rlm.read_failure(TopicPartition(pr.topic, pr.partition))
        if failure is not None:
            _remote_failed(pr, failure)
        else:
            _remote_empty(pr, isolation)
        return
    except Exception as exc:  # noqa: BLE001
        _remote_failed(pr, exc)
        return
    finally:
        metrics.remote_fetch_waiting -= 1
    _remote_done(pr, result)


def _record_follower_fetch(broker: Broker, replica_id: int, reads: list[_PartitionRead]) -> None:
    rm = broker.replica_manager
    if rm is None:
        return
    for pr in reads:
        if pr.data.error_code == ErrorCode.none and pr.data.diverging_epoch is None and pr.leader_end_offset >= 0:
            rm.update_follower_fetch_state(TopicPartition(pr.topic, pr.partition), replica_id, pr.fetch_offset,
                                           pr.replica_log_start, pr.leader_end_offset)


def _open_regions(topics: list[FetchTopicData]) -> None:
    """Replace log FileSlices with regions opened here, read now (a segment deleted by retention
    after this point stays readable through the open handle)."""
    for t in topics:
        for d in t.partitions:
            r = d.records
            if r is None or isinstance(r, (bytes, bytearray, memoryview)):
                continue
            if not r.size:
                d.records = b""
                continue
            try:
                d.records = OpenRegion(r.open(), r.position, r.size)
            except OSError:
                d.records = r.read_bytes()


async def handle_fetch(ctx: RequestContext, req: Any) -> RawResponse:
    broker = ctx.broker
    version = ctx.api_version
    replica_id = getattr(req, "replica_id", None)
    if replica_id is None:
        rs = getattr(req, "replica_state", None)
        replica_id = rs.replica_id if rs is not None else -1
    follower = replica_id >= 0
    # KIP-392: a consumer's Fetch v11+ may be served by a follower; it names its client.rack ("" for none)
    client_rack = (getattr(req, "rack_id", None) or "") if not follower and version >= 11 else None
    isolation = (
        FetchIsolation.LOG_END if follower
        else FetchIsolation.TXN_COMMITTED if req.isolation_level == READ_COMMITTED
        else FetchIsolation.HIGH_WATERMARK
    )
    fetch_session = new_fetch_context(broker.fetch_sessions, req, version, follower)
    if fetch_session.error != ErrorCode.none:
        parts, size = encode_fetch_response(version, ctx.correlation_id, [], error_code=fetch_session.error)
        return RawResponse(parts, size)

    # a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic
    cluster_action = follower and authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    readable: dict[str, bool] = {}

    def may_fetch(name: str) -> bool:
        if follower:
            return cluster_action
        if name not in readable:
            readable[name] = authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name)
        return readable[name]

    topics: list[FetchTopicData] = []
    reads: list[_PartitionRead] = []
    for ft in fetch_session.topics:
        if version >= 13:
            # kio reads the all-zero id as None: no topic has it
            tid = ft.topic_id or uuid.UUID(int=0)
            meta = broker.topic_by_id(tid) if ft.topic_id else None
            name = meta.name if meta else ""
        else:
            name = ft.topic
            meta = broker.get_topic(name)
            tid = meta.topic_id if meta else uuid.UUID(int=0)
        td = FetchTopicData(name, tid)
        for fp in ft.partitions:
            pr = _PartitionRead(name, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                                getattr(fp, "current_leader_epoch", -1), getattr(fp, "log_start_offset", -1),
                                getattr(fp, "last_fetched_epoch", -1))
            if meta is None and version >= 13:
                pr.data.error_code = ErrorCode.unknown_topic_id
            elif not may_fetch(name):
                pr.data.error_code = ErrorCode.topic_authorization_failed
            elif meta is None:
                pr.data.error_code = ErrorCode.unknown_topic_or_partition
            else:
                reads.append(pr)
            td.partitions.append(pr.data)
        topics.append(td)

    max_wait_ms = _ms(req.max_wait)
    min_bytes = req.min_bytes
    response_max = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
    deadline = time.monotonic() + max_wait_ms / 1000
    keys = [(pr.topic, pr.partition) for pr in reads]
    followed = False
    while True:
        total = 0
        errors = False
        for pr in reads:
            pr.remote = False
            # in request order, one at a time: each read's budget is what the earlier ones left
            total += await _read_local(
                broker, pr, isolation, response_max - total, total == 0, follower, ctx.cold_reads, replica_id,
                client_rack)
            # a diverging epoch is answered at once, as an error is (Kafka's hasDivergingEpoch)
            errors = errors or pr.data.error_code != ErrorCode.none or pr.data.diverging_epoch is not None
        if follower and not followed:
            # the follower has everything below its fetch offset: the ISR and the HW may move now
            followed = True
            _record_follower_fetch(broker, replica_id, reads)
        remote = [pr for pr in reads if pr.remote]
        if remote:
            # several partitions of one fetch are read from the remote tier in parallel; those
            # the RLM answers at once (read ahead into memory) cost no trip through the pool
            waits = []
            for pr, max_bytes, min_one in _remote_budgets(remote, response_max - total, total == 0):
                if max_bytes <= 0 and not min_one:
                    _remote_empty(pr, isolation)  # fetch.max.bytes is spent: the client asks again
                elif (fut := _start_remote(broker, pr, max_bytes, min_one, isolation)) is not None:
                    waits.append((pr, fut))
            if waits:
                await asyncio.gather(*(_read_remote(broker, pr, fut, isolation) for pr, fut in waits))
            break
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errors or not reads or remaining <= 0 or broker.stopping or (
                client_rack and any(pr.data.preferred_read_replica >= 0 for pr in reads)):
            break
        await broker.append_watchers.wait(keys, remaining)
    metrics = broker.metrics
    for pr in reads:
        metrics.record_fetch(pr.topic, _records_size(pr.data.records), follower)
    if follower:
        _record_throttled(broker, reads)
    topics, session_id = fetch_session.finish(topics)
    _open_regions(topics)
    parts, size = encode_fetch_response(version, ctx.correlation_id, topics, session_id=session_id,
                                        node_endpoints=_leader_endpoints(broker, topics, ctx.listener_name))
    return RawResponse(parts, size)


def _leader_endpoints(broker: Broker, topics: list[FetchTopicData],
                      listener: str) -> list[tuple[int, str, int, str | None]]:
    """Where the leaders named in ``current_leader`` hints are (Fetch v16's NodeEndpoints)."""
    node = broker.cluster_node
    if node is None:
        return []
    ids = {d.current_leader[0] for t in topics for d in t.partitions if d.current_leader is not None}
    return [ep for i in sorted(ids) if (ep := node.client_endpoint(i, listener)) is not None]


def handlers() -> dict[int, Handler]:
    return {FETCH: handle_fetch}
