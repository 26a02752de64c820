"""Fetch (1): the request and response of Kafka's Fetch; the reading is the ReplicaManager's.

The handler resolves the request's topics (by id from v13), authorizes them, and hands the
partitions to ReplicaManager.fetch_messages, which reads each locally (file regions sent with
sendfile) or from the remote tier, and parks a fetch short of ``min_bytes``. Incremental fetch
sessions (KIP-227) are kept by tieredlog.server.fetch_session: it says which partitions a request
reads and which of them the answer carries.
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.log.types import FetchIsolation
from tieredlog.protocol.api import FETCH
from tieredlog.protocol.fetch_encoder import FetchTopicData, encode_fetch_response
from tieredlog.replication.data_path import NO_RESPONSE_LIMIT, FetchParams, PartitionRead
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import AuthorizerServer, authorize, authorize_cluster
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.fetch_request import TOPIC_IDS_SINCE, FetchRequest, KioFetchRequest, fetch_request
from tieredlog.server.fetch_session import FetchContext, FetchSessionCache
from tieredlog.server.fetch_session import new_context as new_fetch_context
from tieredlog.server.file_regions import OpenRegion
from tieredlog.server.network import RawResponse

if TYPE_CHECKING:
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.server.cluster_node import ClusterNode
    from tieredlog.server.topic_store import TopicMetadata

READ_COMMITTED = 1


class FetchServer(AuthorizerServer, Protocol):
    """What the Fetch handler needs of the broker."""

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def cluster_node(self) -> ClusterNode | None: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...


def _ms(value: datetime.timedelta) -> float:
    return value.total_seconds() * 1000


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


async def handle_fetch(ctx: RequestContext[FetchServer], kio_req: KioFetchRequest) -> RawResponse:
    server = ctx.broker
    version = ctx.api_version
    req = fetch_request(kio_req, version)
    params = _fetch_params(req)
    fetch_session = new_fetch_context(server.fetch_sessions, req, version, params.follower)
    if fetch_session.error != ErrorCode.none:
        parts, size = encode_fetch_response(version, ctx.correlation_id, [], error_code=fetch_session.error)
        return RawResponse(parts, size)
    rm = server.replica_manager
    assert rm is not None, "the broker serves requests only after start() made its replica manager"
    topics, reads = _partition_reads(ctx, server, fetch_session, params.follower)
    await rm.fetch_messages(params, reads, ctx.cold_reads)
    topics, session_id = fetch_session.finish(topics)
    _open_regions(topics)
    parts, size = encode_fetch_response(version, ctx.correlation_id, topics, session_id=session_id,
                                        node_endpoints=_leader_endpoints(server, topics, ctx.listener_name))
    return RawResponse(parts, size)


def _fetch_params(req: FetchRequest) -> FetchParams:
    follower = req.replica_id >= 0
    # KIP-392: a consumer's Fetch v11+ may be served by a follower; it names its client.rack ("" for none)
    client_rack = (req.rack_id or "") if not follower and req.rack_id is not None else None
    isolation = (
        FetchIsolation.LOG_END if follower
        else FetchIsolation.TXN_COMMITTED if req.isolation_level == READ_COMMITTED
        else FetchIsolation.HIGH_WATERMARK
    )
    return FetchParams(req.replica_id, _ms(req.max_wait), req.min_bytes,
                       req.max_bytes if req.max_bytes > 0 else NO_RESPONSE_LIMIT, isolation, client_rack)


def _partition_reads(ctx: RequestContext[FetchServer], server: FetchServer, fetch_session: FetchContext,
                     follower: bool) -> tuple[list[FetchTopicData], list[PartitionRead]]:
    """The response's topics, each partition's data to be filled in, and the partitions to read: the
    others already carry their error (unknown topic, not authorized)."""
    version = ctx.api_version
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
    reads: list[PartitionRead] = []
    for ft in fetch_session.topics:
        if version >= TOPIC_IDS_SINCE:
            # kio reads the all-zero id as None: no topic has it
            tid = ft.topic_id or uuid.UUID(int=0)
            meta = server.topic_by_id(tid) if ft.topic_id else None
            name = meta.name if meta else ""
        else:
            name = ft.topic
            meta = server.get_topic(name)
            tid = meta.topic_id if meta else uuid.UUID(int=0)
        td = FetchTopicData(name, tid)
        for fp in ft.partitions:
            pr = PartitionRead(name, fp.partition, fp.fetch_offset, fp.partition_max_bytes, fp.current_leader_epoch,
                               fp.log_start_offset, fp.last_fetched_epoch)
            if meta is None and version >= TOPIC_IDS_SINCE:
                pr.data.error_code = ErrorCode.unknown_topic_id
            elif not may_fetch(name):
                pr.data.error_code = ErrorCode.topic_authorization_failed
            elif meta is None:
                pr.data.error_code = ErrorCode.unknown_topic_or_partition
            else:
                reads.append(pr)
            td.partitions.append(pr.data)
        topics.append(td)
    return topics, reads


def _leader_endpoints(server: FetchServer, topics: list[FetchTopicData],
                      listener: str) -> list[tuple[int, str, int, str | None]]:
    """Where the leaders named in ``current_leader`` hints are (Fetch v16's NodeEndpoints)."""
    node = server.cluster_node
    if node is None:
        return []
    ids = {d.current_leader[0] for t in topics for d in t.partitions if d.current_leader is not None}
    return [ep for i in sorted(ids) if (ep := node.client_endpoint(i, listener)) is not None]


def handlers() -> dict[int, Handler[FetchServer]]:
    return {FETCH: handle_fetch}
