"""LocalTieredStorage: the built-in RemoteStorageManager that keeps remote segments in a local folder.

Key layout (the same one the object-store backends use, so the Spark reader sees one shape)::

    <dir>/<topic>-<topicId>/<partition>/<20-digit start offset>-<segment id>.<suffix>

``topicId`` and ``segment id`` are Kafka's string form of a Uuid (URL-safe base64 without padding,
22 characters). The suffixes are those of Kafka's own LocalTieredStorage: ``.log``, ``.index``,
``.timeindex``, ``.txnindex`` (only when the local segment had one), ``.leader_epoch_checkpoint``,
``.snapshot``. A ``.manifest`` JSON object is written last: it is the commit marker external readers
rely on, so a segment without a manifest is an interrupted or failed copy and must be ignored.

Every file is written to a unique temporary name and renamed into place, so a reader never sees a
half-written object, and concurrent attempts never write into each other's temporary files.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Mapping

from tieredlog.atomic_file import atomic_copy, fsync_dir
from tieredlog.rsm.api import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from tieredlog.rsm.keys import uuid_from_base64, uuid_to_base64  # noqa: F401 - tools import them from here

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
LOG_SUFFIX = ".log"
MANIFEST_SUFFIX = ".manifest"
# IndexType -> file suffix, as Kafka's LocalTieredStorage names them.
INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: ".index",
    IndexType.TIMESTAMP: ".timeindex",
    IndexType.TRANSACTION: ".txnindex",
    IndexType.LEADER_EPOCH: ".leader_epoch_checkpoint",
    IndexType.PRODUCER_SNAPSHOT: ".snapshot",
}
# Order of the copy, as Kafka's: data first, then indexes; the manifest comes after all of them.
COPY_ORDER = (LOG_SUFFIX, ".index", ".timeindex", ".txnindex", ".leader_epoch_checkpoint", ".snapshot")

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_SEGMENT_FILE = re.compile(r"^(\d{20})-([a-zA-Z0-9_-]{22})(\.[a-z_]+)$")
_MAX_MANIFEST_BYTES = 1 << 20  # a manifest is about 1 KiB


def validate_topic_name(topic: str) -> str:
    """Kafka's legal topic names; anything else must never become part of a path."""
    if not isinstance(topic, str) or topic in (".", "..") or not _LEGAL_TOPIC.match(topic):
        raise RemoteStorageException(f"illegal topic name {topic!r}")
    return topic


def partition_key_prefix(tp: TopicIdPartition) -> str:
    """``<topic>-<topicId>/<partition>``: the folder (or key prefix) of one partition's segments."""
    validate_topic_name(tp.topic)
    if not isinstance(tp.partition, int) or isinstance(tp.partition, bool) or tp.partition < 0:
        raise RemoteStorageException(f"illegal partition {tp.partition!r}")
    return f"{tp.topic}-{uuid_to_base64(tp.topic_id)}/{tp.partition}"


def segment_file_stem(md: RemoteLogSegmentMetadata) -> str:
    return f"{md.start_offset:020d}-{uuid_to_base64(md.remote_log_segment_id.id)}"


def segment_key(md: RemoteLogSegmentMetadata, suffix: str) -> str:
    """The object key of one file of a segment, relative to the storage root."""
    return f"{partition_key_prefix(md.topic_id_partition)}/{segment_file_stem(md)}{suffix}"


def build_manifest(md: RemoteLogSegmentMetadata, files: Mapping[str, int]) -> dict:
    """The commit marker: what a reader needs to use the segment without the metadata topic.
    ``files`` maps suffix -> size in bytes of every object written for the segment."""
    tp = md.topic_id_partition
    stem = segment_file_stem(md)
    return {
        "version": MANIFEST_VERSION,
        "topic": tp.topic,
        "topic_id": uuid_to_base64(tp.topic_id),
        "partition": tp.partition,
        "segment_id": uuid_to_base64(md.remote_log_segment_id.id),
        "start_offset": md.start_offset,
        "end_offset": md.end_offset,
        "max_timestamp_ms": md.max_timestamp_ms,
        "broker_id": md.broker_id,
        "event_timestamp_ms": md.event_timestamp_ms,
        "segment_size_in_bytes": md.segment_size_in_bytes,
        "segment_leader_epochs": [[e, o] for e, o in sorted(md.segment_leader_epochs.items())],
        "tx_index_present": ".txnindex" in files,
        "files": {suffix.lstrip("."): {"name": stem + suffix, "size": size} for suffix, size in files.items()},
    }


