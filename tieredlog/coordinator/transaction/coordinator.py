"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager).

A state machine per transactional id, its state durable in `__transaction_state` (one record per
transition, written before the transition is applied). The request handlers call `init_producer_id`,
`add_partitions`, `end_txn`, `list_transactions` and `describe_transactions`. EndTxn is answered once
PrepareCommit / PrepareAbort is written; the markers are then written to every partition of the
transaction through a `MarkerWriter`, retried until each partition has its marker, and only then is
CompleteCommit / CompleteAbort written, as in Kafka. A transaction open past its timeout is aborted by
the coordinator with the producer's epoch bumped, which fences the producer.

Alone, a broker coordinates every transactional id at coordinator epoch 0 and loads every partition
at start-up. In a cluster (`for_cluster`) it serves the ids of the `__transaction_state` partitions it
leads, with their leader epoch as coordinator epoch: `on_elected` loads a partition (its ids answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile) and resumes the markers of transactions left in a Prepare
state; `on_resigned` drops them (NOT_COORDINATOR).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.schema import SchemaError, partition_for
from tieredlog.coordinator.storage import PartitionedGroupStore, ReplayedRecord, store_error_code
from tieredlog.coordinator.timer import Cancellable, Scheduler
from tieredlog.coordinator.transaction import schema
from tieredlog.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
)

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
# Markers that could not be written are tried again after this long (Kafka's marker channel retries
# on its next send loop; a partition without a leader gets one once the metadata has it).
MARKER_RETRY_BACKOFF_S = 0.1
MARKER_RETRY_BACKOFF_MAX_S = 2.0
# A request that meets a transaction whose markers are being written waits this long for them before
# it is answered CONCURRENT_TRANSACTIONS (Kafka answers at once; the client then backs off, which costs
# more than the markers take on a healthy cluster).
COMPLETION_WAIT_S = 0.2


@dataclass(frozen=True)
class TransactionConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    num_partitions: int = 50  # transaction.state.log.num.partitions

    @classmethod
    def from_properties(cls, props) -> "TransactionConfig":  # noqa: ANN001 - a dict or BrokerConfig
        names = {
            "transaction.max.timeout.ms": "max_timeout_ms",
            "transactional.id.expiration.ms": "id_expiration_ms",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "abort_timed_out_interval_ms",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "remove_expired_interval_ms",
            "transaction.state.log.num.partitions": "num_partitions",
        }
        values = {attr: int(props.get(key)) for key, attr in names.items() if props.get(key) not in (None, "")}
        return cls(**values)


