"""RemoteIndexCache: a bounded on-disk cache of remote segments' offset, time and txn indexes.

Files live in ``<log dir>/remote-log-index-cache/<start offset>_<segment uuid>.{index,timeindex,txnindex}``
(Kafka's layout; the uuid in Kafka's URL-safe base64). Each entry weighs the sum of its three file
sizes; the least recently used entries are evicted once the total passes
``remote.log.index.file.cache.total.size.bytes``, and their files are deleted.

Indexes are read through ``mmap``. An evicted entry's files are unlinked at once, but an entry a
reader thread still holds keeps its mapping alive until the reader drops it (the mapping is
closed by garbage collection, never under a reader's feet: Kafka's KAFKA-19971 race).
Only one thread fetches a given segment's indexes; the others wait for it.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from pathlib import Path

from tieredlog.atomic_file import SourceTooLargeError, atomic_copy, atomic_write
from tieredlog.formats.index import CorruptIndexError
from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str
from tieredlog.log.index import MappedOffsetIndex, MappedTimeIndex, read_txn_index
from tieredlog.log.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from tieredlog.rlm.metrics import metrics
from tieredlog.rsm.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
)

log = logging.getLogger(__name__)

DIR_NAME = "remote-log-index-cache"
# Kafka's cache names its files as a segment's indexes
OFFSET_SUFFIX, TIME_SUFFIX, TXN_SUFFIX = INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
_SUFFIXES = (OFFSET_SUFFIX, TIME_SUFFIX, TXN_SUFFIX)
_UNTRIMMED_INDEX_MAX = 32 << 20  # segment.index.bytes is 10 MiB by default


class Entry:
    def __init__(self, key: uuid.UUID, base_offset: int, files: dict[str, Path]) -> None:
        self.key = key
        self.base_offset = base_offset
        self.files = files
        self.offset_index = MappedOffsetIndex(files[OFFSET_SUFFIX], base_offset)
        self.time_index = MappedTimeIndex(files[TIME_SUFFIX], base_offset)
        # searched by tieredlog.rlm.aborted_txns with the log's own collect_aborted_across
        self.aborted_txns: list[AbortedTxn] = read_txn_index(files[TXN_SUFFIX])
        self.weight = sum(p.stat().st_size for p in files.values())


class RemoteIndexCache:
    def __init__(
        self,
        rsm: RemoteStorageManager,
        log_dir: str | os.PathLike,
        max_size_bytes: int = 1 << 30,
        on_hit=None,
        on_miss=None,
        on_evict=None,
    ) -> None:
        self.rsm = rsm
        self.dir = Path(log_dir) / DIR_NAME
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_size_bytes = max_size_bytes
        self._lock = threading.Lock()
        self._entries: "OrderedDict[uuid.UUID, Entry]" = OrderedDict()
        self._loading: dict[uuid.UUID, Future] = {}
        self._size = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._on_hit, self._on_miss, self._on_evict = on_hit, on_miss, on_evict
        self._closed = False
        self._init_from_disk()

    # -- start-up -----------------------------------------------------------------------------
    def _init_from_disk(self) -> None:
        """Drop leftovers of interrupted writes and evictions; re-register complete triples."""
        groups: dict[str, dict[str, Path]] = {}
        for p in self.dir.iterdir():
            if p.name.endswith((".tmp", ".deleted")):
                p.unlink(missing_ok=True)
                continue
            stem, suffix = os.path.splitext(p.name)
            groups.setdefault(stem, {})[suffix] = p
        for stem, files in groups.items():
            try:
                start_s, uid_s = stem.split("_", 1)
                base, key = int(start_s), kafka_str_to_uuid(uid_s)
                if set(files) != set(_SUFFIXES):
                    raise CorruptIndexError("incomplete")
                entry = Entry(key, base, files)
            except (ValueError, CorruptIndexError, OSError):
                for p in files.values():
                    p.unlink(missing_ok=True)
                continue
            self._entries[key] = entry
            self._size += entry.weight
        self._evict_locked()

    # -- public -------------------------------------------------------------------------------
    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: uuid.UUID) -> bool:
        return key in self._entries

    def get_entry(self, md: RemoteLogSegmentMetadata) -> Entry:
        key = md.remote_log_segment_id.id
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("RemoteIndexCache is closed")
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    if self._on_hit:
                        self._on_hit()
                    return entry
                fut = self._loading.get(key)
                owner = fut is None
                if fut is None:
                    fut = Future()
                    self._loading[key] = fut
                    self.misses += 1
                    if self._on_miss:
                        self._on_miss()
            if not owner:
                # another thread is fetching these indexes; share its result (or its error)
                fut.result()
                continue
            try:
                entry = self._load(md)
            except BaseException as exc:
                with self._lock:
                    self._loading.pop(key, None)
                fut.set_exception(exc)
                raise
            with self._lock:
                self._loading.pop(key, None)
                self._entries[key] = entry
                self._size += entry.weight
                self._evict_locked(keep=key)
            fut.set_result(entry)
            return entry

    def lookup_offset(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        """File position in the remote segment to start reading ``offset`` from."""
        return self.get_entry(md).offset_index.lookup(offset)[1]

    def lookup_offset_entry(self, md: RemoteLogSegmentMetadata, offset: int) -> tuple[int, int]:
        return self.get_entry(md).offset_index.lookup(offset)

    def lookup_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int) -> int:
        """Position to scan from for the first record with timestamp >= ``timestamp``."""
        entry = self.get_entry(md)
        offset = max(entry.time_index.lookup(timestamp)[1], starting_offset)
        return entry.offset_index.lookup(offset)[1]

    def remove(self, key: uuid.UUID) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._size -= entry.weight
                self._delete_files(entry)

    def remove_all(self, keys) -> None:
        for k in keys:
            self.remove(k)

    def resize(self, max_size_bytes: int) -> None:
        """Dynamic config: remote.log.index.file.cache.total.size.bytes."""
        with self._lock:
            self.max_size_bytes = max_size_bytes
            self._evict_locked()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._entries.clear()

    # -- internals ----------------------------------------------------------------------------
    def _evict_locked(self, keep: uuid.UUID | None = None) -> None:
        while self._size > self.max_size_bytes and self._entries:
            key, entry = next(iter(self._entries.items()))
            if key == keep and len(self._entries) == 1:
                break  # an entry larger than the whole cache still serves the read that loaded it
            del self._entries[key]
            self._size -= entry.weight
            self.evictions += 1
            if self._on_evict:
                self._on_evict()
            self._delete_files(entry)

    @staticmethod
    def _delete_files(entry: Entry) -> None:
        # rename first so a crash mid-way leaves only *.deleted files, which start-up removes
        for p in entry.files.values():
            try:
                tmp = p.with_name(p.name + ".deleted")
                os.replace(p, tmp)
                tmp.unlink(missing_ok=True)
            except FileNotFoundError:
                pass

    def _fetch_to_file(self, md: RemoteLogSegmentMetadata, index_type: IndexType, dest: Path) -> None:
        # No fsync: a cache file lost to a crash is fetched again.
        try:
            stream = self.rsm.fetch_index(md, index_type)
            metrics().object_store.record(md.topic_id_partition.topic, "GET")
        except RemoteResourceNotFoundException:
            metrics().object_store.record(md.topic_id_partition.topic, "GET")  # a 404 is billed too
            if index_type is not IndexType.TRANSACTION:
                raise
            atomic_write(dest, b"", sync=False)  # a segment without transactions has no txn index
            return
        # An index has at most one entry per batch, so it is smaller than its segment (or, not
        # trimmed at roll, as long as segment.index.bytes): a bigger object is corrupt, and is not
        # copied to the cache folder whatever its size.
        limit = max(md.segment_size_in_bytes, _UNTRIMMED_INDEX_MAX) if md.segment_size_in_bytes > 0 else None
        try:
            atomic_copy(dest, stream, sync=False, max_bytes=limit)
        except SourceTooLargeError:
            raise CorruptIndexError(
                f"remote {index_type.value} index of segment {md.remote_log_segment_id.id} "
                f"is over {limit} bytes, more than its segment can need"
            ) from None
        finally:
            stream.close()

    def _load(self, md: RemoteLogSegmentMetadata) -> Entry:
        key = md.remote_log_segment_id.id
        stem = f"{md.start_offset}_{uuid_to_kafka_str(key)}"
        files = {s: self.dir / (stem + s) for s in _SUFFIXES}
        kinds = {OFFSET_SUFFIX: IndexType.OFFSET, TIME_SUFFIX: IndexType.TIMESTAMP, TXN_SUFFIX: IndexType.TRANSACTION}
        for suffix, path in files.items():
            if not path.exists():
                self._fetch_to_file(md, kinds[suffix], path)
        try:
            return Entry(key, md.start_offset, files)
        except CorruptIndexError as exc:
            # a file left by an older run or a bad transfer: fetch everything once more
            first = exc
        for suffix, path in files.items():
            self._fetch_to_file(md, kinds[suffix], path)
        try:
            entry = Entry(key, md.start_offset, files)
        except CorruptIndexError:
            # the remote objects themselves: the failed read reports it (one line); nothing is kept,
            # so the next read fetches them again
            for path in files.values():
                path.unlink(missing_ok=True)
            raise
        log.info("cached indexes of %s were corrupt (%s); fetched again", stem, first)
        return entry
