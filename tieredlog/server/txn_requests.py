"""Typed views of the transaction APIs' requests, whatever their version.

As tieredlog.server.group_requests: a handler takes the union of kio's classes (``Kio...Request``)
where every served version has the fields it reads, else a view with Kafka's default where a version
has none. AddPartitionsToTxn has two forms, a client's (v0-3) and the brokers' batch (v4+): each branch
of its handler reads its own union.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias, cast

if TYPE_CHECKING:
    from kio.schema.add_offsets_to_txn import v0 as ao0
    from kio.schema.add_offsets_to_txn import v1 as ao1
    from kio.schema.add_offsets_to_txn import v2 as ao2
    from kio.schema.add_offsets_to_txn import v3 as ao3
    from kio.schema.add_partitions_to_txn import v0 as ap0
    from kio.schema.add_partitions_to_txn import v1 as ap1
    from kio.schema.add_partitions_to_txn import v2 as ap2
    from kio.schema.add_partitions_to_txn import v3 as ap3
    from kio.schema.add_partitions_to_txn import v4 as ap4
    from kio.schema.add_partitions_to_txn import v5 as ap5
    from kio.schema.describe_transactions import v0 as dt0
    from kio.schema.end_txn import v0 as et0
    from kio.schema.end_txn import v1 as et1
    from kio.schema.end_txn import v2 as et2
    from kio.schema.end_txn import v3 as et3
    from kio.schema.end_txn import v4 as et4
    from kio.schema.list_transactions import v0 as lt0
    from kio.schema.list_transactions import v1 as lt1
    from kio.schema.txn_offset_commit import v0 as toc0
    from kio.schema.txn_offset_commit import v1 as toc1
    from kio.schema.txn_offset_commit import v2 as toc2
    from kio.schema.txn_offset_commit import v3 as toc3
    from kio.schema.write_txn_markers import v1 as wm1

    KioAddPartitionsToTxnRequest: TypeAlias = (ap0.AddPartitionsToTxnRequest | ap1.AddPartitionsToTxnRequest
                                               | ap2.AddPartitionsToTxnRequest | ap3.AddPartitionsToTxnRequest
                                               | ap4.AddPartitionsToTxnRequest | ap5.AddPartitionsToTxnRequest)
    KioAddPartitionsToTxnRequestV4: TypeAlias = ap4.AddPartitionsToTxnRequest | ap5.AddPartitionsToTxnRequest
    KioAddOffsetsToTxnRequest: TypeAlias = (ao0.AddOffsetsToTxnRequest | ao1.AddOffsetsToTxnRequest
                                            | ao2.AddOffsetsToTxnRequest | ao3.AddOffsetsToTxnRequest)
    KioEndTxnRequest: TypeAlias = (et0.EndTxnRequest | et1.EndTxnRequest | et2.EndTxnRequest | et3.EndTxnRequest
                                   | et4.EndTxnRequest)
    KioWriteTxnMarkersRequest: TypeAlias = wm1.WriteTxnMarkersRequest
    KioTxnOffsetCommitRequest: TypeAlias = (toc0.TxnOffsetCommitRequest | toc1.TxnOffsetCommitRequest
                                            | toc2.TxnOffsetCommitRequest | toc3.TxnOffsetCommitRequest)
    _KioTxnOffsetCommitRequestV2: TypeAlias = toc2.TxnOffsetCommitRequest | toc3.TxnOffsetCommitRequest
    _KioTxnOffsetCommitRequestV3: TypeAlias = toc3.TxnOffsetCommitRequest
    KioDescribeTransactionsRequest: TypeAlias = dt0.DescribeTransactionsRequest
    KioListTransactionsRequest: TypeAlias = lt0.ListTransactionsRequest | lt1.ListTransactionsRequest
    _KioListTransactionsRequestV1: TypeAlias = lt1.ListTransactionsRequest
    KioAddPartitionsToTxnTransaction: TypeAlias = (ap4.request.AddPartitionsToTxnTransaction
                                                   | ap5.request.AddPartitionsToTxnTransaction)
    KioAddPartitionsToTxnRequestV0To3: TypeAlias = (ap0.AddPartitionsToTxnRequest | ap1.AddPartitionsToTxnRequest
                                                    | ap2.AddPartitionsToTxnRequest | ap3.AddPartitionsToTxnRequest)

FIRST_BROKER_VERSION = 4  # AddPartitionsToTxn v4+: the brokers' batched form (KIP-890)
_COMMITTED_LEADER_EPOCH_SINCE, _GROUP_MEMBER_SINCE = 2, 3


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int  # -1 before v2
    committed_metadata: str | None


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitTopic:
    name: str
    partitions: list[TxnOffsetCommitPartition]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int  # before v3 (KIP-447) the request names no member: -1, "", None
    member_id: str
    group_instance_id: str | None
    topics: list[TxnOffsetCommitTopic]


def txn_offset_commit_request(req: KioTxnOffsetCommitRequest, version: int) -> TxnOffsetCommitRequest:
    generation_id, member_id, instance_id = -1, "", None
    if version >= _GROUP_MEMBER_SINCE:
        v3 = cast("_KioTxnOffsetCommitRequestV3", req)
        generation_id, member_id, instance_id = v3.generation_id, v3.member_id, v3.group_instance_id
    topics = []
    if version >= _COMMITTED_LEADER_EPOCH_SINCE:
        for t2 in cast("_KioTxnOffsetCommitRequestV2", req).topics:
            topics.append(TxnOffsetCommitTopic(t2.name, [
                TxnOffsetCommitPartition(p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                         p.committed_metadata) for p in t2.partitions]))
    else:
        for t in req.topics:
            topics.append(TxnOffsetCommitTopic(t.name, [
                TxnOffsetCommitPartition(p.partition_index, p.committed_offset, -1, p.committed_metadata)
                for p in t.partitions]))
    return TxnOffsetCommitRequest(req.transactional_id, req.group_id, req.producer_id, req.producer_epoch,
                                  generation_id, member_id, instance_id, topics)


_DURATION_FILTER_SINCE = 1


@dataclass(frozen=True, slots=True)
class ListTransactionsRequest:
    state_filters: tuple[str, ...]
    producer_id_filters: tuple[int, ...]
    duration_filter: int  # ms; -1 (every duration) before v1


def list_transactions_request(req: KioListTransactionsRequest, version: int) -> ListTransactionsRequest:
    duration = -1
    if version >= _DURATION_FILTER_SINCE:
        duration = cast("_KioListTransactionsRequestV1", req).duration_filter
    return ListTransactionsRequest(tuple(req.state_filters), tuple(req.producer_id_filters), duration)


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    """InitProducerId v0-5; the producer id and epoch (KIP-360, v3+) are -1 before."""

    transactional_id: str | None
    transaction_timeout: datetime.timedelta
    producer_id: int = -1
    producer_epoch: int = -1


class KioInitProducerIdRequest(Protocol):
    transactional_id: str | None
    transaction_timeout: datetime.timedelta


class KioInitProducerIdRequestV3(KioInitProducerIdRequest, Protocol):
    producer_id: int
    producer_epoch: int


_PRODUCER_ID_SINCE = 3


def init_producer_id_request(req: KioInitProducerIdRequest, version: int) -> InitProducerIdRequest:
    if version >= _PRODUCER_ID_SINCE:
        v3 = cast(KioInitProducerIdRequestV3, req)
        return InitProducerIdRequest(req.transactional_id, req.transaction_timeout, v3.producer_id, v3.producer_epoch)
    return InitProducerIdRequest(req.transactional_id, req.transaction_timeout)
