"""ChunkedRemoteStorageManager: wraps any RSM and stores each segment's log as fixed-size chunks,
each optionally zstd-compressed and AES-GCM encrypted, behind a chunk index (see ``format.py``).
Ranged reads fetch only the chunks they need; a disk cache with prefetch serves sequential readers.
"""

from __future__ import annotations

import io
import logging
import shutil
import tempfile
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Mapping

import zstandard

from tieredlog.rsm import (
    ConfigReader,
    CustomMetadata,
    IndexType,
    ListableRemoteStorageManager,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteStorageConfigError,
    RemoteStorageException,
    RemoteStorageManager,
    SegmentObjectKey,
    TopicIdPartition,
    check_positions,
    load_remote_storage_manager,
)
from tieredlog_chunked import crypto
from tieredlog_chunked.cache import DiskChunkCache
from tieredlog_chunked.format import FIRST_READ, PREAMBLE, ChunkHeader, header_length_from_preamble, parse_header

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# A compressed first chunk larger than this share of the original means the data is already
# compressed (Kafka batches usually are): store the segment as is.
COMPRESSION_WORTH_IT = 0.9
# One backend read covers at most this many original bytes; larger ranges stream batch by batch.
READ_BATCH_BYTES = 16 * MIB


@dataclass
class FetchStats:
    """Counters for the cost of reads: ``bytes_fetched`` from the backend per ``bytes_served``."""

    bytes_fetched: int = 0
    bytes_served: int = 0
    backend_reads: int = 0
    chunks_decoded: int = 0


