"""Kafka's LogLoader: a partition's segments, offsets and producer state read back from its directory.

After a clean shutdown the segments are opened and their indexes sanity-checked. After an unclean one,
every batch from the segment holding the recovery point on is re-validated (CRC, offsets) and its
indexes rebuilt; a torn or garbage tail is cut, and the leader-epoch cache and producer state follow.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from tieredlog.formats.errors import RecordError
from tieredlog.formats.index import CorruptIndexError
from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.log.leader_epoch import LeaderEpochFileCache
from tieredlog.log.local_log import LocalLog
from tieredlog.log.producer_state import ProducerStateManager, read_control_record
from tieredlog.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    offset_from_filename,
)
from tieredlog.log.types import EpochEntry
from tieredlog.records.batch import HEADER_SIZE, BatchHeader, peek_size, read_header, validate_batch
from tieredlog.records.record import ControlRecord

log = logging.getLogger(__name__)

# Leftovers of an interrupted delete, compaction or atomic write: never data to load (a ``.swap``
# segment is finished first, see _complete_swaps).
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class LoadedLogOffsets:
    log_start_offset: int
    local_log_start_offset: int


class LogLoader:
    """Fills an empty LocalLog from its directory; ``load()`` returns the start offsets it settled on
    (the LocalLog gets its log end offset and recovery point)."""

    def __init__(
        self,
        local_log: LocalLog,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        *,
        had_clean_shutdown: bool,
        log_start_offset: int | None,
        remote_storage_enable: bool,
        rebuild_leader_epochs: bool = False,
    ):
        self.local_log = local_log
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.clean = had_clean_shutdown
        self.log_start_offset = log_start_offset
        self.remote_storage_enable = remote_storage_enable
        self.rebuild_leader_epochs = rebuild_leader_epochs

    def load(self) -> LoadedLogOffsets:
        local = self.local_log
        bases = self._remove_leftovers_and_list_segments()
        for base in sorted(bases):
            local.add_segment(local.new_segment(base, active=False))
        # Indexes carry no checksum: rebuild any that fail the sanity check, even after a clean shutdown.
        # After an unclean one, the segments from the recovery point on are rebuilt from the log by
        # _recover_unflushed whatever their indexes hold (Kafka's recoverLog), so checking them first is
        # wasted work, and the active segment's index is still preallocated, which fails the check anyway.
        segs = local.segments
        recover_from = None
        if not self.clean and segs:
            recover_from = local.segments_from(local.recovery_point)[0].base_offset
        for seg in segs:
            if recover_from is not None and seg.base_offset >= recover_from:
                break
            if local.segment_at(seg.base_offset) is not seg:
                continue  # deleted after an earlier corrupt one
            try:
                seg.sanity_check()
            except (CorruptIndexError, RecordError) as e:
                log.warning("rebuilding indexes of %s: %s", seg.log_path, e)
                if seg.recover() > 0:
                    local.delete_segments_after(seg.base_offset)
        if not self.clean:
            self._recover_unflushed()
        if self.rebuild_leader_epochs:
            self._rebuild_leader_epochs()
        if not local.num_segments:
            local.add_segment(local.new_segment(self.log_start_offset or 0, active=True))
        active = local.active_segment
        active.make_active()
        local.log_end_offset = active.next_offset
        first_base = local.first_base_offset
        log_start_offset = self.log_start_offset
        if log_start_offset is None:
            # Kafka's LogLoader: a tiered log without a checkpointed start may have data below its first
            # local segment, so it starts at 0 until the RLM moves it up to the earliest remote segment
            log_start_offset = 0 if self.remote_storage_enable else first_base
        if not self.remote_storage_enable:
            log_start_offset = max(log_start_offset, first_base)
        log_start_offset = min(log_start_offset, local.log_end_offset)
        local_log_start_offset = max(first_base, log_start_offset)
        local.recovery_point = min(max(local.recovery_point, 0), local.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(local.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(log_start_offset)
        rebuild_producer_state(
            self.producer_state, local, local_log_start_offset,
            rebuild_txn_from=None if self.clean else local.recovery_point,
        )
        return LoadedLogOffsets(log_start_offset, local_log_start_offset)

    def _complete_swaps(self) -> None:
        """A crash during a cleaned segment's swap left ``<base>.log.swap``: the segments whose base
        offsets it covers go, and its files take their names (Kafka's LogLoader does the same). The
        ``.log.swap`` is renamed last, so while it exists its indexes are under either name."""
        d = self.local_log.dir
        for name in sorted(os.listdir(d)):
            if not (name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and name[:20].isdigit()):
                continue
            base = offset_from_filename(name)
            swap = d / name
            end = _next_offset_of(swap, base)
            log.info("%s: finishing the swap of cleaned segment %s (offsets %d to %d)", self.local_log.topic_partition,
                     name, base, end - 1)
            for other in os.listdir(d):
                if not (other.endswith(LOG_SUFFIX) and other[:20].isdigit() and len(other) == 24):
                    continue
                other_base = offset_from_filename(other)
                if base <= other_base < end:
                    for ext in (LOG_SUFFIX, *_INDEX_SUFFIXES):
                        (d / f"{other[:20]}{ext}").unlink(missing_ok=True)
            prefix = name[:20]
            for ext in (*_INDEX_SUFFIXES, LOG_SUFFIX):
                src = d / f"{prefix}{ext}{SWAP_SUFFIX}"
                if src.exists():
                    os.replace(src, d / f"{prefix}{ext}")

    def _remove_leftovers_and_list_segments(self) -> list[int]:
        self._complete_swaps()
        d = self.local_log.dir
        bases = []
        for name in sorted(os.listdir(d)):
            if name.endswith(_LEFTOVER_SUFFIXES):
                (d / name).unlink(missing_ok=True)
                continue
            if name.endswith(LOG_SUFFIX) and name[:20].isdigit() and len(name) == 24:
                bases.append(offset_from_filename(name))
        base_set = set(bases)
        for name in os.listdir(d):
            # Index files without their log are orphans: Kafka deletes them too.
            if name.endswith(_INDEX_SUFFIXES) and name[:20].isdigit() and offset_from_filename(name) not in base_set:
                (d / name).unlink(missing_ok=True)
        return bases

    def _rebuild_leader_epochs(self) -> None:
        """The checkpoint was unreadable: the epochs of every local batch, from the start (headers
        only), replace whatever recovery assigned (it saw only the segments past the recovery
        point), and the checkpoint is written again."""
        latest = None
        entries: list[EpochEntry] = []
        for seg in self.local_log.segments:
            for _, h in seg.iter_headers(0):
                epoch = h.partition_leader_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    entries.append(EpochEntry(epoch, h.base_offset))
                    latest = epoch
        cache = self.leader_epoch_cache
        cache.clear()
        cache.assign_all(entries)  # writes the checkpoint

    def _recover_unflushed(self) -> None:
        """Unclean shutdown: re-validate every batch past the recovery point, cut torn or garbage tails."""
        local = self.local_log
        cache = self.leader_epoch_cache
        latest = cache.latest_epoch

        def on_batch(h: BatchHeader) -> None:
            nonlocal latest
            if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                cache.assign(h.partition_leader_epoch, h.base_offset)
                latest = h.partition_leader_epoch

        for seg in local.segments_from(local.recovery_point):
            seg.txn_index.truncate_to(max(local.recovery_point, seg.base_offset))
            truncated = seg.recover(on_batch)
            if truncated:
                log.warning("truncated %d invalid bytes at the end of %s", truncated, seg.log_path)
                local.delete_segments_after(seg.base_offset)
                break
        # An empty segment past the first one is useless after a crash (Kafka drops it as well).
        while local.num_segments > 1 and local.active_segment.size == 0:
            local.remove_segment(local.active_segment.base_offset).delete()


def _next_offset_of(path: os.PathLike[str], base: int) -> int:
    """One past the last offset of a segment file, from its batch headers (fsynced before it was
    named ``.swap``, so whole)."""
    nxt = base
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        pos = 0
        while total - pos >= HEADER_SIZE:
            head = os.pread(f.fileno(), HEADER_SIZE, pos)
            size = peek_size(head, 0)
            if size < HEADER_SIZE or pos + size > total:
                break
            nxt = read_header(head, 0).next_offset
            pos += size
    return nxt


def rebuild_producer_state(
    ps: ProducerStateManager, local: LocalLog, local_log_start_offset: int, rebuild_txn_from: int | None
) -> None:
    """Load the newest producer snapshot and replay batch headers from there to the log end (Kafka's
    UnifiedLog.rebuildProducerState).

    ``rebuild_txn_from``: aborted transactions whose marker lies at or after it are re-added to the
    transaction indexes (those indexes were truncated by recovery).
    """
    end = local.log_end_offset
    start = ps.truncate_and_reload(local_log_start_offset, end)
    start = max(start, local_log_start_offset)
    if start >= end:
        return
    for seg in local.segments_from(start):
        base = seg.base_offset
        for pos, h in seg.iter_headers(0 if base >= start else seg.offset_index.lookup(start)[1]):
            if h.last_offset < start or not h.has_producer_id:
                continue
            control = _read_control(seg, pos, h) if h.is_control else None
            done = ps.update(h, h.base_offset, h.max_timestamp, control)
            if done is not None and done.is_aborted and rebuild_txn_from is not None and done.last_offset >= rebuild_txn_from:
                seg.txn_index.append(
                    AbortedTxn(done.producer_id, done.first_offset, done.last_offset, ps.last_stable_offset(done))
                )
    ps.map_end_offset = end


def _read_control(seg: LogSegment, pos: int, h: BatchHeader) -> ControlRecord | None:
    """The marker's control record, or None (one line) when the batch is damaged: a segment below the
    recovery point is not re-validated at load, and a marker that cannot be read must not fail the
    partition's load, and with it the broker's start. Without its record the marker counts as a
    commit, as ``ProducerStateManager.update`` documents."""
    if h.records_count <= 0:
        return None  # an empty batch the cleaner kept for the producer's epoch: no marker left in it
    data = seg.read_bytes(pos, h.size)
    try:
        validate_batch(data, 0, check_records=False)
        return read_control_record(data)
    except (RecordError, ValueError) as e:
        log.warning("%s: unreadable transaction marker at offset %d (read as no control record): %s",
                    seg.log_path, h.base_offset, e)
        return None
