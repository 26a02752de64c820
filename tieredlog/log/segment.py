"""One log segment: ``<base offset, 20 digits>.log`` plus its offset, time and transaction indexes.

The ``.log`` file is a plain sequence of v2 record batches, byte for byte what Apache Kafka writes. The
segment only ever reads the 61-byte batch headers (through ``tieredlog.records.batch``); it never
decodes records. Index maintenance follows Kafka's ``LogSegment`` exactly (one offset-index entry per
``index.interval.bytes`` of log, keyed by the batch's last offset; a time-index entry only when the max
timestamp grew), so indexes rebuilt by recovery equal the ones written by appends, and both equal
Kafka's.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, NamedTuple, Sequence

from tieredlog.formats.errors import RecordError
from tieredlog.formats.index import NO_TIMESTAMP, CorruptIndexError
from tieredlog.log.index import INT32_MAX, OffsetIndex, TimeIndex, TransactionIndex
from tieredlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, peek_size, read_header, validate_batch

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a segment the cleaner is writing: never loaded
SWAP_SUFFIX = ".swap"  # a cleaned segment being swapped in: the next load finishes the swap

# Header scans read _SCAN_CHUNK at a time where batches are small (many headers per read), and a page
# after a batch larger than a quarter of that (the next read holds one header however much it reads):
# a fetch's scans over batches of a MB copy pages, not 64 KiB chunks, into memory.
_SCAN_CHUNK = 64 * 1024
_SCAN_PAGE = 4096
_RECOVER_CHUNK = 4 * 1024 * 1024  # recovery reads whole batches in chunks of this size
# Non-blocking header reads (``nowait=True``) use preadv(RWF_NOWAIT) (Linux 4.14+): it fails with EAGAIN,
# or reads short, instead of waiting for the disk. 0 where the OS has no such flag: such reads block.
_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)


class PagesNotCached(Exception):
    """A non-blocking read (``nowait=True``) needed pages that are not in the page cache: the same read
    without ``nowait`` would wait for the disk. Not an OSError: nothing failed, the caller retries the
    read, blocking, off its event loop."""


class SegmentOffsetOverflowError(ValueError):
    """Offsets that do not fit the segment's int32 relative-offset space (Kafka's LogSegmentOffsetOverflowException)."""


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """``00000000000000000042.log`` -> 42."""
    return int(name.split(".", 1)[0])


class LogFile:
    """The ``.log`` file: positional reads and writes on one lazily opened descriptor."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def fd(self) -> int:
        if self._fd is None:
            # No O_CREAT: a read racing with the segment's deletion must fail, not leave an empty file
            # behind under the old name (a later load would take it for a segment).
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def create(self) -> None:
        """Create the file (a new segment); the only path that may."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self.fd(), size, position)

    def read_nowait(self, position: int, size: int) -> bytes | bytearray:
        """``read`` that never waits for the disk: PagesNotCached when the range is not (wholly) in the
        page cache. A short read is taken for pages missing (the callers read below the segment's
        size), and a blocking retry reads what is really there. Blocks as ``read`` without RWF_NOWAIT
        or on a file system that refuses it."""
        if not _NOWAIT or size <= 0:
            return self.read(position, size)
        buf = bytearray(size)
        try:
            n = os.preadv(self.fd(), [buf], position, _NOWAIT)
        except BlockingIOError:
            raise PagesNotCached(f"{self.path} at {position}: {size} bytes not cached") from None
        except OSError as exc:
            if exc.errno != errno.EOPNOTSUPP:
                raise
            return self.read(position, size)
        if n < size:
            raise PagesNotCached(f"{self.path} at {position}: {n} of {size} bytes cached")
        return buf

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        fd = self.fd()
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, position)
            view = view[n:]
            position += n

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd(), size)

    def file_size(self) -> int:
        return os.fstat(self.fd()).st_size if self._fd is not None else self.path.stat().st_size

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class AppendMark(NamedTuple):
    """What ``append_mark()`` saw; ``rollback_to`` restores it."""

    size: int
    next_offset: int | None
    max_ts: int | None
    offset_of_max_ts: int
    rolling_ts: int | None
    bytes_since_last_index: int
    offset_entries: int
    time_entries: int
    txn_entries: int


@dataclass
class FileSlice:
    """A byte range of a segment file: what a local fetch sends (with ``os.sendfile`` when it can).

    ``size`` covers whole batches only. ``fetch_size`` is the range Kafka's read would have sent, up
    to its max bytes, which may end inside a batch: a fetch's ``min_bytes`` and byte budgets count it,
    as Kafka's do, while the partial batch, which every client drops, is not sent (-1: ``size``)."""

    path: Path
    position: int
    size: int
    _file: LogFile | None = field(default=None, repr=False, compare=False)
    available: int = field(default=-1, compare=False)

    def __len__(self) -> int:
        return self.size

    @property
    def fetch_size(self) -> int:
        return self.size if self.available < 0 else self.available

    def fileno(self) -> int:
        """A descriptor of the segment file, owned by the segment (do not close it); for os.sendfile."""
        if self._file is None:
            self._file = LogFile(self.path)
        return self._file.fd()

    def open(self) -> BinaryIO:
        """A new file object on the segment file that the caller closes; valid even after the segment rolls."""
        return os.fdopen(os.dup(self.fileno()), "rb")

    def read_bytes(self) -> bytes:
        if self.size == 0:
            return b""
        data = os.pread(self.fileno(), self.size, self.position)
        if len(data) != self.size:
            raise OSError(f"short read of {self.path} at {self.position}: {len(data)} of {self.size} bytes")
        return data


