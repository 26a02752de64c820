"""KIP-890 part 1 for Produce: a transaction's first batch on a partition is appended once its
coordinator confirms the partition is in the transaction (Kafka's ReplicaManager with the
AddPartitionsToTxnManager). The ReplicaManager asks this module which appends need it and hands it
those appends; the loop serves other requests while the coordinator answers, and the produces of
one producer to one partition still append in the order they came.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.records.batch import HEADER_SIZE, MAGIC_OFFSET, read_header
from tieredlog.replication.data_path import LocalAppend, PartitionAppendResult, Unverified

if TYPE_CHECKING:
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.replication.replica_manager import ReplicaManager
    from tieredlog.server.topic_store import TopicMetadata
    from tieredlog.server.txn_verification import AddPartitionsToTxnManager, VerificationGuards

log = logging.getLogger(__name__)

# Produce v11 knows TRANSACTION_ABORTABLE; older versions get INVALID_TXN_STATE with Kafka's message.
TRANSACTION_ABORTABLE_SINCE = 11
NOT_ADDED = "Partition was not added to the transaction"
# retriable coordinator answers older clients may not retry: NOT_ENOUGH_REPLICAS (no metadata refresh)
_RETRY_AS_NOT_ENOUGH_REPLICAS = {ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
                                 ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                 ErrorCode.concurrent_transactions}


class VerificationServer(Protocol):
    """What the verification of a produce needs of the broker."""

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def txn_guards(self) -> VerificationGuards: ...

    @property
    def txn_verification(self) -> AddPartitionsToTxnManager: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def get_partition_log(self, topic: str, partition: int) -> UnifiedLog | None: ...


class ProduceVerification:
    """The verification of one Produce request of ``transactional_id`` (an AppendVerification)."""

    def __init__(self, server: VerificationServer, transactional_id: str, api_version: int) -> None:
        self._server = server
        self._transactional_id = transactional_id
        self._api_version = api_version

    def producer_to_verify(self, tp: TopicPartition, records: bytes | None) -> tuple[int, int] | None:
        """(producer id, epoch) when ``records`` starts a transaction on ``tp``, a partition led here (its
        first batch is transactional and the producer has no transaction open there at that epoch);
        None when the append needs no verification (or will be refused for another reason)."""
        if not records or len(records) < HEADER_SIZE or records[MAGIC_OFFSET] != 2:
            return None
        header = read_header(records)
        if not header.is_transactional or header.producer_id < 0:
            return None
        rm = self._server.replica_manager
        partition = rm.get_partition(tp) if rm is not None else None
        meta = self._server.get_topic(tp.topic)
        if partition is None or not partition.is_leader or meta is None or meta.internal:
            return None
        if self._in_transaction(tp, header.producer_id, header.producer_epoch):
            return None
        return header.producer_id, header.producer_epoch

    def _in_transaction(self, tp: TopicPartition, producer_id: int, producer_epoch: int) -> bool:
        plog = self._server.get_partition_log(tp.topic, tp.partition)
        entry = plog.producer_state.last_entry(producer_id) if plog is not None else None
        return entry is not None and entry.current_txn_first_offset is not None and entry.producer_epoch == producer_epoch

    async def append_verified(self, unverified: list[Unverified], append: LocalAppend) -> dict[int, PartitionAppendResult]:
        """Verify the partitions with the coordinator, then ``append`` those in the transaction: each
        answer by its position in the request."""
        producers = {producer for *_, producer in unverified}
        if len(producers) > 1:
            return {i: self._refused(tp, ErrorCode.invalid_producer_id_mapping,
                                     "Transactional records contained more than one producer ID")
                    for i, tp, _records, _producer in unverified}
        ((producer_id, epoch),) = producers
        guards = self._server.txn_guards
        places = {tp: guards.enter(tp, producer_id) for _, tp, *_ in unverified}
        try:
            before = [prev for prev, _ in places.values() if prev is not None]
            if before:
                await asyncio.wait(before)  # never cancels the earlier produces' futures
            need = {tp for _, tp, *_ in unverified if not self._in_transaction(tp, producer_id, epoch)}
            guard_of = {tp: guards.guard(tp, producer_id) for tp in need}
            errors = {}
            if need:
                answer = await self._server.txn_verification.verify(self._transactional_id, producer_id, epoch,
                                                                    {(tp.topic, tp.partition) for tp in need})
                errors = {TopicPartition(*k): code for k, code in answer.items()}
            out = {}
            for i, tp, records, _producer in unverified:
                if tp in errors:
                    code, message = verification_error(errors[tp], self._api_version)
                    log.debug("produce of transactional id %s to %s-%d not verified: %s", self._transactional_id,
                              *tp, errors[tp].name)
                    out[i] = self._refused(tp, code, message)
                elif tp in need and not self._in_transaction(tp, producer_id, epoch) \
                        and guards.guard(tp, producer_id) is not guard_of[tp]:
                    # a marker of this producer landed while the coordinator answered: that transaction is over
                    out[i] = self._refused(tp, ErrorCode.invalid_txn_state, "Record was not part of an ongoing transaction")
                else:
                    out[i] = append(tp, records)
            return out
        finally:
            for tp, (_, mine) in places.items():
                guards.leave(tp, producer_id, mine)

    def _refused(self, tp: TopicPartition, code: ErrorCode, message: str | None) -> PartitionAppendResult:
        plog = self._server.get_partition_log(tp.topic, tp.partition)
        return PartitionAppendResult(code, error_message=message,
                                     log_start_offset=plog.log_start_offset if plog is not None else -1)


def verification_error(code: ErrorCode, version: int) -> tuple[ErrorCode, str | None]:
    """Kafka's translation of a coordinator's answer into the produce's error (ReplicaManager)."""
    if code == ErrorCode.transaction_abortable and version < TRANSACTION_ABORTABLE_SINCE:
        code = ErrorCode.invalid_txn_state
    if code == ErrorCode.invalid_txn_state:
        return code, NOT_ADDED
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return (ErrorCode.not_enough_replicas,
                f"Unable to verify the partition has been added to the transaction. Underlying error: {code.name.upper()}")
    return code, None