class ChunkedRemoteStorageManager(ListableRemoteStorageManager):
    """Listing (for readers without a broker) is the wrapped backend's: the objects keep its names and its
    manifest, written last, describes the original segment; only the log's and indexes' bytes differ, and
    :meth:`fetch_log_segment` / :meth:`fetch_index` undo that.

    Configs (without the broker's ``rsm.config.`` prefix):

    - ``chunked.backend``: the wrapped RSM (short name or ``module:Class``); its configs go under
      ``chunked.backend.config.`` (``broker.id`` is passed on); ``chunked.backend.class.path`` optional.
    - ``chunk.size``: original bytes per chunk, default 4 MiB.
    - ``compression.enabled`` (default false), ``compression.heuristic.enabled`` (default true).
    - ``encryption.enabled`` (default false), ``encryption.key.id``, ``encryption.keys.<id>``
      (base64 of 32 bytes; keep old ids to read old segments).
    - ``fetch.chunk.cache.path`` (enables the disk cache), ``fetch.chunk.cache.size`` (bytes, default
      256 MiB), ``fetch.chunk.cache.prefetch.max.size`` (bytes read ahead after each read, default 0),
      ``fetch.chunk.cache.thread.pool.size`` (prefetch threads, default 4).
    - ``fetch.manifest.cache.size``: chunk headers kept in memory, default 1000.
    """

    def __init__(self) -> None:
        self.backend: RemoteStorageManager | None = None
        self.chunk_size = 4 * MIB
        self.compression = False
        self.compression_heuristic = True
        self.key_ring: crypto.KeyRing | None = None
        self.cache: DiskChunkCache | None = None
        self.prefetch_max = 0
        self.stats = FetchStats()
        self._stats_lock = threading.Lock()
        self._headers: OrderedDict[uuid.UUID, tuple[ChunkHeader, bytes | None]] = OrderedDict()
        self._headers_max = 1000
        self._lock = threading.Lock()
        self._inflight: dict[tuple[uuid.UUID, int], Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._prefetches: set[Future] = set()

    # -- configuration -------------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, object]) -> None:
        reader = ConfigReader(configs)
        backend_name = reader.string("chunked.backend")
        if backend_name == "chunked":
            raise RemoteStorageConfigError("invalid config rsm.config.chunked.backend='chunked': it cannot wrap itself")
        self.chunk_size = reader.integer("chunk.size", 4 * MIB, minimum=1024, maximum=1024 * MIB)  # type: ignore[assignment]
        self.compression = reader.boolean("compression.enabled", False)
        self.compression_heuristic = reader.boolean("compression.heuristic.enabled", True)
        if reader.boolean("encryption.enabled", False):
            active = reader.string("encryption.key.id")
            raw = reader.with_prefix("encryption.keys.")
            if not raw:
                raise RemoteStorageConfigError("missing config rsm.config.encryption.keys.<id> (base64 of 32 bytes)")
            try:
                keys = {key_id: crypto.KeyRing.decode_key(key_id, str(v)) for key_id, v in raw.items()}
                self.key_ring = crypto.KeyRing(keys, active)  # type: ignore[arg-type]
            except ValueError as exc:
                raise RemoteStorageConfigError(f"invalid encryption config: {exc}") from None
        self._headers_max = reader.integer("fetch.manifest.cache.size", 1000, minimum=1)  # type: ignore[assignment]
        cache_path = reader.string("fetch.chunk.cache.path", None)
        cache_size = reader.integer("fetch.chunk.cache.size", 256 * MIB, minimum=0)
        self.prefetch_max = reader.integer("fetch.chunk.cache.prefetch.max.size", 0, minimum=0)  # type: ignore[assignment]
        threads = reader.integer("fetch.chunk.cache.thread.pool.size", 4, minimum=1)
        if self.prefetch_max and not cache_path:
            raise RemoteStorageConfigError(
                "invalid config rsm.config.fetch.chunk.cache.prefetch.max.size: prefetch needs fetch.chunk.cache.path")
        if cache_path:
            try:
                self.cache = DiskChunkCache(Path(cache_path), cache_size)  # type: ignore[arg-type]
            except OSError as exc:
                raise RemoteStorageConfigError(
                    f"invalid config rsm.config.fetch.chunk.cache.path={cache_path!r}: {exc.strerror}") from None
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="chunk-prefetch")
        backend_configs = reader.with_prefix("chunked.backend.config.")
        if "broker.id" in configs:
            backend_configs.setdefault("broker.id", configs["broker.id"])
        self.backend = load_remote_storage_manager(
            backend_name, reader.string("chunked.backend.class.path", None), backend_configs)
        log.info("chunked remote storage over %s: chunk size %d, compression %s, encryption %s, cache %s",
                 backend_name, self.chunk_size, self.compression,
                 f"key id {self.key_ring.active}" if self.key_ring else "off",
                 self.cache.folder if self.cache else "off")

    def _backend(self) -> RemoteStorageManager:
        if self.backend is None:
            raise RemoteStorageException("ChunkedRemoteStorageManager used before configure()")
        return self.backend

    # -- copy ------------------------------------------------------------------------------------------

    def copy_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, log_segment_data: LogSegmentData
    ) -> CustomMetadata | None:
        md, data = remote_log_segment_metadata, log_segment_data
        segment_id = md.remote_log_segment_id.id
        workdir = Path(tempfile.mkdtemp(prefix="tieredlog-chunked-copy-"))
        try:
            data_key = crypto.new_data_key() if self.key_ring else None
            stored_log = self._write_chunked_log(Path(data.log_segment), workdir, segment_id, data_key)

            def index(path: Path | None, name: str) -> Path | None:
                if path is None or data_key is None:
                    return path
                out = workdir / name
                out.write_bytes(crypto.seal(data_key, Path(path).read_bytes(), _index_aad(segment_id, name)))
                return out

            epoch_index = bytes(data.leader_epoch_index)
            if data_key is not None:
                epoch_index = crypto.seal(data_key, epoch_index, _index_aad(segment_id, IndexType.LEADER_EPOCH.name))
            stored = LogSegmentData(
                log_segment=stored_log,
                offset_index=index(Path(data.offset_index), IndexType.OFFSET.name),  # type: ignore[arg-type]
                time_index=index(Path(data.time_index), IndexType.TIMESTAMP.name),  # type: ignore[arg-type]
                transaction_index=index(data.transaction_index, IndexType.TRANSACTION.name),
                producer_snapshot_index=index(Path(data.producer_snapshot_index),  # type: ignore[arg-type]
                                              IndexType.PRODUCER_SNAPSHOT.name),
                leader_epoch_index=epoch_index,
            )
            self._forget(segment_id)  # a re-copy of this id replaces its chunks
            return self._backend().copy_log_segment_data(md, stored)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _write_chunked_log(self, source: Path, workdir: Path, segment_id: uuid.UUID, data_key: bytes | None) -> Path:
        size = source.stat().st_size
        compress = self.compression
        sizes: list[int] = []
        body = workdir / "chunks"
        compressor = zstandard.ZstdCompressor(level=3)
        with source.open("rb") as src, body.open("wb") as out:
            index = 0
            while True:
                chunk = src.read(self.chunk_size)
                if not chunk:
                    break
                if compress:
                    packed = compressor.compress(chunk)
                    if index == 0 and self.compression_heuristic and len(packed) > COMPRESSION_WORTH_IT * len(chunk):
                        compress = False  # already-compressed batches: don't pay for it twice
                        packed = chunk
                    chunk = packed
                if data_key is not None:
                    chunk = crypto.seal(data_key, chunk, _chunk_aad(segment_id, index))
                out.write(chunk)
                sizes.append(len(chunk))
                index += 1
        header = ChunkHeader(
            chunk_size=self.chunk_size, original_size=size, compression="zstd" if compress else None,
            data_key=self.key_ring.wrap(data_key, segment_id) if (self.key_ring and data_key) else None,
            chunks=tuple(sizes))
        stored = workdir / "log"
        with stored.open("wb") as out, body.open("rb") as chunks:
            out.write(header.encode())
            shutil.copyfileobj(chunks, out, 4 * MIB)
        return stored

    # -- fetch -----------------------------------------------------------------------------------------

    def _count(self, fetched: int = 0, served: int = 0, reads: int = 0, decoded: int = 0) -> None:
        with self._stats_lock:
            self.stats.bytes_fetched += fetched
            self.stats.bytes_served += served
            self.stats.backend_reads += reads
            self.stats.chunks_decoded += decoded

    def _read_backend(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        with self._backend().fetch_log_segment(md, start, end) as stream:
            data = stream.read()
        self._count(fetched=len(data), reads=1)
        return data

    def _header(self, md: RemoteLogSegmentMetadata) -> tuple[ChunkHeader, bytes | None]:
        segment_id = md.remote_log_segment_id.id
        with self._lock:
            if segment_id in self._headers:
                self._headers.move_to_end(segment_id)
                return self._headers[segment_id]
        first = self._read_backend(md, 0, FIRST_READ - 1)
        length = header_length_from_preamble(first)
        if PREAMBLE + length > len(first):
            first += self._read_backend(md, len(first), PREAMBLE + length - 1)
        header = parse_header(first)
        data_key = self.key_ring.unwrap(header.data_key, segment_id) if header.data_key and self.key_ring else None
        if header.data_key and data_key is None:
            raise RemoteStorageException(f"segment {segment_id} is encrypted but encryption is not configured")
        with self._lock:
            self._headers[segment_id] = (header, data_key)
            while len(self._headers) > self._headers_max:
                self._headers.popitem(last=False)
        return header, data_key

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        check_positions(start_position, end_position)
        md = remote_log_segment_metadata
        header, data_key = self._header(md)
        last_byte = header.original_size - 1
        end = last_byte if end_position is None else min(end_position, last_byte)
        if start_position > end:
            return io.BytesIO(b"")
        return io.BufferedReader(_ChunkRangeReader(self, md, header, data_key, start_position, end),
                                 buffer_size=256 * 1024)

    def _decode(self, header: ChunkHeader, data_key: bytes | None, segment_id: uuid.UUID,
                index: int, stored: bytes) -> bytes:
        if data_key is not None:
            stored = crypto.open_sealed(data_key, stored, _chunk_aad(segment_id, index))
        if header.compression == "zstd":
            stored = zstandard.ZstdDecompressor().decompress(stored, max_output_size=header.chunk_size)
        self._count(decoded=1)
        return stored

    def _chunks(self, md: RemoteLogSegmentMetadata, header: ChunkHeader, data_key: bytes | None,
                first: int, last: int) -> list[bytes]:
        """Decoded chunks ``first..last``: from the cache, from a fetch already in flight (a prefetch
        or another reader), or fetched now with one ranged read per run of missing chunks."""
        segment_id = md.remote_log_segment_id.id
        results: dict[int, bytes] = {}
        waiting: dict[int, Future] = {}
        mine: dict[int, Future] = {}
        for index in range(first, last + 1):
            cached = self.cache.get((segment_id, index)) if self.cache else None
            if cached is not None:
                results[index] = cached
                continue
            with self._lock:
                future = self._inflight.get((segment_id, index))
                if future is None:
                    future = mine[index] = self._inflight[(segment_id, index)] = Future()
            if index not in mine:
                waiting[index] = future
        try:
            offsets = header.transformed_offsets()
            for run in _runs(sorted(mine)):
                blob = self._read_backend(md, offsets[run[0]], offsets[run[-1] + 1] - 1)
                for index in run:
                    part = blob[offsets[index] - offsets[run[0]]:offsets[index + 1] - offsets[run[0]]]
                    chunk = self._decode(header, data_key, segment_id, index, part)
                    if self.cache:
                        self.cache.put((segment_id, index), chunk)
                    results[index] = chunk
                    mine.pop(index).set_result(chunk)
                    with self._lock:
                        self._inflight.pop((segment_id, index), None)
        except BaseException as exc:
            with self._lock:
                for index, future in mine.items():
                    self._inflight.pop((segment_id, index), None)
                    future.set_exception(exc)
            raise
        for index, future in waiting.items():
            results[index] = future.result()
        return [results[i] for i in range(first, last + 1)]

    def _prefetch_after(self, md: RemoteLogSegmentMetadata, header: ChunkHeader, data_key: bytes | None,
                        last: int) -> None:
        """Read ahead into the cache, up to ``prefetch.max.size`` bytes, never past the segment."""
        if not self.prefetch_max or self._pool is None or self.cache is None:
            return
        segment_id = md.remote_log_segment_id.id
        wanted, budget = [], self.prefetch_max
        for index in range(last + 1, header.chunk_count):
            size = header.original_range(index)[1] - header.original_range(index)[0]
            if size > budget:
                break
            budget -= size
            with self._lock:
                busy = (segment_id, index) in self._inflight
            if not busy and (segment_id, index) not in self.cache:
                wanted.append(index)
        if not wanted:
            return

        def task() -> None:
            try:
                self._chunks(md, header, data_key, wanted[0], wanted[-1])
            except Exception as exc:  # a failed prefetch only costs the reader a fetch later
                log.debug("prefetch of segment %s chunks %s failed: %s", segment_id, wanted, exc)

        future = self._pool.submit(task)
        with self._lock:
            self._prefetches.add(future)
        future.add_done_callback(lambda f: self._discard_prefetch(f))

    def _discard_prefetch(self, future: Future) -> None:
        with self._lock:
            self._prefetches.discard(future)

    def wait_for_prefetch(self, timeout: float | None = 30.0) -> None:
        """Block until every prefetch submitted so far has finished (tests, benchmarks)."""
        with self._lock:
            pending = list(self._prefetches)
        for future in pending:
            future.result(timeout=timeout)

    # -- indexes and delete ------------------------------------------------------------------------------

    def fetch_index(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        md = remote_log_segment_metadata
        stream = self._backend().fetch_index(md, index_type)
        _, data_key = self._header(md)
        if data_key is None:
            return stream
        with stream:
            sealed = stream.read()
        return io.BytesIO(crypto.open_sealed(data_key, sealed, _index_aad(md.remote_log_segment_id.id, index_type.name)))

    def delete_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        self._forget(remote_log_segment_metadata.remote_log_segment_id.id)
        self._backend().delete_log_segment_data(remote_log_segment_metadata)

    def _forget(self, segment_id: uuid.UUID) -> None:
        with self._lock:
            self._headers.pop(segment_id, None)
        if self.cache:
            self.cache.invalidate_segment(segment_id)

    # -- listing (the wrapped backend's) -----------------------------------------------------------------

    def _listable(self) -> ListableRemoteStorageManager:
        backend = self._backend()
        if not isinstance(backend, ListableRemoteStorageManager):
            raise RemoteStorageException(
                f"the wrapped backend {type(backend).__name__} cannot list segments, so readers without a broker "
                "cannot read this tier")
        return backend

    def list_segment_objects(self, topic_id_partition: TopicIdPartition | None = None) -> list[SegmentObjectKey]:
        return self._listable().list_segment_objects(topic_id_partition)

    def list_topic_segment_objects(self, topic: str) -> list[SegmentObjectKey]:
        return self._listable().list_topic_segment_objects(topic)

    def read_manifest(self, key: SegmentObjectKey | str) -> dict[str, Any]:
        return self._listable().read_manifest(key)

    def write_log_start_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        self._listable().write_log_start_offset(topic_id_partition, offset)  # an offset, nothing to hide

    def read_log_start_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        return self._listable().read_log_start_offset(topic_id_partition)

    def write_cleaner_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        self._listable().write_cleaner_offset(topic_id_partition, offset)

    def read_cleaner_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        return self._listable().read_cleaner_offset(topic_id_partition)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self.cache is not None:
            self.cache.close()
            self.cache = None
        if self.backend is not None:
            self.backend.close()
            self.backend = None


class _ChunkRangeReader(io.RawIOBase):
    """Streams original bytes ``start..end`` (inclusive), loading at most READ_BATCH_BYTES of chunks
    at a time, and starts the prefetch after the last chunk of the range."""

    def __init__(self, rsm: ChunkedRemoteStorageManager, md, header: ChunkHeader, data_key, start: int, end: int):
        super().__init__()
        self._rsm, self._md, self._header, self._key = rsm, md, header, data_key
        self._pos, self._end = start, end
        self._buffer = memoryview(b"")
        self._prefetched = False

    def readable(self) -> bool:
        return True

    def _load(self) -> None:
        size = self._header.chunk_size
        first = self._pos // size
        batch = max(1, READ_BATCH_BYTES // size)
        last = min(self._end // size, first + batch - 1)
        chunks = self._rsm._chunks(self._md, self._header, self._key, first, last)
        data = b"".join(chunks)
        begin = self._pos - first * size
        stop = min(len(data), self._end - first * size + 1)
        self._buffer = memoryview(data)[begin:stop]  # slicing a view copies nothing
        if not self._prefetched:
            self._prefetched = True
            self._rsm._prefetch_after(self._md, self._header, self._key, self._end // size)

    def readinto(self, buffer) -> int:
        if not self._buffer:
            if self._pos > self._end:
                return 0
            self._load()
        n = min(len(buffer), len(self._buffer))
        buffer[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        self._pos += n
        self._rsm._count(served=n)
        return n


def _runs(indexes: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index in indexes:
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def _chunk_aad(segment_id: uuid.UUID, index: int) -> bytes:
    # Binds each chunk to its segment and place: chunks cannot be swapped or replayed elsewhere.
    return b"chunk:" + segment_id.bytes + index.to_bytes(4, "big")


def _index_aad(segment_id: uuid.UUID, name: str) -> bytes:
    return b"index:" + segment_id.bytes + name.encode()
