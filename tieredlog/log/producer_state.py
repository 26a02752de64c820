"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager).

Per producer id: the producer epoch, the metadata of its last 5 batches (a retried batch that is
one of those gets the original offsets back instead of being written twice), the coordinator epoch
of its last transaction marker and the first offset of its open transaction, if any. Open
transactions give the first unstable offset, which bounds the last stable offset (LSO).

Snapshots ``<20-digit next offset>.snapshot`` use Kafka's producer snapshot format version 1
(:mod:`tieredlog.formats.producer_snapshot`), so they can be shipped to the remote tier and read by
Kafka tools.

Sequence rules follow Kafka's ProducerAppendInfo for appends from clients; ``update`` (also used
for replicated batches) never raises.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from tieredlog.atomic_file import atomic_write
from tieredlog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.producer_snapshot import (
    NO_TXN_FIRST_OFFSET,
    CorruptSnapshotError,
    SnapshotEntry,
    decode_producer_snapshot,
    encode_producer_snapshot,
)
from tieredlog.formats.record_walk import CONTROL_KEY, CONTROL_VALUE, key_length_position
from tieredlog.formats.varint import read_varint
from tieredlog.log.segment import SNAPSHOT_SUFFIX, filename_prefix
from tieredlog.records.batch import HEADER_SIZE, NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader, BytesLike, peek_size
from tieredlog.records.record import CONTROL_ABORT, ControlRecord

log = logging.getLogger(__name__)

# Kafka keeps the metadata of this many recent batches per producer for duplicate detection.
NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = (1 << 31) - 1

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")



@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """A retried batch already in the log: answer the producer with these original offsets."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset``; aborted ones go to the txn index."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def _maybe_bump_epoch(self, epoch: int) -> None:
        # A new epoch starts a new sequence space: old batches can no longer be duplicates.
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _decrement_sequence(seq: int, delta: int) -> int:
    # Sequences wrap at int32 max (DefaultRecordBatch.decrementSequence).
    return seq - delta if seq >= delta else INT32_MAX - (delta - seq) + 1


# ---------------------------------------------------------------------------------------------
# snapshot files


def snapshot_path(directory: str | os.PathLike[str], offset: int) -> Path:
    return Path(directory) / f"{filename_prefix(offset)}{SNAPSHOT_SUFFIX}"


def snapshot_offset_of(path: str | os.PathLike[str]) -> int | None:
    m = _SNAPSHOT_NAME.match(Path(path).name)
    return int(m.group(1)) if m else None


def encode_snapshot(entries: list[ProducerStateEntry]) -> bytes:
    return encode_producer_snapshot(
        SnapshotEntry(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            NO_TXN_FIRST_OFFSET if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
        for e in entries
    )


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse snapshot bytes; raises CorruptSnapshotError with the byte position of the problem."""
    entries = []
    for pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first in decode_producer_snapshot(data):
        e = ProducerStateEntry(pid, epoch, coordinator_epoch=coord_epoch, last_timestamp=ts)
        if txn_first >= 0:
            e.current_txn_first_offset = txn_first
        if last_offset >= 0:
            e.batches.append(
                BatchMetadata(_decrement_sequence(last_seq, delta), last_seq, last_offset - delta, last_offset, ts)
            )
        entries.append(e)
    return entries


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerStateEntry]:
    return decode_snapshot(Path(path).read_bytes())


# ---------------------------------------------------------------------------------------------
# control records


def read_control_record(buf: BytesLike, pos: int = 0) -> ControlRecord:
    """The control record of the (never compressed) control batch at ``pos``, read in place
    (records.record.parse_control_record needs the batch decoded first). Every length is kept
    within the batch; anything that is not a control record raises ValueError."""
    try:
        end = min(len(buf), pos + peek_size(buf, pos))
        view = memoryview(buf)[:end]
        p = pos + HEADER_SIZE
        _, p = read_varint(view, p)  # record length
        key_len, p = read_varint(view, key_length_position(view, p))
        if key_len < CONTROL_KEY.size or p + key_len > end:
            raise ValueError(f"control record key of {key_len} bytes at byte {p}")
        version, control_type = CONTROL_KEY.unpack_from(view, p)
        p += key_len
        value_len, p = read_varint(view, p)
        if value_len > end - p:
            raise ValueError(f"control record value of {value_len} bytes at byte {p}")
        coordinator_epoch = CONTROL_VALUE.unpack_from(view, p)[1] if value_len >= CONTROL_VALUE.size else None
    except (struct.error, IndexError, CorruptRecordError) as e:
        raise ValueError(f"truncated control record in batch at byte {pos}: {e}") from None
    return ControlRecord(version, control_type, coordinator_epoch)