@dataclass(frozen=True, slots=True)
class LocalTieredStorageEvent:
    """One operation, for tests that assert exact copy / fetch / delete counts (as Kafka's
    LocalTieredStorageHistory does)."""

    type: str  # COPY_SEGMENT, FETCH_SEGMENT, FETCH_<INDEX TYPE>, DELETE_SEGMENT
    broker_id: int
    topic_id_partition: TopicIdPartition
    segment_id: uuid.UUID
    start_offset: int


class _BoundedReader(io.RawIOBase):
    """Reads at most ``remaining`` bytes of an open file from its current position, so a ranged
    fetch never pulls a whole segment into memory."""

    def __init__(self, f: BinaryIO, remaining: int):
        self._f = f
        self._remaining = max(0, remaining)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._remaining <= 0:
            return 0
        view = memoryview(b)[: min(len(b), self._remaining)]
        n = self._f.readinto(view)
        n = n or 0
        self._remaining -= n
        return n

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


class LocalTieredStorage(RemoteStorageManager):
    """Remote storage in a local folder. Configs (``rsm.config.`` stripped): ``dir`` (root folder;
    a temporary folder when unset, as Kafka does), ``delete.enable`` (true; false keeps the data,
    simulating eventually consistent deletes), ``delete.on.close`` (false), ``broker.id``."""

    def __init__(self, dir: str | os.PathLike | None = None):
        self._root: Path | None = Path(dir) if dir is not None else None
        self._delete_enable = True
        self._delete_on_close = False
        self._broker_id = -1
        self._listeners: list[Callable[[LocalTieredStorageEvent], None]] = []
        self._lock = threading.Lock()

    # -- configuration -----------------------------------------------------------------------

    def configure(self, configs: Mapping[str, object]) -> None:
        if configs.get("dir"):
            self._root = Path(str(configs["dir"]))
        self._delete_enable = _bool(configs.get("delete.enable", True))
        self._delete_on_close = _bool(configs.get("delete.on.close", False))
        if configs.get("broker.id") is not None:
            self._broker_id = int(configs["broker.id"])  # type: ignore[arg-type]

    @property
    def root(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="tieredlog-remote-"))
                log.info("rsm.config.dir is not set: using %s", self._root)
            self._root.mkdir(parents=True, exist_ok=True)
            return self._root

    def add_listener(self, listener: Callable[[LocalTieredStorageEvent], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    # -- paths ---------------------------------------------------------------------------------

    def partition_dir(self, tp: TopicIdPartition) -> Path:
        return self.root / partition_key_prefix(tp)

    def segment_path(self, md: RemoteLogSegmentMetadata, suffix: str) -> Path:
        return self.root / segment_key(md, suffix)

    # -- RemoteStorageManager ----------------------------------------------------------------

    def copy_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, log_segment_data: LogSegmentData
    ) -> CustomMetadata | None:
        md, data = remote_log_segment_metadata, log_segment_data
        pdir = self.partition_dir(md.topic_id_partition)
        sources: dict[str, Path | bytes] = {
            LOG_SUFFIX: Path(data.log_segment),
            ".index": Path(data.offset_index),
            ".timeindex": Path(data.time_index),
            ".leader_epoch_checkpoint": bytes(data.leader_epoch_index),
            ".snapshot": Path(data.producer_snapshot_index),
        }
        if data.transaction_index is not None and Path(data.transaction_index).exists():
            sources[".txnindex"] = Path(data.transaction_index)
        written: list[Path] = []
        sizes: dict[str, int] = {}
        try:
            pdir.mkdir(parents=True, exist_ok=True)
            # Idempotent overwrite: a stale manifest from an earlier attempt with this id must not
            # vouch for files this attempt is about to replace.
            _unlink(self.segment_path(md, MANIFEST_SUFFIX))
            for suffix in COPY_ORDER:
                if suffix not in sources:
                    # an earlier attempt with this id may have had one: it must not survive
                    _unlink(self.segment_path(md, suffix))
                    continue
                dest = self.segment_path(md, suffix)
                sizes[suffix] = _atomic_write(dest, sources[suffix])
                written.append(dest)
            manifest = json.dumps(build_manifest(md, sizes), sort_keys=True).encode()
            dest = self.segment_path(md, MANIFEST_SUFFIX)
            _atomic_write(dest, manifest)
            written.append(dest)
            fsync_dir(pdir)
        except Exception as exc:
            # As Kafka: files of a failed attempt are removed so they do not linger as orphans.
            for path in written:
                _unlink(path)
            if isinstance(exc, RemoteStorageException):
                raise
            raise RemoteStorageException(f"copy of segment {segment_file_stem(md)} failed: {exc}") from exc
        self._emit("COPY_SEGMENT", md)
        return None

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        md = remote_log_segment_metadata
        if start_position < 0:
            raise ValueError(f"start_position {start_position} must be >= 0")
        if end_position is not None and end_position < start_position:
            raise ValueError(f"end_position {end_position} must be >= start_position {start_position}")
        f = self._open(self.segment_path(md, LOG_SUFFIX))
        try:
            f.seek(start_position)
        except Exception:
            f.close()
            raise
        self._emit("FETCH_SEGMENT", md)
        if end_position is None:
            return f
        return io.BufferedReader(_BoundedReader(f, end_position - start_position + 1))  # type: ignore[return-value]

    def fetch_index(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        md = remote_log_segment_metadata
        f = self._open(self.segment_path(md, INDEX_SUFFIXES[index_type]))
        self._emit(f"FETCH_{index_type.value}_INDEX", md)
        return f

    def delete_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        md = remote_log_segment_metadata
        if not self._delete_enable:
            return
        # The manifest goes first: from then on no reader treats the segment as committed.
        try:
            for suffix in (MANIFEST_SUFFIX, *COPY_ORDER):
                _unlink(self.segment_path(md, suffix))
        except OSError as exc:
            raise RemoteStorageException(f"delete of segment {segment_file_stem(md)} failed: {exc}") from exc
        # The partition's last segment gone: remove its folder and then the topic's, when empty, so a
        # deleted topic leaves nothing behind. rmdir refuses a folder that is not empty, so a segment
        # being copied there meanwhile (its temporary file is already in it) keeps the folder; a copy
        # that finds its folder gone recreates it (_atomic_write).
        pdir = self.segment_path(md, MANIFEST_SUFFIX).parent
        for folder in (pdir, pdir.parent):
            if folder == self.root:
                break
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (or already gone): leave it and its parent
        self._emit("DELETE_SEGMENT", md)

    def close(self) -> None:
        if self._delete_on_close and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    # -- listing (tools, tests) --------------------------------------------------------------

    def list_manifests(self, tp: TopicIdPartition) -> list[dict]:
        """The committed segments of a partition (those with a manifest), by start offset."""
        pdir = self.partition_dir(tp)
        out = []
        for path in sorted(pdir.glob("*" + MANIFEST_SUFFIX)) if pdir.is_dir() else ():
            if not _SEGMENT_FILE.match(path.name):
                continue
            try:
                if path.stat().st_size > _MAX_MANIFEST_BYTES:
                    raise ValueError(f"over {_MAX_MANIFEST_BYTES} bytes")
                body = json.loads(path.read_bytes())
                if not isinstance(body, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError, RecursionError) as exc:
                # a damaged commit marker: that segment is not listed as committed
                log.warning("ignoring unreadable manifest %s: %s", path, exc)
                continue
            out.append(body)
        return out

    def iter_segment_files(self) -> Iterator[Path]:
        """Every segment object under the root (used by tests to check nothing is left behind).
        os.walk, not rglob: a folder removed by a concurrent delete is skipped, not an error."""
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                if _SEGMENT_FILE.match(name):
                    yield Path(folder) / name

    # -- helpers -------------------------------------------------------------------------------

    def _open(self, path: Path) -> BinaryIO:
        try:
            return open(path, "rb")
        except FileNotFoundError:
            raise RemoteResourceNotFoundException(f"{path.name} not found in remote storage") from None
        except OSError as exc:
            raise RemoteStorageException(f"cannot open {path.name}: {exc}") from exc

    def _emit(self, type_: str, md: RemoteLogSegmentMetadata) -> None:
        listeners = self._listeners
        if not listeners:
            return
        event = LocalTieredStorageEvent(
            type_, self._broker_id, md.topic_id_partition, md.remote_log_segment_id.id, md.start_offset
        )
        for listener in list(listeners):
            listener(event)


def _bool(v: object) -> bool:
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return bool(v)


def _atomic_write(dest: Path, source: Path | bytes) -> int:
    """Write ``source`` (a file to copy, or bytes) to ``dest`` through a temporary file of its own
    (concurrent attempts of one segment never share one), fsynced; the caller fsyncs the folder once
    for all the segment's files. Returns the size written."""
    attempts = 0
    while True:
        try:
            if isinstance(source, (bytes, bytearray, memoryview)):
                return atomic_copy(dest, io.BytesIO(source), sync_dir=False, unique_tmp=True)
            try:
                src = open(source, "rb")
            except FileNotFoundError:
                raise RemoteStorageException(f"local file {source} does not exist") from None
            with src:
                return atomic_copy(dest, src, sync_dir=False, unique_tmp=True)
        except FileNotFoundError:
            # the folder is missing, or a concurrent delete of the partition's last segment removed it
            attempts += 1
            if attempts == 10:
                raise
            dest.parent.mkdir(parents=True, exist_ok=True)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