class LogSegment:
    """A segment's files and in-memory state. Not thread-safe: the UnifiedLog serialises access."""

    def __init__(
        self,
        dir: Path | str,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        roll_jitter_ms: int = 0,
        created_ms: int = 0,
        file_suffix: str = "",
        active: bool = False,
    ):
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        self._suffix = file_suffix
        self.dir.mkdir(parents=True, exist_ok=True)
        self._log = LogFile(self.log_path)
        if not self.log_path.exists():
            self._log.create()
        self._size = self._log.file_size()
        self.offset_index = OffsetIndex(self.offset_index_path, base_offset, max_index_size, writable=active)
        self.time_index = TimeIndex(self.time_index_path, base_offset, max_index_size, writable=active)
        self.txn_index = TransactionIndex(self.txn_index_path, base_offset)
        self._next_offset: int | None = None if self._size else base_offset
        self._max_ts: int | None = None  # loaded lazily from the time index, as Kafka does
        self._offset_of_max_ts = base_offset
        self._rolling_ts: int | None = None  # first batch's max timestamp; None = not loaded
        self._bytes_since_last_index = 0

    # ---- paths ------------------------------------------------------------------------------------
    def _path(self, suffix: str) -> Path:
        return self.dir / f"{filename_prefix(self.base_offset)}{suffix}{self._suffix}"

    @property
    def log_path(self) -> Path:
        return self._path(LOG_SUFFIX)

    @property
    def offset_index_path(self) -> Path:
        return self._path(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self._path(TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> Path:
        return self._path(TXN_INDEX_SUFFIX)

    # ---- state ------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (the base offset when empty)."""
        if self._next_offset is None:
            _, pos = self.offset_index.lookup(1 << 62)
            nxt = self.base_offset
            for _, h in self.iter_headers(pos):
                nxt = h.next_offset
            self._next_offset = nxt
        return self._next_offset

    def _load_max_ts(self) -> None:
        if self._max_ts is None:
            ts, off = self.time_index.last_entry
            self._max_ts, self._offset_of_max_ts = ts, off

    @property
    def max_timestamp_so_far(self) -> int:
        self._load_max_ts()
        return self._max_ts  # type: ignore[return-value]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        self._load_max_ts()
        return self._offset_of_max_ts

    @property
    def last_modified_ms(self) -> int:
        return self.log_path.stat().st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """The largest batch timestamp, or the file's mtime when there is none (as Kafka)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    def rolling_based_timestamp(self) -> int:
        if self._rolling_ts is None:
            self._rolling_ts = NO_TIMESTAMP
            for _, h in self.iter_headers(0):
                self._rolling_ts = h.max_timestamp
                break
        return self._rolling_ts

    # ---- reads ------------------------------------------------------------------------------------
    def iter_headers(
        self, start: int = 0, end: int | None = None, *, nowait: bool = False
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from ``start``; reads headers only, in chunks.
        ``nowait``: a chunk not in the page cache raises PagesNotCached instead of waiting for the disk."""
        end = self._size if end is None else end
        read = self._log.read_nowait if nowait else self._log.read
        pos = start
        buf: bytes | bytearray = b""
        buf_start = start
        chunk = _SCAN_PAGE
        while end - pos >= HEADER_SIZE:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = read(pos, min(chunk, end - pos))
                buf_start, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            size = peek_size(buf, off)
            if size < HEADER_SIZE or pos + size > end:
                return
            yield pos, read_header(buf, off)
            pos += size
            chunk = _SCAN_PAGE if size > _SCAN_CHUNK // 4 else _SCAN_CHUNK

    def translate_offset(
        self, offset: int, starting_position: int = 0, *, nowait: bool = False
    ) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``. ``nowait``: raise
        PagesNotCached rather than wait for the disk (the header scan reads up to 64 KiB at a time)."""
        _, idx_pos = self.offset_index.lookup(offset)
        for pos, h in self.iter_headers(max(idx_pos, starting_position), nowait=nowait):
            if h.last_offset >= offset:
                return pos, h
        return None

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False,
        *, nowait: bool = False,
    ) -> tuple[FileSlice, int] | None:
        """A slice of the whole batches from the batch holding ``start_offset``, at most ``max_size`` bytes
        (or one whole batch when ``min_one_message``), never past ``max_position``; its ``fetch_size``
        is Kafka's slice, which may end inside a batch. None when the offset is past the segment.
        ``nowait``: PagesNotCached instead of waiting for the disk to find the batches."""
        found = self.translate_offset(start_offset, nowait=nowait)
        if found is None:
            return None
        pos, h = found
        limit = self._size if max_position is None else min(max_position, self._size)
        wanted = max(max_size, h.size) if min_one_message else max_size
        size = max(0, min(limit - pos, wanted))
        # ``limit`` is a batch boundary: a read that reaches it ends with a whole batch
        whole = size if size == limit - pos else self._whole_batches(pos, h.size, pos + size, nowait)
        return FileSlice(self.log_path, pos, whole, self._log, available=size), h.base_offset

    def _whole_batches(self, pos: int, first_size: int, end: int, nowait: bool) -> int:
        """Bytes of the whole batches in ``[pos, end)``, the batch at ``pos`` (``first_size`` bytes)
        first. A fetch's slice ends where its max bytes cut it, maybe inside a batch that the client
        drops and fetches again: not sending it saves up to a batch per fetch of copying and
        transmission. The offset index (an entry at least every ``index.interval.bytes``) gives the
        last indexed batch start within the range; headers are read from there only."""
        if pos + first_size > end:
            return 0  # not even the first batch is whole (no min_one_message)
        start = max(pos + first_size, self.offset_index.floor_position(end))
        for p, h in self.iter_headers(start, end, nowait=nowait):
            start = p + h.size
        return start - pos

    def read_bytes(self, position: int, size: int) -> bytes:
        return self._log.read(position, size)

    def open_file(self) -> BinaryIO:
        """A new file object on the ``.log`` file (a dup of the segment's descriptor) that the caller
        closes: it stays valid when the segment is closed, renamed or deleted meanwhile, so it can be
        read outside the log's lock."""
        return os.fdopen(os.dup(self._log.fd()), "rb")

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> tuple[int, BatchHeader] | None:
        """The first batch at or after ``starting_offset`` whose max timestamp is >= ``timestamp``."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        for p, h in self.iter_headers(pos):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                return p, h
        return None

    # ---- writes -----------------------------------------------------------------------------------
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def append(
        self, records: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], mark: AppendMark | None = None
    ) -> None:
        """Append whole batches (offsets already assigned) and maintain the indexes, batch by batch.
        A failed write is undone back to ``mark``: the ``append_mark()`` a caller took just before
        this call (the UnifiedLog holds one to undo its own later steps too), else one taken here."""
        if not headers:
            return
        if headers[0].base_offset < self.base_offset or not self.can_convert_to_relative_offset(headers[-1].last_offset):
            raise SegmentOffsetOverflowError(
                f"offsets {headers[0].base_offset}..{headers[-1].last_offset} do not fit segment {self.base_offset}"
            )
        self._load_max_ts()
        if mark is None:
            mark = self.append_mark()
        if self._size == 0:
            self._rolling_ts = headers[0].max_timestamp
        pos = self._size
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index
        max_ts, off_max = self._max_ts, self._offset_of_max_ts
        entries: list[tuple[int, int, int, int]] = []
        for h in headers:
            if h.max_timestamp > max_ts:  # type: ignore[operator]
                max_ts, off_max = h.max_timestamp, h.last_offset
            if since > interval:
                entries.append((h.last_offset, pos, max_ts, off_max))  # type: ignore[arg-type]
                since = 0
            pos += h.size
            since += h.size
        # Data first: an index entry must never point at bytes that are not in the file yet. A write
        # that fails part-way (full disk) is undone, so the segment is exactly as before the call.
        try:
            self._log.write_at(self._size, records)
            for offset, position, ts, ts_off in entries:
                self.offset_index.append(offset, position)
                self.time_index.maybe_append(ts, ts_off)
        except BaseException:
            self.rollback_to(mark)
            raise
        self._size = pos
        self._bytes_since_last_index = since
        self._max_ts, self._offset_of_max_ts = max_ts, off_max
        self._next_offset = headers[-1].next_offset

    def append_mark(self) -> "AppendMark":
        """Everything an append changes, to undo it with ``rollback_to`` if a later step fails."""
        return AppendMark(
            self._size, self._next_offset, self._max_ts, self._offset_of_max_ts, self._rolling_ts,
            self._bytes_since_last_index, self.offset_index.entries, self.time_index.entries,
            self.txn_index.num_entries,
        )

    def rollback_to(self, mark: "AppendMark") -> None:
        """Cut the log and its indexes back to ``mark`` (a failed append: nothing of it stays visible).

        Best effort on the files: if even the truncation fails, the in-memory size still says where the
        log ends, the next append overwrites from there, and recovery would cut any torn tail."""
        self._size = mark.size
        self._next_offset = mark.next_offset
        self._max_ts, self._offset_of_max_ts = mark.max_ts, mark.offset_of_max_ts
        self._rolling_ts = mark.rolling_ts
        self._bytes_since_last_index = mark.bytes_since_last_index
        undos: tuple[Callable[[], object], ...] = (
            lambda: self.offset_index.truncate_to_entries(mark.offset_entries),
            lambda: self.time_index.truncate_to_entries(mark.time_entries),
            lambda: self.txn_index.truncate_to_entries(mark.txn_entries),
            lambda: self._log.truncate(mark.size) if self._log.file_size() != mark.size else None,
        )
        for undo in undos:
            try:
                undo()
            except OSError:
                pass

    def should_roll(
        self,
        *,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """Kafka's LogSegment.shouldRoll: size, age (with jitter), full indexes, relative-offset overflow."""
        rolling_ts = self.rolling_based_timestamp()
        waited = max_timestamp_in_messages - rolling_ts if rolling_ts >= 0 else now_ms - self.created_ms
        reached_roll_ms = waited > segment_ms - self.roll_jitter_ms
        return (
            self._size > segment_bytes - messages_size
            or (self._size > 0 and reached_roll_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_convert_to_relative_offset(max_offset_in_messages)
        )

    def truncate_to(self, offset: int) -> int:
        """Drop every batch holding offsets >= ``offset``; returns the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            return 0
        pos = found[0]
        removed = self._size - pos
        self._log.truncate(pos)
        self._size = pos
        self._next_offset = None if pos else self.base_offset
        self._max_ts = None
        self._rolling_ts = None
        self._bytes_since_last_index = 0
        return removed

    def iter_batches(self, start: int = 0) -> Iterator[tuple[int, memoryview | None]]:
        """(position, whole batch bytes) from ``start``; ``None`` bytes mark a torn or impossible batch."""
        file_size = self._log.file_size()
        pos = start
        buf = b""
        buf_start = start
        while pos < file_size:
            off = pos - buf_start
            if len(buf) - off < LOG_OVERHEAD:
                buf = self._log.read(pos, min(_RECOVER_CHUNK, file_size - pos))
                buf_start, off = pos, 0
                if len(buf) < LOG_OVERHEAD:
                    yield pos, None
                    return
            size = peek_size(buf, off)
            if size < HEADER_SIZE or size > file_size - pos:
                yield pos, None
                return
            if off + size > len(buf):
                buf = self._log.read(pos, max(size, min(_RECOVER_CHUNK, file_size - pos)))
                buf_start, off = pos, 0
            yield pos, memoryview(buf)[off : off + size]
            pos += size

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None, rebuild_txn_index: bool = False) -> int:
        """Re-read every batch, check its CRC and offsets, rebuild the offset and time indexes, and cut
        the file at the first invalid batch (a torn write or garbage). Returns the bytes truncated.

        ``on_batch`` sees each valid batch in order (leader-epoch cache and producer state rebuilds).
        """
        self.offset_index.reset()
        self.time_index.reset()
        if rebuild_txn_index:
            self.txn_index.reset()
        valid = 0
        last_index_entry = 0
        max_ts, off_max = NO_TIMESTAMP, self.base_offset
        expected = self.base_offset
        first_ts: int | None = None
        for _pos, view in self.iter_batches(0):
            if view is None:
                break
            try:
                h = validate_batch(view, 0, check_records=False)
            except RecordError:
                break
            if h.base_offset < expected or not self.can_convert_to_relative_offset(h.last_offset):
                break
            if first_ts is None:
                first_ts = h.max_timestamp
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, h.last_offset
            if valid - last_index_entry > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, valid)
                self.time_index.maybe_append(max_ts, off_max)
                last_index_entry = valid
            valid += h.size
            expected = h.next_offset
            if on_batch is not None:
                on_batch(h)
        truncated = self._log.file_size() - valid
        if truncated:
            self._log.truncate(valid)
        self._size = valid
        self._next_offset = expected
        self._max_ts, self._offset_of_max_ts = max_ts, off_max
        self._rolling_ts = NO_TIMESTAMP if first_ts is None else first_ts
        self._bytes_since_last_index = valid - last_index_entry
        try:
            self.txn_index.sanity_check()
        except CorruptIndexError:
            self.txn_index.reset()  # as Kafka's recover: it starts empty (the caller logged why)
        self.txn_index.truncate_to(expected)
        # As after a roll: the time index ends with the segment's max timestamp, and both are trimmed
        # (the log makes its active segment writable again).
        if max_ts >= 0:
            self.time_index.maybe_append(max_ts, off_max, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        return truncated

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index file is missing (for a non-empty log) or implausible."""
        if self._size and not (self.offset_index_path.exists() and self.time_index_path.exists()):
            raise CorruptIndexError(f"index files of segment {self.log_path} are missing")
        self.offset_index.sanity_check(self._size)
        nxt = self.next_offset
        if self.offset_index.entries and self.offset_index.last_offset >= nxt:
            raise CorruptIndexError(f"offset index of {self.log_path} points past the end of the log")
        self.time_index.sanity_check(nxt)
        self.txn_index.sanity_check()

    def rebuild_indexes(self) -> None:
        """Rebuild the offset and time indexes from the log without touching the data."""
        size = self._size
        self.recover(None)
        if self._size != size:  # pragma: no cover - callers rebuild only segments that recovered cleanly
            raise CorruptIndexError(f"segment {self.log_path} lost {size - self._size} bytes while rebuilding indexes")

    # ---- lifecycle --------------------------------------------------------------------------------
    def on_become_inactive(self) -> None:
        """At roll: record the final max timestamp and trim the indexes to their valid entries."""
        self._load_max_ts()
        if self._max_ts is not None and self._max_ts >= 0:
            if not self.time_index.is_writable:
                self.time_index.make_writable()
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def make_active(self) -> None:
        self.offset_index.make_writable()
        self.time_index.make_writable()

    def flush(self) -> None:
        self._log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        try:
            if self.time_index.is_writable:
                self.on_become_inactive()
            self.offset_index.close()
            self.time_index.close()
        finally:
            # A full disk can fail the roll entry or the trim; the descriptors are released anyway
            # (an untrimmed index fails the sanity check at the next start and is rebuilt).
            self.offset_index.release()
            self.time_index.release()
            self.txn_index.close()
            self._log.close()

    def close_handles(self) -> None:
        """Release descriptors without writing anything (a segment scheduled for deletion)."""
        self._log.close()
        self.txn_index.close()

    def change_file_suffix(self, new_suffix: str, *, log_last: bool = False) -> None:
        """Rename every file of the segment, e.g. to ``.deleted`` before the delayed physical delete.
        The ``.log`` goes first (an index left behind is an orphan the next load deletes), or last
        with ``log_last`` (a cleaned segment leaving ``.swap``: the ``.log.swap`` still there tells
        the next load that the swap is unfinished, and its indexes are found under either name)."""
        old_log = self.log_path
        self._suffix = new_suffix

        def rename_log() -> None:
            if old_log.exists():
                os.replace(old_log, self.log_path)
            self._log.path = self.log_path

        if not log_last:
            rename_log()
        self.offset_index.rename_to(self.offset_index_path)
        self.time_index.rename_to(self.time_index_path)
        self.txn_index.rename_to(self.txn_index_path)
        if log_last:
            rename_log()

    def delete(self) -> None:
        self.close_handles()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            self.log_path.unlink()
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, path={self.log_path})"