# ---------------------------------------------------------------------------------------------


def _check_next_in_request(prev: BatchHeader, h: BatchHeader, txn_open: bool) -> None:
    """Kafka's sequence rules for a producer's batch that follows ``prev`` in the same request."""
    pid, epoch = h.producer_id, h.producer_epoch
    if epoch < prev.producer_epoch:
        raise InvalidProducerEpochError(
            f"producer {pid} has epoch {epoch}, smaller than epoch {prev.producer_epoch} earlier in the request"
        )
    if epoch != prev.producer_epoch:
        if h.base_sequence != 0 and prev.producer_epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequenceNumberError(
                f"producer {pid}: new epoch {epoch} must start at sequence 0, got {h.base_sequence}"
            )
    else:
        expected = 0 if prev.last_sequence == INT32_MAX else prev.last_sequence + 1  # sequences wrap
        if h.base_sequence != expected:
            raise OutOfOrderSequenceNumberError(
                f"producer {pid} epoch {epoch}: out of order sequence {h.base_sequence}, expected {expected}"
            )
    if txn_open and not h.is_transactional:
        raise InvalidTxnStateError(
            f"producer {pid} has a transaction open but sent a non-transactional batch"
        )


class ProducerStateManager:
    def __init__(self, dir: str | os.PathLike[str], producer_id_expiration_ms: int = 86_400_000):
        self.dir = Path(dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset of an open transaction -> producer id
        self._unreplicated: dict[int, CompletedTxn] = {}  # first offset -> txn whose marker is above the HW
        self.map_end_offset = 0  # next offset the state reflects

    # -- validation (client appends) -----------------------------------------------------------

    def check_sequence(self, header: BatchHeader) -> DuplicateBatch | None:
        """Validate a client batch against the producer's state, before it is appended.

        Returns DuplicateBatch for a retry of one of the last 5 batches. Raises
        InvalidProducerEpochError (older epoch), OutOfOrderSequenceNumberError (gap, or a new epoch
        not starting at 0) or InvalidTxnStateError (non-transactional write inside a transaction).
        An unknown producer id is accepted with any sequence (KIP-360: its state may have been
        removed with the log prefix). One batch per producer per call: with several batches of one
        producer in a request, call ``update`` between them.
        """
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self._producers.get(pid)
        if entry is None:
            return None
        epoch = header.producer_epoch
        if not header.is_control:
            dup = entry.find_duplicate(epoch, header.base_sequence, header.last_sequence)
            if dup is not None:
                return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp)
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} has epoch {epoch}, smaller than the last seen epoch {entry.producer_epoch}"
            )
        if header.is_control:
            return None
        first_seq = header.base_sequence
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid}: new epoch {epoch} must start at sequence 0, got {first_seq} "
                    f"(current epoch {entry.producer_epoch})"
                )
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"producer {pid} epoch {epoch}: out of order sequence {first_seq}, expected {entry.last_seq + 1}"
                if entry.last_seq < INT32_MAX
                else f"producer {pid} epoch {epoch}: out of order sequence {first_seq}, expected 0"
            )
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {pid} has a transaction open since offset {entry.current_txn_first_offset} "
                "but sent a non-transactional batch"
            )
        return None

    def check_marker(self, header: BatchHeader, control: ControlRecord) -> None:
        """A transaction marker from a coordinator (Kafka's ProducerAppendInfo.appendEndTxnMarker
        checks): never for an older epoch of the producer, never from an older coordinator."""
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {header.producer_id} has epoch {header.producer_epoch}, smaller than the "
                f"last seen epoch {entry.producer_epoch}"
            )
        if control.coordinator_epoch is not None and control.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {header.producer_id} from coordinator epoch {control.coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )

    def check_request(self, headers: list[BatchHeader]) -> DuplicateBatch | None:
        """Producer checks of a whole client request, before anything is written (Kafka's per-request
        ProducerAppendInfo).

        A producer's first batch in the request is checked against its stored state; its later batches
        against the batch before them in the same request (the stored state only changes once the whole
        request is appended). A retry of a stored batch answers the whole request as a duplicate, as
        Kafka does.
        """
        seen: dict[int, tuple[BatchHeader, bool]] = {}  # producer id -> (its previous batch here, txn open)
        for h in headers:
            if not h.has_producer_id:
                continue
            pid = h.producer_id
            prev = seen.get(pid)
            if prev is None:
                dup = self.check_sequence(h)
                if dup is not None:
                    return dup
                entry = self.last_entry(pid)
                txn_open = entry is not None and entry.current_txn_first_offset is not None
            else:
                entry = self.last_entry(pid)
                stored = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence) if entry else None
                if stored is not None:
                    return DuplicateBatch(stored.first_offset, stored.last_offset, stored.timestamp)
                p, txn_open = prev
                _check_next_in_request(p, h, txn_open)
            seen[pid] = (h, txn_open or h.is_transactional)
        return None

    # -- state changes -------------------------------------------------------------------------

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        append_timestamp: int,
        control: ControlRecord | None = None,
    ) -> CompletedTxn | None:
        """Record a batch appended at ``first_offset`` (leader or follower); never raises.

        For control batches pass ``control`` (see ``read_control_record``); the transaction is
        completed and returned (without it the marker counts as a COMMIT).
        """
        last_offset = first_offset + header.last_offset_delta
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        pid = header.producer_id
        if pid < 0:
            return None
        if header.is_control:
            return self.complete_txn(
                pid,
                header.producer_epoch,
                last_offset,
                append_timestamp,
                is_aborted=control is not None and control.type == CONTROL_ABORT,
                coordinator_epoch=-1 if control is None or control.coordinator_epoch is None else control.coordinator_epoch,
            )
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerStateEntry(pid)
        entry._maybe_bump_epoch(header.producer_epoch)
        entry.batches.append(
            BatchMetadata(header.base_sequence, header.last_sequence, first_offset, last_offset, append_timestamp)
        )
        entry.last_timestamp = append_timestamp
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing[first_offset] = pid
        return None

    def complete_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_offset: int,
        timestamp: int,
        is_aborted: bool,
        coordinator_epoch: int = -1,
    ) -> CompletedTxn:
        """End the producer's open transaction with a marker at ``marker_offset``.

        The transaction stays unstable until the high watermark passes the marker
        (``on_high_watermark_updated``).
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        first = entry.current_txn_first_offset
        first = marker_offset if first is None else first
        txn = CompletedTxn(producer_id, first, marker_offset, is_aborted)
        entry._maybe_bump_epoch(producer_epoch)
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        if self._ongoing.get(first) == producer_id:
            del self._ongoing[first]
        self._unreplicated[first] = txn
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        return txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the HW are stable now."""
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset < high_watermark:
                del self._unreplicated[first]

    def first_undecided_offset(self) -> int | None:
        return min(self._ongoing) if self._ongoing else None

    def first_unstable_offset(self) -> int | None:
        """Lowest first offset of a transaction that is open or whose marker is not replicated yet.

        The partition log's LSO is ``min(this, high watermark)`` (the HW when None).
        """
        candidates = list(self._ongoing) + list(self._unreplicated)
        return min(candidates) if candidates else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """LSO to record with an aborted transaction in the txn index (Kafka's lastStableOffset)."""
        others = [o for o, pid in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._producers[pid]
        return expired

    def _is_expired(self, e: ProducerStateEntry, now_ms: int) -> bool:
        return e.current_txn_first_offset is None and now_ms - e.last_timestamp >= self.producer_id_expiration_ms

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """DeleteRecords / retention: forget completed txns and snapshots below the new start.

        Producers are kept (KIP-360), so a producer whose data was deleted can go on writing.
        """
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset < log_start_offset:
                del self._unreplicated[first]
        self.delete_snapshots_below(log_start_offset)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and delete every snapshot (the log was emptied and restarts at ``offset``)."""
        self._clear()
        for o in self._snapshot_offsets():
            self._delete_snapshot(o)
        self.map_end_offset = offset

    def truncate_fully_and_reload_snapshots(self) -> None:
        """Forget the in-memory state but keep the snapshot files (a follower has just placed the
        remote segment's snapshot in the directory); follow with ``load``."""
        self._clear()
        self.map_end_offset = 0

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    # -- reads ---------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self._producers)

    # -- snapshots -----------------------------------------------------------------------------

    def _snapshot_offsets(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(o for o in map(snapshot_offset_of, names) if o is not None)

    def _delete_snapshot(self, offset: int) -> None:
        try:
            snapshot_path(self.dir, offset).unlink()
        except FileNotFoundError:
            pass

    def take_snapshot(self, next_offset: int | None = None, sync: bool = True) -> Path:
        """Write the state as of ``next_offset`` (default: the map end offset) and return the file.

        ``sync=False`` (a roll, under the log's lock): no fsync here; the caller has it flushed in the
        background. A crash before that leaves at worst a snapshot that fails its CRC at load, which is
        then deleted and the state rebuilt from an older one and the log."""
        offset = self.map_end_offset if next_offset is None else next_offset
        path = snapshot_path(self.dir, offset)
        entries = [self._producers[pid] for pid in sorted(self._producers)]
        atomic_write(path, encode_snapshot(entries), sync=sync)
        return path

    def snapshot_file(self, offset: int) -> Path | None:
        p = snapshot_path(self.dir, offset)
        return p if p.exists() else None

    fetch_snapshot = snapshot_file

    @property
    def latest_snapshot_offset(self) -> int | None:
        offsets = self._snapshot_offsets()
        return offsets[-1] if offsets else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        offsets = self._snapshot_offsets()
        return offsets[0] if offsets else None

    def snapshot_offsets(self) -> list[int]:
        return self._snapshot_offsets()

    def delete_snapshots_below(self, offset: int) -> None:
        for o in self._snapshot_offsets():
            if o < offset:
                self._delete_snapshot(o)

    def truncate_and_reload(self, log_start: int, log_end: int, now_ms: int | None = None) -> int:
        """Align the state with a log spanning ``[log_start, log_end)`` after truncation.

        Snapshots above ``log_end`` or at/below ``log_start`` are deleted; if the state is not
        already at ``log_end`` it is rebuilt from the newest readable snapshot. Returns the offset
        from which the caller must replay batches into ``update`` to reach ``log_end``.
        """
        for o in self._snapshot_offsets():
            if o > log_end or o <= log_start:
                self._delete_snapshot(o)
        if log_end != self.map_end_offset:
            self._clear()
            self._load_latest_snapshot(log_start, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start)
        return self.map_end_offset

    def load(self, log_start: int, log_end: int, now_ms: int | None = None) -> int:
        """Startup: load the newest readable snapshot within ``[log_start, log_end]`` and return the
        offset from which the caller replays the log (``log_start`` when there is no snapshot).

        Corrupt snapshots are logged and deleted, and the next older one is tried.
        """
        for o in self._snapshot_offsets():
            if o > log_end:
                self._delete_snapshot(o)
        self._clear()
        self._load_latest_snapshot(log_start, now_ms)
        return self.map_end_offset

    def _load_latest_snapshot(self, log_start: int, now_ms: int | None) -> None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        for offset in reversed(self._snapshot_offsets()):
            if offset < log_start:
                break
            path = snapshot_path(self.dir, offset)
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as e:
                log.warning("ignoring corrupt producer snapshot %s: %s at byte %d", path, e, e.position)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._is_expired(entry, now_ms):
                    self._load_entry(entry)
            self.map_end_offset = offset
            return
        self.map_end_offset = log_start

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing[entry.current_txn_first_offset] = entry.producer_id
