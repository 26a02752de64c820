"""Segment index files: ``OffsetIndex`` (``.index``), ``TimeIndex`` (``.timeindex``) and
``TransactionIndex`` (``.txnindex``); their entry layouts are :mod:`tieredlog.formats.index` and
:mod:`tieredlog.formats.txn_index`.

The offset and time indexes of the active segment are preallocated to ``segment.index.bytes`` (rounded
down to the entry size) and trimmed to their valid entries on roll and close, as Kafka does, so a file's
length tells how many entries it holds once the segment is inactive. Writes are positional (``os.pwrite``);
the valid entries are also kept in native ``array`` columns so a lookup is a C-level ``bisect`` and never
touches the file. Rolled segments load their index lazily on first use and hold no file descriptor.
"""

from __future__ import annotations

import bisect
import errno
import logging
import mmap
import os
import struct
from array import array
from pathlib import Path

from tieredlog.formats.index import (
    NO_TIMESTAMP,
    OFFSET_ENTRY,
    TIME_ENTRY,
    CorruptIndexError,
    decode_offset_entries,
    decode_time_entries,
)
from tieredlog.formats.txn_index import (
    TXN_ENTRY,
    AbortedTxn,
    TxnIndexSearchResult,
    collect_aborted_txns,
    decode_txn_entries,
)

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1

class IndexOffsetError(ValueError):
    """An entry that would break the index's ordering (Kafka's InvalidOffsetException)."""


def _round_down(value: int, multiple: int) -> int:
    return value - value % multiple


