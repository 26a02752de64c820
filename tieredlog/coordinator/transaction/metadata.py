"""A transactional id's state at its coordinator (Kafka's TransactionMetadata and TransactionState)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tieredlog.coordinator.transaction.schema import StoredTransaction

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# An epoch at this value cannot be bumped again: the coordinator hands out a new producer id instead.
MAX_PRODUCER_EPOCH = 32767 - 1


class TransactionState(enum.IntEnum):
    """Kafka's TransactionState, with the ids `__transaction_state` stores and the names
    ListTransactions / DescribeTransactions use."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> "TransactionState | None":
        return _BY_NAME.get(name)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def is_preparing(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

TopicPartition = tuple[str, int]


@dataclass
class TransactionMetadata:
    """What the coordinator knows of one transactional id. ``pending`` is set while a new state is
    being written to the log: requests meanwhile get CONCURRENT_TRANSACTIONS, as in Kafka."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # before the last bump: a retried InitProducerId
    pending: TransactionState | None = None

    def stored(self, state: TransactionState | None = None, *, producer_id: int | None = None,
               producer_epoch: int | None = None, partitions: set[TopicPartition] | None = None,
               timeout_ms: int | None = None, start_ms: int | None = None, now_ms: int) -> StoredTransaction:
        """The record of this transaction moved to ``state`` (what is written before it is applied)."""
        return StoredTransaction(
            self.producer_id if producer_id is None else producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            int(self.state if state is None else state),
            frozenset(self.partitions if partitions is None else partitions),
            now_ms,
            self.start_ms if start_ms is None else start_ms,
        )

    def apply(self, record: StoredTransaction) -> None:
        """Take the state a written record holds (after the write, or while loading the log)."""
        if record.producer_epoch != self.producer_epoch or record.producer_id != self.producer_id:
            self.last_producer_epoch = self.producer_epoch if record.producer_id == self.producer_id else NO_PRODUCER_EPOCH
        self.producer_id = record.producer_id
        self.producer_epoch = record.producer_epoch
        self.timeout_ms = record.timeout_ms
        self.state = TransactionState(record.state)
        self.partitions = set(record.partitions)
        self.last_update_ms = record.last_update_ms
        self.start_ms = record.start_ms
        self.pending = None

    @classmethod
    def from_stored(cls, transactional_id: str, record: StoredTransaction) -> "TransactionMetadata":
        md = cls(transactional_id, record.producer_id, record.producer_epoch, record.timeout_ms)
        md.apply(record)
        md.last_producer_epoch = NO_PRODUCER_EPOCH
        return md