class MarkerWriter(Protocol):
    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                            partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Write a COMMIT or ABORT marker to each partition at its leader; the error per partition
        (NONE once the partition has it)."""

    async def close(self) -> None:
        """Release connections to other brokers."""


ProducerIdSource = Callable[[], Awaitable[int]]

# Errors after which a marker is not needed (the partition is gone, or has seen a newer epoch of this
# producer, so this transaction is settled there); any other error is retried.
_MARKER_SETTLED = {
    ErrorCode.none,
    ErrorCode.invalid_producer_epoch,
    ErrorCode.producer_fenced,
    ErrorCode.transaction_coordinator_fenced,
}


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, scheduler: Scheduler, store: PartitionedGroupStore,
                 producer_ids: ProducerIdSource, markers: MarkerWriter, *, cluster: bool = False,
                 partition_exists: Callable[[TopicPartition], bool] = lambda tp: True) -> None:
        """``partition_exists``: a marker for a partition that no longer exists (its topic was
        deleted) is dropped rather than retried forever."""
        self.config = config
        self.scheduler = scheduler
        self.store = store
        self._producer_ids = producer_ids
        self._markers = markers
        self._partition_exists = partition_exists
        self.cluster = cluster
        self.transactions: dict[str, TransactionMetadata] = {}
        # partition of __transaction_state -> coordinator epoch (alone: every partition at epoch 0)
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}
        self.active = False
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[Cancellable] = []
        self._completing: dict[str, asyncio.Event] = {}  # transactional id -> set once its markers are done

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        if not self.cluster:
            now = self.scheduler.wall_clock_ms()
            for p in range(self.store.num_partitions):
                records = await asyncio.to_thread(self._replay, p)
                self._adopt(p, 0, _load(records, now))
        self.active = True
        self._schedule(self.config.abort_timed_out_interval_ms, self.abort_timed_out_transactions)
        self._schedule(self.config.remove_expired_interval_ms, self.remove_expired_transactional_ids)

    async def shutdown(self) -> None:
        self.active = False
        for timer in self._timers:
            timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await self._markers.close()

    def _replay(self, partition: int) -> list[ReplayedRecord]:
        """A partition's records (reads the disk: called in a thread)."""
        return list(self.store.replay_partition(partition))

    def _schedule(self, interval_ms: int, action: Callable[[], None]) -> None:
        def tick() -> None:
            if not self.active:
                return
            try:
                action()
            finally:
                self._timers.append(self.scheduler.call_later(interval_ms, tick))
        self._timers.append(self.scheduler.call_later(interval_ms, tick))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- leadership of __transaction_state partitions (a cluster) -----------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.store.num_partitions)

    def on_elected(self, partition: int, coordinator_epoch: int) -> None:
        if partition in self.owned:
            self.owned[partition] = max(self.owned[partition], coordinator_epoch)
            return
        if self.loading.get(partition, -1) >= coordinator_epoch:
            return
        self.loading[partition] = coordinator_epoch
        self._spawn(self._load_partition(partition, coordinator_epoch), f"load-{TRANSACTION_STATE_TOPIC}-{partition}")

    def on_resigned(self, partition: int, coordinator_epoch: int) -> None:
        held = self.owned.get(partition, self.loading.get(partition))
        if held is None or coordinator_epoch < held:
            return
        self.owned.pop(partition, None)
        self.loading.pop(partition, None)
        dropped = [t for t in self.transactions if self.partition_for(t) == partition]
        for t in dropped:
            del self.transactions[t]
        log.info("%s-%d: no longer the coordinator, unloaded %d transactional id(s)",
                 TRANSACTION_STATE_TOPIC, partition, len(dropped))

    async def _load_partition(self, partition: int, coordinator_epoch: int) -> None:
        started = time.monotonic()
        now = self.scheduler.wall_clock_ms()
        try:
            records = await asyncio.to_thread(self._replay, partition)
        except Exception:  # noqa: BLE001 - the partition stays unserved here; clients keep looking
            log.exception("%s-%d: loading the transactions failed", TRANSACTION_STATE_TOPIC, partition)
            if self.loading.get(partition) == coordinator_epoch:
                del self.loading[partition]
            return
        if self.loading.get(partition) != coordinator_epoch or not self.active:
            return
        del self.loading[partition]
        loaded = _load(records, now)
        self._adopt(partition, coordinator_epoch, loaded)
        log.info("%s-%d: loaded %d transactional id(s) in %.0f ms (coordinator epoch %d)", TRANSACTION_STATE_TOPIC,
                 partition, len(loaded), (time.monotonic() - started) * 1000, coordinator_epoch)

    def _adopt(self, partition: int, coordinator_epoch: int, loaded: dict[str, TransactionMetadata]) -> None:
        self.owned[partition] = coordinator_epoch
        self.transactions.update(loaded)
        for md in loaded.values():
            # Kafka resumes the markers of a transaction its previous coordinator had prepared
            if md.state.is_preparing:
                self._complete_later(md, md.state is TransactionState.PREPARE_COMMIT)
            elif md.state is TransactionState.PREPARE_EPOCH_FENCE:
                self._spawn(self._abort(md, fence=False), f"abort-{md.transactional_id}")

    def _ownership_error(self, transactional_id: str) -> ErrorCode | None:
        if not self.active:
            return ErrorCode.coordinator_not_available
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned:
            return ErrorCode.not_coordinator
        return None

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        return self.owned.get(self.partition_for(transactional_id))

    # -- writes -----------------------------------------------------------------------------------
    async def _write(self, md: TransactionMetadata, record: schema.StoredTransaction) -> ErrorCode:
        """Write ``record`` for ``md`` and apply it once durable (the ISR has it, in a cluster)."""
        tid = md.transactional_id
        epoch = self.coordinator_epoch(tid)
        md.pending = TransactionState(record.state)
        try:
            wait = self.store.append(tid, [(schema.encode_key(tid), schema.encode_value(record))],
                                     self.scheduler.wall_clock_ms())
            if wait is not None:
                await wait()
        except Exception as exc:  # noqa: BLE001 - the failed write is the request's answer
            md.pending = None
            code = store_error_code(exc)
            log.warning("transactional id %s: writing %s to %s failed: %s", tid,
                        TransactionState(record.state).display_name, TRANSACTION_STATE_TOPIC, code.name)
            return code
        if self.coordinator_epoch(tid) != epoch or self.transactions.get(tid) is not md:
            md.pending = None
            return ErrorCode.not_coordinator  # resigned while writing: the next coordinator reloads the log
        md.apply(record)
        return ErrorCode.none

    # -- InitProducerId ----------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        fail = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if transactional_id == "":
            return (ErrorCode.invalid_request, *fail)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return (ErrorCode.invalid_transaction_timeout, *fail)
        if (code := self._ownership_error(transactional_id)) is not None:
            return (code, *fail)
        await self._await_completion(transactional_id)
        md = self.transactions.get(transactional_id)
        if md is None:
            try:
                pid = await self._producer_ids()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or the disk failed: the client retries
                log.warning("could not reserve a block of producer ids: %s", exc)
                return (ErrorCode.coordinator_not_available, *fail)
            md = self.transactions.setdefault(transactional_id,
                                              TransactionMetadata(transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms))
        if md.pending is not None or md.state.is_preparing or md.state is TransactionState.PREPARE_EPOCH_FENCE:
            return (ErrorCode.concurrent_transactions, *fail)
        if expected_producer_id >= 0:
            # KIP-360: a producer that knows its id and epoch may only continue them
            if expected_producer_id != md.producer_id:
                return (ErrorCode.producer_fenced, *fail)
            if expected_epoch == md.last_producer_epoch and md.state is TransactionState.EMPTY:
                return ErrorCode.none, md.producer_id, md.producer_epoch  # a retry of the last bump
            if expected_epoch != md.producer_epoch:
                return (ErrorCode.producer_fenced, *fail)
        if md.state is TransactionState.ONGOING:
            # an older instance of this producer left a transaction open: fence it and abort the
            # transaction with the bumped epoch; the client retries and gets its epoch after the abort
            self._spawn(self._abort(md, fence=True), f"abort-{transactional_id}")
            return (ErrorCode.concurrent_transactions, *fail)
        if md.state is TransactionState.DEAD:
            return (ErrorCode.concurrent_transactions, *fail)
        now = self.scheduler.wall_clock_ms()
        pid, epoch = md.producer_id, md.producer_epoch + 1
        if md.producer_epoch >= MAX_PRODUCER_EPOCH:
            try:
                pid, epoch = await self._producer_ids(), 0  # the epoch is exhausted: a new producer id
            except Exception as exc:  # noqa: BLE001
                log.warning("could not reserve a block of producer ids: %s", exc)
                return (ErrorCode.coordinator_not_available, *fail)
        record = md.stored(TransactionState.EMPTY, producer_id=pid, producer_epoch=epoch, partitions=set(),
                           timeout_ms=timeout_ms, start_ms=-1, now_ms=now)
        code = await self._write(md, record)
        if code != ErrorCode.none:
            return (code, *fail)
        return ErrorCode.none, md.producer_id, md.producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------------
    def _producer_metadata(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata | ErrorCode:
        """The id's metadata when this broker coordinates it and the request names its current
        producer id and epoch; else the error to answer."""
        if (code := self._ownership_error(transactional_id)) is not None:
            return code
        md = self.transactions.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if md.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        return md

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata | ErrorCode:
        md = self._producer_metadata(transactional_id, producer_id, epoch)
        if isinstance(md, ErrorCode):
            return md
        if md.pending is not None or md.state.is_preparing or md.state is TransactionState.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        return md

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        await self._await_completion(transactional_id)
        found = self._check_producer(transactional_id, producer_id, epoch)
        if isinstance(found, ErrorCode):
            return found
        md = found
        wanted = set(partitions)
        if md.state is TransactionState.DEAD:
            return ErrorCode.invalid_txn_state
        if md.state is TransactionState.ONGOING and wanted <= md.partitions:
            return ErrorCode.none
        now = self.scheduler.wall_clock_ms()
        start = md.start_ms if md.state is TransactionState.ONGOING else now
        record = md.stored(TransactionState.ONGOING, partitions=md.partitions | wanted if
                           md.state is TransactionState.ONGOING else wanted, start_ms=start, now_ms=now)
        return await self._write(md, record)

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn `verify_only`): NONE for each partition in the open
        transaction, TRANSACTION_ABORTABLE for one not in it. A pending write is not waited for:
        partitions join the metadata once their AddPartitions record is durable, and leave it with
        the markers, which void a verification on their own."""
        wanted = set(partitions)
        if transactional_id == "":
            return {tp: ErrorCode.invalid_request for tp in wanted}
        if (code := self._ownership_error(transactional_id)) is not None:
            return {tp: code for tp in wanted}
        md = self.transactions.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            code = ErrorCode.invalid_producer_id_mapping
        elif md.producer_epoch != epoch:
            code = ErrorCode.producer_fenced
        elif md.state.is_preparing:
            code = ErrorCode.concurrent_transactions
        else:
            return {tp: ErrorCode.none if tp in md.partitions else ErrorCode.transaction_abortable for tp in wanted}
        return {tp: code for tp in wanted}

    # -- EndTxn -----------------------------------------------------------------------------------
    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, committed: bool) -> ErrorCode:
        md = self._producer_metadata(transactional_id, producer_id, epoch)
        if isinstance(md, ErrorCode):
            return md
        if md.pending is not None:
            return ErrorCode.concurrent_transactions
        state = md.state
        if state is TransactionState.ONGOING:
            return await self._prepare(md, committed)
        if state is TransactionState.COMPLETE_COMMIT:
            return ErrorCode.none if committed else ErrorCode.invalid_txn_state  # a retried EndTxn
        if state is TransactionState.COMPLETE_ABORT:
            return ErrorCode.invalid_txn_state if committed else ErrorCode.none
        if state is TransactionState.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if committed else ErrorCode.invalid_txn_state
        if state is TransactionState.PREPARE_ABORT:
            return ErrorCode.invalid_txn_state if committed else ErrorCode.concurrent_transactions
        return ErrorCode.invalid_txn_state  # Empty (nothing to end), Dead, PrepareEpochFence

    async def _prepare(self, md: TransactionMetadata, committed: bool, *, producer_epoch: int | None = None) -> ErrorCode:
        state = TransactionState.PREPARE_COMMIT if committed else TransactionState.PREPARE_ABORT
        record = md.stored(state, producer_epoch=producer_epoch, now_ms=self.scheduler.wall_clock_ms())
        code = await self._write(md, record)
        if code == ErrorCode.none:
            self._complete_later(md, committed)
        return code

    async def _abort(self, md: TransactionMetadata, *, fence: bool) -> None:
        """Abort ``md``'s open transaction from the coordinator (a timeout, a new instance of its
        producer): with the epoch bumped first, so the old producer's next request is fenced."""
        epoch = md.producer_epoch + 1 if fence and md.producer_epoch < MAX_PRODUCER_EPOCH else md.producer_epoch
        if md.pending is not None or md.state not in (TransactionState.ONGOING, TransactionState.PREPARE_EPOCH_FENCE):
            return
        code = await self._prepare(md, False, producer_epoch=epoch)
        if code != ErrorCode.none:
            log.warning("transactional id %s: aborting the open transaction failed (%s); retried on the next timeout "
                        "check", md.transactional_id, code.name)

    def _complete_later(self, md: TransactionMetadata, committed: bool) -> None:
        done = self._completing[md.transactional_id] = asyncio.Event()

        async def complete() -> None:
            try:
                await self._complete(md, committed)
            finally:
                done.set()
                if self._completing.get(md.transactional_id) is done:
                    del self._completing[md.transactional_id]

        self._spawn(complete(), f"markers-{md.transactional_id}")

    async def _await_completion(self, transactional_id: str) -> None:
        done = self._completing.get(transactional_id)
        if done is not None:
            try:
                await asyncio.wait_for(done.wait(), COMPLETION_WAIT_S)
            except asyncio.TimeoutError:
                pass  # still writing markers: the caller answers CONCURRENT_TRANSACTIONS

    async def _complete(self, md: TransactionMetadata, committed: bool) -> None:
        """Write the markers until every partition has one, then CompleteCommit / CompleteAbort."""
        tid = md.transactional_id
        coordinator_epoch = self.coordinator_epoch(tid)
        remaining = set(md.partitions)
        backoff = MARKER_RETRY_BACKOFF_S
        while remaining:
            if not self.active or self.coordinator_epoch(tid) != coordinator_epoch or self.transactions.get(tid) is not md:
                return  # no longer this transaction's coordinator: the next one resumes it
            try:
                result = await self._markers.write_markers(md.producer_id, md.producer_epoch, coordinator_epoch or 0,
                                                           committed, remaining)
            except Exception:  # noqa: BLE001 - the whole send failed: every partition is retried
                log.exception("transactional id %s: sending markers failed", tid)
                result = {}
            for tp, code in result.items():
                if code in _MARKER_SETTLED:
                    remaining.discard(tp)
                elif code == ErrorCode.unknown_topic_or_partition and not self._partition_exists(tp):
                    log.info("transactional id %s: %s-%d no longer exists; its marker is dropped", tid, *tp)
                    remaining.discard(tp)
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_MAX_S)
        state = TransactionState.COMPLETE_COMMIT if committed else TransactionState.COMPLETE_ABORT
        while True:
            if not self.active or self.coordinator_epoch(tid) != coordinator_epoch or self.transactions.get(tid) is not md:
                return
            code = await self._write(md, md.stored(state, partitions=set(), now_ms=self.scheduler.wall_clock_ms()))
            if code in (ErrorCode.none, ErrorCode.not_coordinator):
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_MAX_S)

    # -- timers -----------------------------------------------------------------------------------
    def abort_timed_out_transactions(self) -> None:
        now = self.scheduler.wall_clock_ms()
        for md in list(self.transactions.values()):
            if md.state is TransactionState.ONGOING and md.pending is None and md.start_ms + md.timeout_ms < now:
                log.info("transactional id %s: aborting the transaction of producer %d (epoch %d), open for %d ms, "
                         "past its timeout of %d ms", md.transactional_id, md.producer_id, md.producer_epoch,
                         now - md.start_ms, md.timeout_ms)
                self._spawn(self._abort(md, fence=True), f"abort-{md.transactional_id}")

    def remove_expired_transactional_ids(self) -> None:
        now = self.scheduler.wall_clock_ms()
        for tid, md in list(self.transactions.items()):
            if md.state.is_complete and md.pending is None and md.last_update_ms + self.config.id_expiration_ms < now:
                self._spawn(self._expire(md), f"expire-{tid}")

    async def _expire(self, md: TransactionMetadata) -> None:
        tid = md.transactional_id
        md.pending = TransactionState.DEAD
        try:
            wait = self.store.append(tid, [(schema.encode_key(tid), None)], self.scheduler.wall_clock_ms())
            if wait is not None:
                await wait()
        except Exception as exc:  # noqa: BLE001 - tried again at the next expiration check
            log.warning("transactional id %s: writing its expiration failed: %s", tid, exc)
            md.pending = None
            return
        if self.transactions.get(tid) is md:
            del self.transactions[tid]

    # -- ListTransactions / DescribeTransactions ------------------------------------------------------
    def list_transactions(self, states: set[str], producer_ids: set[int],
                          min_duration_ms: int = -1) -> tuple[ErrorCode, list[tuple[str, int, str]], list[str]]:
        """(error, [(transactional id, producer id, state name)], unknown state filters)."""
        if not self.active or self.loading:
            return ErrorCode.coordinator_load_in_progress if self.loading else ErrorCode.coordinator_not_available, [], []
        unknown = sorted(s for s in states if TransactionState.from_name(s) is None)
        wanted = {TransactionState.from_name(s) for s in states} - {None}
        now = self.scheduler.wall_clock_ms()
        out = []
        for tid, md in sorted(self.transactions.items()):
            if states and md.state not in wanted:
                continue
            if producer_ids and md.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (md.state is not TransactionState.ONGOING or now - md.start_ms < min_duration_ms):
                continue
            out.append((tid, md.producer_id, md.state.display_name))
        return ErrorCode.none, out, unknown

    def describe_transaction(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if (code := self._ownership_error(transactional_id)) is not None:
            return code, None
        md = self.transactions.get(transactional_id)
        if md is None:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, md


def _load(records: Iterable[ReplayedRecord], now_ms: int) -> dict[str, TransactionMetadata]:
    """The transactional ids the records of one partition leave behind (the last record of an id wins,
    a tombstone removes it)."""
    stored: dict[str, schema.StoredTransaction | None] = {}
    unreadable = 0
    first: SchemaError | None = None
    for key, value, _ in records:
        try:
            tid = schema.decode_key(key)
            stored[tid] = None if value is None else schema.decode_value(value)
        except (SchemaError, ValueError) as exc:
            unreadable += 1
            first = first or SchemaError(str(exc))
    if first is not None:
        log.warning("skipped %d unreadable %s record(s); the first: %s", unreadable, TRANSACTION_STATE_TOPIC, first)
    out = {}
    for tid, record in stored.items():
        if record is None or record.state == TransactionState.DEAD:
            continue
        out[tid] = TransactionMetadata.from_stored(tid, record)
    return out
