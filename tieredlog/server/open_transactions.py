"""The transactions open on a partition, as the metrics scrape sees them (hanging-transaction gauges).

Read from the partition's producer state without the log's lock, as every gauge of
tieredlog.server.broker_metrics is: the scrape runs on the HTTP server's thread and must never make an
append wait. Each container is copied whole first (``dict(...)``, ``list(deque)`` and ``min(dict)`` run
in C under the GIL, so no append interleaves; ``first_unstable_offset`` takes its minimum over such a
copy); an entry changed meanwhile is at worst one scrape
stale, never torn in a way that matters here (a transaction that completed in between is skipped).

A transaction's start is the timestamp of its first batch while the producer state still holds it
(the last 5 batches of each producer); for a longer transaction, or one restored from a snapshot,
the oldest batch of it still held, so the age shown is then a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from tieredlog.log.producer_state import ProducerStateEntry, ProducerStateManager

# Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS: a transaction is late once its producer has
# been silent for transaction.max.timeout.ms plus this much (the coordinator should have aborted it).
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    producer_id: int
    producer_epoch: int
    start_offset: int
    start_timestamp: int
    last_timestamp: int  # of the producer's newest batch, what Kafka's lateness and find-hanging measure

    def age_ms(self, now_ms: int) -> int:
        return max(now_ms - self.start_timestamp, 0)


def _start_timestamp(entry: ProducerStateEntry, start_offset: int) -> int:
    held = [b.timestamp for b in list(entry.batches) if b.first_offset >= start_offset]
    return min(held) if held else entry.last_timestamp


def open_transactions(state: ProducerStateManager) -> list[OpenTransaction]:
    """The open transactions, oldest (lowest start offset) first; cheap when there are none."""
    if state.first_unstable_offset() is None:
        return []  # no transaction open nor one whose marker awaits replication
    out = []
    for entry in state.active_producers.values():
        start = entry.current_txn_first_offset
        if start is None:
            continue
        out.append(OpenTransaction(entry.producer_id, entry.producer_epoch, start, _start_timestamp(entry, start),
                                   entry.last_timestamp))
    out.sort(key=lambda t: t.start_offset)
    return out


def has_late_transaction(open_txns: list[OpenTransaction], now_ms: int, max_transaction_timeout_ms: int) -> bool:
    """Kafka's ProducerStateManager.hasLateTransaction: the producer of the oldest open transaction has
    written nothing for longer than transaction.max.timeout.ms plus the buffer."""
    if not open_txns:
        return False
    last = open_txns[0].last_timestamp
    return last > 0 and now_ms - last > max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS
