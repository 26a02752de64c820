"""Typed views of the metadata and offset lookups' requests (Metadata, DescribeCluster, ListOffsets,
OffsetForLeaderEpoch), whatever their version.

As tieredlog.server.group_requests: a handler takes the union of kio's classes (``Kio...Request``)
where every served version has the fields it reads, else a view with Kafka's default where a version
has none, built once per request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, cast

if TYPE_CHECKING:
    from kio.schema.describe_cluster import v0 as dcl0
    from kio.schema.describe_cluster import v1 as dcl1
    from kio.schema.list_offsets import v1 as lo1
    from kio.schema.list_offsets import v2 as lo2
    from kio.schema.list_offsets import v3 as lo3
    from kio.schema.list_offsets import v4 as lo4
    from kio.schema.list_offsets import v5 as lo5
    from kio.schema.list_offsets import v6 as lo6
    from kio.schema.list_offsets import v7 as lo7
    from kio.schema.list_offsets import v8 as lo8
    from kio.schema.list_offsets import v9 as lo9
    from kio.schema.metadata import v0 as md0
    from kio.schema.metadata import v1 as md1
    from kio.schema.metadata import v2 as md2
    from kio.schema.metadata import v3 as md3
    from kio.schema.metadata import v4 as md4
    from kio.schema.metadata import v5 as md5
    from kio.schema.metadata import v6 as md6
    from kio.schema.metadata import v7 as md7
    from kio.schema.metadata import v8 as md8
    from kio.schema.metadata import v9 as md9
    from kio.schema.metadata import v10 as md10
    from kio.schema.metadata import v11 as md11
    from kio.schema.metadata import v12 as md12
    from kio.schema.offset_for_leader_epoch import v2 as ofle2
    from kio.schema.offset_for_leader_epoch import v3 as ofle3
    from kio.schema.offset_for_leader_epoch import v4 as ofle4

    KioMetadataRequest: TypeAlias = (md0.MetadataRequest | md1.MetadataRequest | md2.MetadataRequest
                                     | md3.MetadataRequest | md4.MetadataRequest | md5.MetadataRequest
                                     | md6.MetadataRequest | md7.MetadataRequest | md8.MetadataRequest
                                     | md9.MetadataRequest | md10.MetadataRequest | md11.MetadataRequest
                                     | md12.MetadataRequest)
    _KioMetadataRequestV4: TypeAlias = (md4.MetadataRequest | md5.MetadataRequest | md6.MetadataRequest
                                        | md7.MetadataRequest | md8.MetadataRequest | md9.MetadataRequest
                                        | md10.MetadataRequest | md11.MetadataRequest | md12.MetadataRequest)
    _KioMetadataRequestV8: TypeAlias = (md8.MetadataRequest | md9.MetadataRequest | md10.MetadataRequest
                                        | md11.MetadataRequest | md12.MetadataRequest)
    _KioMetadataRequestV10: TypeAlias = md10.MetadataRequest | md11.MetadataRequest | md12.MetadataRequest
    KioDescribeClusterRequest: TypeAlias = dcl0.DescribeClusterRequest | dcl1.DescribeClusterRequest
    _KioDescribeClusterRequestV1: TypeAlias = dcl1.DescribeClusterRequest
    KioListOffsetsRequest: TypeAlias = (lo1.ListOffsetsRequest | lo2.ListOffsetsRequest | lo3.ListOffsetsRequest
                                        | lo4.ListOffsetsRequest | lo5.ListOffsetsRequest | lo6.ListOffsetsRequest
                                        | lo7.ListOffsetsRequest | lo8.ListOffsetsRequest | lo9.ListOffsetsRequest)
    _KioListOffsetsRequestV2: TypeAlias = (lo2.ListOffsetsRequest | lo3.ListOffsetsRequest | lo4.ListOffsetsRequest
                                           | lo5.ListOffsetsRequest | lo6.ListOffsetsRequest | lo7.ListOffsetsRequest
                                           | lo8.ListOffsetsRequest | lo9.ListOffsetsRequest)
    _KioListOffsetsRequestV4: TypeAlias = (lo4.ListOffsetsRequest | lo5.ListOffsetsRequest | lo6.ListOffsetsRequest
                                           | lo7.ListOffsetsRequest | lo8.ListOffsetsRequest | lo9.ListOffsetsRequest)
    KioOffsetForLeaderEpochRequest: TypeAlias = (ofle2.OffsetForLeaderEpochRequest | ofle3.OffsetForLeaderEpochRequest
                                                 | ofle4.OffsetForLeaderEpochRequest)
    _KioMetadataRequestV8To10: TypeAlias = md8.MetadataRequest | md9.MetadataRequest | md10.MetadataRequest

_ALLOW_AUTO_TOPIC_CREATION_SINCE, _AUTHORIZED_OPERATIONS_SINCE, _TOPIC_IDS_SINCE = 4, 8, 10
_CLUSTER_OPERATIONS_UNTIL = 10  # Metadata v11+ leaves them to DescribeCluster (KIP-700)


@dataclass(frozen=True, slots=True)
class MetadataRequestTopic:
    name: str | None  # null only from v10, with a topic id
    topic_id: uuid.UUID | None  # None before v10, and for the all-zero id


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    topics: list[MetadataRequestTopic] | None  # None: every topic (also v0's empty list, as Kafka reads it)
    allow_auto_topic_creation: bool  # True before v4
    include_cluster_authorized_operations: bool  # False outside v8-10
    include_topic_authorized_operations: bool  # False before v8


def metadata_request(req: KioMetadataRequest, version: int) -> MetadataRequest:
    topics = None
    if req.topics is not None and (req.topics or version > 0):
        if version >= _TOPIC_IDS_SINCE:
            v10 = cast("_KioMetadataRequestV10", req)
            topics = [MetadataRequestTopic(t.name, t.topic_id) for t in v10.topics or ()]
        else:
            topics = [MetadataRequestTopic(t.name, None) for t in req.topics]
    allow_auto = True
    if version >= _ALLOW_AUTO_TOPIC_CREATION_SINCE:
        allow_auto = cast("_KioMetadataRequestV4", req).allow_auto_topic_creation
    cluster_ops = topic_ops = False
    if version >= _AUTHORIZED_OPERATIONS_SINCE:
        topic_ops = cast("_KioMetadataRequestV8", req).include_topic_authorized_operations
    if _AUTHORIZED_OPERATIONS_SINCE <= version <= _CLUSTER_OPERATIONS_UNTIL:
        cluster_ops = cast("_KioMetadataRequestV8To10", req).include_cluster_authorized_operations
    return MetadataRequest(topics, allow_auto, cluster_ops, topic_ops)


_ENDPOINT_TYPE_SINCE = 1
BROKERS_ENDPOINT_TYPE = 1  # DescribeCluster's endpoint_type: brokers (2 is controllers, KIP-919)


def endpoint_type(req: KioDescribeClusterRequest, version: int) -> int:
    """DescribeCluster's endpoint type: the brokers' before v1."""
    if version >= _ENDPOINT_TYPE_SINCE:
        return cast("_KioDescribeClusterRequestV1", req).endpoint_type
    return BROKERS_ENDPOINT_TYPE


_ISOLATION_LEVEL_SINCE, _CURRENT_LEADER_EPOCH_SINCE = 2, 4
READ_UNCOMMITTED = 0


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    partition_index: int
    current_leader_epoch: int  # -1 (not checked) before v4
    timestamp: int


@dataclass(frozen=True, slots=True)
class ListOffsetsTopic:
    name: str
    partitions: list[ListOffsetsPartition]


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    isolation_level: int  # READ_UNCOMMITTED before v2
    topics: list[ListOffsetsTopic]


def list_offsets_request(req: KioListOffsetsRequest, version: int) -> ListOffsetsRequest:
    isolation = READ_UNCOMMITTED
    if version >= _ISOLATION_LEVEL_SINCE:
        isolation = cast("_KioListOffsetsRequestV2", req).isolation_level
    topics = []
    if version >= _CURRENT_LEADER_EPOCH_SINCE:
        for t4 in cast("_KioListOffsetsRequestV4", req).topics:
            topics.append(ListOffsetsTopic(t4.name, [
                ListOffsetsPartition(p.partition_index, p.current_leader_epoch, p.timestamp) for p in t4.partitions]))
    else:
        for t in req.topics:
            topics.append(ListOffsetsTopic(t.name, [ListOffsetsPartition(p.partition_index, -1, p.timestamp)
                                                    for p in t.partitions]))
    return ListOffsetsRequest(isolation, topics)