class _SparseIndex:
    """Shared machinery of the offset and time index: two native columns plus positional file writes."""

    entry_size: int
    _entry: struct.Struct

    def __init__(self, path: Path | str, base_offset: int, max_index_size: int, writable: bool = False):
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._max_entries = max(_round_down(max_index_size, self.entry_size) // self.entry_size, 0)
        self._keys: array[int] | None = None  # search column (relative offsets or timestamps)
        self._vals: array[int] | None = None  # the other column
        self._fd: int | None = None
        if writable:
            self.make_writable()

    # ---- loading ---------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        n = len(data) // self.entry_size
        keys, vals = self._decode(memoryview(data)[: n * self.entry_size])
        self._keys, self._vals = keys, vals
        self._file_len = len(data)

    def _decode(self, data: memoryview) -> tuple[array[int], array[int]]:
        raise NotImplementedError

    def _columns(self) -> tuple[array[int], array[int]]:
        if self._keys is None:
            self._load()
        return self._keys, self._vals  # type: ignore[return-value]

    @property
    def entries(self) -> int:
        return len(self._columns()[0])

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def size_bytes(self) -> int:
        """Bytes of valid entries (what the file holds once trimmed)."""
        return self.entries * self.entry_size

    @property
    def is_writable(self) -> bool:
        return self._fd is not None

    # ---- file lifecycle --------------------------------------------------------------------------
    def make_writable(self) -> None:
        """Open for appends and preallocate the file to ``max_index_size`` (Kafka's resize on activation)."""
        self._columns()
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        length = max(self._max_entries * self.entry_size, self.size_bytes)
        os.ftruncate(self._fd, length)

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail so the file holds exactly the valid entries, and stop writing."""
        if self._fd is not None:
            os.ftruncate(self._fd, self.size_bytes)
            os.close(self._fd)
            self._fd = None
        elif self._keys is not None and self.path.exists() and self.path.stat().st_size != self.size_bytes:
            os.truncate(self.path, self.size_bytes)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        self.trim_to_valid_size()

    def release(self) -> None:
        """Close the descriptor without trimming (after a failed close)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = Path(new_path)

    def delete(self) -> bool:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False

    def _write_entry(self, index: int, a: int, b: int) -> None:
        if self._fd is None:
            raise IndexOffsetError(f"index {self.path} is not open for writing")
        data = self._entry.pack(a, b)
        # The file is preallocated, but sparse: on a full disk writing into it can still fail
        # (ENOSPC), possibly after part of the entry landed. The column is only extended after
        # this returns, so a failure leaves the index as it was; zero the slot so no half entry
        # is ever read back from the file.
        if os.pwrite(self._fd, data, index * self.entry_size) != len(data):
            self._zero_slot(self._fd, index)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))

    def _zero_slot(self, fd: int, index: int) -> None:
        try:
            os.pwrite(fd, bytes(self.entry_size), index * self.entry_size)
        except OSError:
            pass

    def truncate_to_entries(self, keep: int) -> None:
        """Drop every entry after the first ``keep`` (undo of a failed append); no-op if there are no more."""
        if self.entries > keep:
            self._truncate_entries(keep)

    def _truncate_entries(self, keep: int) -> None:
        keys, vals = self._columns()
        del keys[keep:]
        del vals[keep:]
        if self._fd is None:
            # Truncating a rolled segment makes it the active one again (Kafka resizes it back).
            self.make_writable()
        else:
            # Cutting and re-extending zeroes the dropped entries, so a crash cannot resurrect them.
            end = self._max_entries * self.entry_size
            os.ftruncate(self._fd, keep * self.entry_size)
            os.ftruncate(self._fd, max(end, keep * self.entry_size))

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index from the log).

        Never reads the old file: after a crash the active segment's index is still preallocated to
        ``segment.index.bytes``, and decoding megabytes of entries only to discard them made recovery
        cost ~150 ms per partition however small the partition was.
        """
        self._keys, self._vals = self._empty_columns()
        self._file_len = 0
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        # Cutting to zero first so no stale entry survives past the rebuilt ones if we crash mid-rebuild.
        os.ftruncate(self._fd, 0)
        os.ftruncate(self._fd, self._max_entries * self.entry_size)

    def _empty_columns(self) -> tuple[array[int], array[int]]:
        return self._decode(memoryview(b""))

    def file_bytes(self) -> bytes:
        """The valid entries exactly as they are laid out on disk."""
        keys, vals = self._columns()
        return b"".join(self._entry.pack(*self._pack_order(k, v)) for k, v in zip(keys, vals))

    def _pack_order(self, key: int, val: int) -> tuple[int, int]:
        raise NotImplementedError


class OffsetIndex(_SparseIndex):
    """Sparse offset -> file position map of one segment."""

    entry_size = OFFSET_ENTRY.size
    _entry = OFFSET_ENTRY

    def _decode(self, data: memoryview) -> tuple[array[int], array[int]]:
        return decode_offset_entries(data)

    def _pack_order(self, key: int, val: int) -> tuple[int, int]:
        return key, val

    @property
    def is_full(self) -> bool:
        return self.entries >= self._max_entries

    @property
    def last_offset(self) -> int:
        keys, _ = self._columns()
        return self.base_offset + keys[-1] if keys else self.base_offset

    def append(self, offset: int, position: int) -> None:
        keys, vals = self._columns()
        if keys and offset - self.base_offset <= keys[-1]:
            raise IndexOffsetError(
                f"offset {offset} is not larger than the last indexed offset {self.last_offset} in {self.path}"
            )
        if len(keys) >= self._max_entries:
            raise IndexOffsetError(f"offset index {self.path} is full ({self._max_entries} entries)")
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise IndexOffsetError(f"offset {offset} is out of range for segment base {self.base_offset}")
        self._write_entry(len(keys), rel, position)
        keys.append(rel)
        vals.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base offset, 0)."""
        keys, vals = self._columns()
        i = bisect.bisect_right(keys, target_offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + keys[i - 1], vals[i - 1]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position``, else 0."""
        _, vals = self._columns()
        i = bisect.bisect_right(vals, position)
        return vals[i - 1] if i else 0

    def entry(self, n: int) -> tuple[int, int]:
        keys, vals = self._columns()
        return self.base_offset + keys[n], vals[n]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        keys, _ = self._columns()
        rel = offset - self.base_offset
        keep = 0 if rel <= 0 else bisect.bisect_left(keys, rel)
        self._truncate_entries(keep)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError unless the file could have been written by a segment of this base offset."""
        keys, vals = self._columns()
        if self._fd is None and self._file_len % self.entry_size:
            raise CorruptIndexError(f"index file {self.path} has size {self._file_len}, not a multiple of 8")
        if not keys:
            return
        if keys[0] < 0 or any(a >= b for a, b in zip(keys, keys[1:])):
            raise CorruptIndexError(f"index file {self.path} has offsets out of order")
        if vals[0] < 0 or any(a > b for a, b in zip(vals, vals[1:])):
            raise CorruptIndexError(f"index file {self.path} has positions out of order")
        if log_size is not None and vals[-1] >= log_size:
            raise CorruptIndexError(f"index file {self.path} points at byte {vals[-1]} beyond the log size {log_size}")


class TimeIndex(_SparseIndex):
    """Sparse max-timestamp -> offset map of one segment; entries only when the max timestamp grows."""

    entry_size = TIME_ENTRY.size
    _entry = TIME_ENTRY

    def _decode(self, data: memoryview) -> tuple[array[int], array[int]]:
        return decode_time_entries(data)

    def _pack_order(self, key: int, val: int) -> tuple[int, int]:
        return key, val

    @property
    def is_full(self) -> bool:
        # The last slot is kept for the entry written when the segment rolls (as Kafka does).
        return self.entries >= self._max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        ts, rel = self._columns()
        if not ts:
            return NO_TIMESTAMP, self.base_offset
        return ts[-1], self.base_offset + rel[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        ts, rel = self._columns()
        if not skip_full_check and self.is_full:
            raise IndexOffsetError(f"time index {self.path} is full")
        last_ts, last_off = self.last_entry
        if ts and offset < last_off:
            raise IndexOffsetError(f"offset {offset} is below the last time-indexed offset {last_off} in {self.path}")
        if ts and timestamp < last_ts:
            raise IndexOffsetError(f"timestamp {timestamp} is below the last indexed timestamp {last_ts} in {self.path}")
        if timestamp > last_ts:
            if len(ts) >= self._max_entries:
                raise IndexOffsetError(f"time index {self.path} has no room left")
            self._write_entry(len(ts), timestamp, offset - self.base_offset)
            ts.append(timestamp)
            rel.append(offset - self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else (-1, base offset)."""
        ts, rel = self._columns()
        i = bisect.bisect_right(ts, target_timestamp)
        if i == 0:
            return NO_TIMESTAMP, self.base_offset
        return ts[i - 1], self.base_offset + rel[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        _, rel = self._columns()
        r = offset - self.base_offset
        keep = 0 if r <= 0 else bisect.bisect_left(rel, r)
        self._truncate_entries(keep)

    def sanity_check(self, next_offset: int | None = None) -> None:
        ts, rel = self._columns()
        if self._fd is None and self._file_len % self.entry_size:
            raise CorruptIndexError(f"time index file {self.path} has size {self._file_len}, not a multiple of 12")
        if not ts:
            return
        if any(a >= b for a, b in zip(ts, ts[1:])) or rel[0] < 0 or any(a > b for a, b in zip(rel, rel[1:])):
            raise CorruptIndexError(f"time index file {self.path} has entries out of order")
        if next_offset is not None and self.base_offset + rel[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"time index file {self.path} points past the end of the log")


class TransactionIndex:
    """Aborted transactions whose abort marker lies in this segment. Not preallocated; created on first use."""

    entry_size = TXN_ENTRY.size

    def __init__(self, path: Path | str, base_offset: int):
        self.path = Path(path)
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._fd: int | None = None

    def _all(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = decode_txn_entries(data, str(self.path))
        return self._entries

    def entries(self) -> list[AbortedTxn]:
        return list(self._all())

    def append(self, txn: AbortedTxn) -> None:
        entries = self._all()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise IndexOffsetError(
                f"aborted txn ending at {txn.last_offset} is not after the last one ({entries[-1].last_offset})"
            )
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        data = txn.to_bytes()
        end = len(entries) * self.entry_size
        try:
            if os.pwrite(self._fd, data, end) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        except OSError:
            # A full disk: cut any partial entry so the file still holds whole entries only.
            try:
                os.ftruncate(self._fd, end)
            except OSError:
                pass
            raise
        entries.append(txn)

    def truncate_to_entries(self, keep: int) -> None:
        """Drop every entry after the first ``keep`` (undo of a failed append)."""
        entries = self._all()
        if len(entries) > keep:
            del entries[keep:]
            if self.path.exists():
                os.truncate(self.path, keep * self.entry_size)

    @property
    def num_entries(self) -> int:
        return len(self._all())

    @property
    def aborted_txns(self) -> list[AbortedTxn]:
        """The entries, uncopied: read them, never change them."""
        return self._all()

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return collect_aborted_txns(self._all(), fetch_offset, upper_bound_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose abort marker is at or after ``offset``. Only recovery and log
        truncation call it, so an unreadable index is emptied here (one line) rather than failing the
        partition's load: its entries are rebuilt by the producer-state replay or lost."""
        try:
            entries = self._all()
        except CorruptIndexError as e:
            log.warning("emptying unreadable transaction index: %s", e)
            self.reset()
            return
        keep = [t for t in entries if t.last_offset < offset]
        if len(keep) != len(entries):
            self._entries = keep
            if self.path.exists():
                os.truncate(self.path, len(keep) * self.entry_size)

    def reset(self) -> None:
        """Empty the index without reading it: recovery resets indexes it may not be able to read."""
        self._entries = []
        if self.path.exists():
            os.truncate(self.path, 0)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = Path(new_path)

    def delete(self) -> bool:
        self.close()
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False

    def sanity_check(self) -> None:
        self._all()


# ---------------------------------------------------------------------------------------------
# read-only mapped views (indexes of remote segments, cached on local disk)


class _MappedEntries:
    """The fixed-size entries of one index file through ``mmap``: nothing is decoded until a lookup
    touches it, and the pages stay the kernel's to evict (a cache of many indexes costs no heap).
    The mapping is closed by garbage collection, never under a reader still holding the view."""

    def __init__(self, path: Path, entry: struct.Struct) -> None:
        self.path = path
        self._entry = entry
        size = path.stat().st_size
        if size % entry.size:
            raise CorruptIndexError(f"{path.name}: size {size} is not a multiple of {entry.size}")
        self._buf: mmap.mmap | bytes = b""
        if size:
            with open(path, "rb") as f:
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.entries = size // entry.size
        self.entries = self._effective_len()

    def _effective_len(self) -> int:
        """Entries before any preallocated zero tail (an index not trimmed at roll): after the
        first entry every real entry has a positive relative offset, so zeros mark the end."""
        n = self.entries
        if n <= 1 or any(self[n - 1]):
            return n
        lo, hi = 1, n - 1  # first all-zero entry is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if any(self[mid]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def __len__(self) -> int:
        return self.entries

    def __getitem__(self, i: int) -> tuple[int, ...]:
        entry: tuple[int, ...] = self._entry.unpack_from(self._buf, i * self._entry.size)
        return entry


class _Column:
    """One field of every entry, as a sequence ``bisect`` can search in place."""

    def __init__(self, entries: _MappedEntries, field_no: int) -> None:
        self._entries = entries
        self._field = field_no

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, i: int) -> int:
        return self._entries[i][self._field]


class MappedOffsetIndex:
    """Read-only :class:`OffsetIndex` over a file that may come from elsewhere (a remote segment's
    index): checked as Kafka's ``OffsetIndex.sanityCheck`` does, in O(1) (ends ordered and not
    negative); a lookup never trusts more than that."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self._idx = _MappedEntries(path, OFFSET_ENTRY)
        self.base_offset = base_offset
        self._keys = _Column(self._idx, 0)
        n = len(self._idx)
        if n:
            first, last = self._idx[0], self._idx[n - 1]
            if first[0] < 0 or last[0] < first[0] or first[1] < 0 or last[1] < first[1]:
                raise CorruptIndexError(f"{path.name}: entries out of order")

    @property
    def entries(self) -> int:
        return len(self._idx)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """As :meth:`OffsetIndex.lookup`: (offset, position) of the last entry at or below the
        target, else (base offset, 0)."""
        i = bisect.bisect_right(self._keys, target_offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        rel, pos = self._idx[i - 1]
        return self.base_offset + rel, pos


class MappedTimeIndex:
    """Read-only :class:`TimeIndex`, checked as Kafka's ``TimeIndex.sanityCheck`` (ends ordered,
    offsets not below the base)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self._idx = _MappedEntries(path, TIME_ENTRY)
        self.base_offset = base_offset
        self._keys = _Column(self._idx, 0)
        n = len(self._idx)
        if n:
            (first_ts, first_rel), (last_ts, last_rel) = self._idx[0], self._idx[n - 1]
            if last_ts < first_ts or first_rel < 0 or last_rel < first_rel:
                raise CorruptIndexError(f"{path.name}: entries out of order")

    @property
    def entries(self) -> int:
        return len(self._idx)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """As :meth:`TimeIndex.lookup`: (timestamp, offset) of the last entry at or below the
        target, else (-1, base offset)."""
        i = bisect.bisect_right(self._keys, target_timestamp)
        if i == 0:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = self._idx[i - 1]
        return ts, self.base_offset + rel


def read_txn_index(path: Path) -> list[AbortedTxn]:
    """The entries of a transaction index file (read-only)."""
    return decode_txn_entries(Path(path).read_bytes(), Path(path).name)
