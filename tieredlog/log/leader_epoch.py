"""The leader-epoch cache of one partition (KIP-101, KIP-279), as Kafka's LeaderEpochFileCache.

An ordered list of ``EpochEntry(epoch, start_offset)`` with strictly increasing epochs and start
offsets: epoch ``e`` covers ``[start_offset(e), start_offset(next epoch))``. Followers use
``end_offset_for`` to find where their log diverges from the leader's; the remote tier uses the
lineage to pick the right segment among overlapping ones.

Thread-safe: the event loop appends while RLM threads read ranges, so one lock guards the list.
Every change that adds an entry is written to the checkpoint file before the call returns;
truncations may defer the fsync (``flush=False``), as Kafka does, because a stale checkpoint is
truncated again on the next log load.
"""

from __future__ import annotations

import bisect
import logging
import threading
from typing import Iterable

from tieredlog.formats.checkpoints import CorruptCheckpointError
from tieredlog.log.checkpoints import LeaderEpochCheckpointFile
from tieredlog.log.types import EpochEntry

__all__ = ["EpochEntry", "LeaderEpochFileCache", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


def _truncate_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    """Drop entries starting at or below ``start_offset``; the last dropped epoch restarts there."""
    i = 0
    while i < len(entries) and entries[i].start_offset <= start_offset:
        i += 1
    if i == 0:
        return entries
    return [EpochEntry(entries[i - 1].epoch, start_offset), *entries[i:]]


def _truncate_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    """Drop entries starting at or above ``end_offset`` (the log was truncated to it)."""
    if end_offset < 0:
        return entries
    i = len(entries)
    while i > 0 and entries[i - 1].start_offset >= end_offset:
        i -= 1
    return entries[:i]


class LeaderEpochFileCache:
    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None = None, name: str = ""):
        self._checkpoint = checkpoint
        self._name = name or (str(checkpoint.path.parent.name) if checkpoint else "")
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        if checkpoint is not None:
            # Re-assign rather than trust the file, so a hand-edited or stale file is made monotonic.
            for e in checkpoint.read():
                try:
                    self._assign(e)
                except ValueError as exc:  # an entry no leader writes (a negative epoch or offset)
                    raise CorruptCheckpointError(str(checkpoint.path), None, str(exc)) from None

    # -- writes --------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, sync: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; a no-op unless it changes the lineage.
        Returns True when the checkpoint was rewritten.

        Same epoch at a higher offset: ignored (the epoch already started earlier). A new epoch (or
        the same one at a lower offset) is appended after removing every entry that would break
        monotonicity, i.e. entries with an epoch >= ``epoch`` or a start offset >= ``start_offset``.
        ``sync=False`` (the append path): the checkpoint is written but not fsynced; the caller has it
        fsynced before the recovery point passes ``start_offset``.
        """
        with self._lock:
            if self._assign(EpochEntry(epoch, start_offset)):
                self._flush(sync)
                return True
            return False

    def assign_all(self, entries: Iterable[EpochEntry]) -> None:
        """Assign several entries with one checkpoint write (follower rebuild from the remote tier)."""
        with self._lock:
            changed = False
            for e in entries:
                changed |= self._assign(EpochEntry(*e))
            if changed:
                self._flush()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        latest = self._entries[-1] if self._entries else None
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False
        removed = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning("[LeaderEpochCache %s] new %s truncated conflicting entries %s", self._name, entry, removed)
        self._entries.append(entry)
        return True

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """The log was truncated to ``end_offset``: drop epochs that start at or after it."""
        with self._lock:
            new = _truncate_from_end(self._entries, end_offset)
            if len(new) != len(self._entries):
                self._entries = new
                if flush:
                    self._flush()

    def truncate_from_start(self, start_offset: int, flush: bool = True) -> None:
        """The log start moved to ``start_offset``: drop epochs wholly below it and move the
        epoch that contains it to start there (exclusive: an entry at ``start_offset`` stays)."""
        with self._lock:
            new = _truncate_from_start(self._entries, start_offset)
            if new is not self._entries and new != self._entries:
                self._entries = new
                if flush:
                    self._flush()

    def clear_and_flush(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def clear(self) -> None:
        with self._lock:
            self._entries = []

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self, sync: bool = True) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._entries, sync)

    # -- reads ---------------------------------------------------------------------------------

    def epoch_entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        e = self.latest_entry
        return None if e is None else e.epoch

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            for e in self._entries:
                if e.epoch == epoch:
                    return e
            return None

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The highest cached epoch below ``epoch`` (default: below the latest)."""
        with self._lock:
            if epoch is None:
                return self._entries[-2].epoch if len(self._entries) >= 2 else None
            lower = [e.epoch for e in self._entries if e.epoch < epoch]
            return lower[-1] if lower else None

    def next_epoch(self, epoch: int) -> int | None:
        """The lowest cached epoch above ``epoch``."""
        with self._lock:
            for e in self._entries:
                if e.epoch > epoch:
                    return e.epoch
            return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range contains ``offset``; None below the earliest entry."""
        with self._lock:
            starts = [e.start_offset for e in self._entries]
            i = bisect.bisect_right(starts, offset)
            return self._entries[i - 1].epoch if i else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= requested, end offset of that epoch).

        - undefined requested epoch, or one above every cached epoch: ``(-1, -1)``;
        - the latest epoch: ``(latest, log_end_offset)``, since it is still being written;
        - otherwise the end offset is the start offset of the first higher epoch. When the
          requested epoch is below the earliest cached one (older epochs were removed with the
          data), Kafka answers ``(requested_epoch, start of the earliest entry)`` so a follower
          truncates to the leader's start instead of keeping divergent data.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries and self._entries[-1].epoch == requested_epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = None
            for e in self._entries:
                if e.epoch > requested_epoch:
                    break
                floor = e
            if floor is None:
                return requested_epoch, higher.start_offset
            return floor.epoch, higher.start_offset

    def entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """Entries covering ``[start_offset, end_offset)``, the first clipped to ``start_offset``.

        ``start_offset < 0`` keeps everything from the beginning: ``entries_in_range(-1, next)`` is
        the whole history up to a segment's end, which the remote copy ships.
        """
        with self._lock:
            entries = list(self._entries)
        if start_offset >= 0:
            entries = _truncate_from_start(entries, start_offset)
        return _truncate_from_end(entries, end_offset)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self._name!r}, {self.epoch_entries()})"
