"""What every object-store RSM (S3, fsspec) shares: the segment manifest, and the copy / fetch / delete /
list algorithm over five primitive operations.

A segment is stored as one object per file (see :mod:`tieredlog.rsm.keys`), written in the order
log, indexes, producer snapshot, leader-epoch checkpoint, and the manifest **last**: a reader that
lists the bucket (Spark, ``tieredlog remote ls``) treats a segment without a manifest as uncommitted.
"""

from __future__ import annotations

import abc
import io
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Mapping

from tieredlog.formats.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    SegmentManifest,
    decode_manifest,
    encode_manifest,
)
from tieredlog.rsm.api import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    TopicIdPartition,
    check_positions,
)
from tieredlog.rsm.keys import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    MANIFEST_SUFFIX,
    InvalidKeyError,
    SegmentObjectKey,
    cleaner_offset_key,
    log_start_offset_key,
    parse_listing,
    parse_segment_key,
    partition_prefix,
    segment_keys,
    segment_stem,
    validate_topic,
)
from tieredlog.rsm.listing import (
    MAX_LOG_START_BYTES,
    ListableRemoteStorageManager,
    decode_cleaner_offset,
    decode_log_start_offset,
    encode_cleaner_offset,
    encode_log_start_offset,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)


def build_manifest(metadata: RemoteLogSegmentMetadata, object_sizes: Mapping[str, int]) -> bytes:
    """The commit marker (:mod:`tieredlog.formats.manifest`) of a segment whose objects have these
    sizes (suffix -> bytes)."""
    tp = metadata.topic_id_partition
    return encode_manifest(SegmentManifest(
        topic=tp.topic,
        topic_id=tp.topic_id,
        partition=tp.partition,
        segment_id=metadata.remote_log_segment_id.id,
        start_offset=metadata.start_offset,
        end_offset=metadata.end_offset,
        max_timestamp_ms=metadata.max_timestamp_ms,
        broker_id=metadata.broker_id,
        event_timestamp_ms=metadata.event_timestamp_ms,
        segment_size_in_bytes=metadata.segment_size_in_bytes,
        segment_leader_epochs=metadata.segment_leader_epochs,
        tx_index_present=INDEX_SUFFIXES[IndexType.TRANSACTION] in object_sizes,
        file_sizes=object_sizes,
    ), segment_stem(metadata))


def parse_manifest(data: bytes) -> dict[str, Any]:
    """The manifest's body; RemoteStorageException for bytes that are not one."""
    try:
        return decode_manifest(data)
    except ManifestError as exc:
        raise RemoteStorageException(str(exc)) from None


