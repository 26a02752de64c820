"""ListOffsets (2) and OffsetForLeaderEpoch (23)."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import RequestTimedOutError
from tieredlog.log.types import TimestampAndOffset, TopicPartition
from tieredlog.log.unified_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from tieredlog.protocol.api import LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH
from tieredlog.replication.data_path import error_code_of
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import AuthorizerServer, authorize_cluster, authorized_names
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.metadata_requests import ListOffsetsPartition, list_offsets_request

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.reader import OffsetAndTimestamp
    from tieredlog.server.metadata_requests import KioListOffsetsRequest, KioOffsetForLeaderEpochRequest

log = logging.getLogger(__name__)

READ_COMMITTED = 1


class OffsetServer(AuthorizerServer, Protocol):
    """What ListOffsets and OffsetForLeaderEpoch need of the broker."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def remote_log_manager(self) -> RemoteLogManager | None: ...

    def get_partition_log(self, topic: str, partition: int) -> UnifiedLog | None: ...


def _epoch_for(plog: UnifiedLog, offset: int) -> int:
    if offset < 0:
        return -1
    try:
        e = plog.leader_epoch_cache.epoch_for_offset(offset)
    except Exception:  # noqa: BLE001 - epoch is advisory in this response
        return -1
    return -1 if e is None else e


def _unpack(found: TimestampAndOffset | OffsetAndTimestamp) -> tuple[int, int, int]:
    """(offset, timestamp, epoch) from the local log's TimestampAndOffset or the RLM's OffsetAndTimestamp."""
    epoch = found.leader_epoch
    return int(found.offset), int(found.timestamp), -1 if epoch is None else int(epoch)


async def _remote_lookup(ctx: RequestContext[OffsetServer], fut: Future, tp: TopicPartition) -> Any:
    """Wait for a lookup on the RLM's list-offsets pool, at most
    ``remote.list.offsets.request.timeout.ms`` (KIP-1075: the partition then gets REQUEST_TIMED_OUT)."""
    timeout_ms = ctx.broker.config["remote.list.offsets.request.timeout.ms"]
    try:
        return await asyncio.wait_for(asyncio.wrap_future(fut), timeout_ms / 1000)
    except asyncio.TimeoutError:
        fut.cancel()
        raise RequestTimedOutError(
            f"remote ListOffsets of {tp.topic}-{tp.partition} took longer than "
            f"remote.list.offsets.request.timeout.ms={timeout_ms}"
        ) from None


async def _offset_for(ctx: RequestContext[OffsetServer], plog: UnifiedLog, tp: TopicPartition, ts: int, isolation: int) -> tuple[int, int, int]:
    """(offset, timestamp, leader_epoch) for one ListOffsets partition."""
    if ts == LATEST_TIMESTAMP:
        off = plog.last_stable_offset if isolation == READ_COMMITTED else plog.high_watermark
        return off, -1, _epoch_for(plog, off - 1)
    if ts == EARLIEST_TIMESTAMP:
        return plog.log_start_offset, -1, _epoch_for(plog, plog.log_start_offset)
    if ts == EARLIEST_LOCAL_TIMESTAMP:
        return plog.local_log_start_offset, -1, _epoch_for(plog, plog.local_log_start_offset)
    if ts == LATEST_TIERED_TIMESTAMP:
        off = plog.highest_offset_in_remote_storage
        return off, -1, _epoch_for(plog, off)
    rlm = ctx.broker.remote_log_manager
    if ts == MAX_TIMESTAMP and rlm is not None and plog.local_log_start_offset > plog.log_start_offset:
        # The largest timestamp may be in a segment only the remote tier holds (all data tiered, or
        # late records with old offsets). Kafka looks at local segments only; the remote tier's
        # segment metadata answers here as well, and on a tie the remote (earlier) offset wins.
        remote = await _remote_lookup(ctx, rlm.find_max_timestamp_async(tp), tp)
        local = await asyncio.to_thread(plog.fetch_offset_by_timestamp, ts)
        if remote is not None and (local is None or _unpack(remote)[1] >= _unpack(local)[1]):
            return _unpack(remote)
        if local is None:
            return -1, -1, -1
        return _unpack(local)
    if ts >= 0 and rlm is not None and plog.local_log_start_offset > plog.log_start_offset:
        # part of the log lives only in the remote tier; ask it first, off the loop
        found = await _remote_lookup(ctx, rlm.find_offset_by_timestamp_async(tp, ts), tp)
        if found is not None:
            return _unpack(found)
    # reads a time index and may decode (decompress) a batch: never on the event loop
    found = await asyncio.to_thread(plog.fetch_offset_by_timestamp, ts)
    if found is None:
        return -1, -1, -1
    off, found_ts, epoch = _unpack(found)
    # by-timestamp lookups never return offsets the consumer cannot read yet
    if ts >= 0 and off >= plog.high_watermark:
        return -1, -1, -1
    return off, found_ts, -1 if epoch is None else epoch


