"""Kafka's FindHangingTransactions logic (kafka-transactions.sh find-hanging, KIP-664), apart from the
requests that feed it so it can be checked against given answers.

A transaction is a candidate when a partition's producer state shows it open and its producer has
written nothing for longer than the longest transaction timeout any coordinator allows: a live
transaction would have ended (committed, aborted, or been aborted by its coordinator) by then. A
candidate is hanging unless a coordinator still answers for it: its producer id is listed
(ListTransactions) under a transactional id whose description (DescribeTransactions) includes the
partition, so the coordinator will still write the marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from tieredlog.log.types import TopicPartition
from tieredlog.tools.transaction_admin import ProducerState, TransactionDescription, TransactionListing

# kafka-transactions.sh find-hanging's default --max-transaction-timeout (minutes), Kafka's default
# transaction.max.timeout.ms
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
MS_PER_MINUTE = 60_000

HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
           "Duration(min)")


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    topic_partition: TopicPartition
    producer: ProducerState


def candidate_open_transactions(producers: Mapping[TopicPartition, Iterable[ProducerState]], now_ms: int,
                                max_transaction_timeout_ms: int) -> list[OpenTransaction]:
    """Open transactions whose producer last wrote more than the timeout ago (Kafka measures from the
    producer's last timestamp, not from the transaction's start)."""
    return [OpenTransaction(tp, p) for tp, states in producers.items() for p in states
            if p.current_transaction_start_offset is not None
            and now_ms - p.last_timestamp > max_transaction_timeout_ms]


def group_by_producer_id(candidates: Iterable[OpenTransaction]) -> dict[int, list[OpenTransaction]]:
    out: dict[int, list[OpenTransaction]] = {}
    for t in candidates:
        out.setdefault(t.producer.producer_id, []).append(t)
    return out


def transactional_ids(listings: Iterable[TransactionListing], producer_ids: Iterable[int]) -> dict[int, str]:
    """Producer id -> transactional id, from ListTransactions filtered by those producer ids (a listing
    of another producer id, which a coordinator ignoring the filter might send, is left out)."""
    wanted = set(producer_ids)
    return {t.producer_id: t.transactional_id for t in listings if t.producer_id in wanted}


def hanging_transactions(open_by_producer: Mapping[int, list[OpenTransaction]], ids: Mapping[int, str],
                         descriptions: Mapping[str, TransactionDescription | None]) -> list[OpenTransaction]:
    """The candidates no coordinator will end: no transactional id for the producer, no description
    for it (TRANSACTIONAL_ID_NOT_FOUND), or a description whose partitions leave this one out.

    DescribeTransactions lists every partition of an ongoing transaction, and while it prepares to
    commit or abort the partitions whose marker is not written yet: one listed will get its marker.
    """
    hanging: list[OpenTransaction] = []
    for producer_id, txns in open_by_producer.items():
        tid = ids.get(producer_id)
        description = descriptions.get(tid) if tid is not None else None
        if description is None:
            hanging.extend(txns)
        else:
            hanging.extend(t for t in txns if t.topic_partition not in description.topic_partitions)
    return hanging


def rows(hanging: Iterable[OpenTransaction], now_ms: int) -> list[list[str]]:
    out = []
    for t in hanging:
        p = t.producer
        out.append([
            t.topic_partition.topic, str(t.topic_partition.partition), str(p.producer_id), str(p.producer_epoch),
            str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
            str(-1 if p.current_transaction_start_offset is None else p.current_transaction_start_offset),
            str(p.last_timestamp), str((now_ms - p.last_timestamp) // MS_PER_MINUTE),
        ])
    return out