class ObjectStoreRemoteStorageManager(ListableRemoteStorageManager):
    """The segment algorithm over a flat key space. Subclasses supply the five primitives; all of
    them must be thread safe and map failures to the ``tieredlog.rsm`` exceptions."""

    key_prefix: str = ""

    @abc.abstractmethod
    def _put_file(self, key: str, path: Path) -> None: ...

    @abc.abstractmethod
    def _put_bytes(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        """Bytes ``start..end`` inclusive (``None``: to the end), cut at the end of the object; empty
        when ``start`` is past it. Missing object: RemoteResourceNotFoundException."""

    @abc.abstractmethod
    def _delete_keys(self, keys: list[str]) -> None:
        """Delete the keys; keys already gone are not an error."""

    @abc.abstractmethod
    def _list_keys(self, prefix: str) -> Iterator[str]: ...

    # -- the RSM contract ------------------------------------------------------------------------

    def copy_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, log_segment_data: LogSegmentData
    ) -> CustomMetadata | None:
        keys = segment_keys(self.key_prefix, remote_log_segment_metadata)
        files: list[tuple[str, Path | bytes]] = [
            (LOG_SUFFIX, log_segment_data.log_segment),
            (INDEX_SUFFIXES[IndexType.OFFSET], log_segment_data.offset_index),
            (INDEX_SUFFIXES[IndexType.TIMESTAMP], log_segment_data.time_index),
        ]
        if log_segment_data.transaction_index is not None:
            files.append((INDEX_SUFFIXES[IndexType.TRANSACTION], log_segment_data.transaction_index))
        files.append((INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT], log_segment_data.producer_snapshot_index))
        files.append((INDEX_SUFFIXES[IndexType.LEADER_EPOCH], bytes(log_segment_data.leader_epoch_index)))
        written: list[str] = []
        sizes: dict[str, int] = {}
        try:
            # Copy is idempotent: an earlier attempt with this id must not keep vouching (manifest)
            # for objects about to be replaced, nor leave a txn index this segment does not have.
            stale = [keys[MANIFEST_SUFFIX]]
            if log_segment_data.transaction_index is None:
                stale.append(keys[INDEX_SUFFIXES[IndexType.TRANSACTION]])
            self._delete_keys(stale)
            for suffix, source in files:
                if isinstance(source, bytes):
                    self._put_bytes(keys[suffix], source)
                    sizes[suffix] = len(source)
                else:
                    self._put_file(keys[suffix], Path(source))
                    sizes[suffix] = Path(source).stat().st_size
                written.append(keys[suffix])
            self._put_bytes(keys[MANIFEST_SUFFIX], build_manifest(remote_log_segment_metadata, sizes))
        except Exception:
            # Orphans cost money and confuse listings; the RLM retries with a new segment id anyway.
            try:
                self._delete_keys(written)
            except Exception as cleanup_exc:  # the original failure is the one to report
                log.warning("could not clean up partial copy of %s: %s",
                            remote_log_segment_metadata.remote_log_segment_id.id, cleanup_exc)
            raise
        return None

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        check_positions(start_position, end_position)
        keys = segment_keys(self.key_prefix, remote_log_segment_metadata)
        return self._get_range(keys[LOG_SUFFIX], start_position, end_position)

    def fetch_index(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        keys = segment_keys(self.key_prefix, remote_log_segment_metadata)
        return self._get_range(keys[INDEX_SUFFIXES[index_type]], 0, None)

    def delete_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        keys = segment_keys(self.key_prefix, remote_log_segment_metadata)
        # The manifest goes first so a lister never sees a committed segment with missing parts.
        self._delete_keys([keys[MANIFEST_SUFFIX]])
        self._delete_keys([k for suffix, k in keys.items() if suffix != MANIFEST_SUFFIX])

    # -- beyond the contract: listing for tools and broker-less readers ----------------------------

    def list_segment_objects(self, topic_id_partition: TopicIdPartition | None = None) -> list[SegmentObjectKey]:
        """Every valid segment object under the prefix (or one partition). Keys that do not parse
        (foreign objects, hand-made keys) are skipped, never trusted."""
        prefix = self.key_prefix if topic_id_partition is None else partition_prefix(self.key_prefix, topic_id_partition)
        return self._parsed_listing(prefix)

    def list_topic_segment_objects(self, topic: str) -> list[SegmentObjectKey]:
        """Every valid segment object of ``topic``, under all its topic ids and partitions: a
        broker-less reader knows the name, not the id. ``<topic>-`` also prefixes longer names
        (``a-`` lists ``a-b``'s keys), so the parsed topic is compared exactly."""
        validate_topic(topic)
        return [k for k in self._parsed_listing(f"{self.key_prefix}{topic}-") if k.topic == topic]

    def _parsed_listing(self, prefix: str) -> list[SegmentObjectKey]:
        return parse_listing(self._list_keys(prefix), self.key_prefix)

    def write_log_start_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        self._write_small(log_start_offset_key(self.key_prefix, topic_id_partition),
                          None if offset is None else encode_log_start_offset(offset))

    def read_log_start_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        key = log_start_offset_key(self.key_prefix, topic_id_partition)
        data = self._read_small(key)
        return None if data is None else decode_log_start_offset(data, key)

    def write_cleaner_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        self._write_small(cleaner_offset_key(self.key_prefix, topic_id_partition),
                          None if offset is None else encode_cleaner_offset(offset))

    def read_cleaner_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        key = cleaner_offset_key(self.key_prefix, topic_id_partition)
        data = self._read_small(key)
        return None if data is None else decode_cleaner_offset(data, key)

    def _write_small(self, key: str, body: bytes | None) -> None:
        if body is None:
            self._delete_keys([key])
        else:
            self._put_bytes(key, body)

    def _read_small(self, key: str) -> bytes | None:
        try:
            with self._get_range(key, 0, None) as stream:
                return stream.read(MAX_LOG_START_BYTES + 1)
        except RemoteResourceNotFoundException:
            return None

    def read_manifest(self, key: SegmentObjectKey | str) -> dict[str, Any]:
        name = key.key if isinstance(key, SegmentObjectKey) else key
        parsed = parse_segment_key(name, self.key_prefix)
        if parsed.suffix != MANIFEST_SUFFIX:
            raise InvalidKeyError(f"{name!r} is not a manifest key")
        with self._get_range(name, 0, None) as stream:
            # one byte more than a manifest may have: a huge object is refused, not read whole
            return parse_manifest(stream.read(MAX_MANIFEST_BYTES + 1))


class LimitedReader(io.RawIOBase):
    """Reads at most ``limit`` bytes (``None``: all) from ``raw`` and maps read errors through
    ``on_error``, so a reset in the middle of a body still surfaces as a tieredlog exception."""

    def __init__(
        self, raw: BinaryIO, limit: int | None, on_error: Callable[[Exception], BaseException] | None = None
    ) -> None:
        super().__init__()
        self._raw = raw
        self._left = limit
        self._on_error = on_error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer)
        want = len(view) if self._left is None else min(len(view), self._left)
        if want == 0:
            return 0
        try:
            data = self._raw.read(want)
        except Exception as exc:
            if self._on_error is None:
                raise
            raise self._on_error(exc) from exc
        n = len(data)
        view[:n] = data
        if self._left is not None:
            self._left -= n
        return n

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()