async def handle_list_offsets(ctx: RequestContext[OffsetServer], kio_req: KioListOffsetsRequest) -> dict:
    broker = ctx.broker
    req = list_offsets_request(kio_req, ctx.api_version)
    isolation = req.isolation_level
    describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))

    async def one(name: str, p: ListOffsetsPartition) -> dict:
        out = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1, "leader_epoch": -1}
        if name not in describable:
            out["error_code"] = ErrorCode.topic_authorization_failed
            return out
        plog = broker.get_partition_log(name, p.partition_index)
        rm = broker.replica_manager
        partition = rm.get_partition(TopicPartition(name, p.partition_index)) if rm is not None else None
        if plog is None or partition is None:
            out["error_code"] = ErrorCode.unknown_topic_or_partition
            return out
        try:
            partition.check_leader_epoch(p.current_leader_epoch)
            off, ts, epoch = await _offset_for(ctx, plog, TopicPartition(name, p.partition_index), p.timestamp, isolation)
            out.update(offset=off, timestamp=ts, leader_epoch=epoch)
        except Exception as exc:  # noqa: BLE001
            out["error_code"] = error_code_of(exc)
            if out["error_code"] == ErrorCode.unknown_server_error:
                log.exception("ListOffsets %s-%d failed", name, p.partition_index)
        return out

    # partitions whose answer is in the remote tier are looked up at the same time, not in turn
    topics = [
        {"name": t.name, "partitions": await asyncio.gather(*(one(t.name, p) for p in t.partitions))}
        for t in req.topics
    ]
    return {"throttle_time": 0, "topics": topics}


async def handle_offset_for_leader_epoch(ctx: RequestContext[OffsetServer], req: KioOffsetForLeaderEpochRequest) -> dict:
    broker = ctx.broker
    # brokers truncating ask with CLUSTER_ACTION; consumers (KIP-320) with DESCRIBE on the topic
    if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION, log_denied=False):
        describable: set[str] = {t.topic for t in req.topics}
    else:
        describable = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in req.topics))
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = {"error_code": 0, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            plog = broker.get_partition_log(t.topic, p.partition)
            rm = broker.replica_manager
            partition = rm.get_partition(TopicPartition(t.topic, p.partition)) if rm is not None else None
            if t.topic not in describable:
                out["error_code"] = ErrorCode.topic_authorization_failed
            elif plog is None or partition is None:
                out["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    # a follower truncating asks the leader, at the epoch it believes current (KIP-320)
                    partition.check_leader_epoch(p.current_leader_epoch)
                    epoch, end = plog.leader_epoch_cache.end_offset_for(p.leader_epoch, plog.log_end_offset)
                    out.update(leader_epoch=epoch, end_offset=end)
                except Exception as exc:  # noqa: BLE001
                    out["error_code"] = error_code_of(exc)
            parts.append(out)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def handlers() -> dict[int, Handler[OffsetServer]]:
    return {LIST_OFFSETS: handle_list_offsets, OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch}
