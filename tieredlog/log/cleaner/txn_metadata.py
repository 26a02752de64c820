"""Kafka's CleanedTransactionMetadata: which batches of a cleaning round belong to aborted
transactions, and which transaction markers may go.

Fed every batch in offset order (the offset-map pass and the cleaning pass each keep their own).
Batches of an aborted transaction are dropped; an ABORT marker stays, and its transaction is kept
in the cleaned segment's transaction index, while this round still saw data of that transaction;
a COMMIT marker stays while this round saw data of its transaction. A marker that may go is then
kept until its delete horizon has passed, as a tombstone is.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.log.index import TransactionIndex
from tieredlog.records.record import CONTROL_ABORT, CONTROL_COMMIT


@dataclass(slots=True)
class _OngoingAbort:
    txn: AbortedTxn
    saw_data: bool = False


class CleanedTransactionMetadata:
    def __init__(self, cleaned_index: TransactionIndex | None = None) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0
        self._ongoing_aborted: dict[int, _OngoingAbort] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index = cleaned_index

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for t in txns:
            heapq.heappush(self._aborted, (t.first_offset, self._seq, t))
            self._seq += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAbort(txn))

    def on_control_batch(self, producer_id: int, last_offset: int, control_type: int | None) -> bool:
        """A marker (``control_type`` None: an empty control batch, no record left): whether it may
        be discarded as far as its transaction's data is concerned."""
        self._consume_aborted_up_to(last_offset)
        if control_type == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.saw_data:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing.txn)
                return False
            return True
        if control_type == CONTROL_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_data_batch(self, producer_id: int, last_offset: int, is_transactional: bool) -> bool:
        """Whether the batch belongs to an aborted transaction (and is discarded)."""
        self._consume_aborted_up_to(last_offset)
        if not is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing.saw_data = True
            return True
        self._ongoing_committed.add(producer_id)
        return False
