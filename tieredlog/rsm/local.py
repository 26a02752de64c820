"""LocalTieredStorage: the built-in RemoteStorageManager that keeps remote segments in a local folder.

Key layout and manifest (the object-store backends', from the same code in ``keys.py`` and
``objectstore.py``, so a broker-less reader sees one shape)::

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
import logging
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Mapping

from tieredlog.atomic_file import atomic_copy, atomic_copy_file, atomic_write, fsync_dir
from tieredlog.formats.manifest import MAX_MANIFEST_BYTES
from tieredlog.rsm import keys
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
from tieredlog.rsm.config import config_int
from tieredlog.rsm.keys import uuid_from_base64, uuid_to_base64  # noqa: F401 - tools import them from here
from tieredlog.rsm.listing import (
    MAX_LOG_START_BYTES,
    ListableRemoteStorageManager,
    decode_cleaner_offset,
    decode_log_start_offset,
    encode_cleaner_offset,
    encode_log_start_offset,
)
from tieredlog.rsm.objectstore import build_manifest, parse_manifest

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)

# The object-store backends' layout and manifest (tieredlog.rsm.keys, .objectstore) with a dot
# before each suffix, as Kafka's LocalTieredStorage names its files.
LOG_SUFFIX = "." + keys.LOG_SUFFIX
MANIFEST_SUFFIX = "." + keys.MANIFEST_SUFFIX
INDEX_SUFFIXES: dict[IndexType, str] = {t: "." + s for t, s in keys.INDEX_SUFFIXES.items()}
# Order of the copy, as Kafka's: data first, then indexes; the manifest comes after all of them.
COPY_ORDER = (LOG_SUFFIX, ".index", ".timeindex", ".txnindex", ".leader_epoch_checkpoint", ".snapshot")


def _checked(build: Callable[..., str], *args: object) -> str:
    try:
        return build(*args)
    except keys.InvalidKeyError as exc:  # a name that must never become part of a path
        raise RemoteStorageException(str(exc)) from None


def partition_key_prefix(tp: TopicIdPartition) -> str:
    """``<topic>-<topicId>/<partition>``: the folder of one partition's segments."""
    return _checked(keys.partition_prefix, "", tp).rstrip("/")


def segment_file_stem(md: RemoteLogSegmentMetadata) -> str:
    return keys.segment_stem(md)


def segment_key(md: RemoteLogSegmentMetadata, suffix: str) -> str:
    """The object key of one file of a segment, relative to the storage root (``suffix`` with its dot)."""
    return _checked(keys.segment_key, "", md, suffix[1:])


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

    def __init__(self, f: io.BufferedReader, remaining: int):
        self._f = f
        self._remaining = max(0, remaining)

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int:
        if self._remaining <= 0:
            return 0
        view = memoryview(b)
        view = view[: min(len(view), self._remaining)]
        n = self._f.readinto(view)
        n = n or 0
        self._remaining -= n
        return n

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


class LocalTieredStorage(ListableRemoteStorageManager):
    """Remote storage in a local folder. Configs (``rsm.config.`` stripped): ``dir`` (root folder;
    a temporary folder when unset, as Kafka does), ``delete.enable`` (true; false keeps the data,
    simulating eventually consistent deletes), ``delete.on.close`` (false), ``broker.id``."""

    def __init__(self, dir: str | os.PathLike[str] | None = None):
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
            self._broker_id = config_int(configs["broker.id"])

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
            manifest = build_manifest(md, {suffix[1:]: size for suffix, size in sizes.items()})
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
        check_positions(start_position, end_position)
        f = self._open(self.segment_path(md, LOG_SUFFIX))
        try:
            f.seek(start_position)
        except Exception:
            f.close()
            raise
        self._emit("FETCH_SEGMENT", md)
        if end_position is None:
            return f
        return io.BufferedReader(_BoundedReader(f, end_position - start_position + 1))

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

    # -- listing (ListableRemoteStorageManager; tools, tests) ----------------------------------

    def list_segment_objects(self, topic_id_partition: TopicIdPartition | None = None) -> list[keys.SegmentObjectKey]:
        prefix = "" if topic_id_partition is None else keys.partition_prefix("", topic_id_partition)
        return keys.parse_listing(self._keys_under(prefix))

    def list_topic_segment_objects(self, topic: str) -> list[keys.SegmentObjectKey]:
        keys.validate_topic(topic)
        return [k for k in keys.parse_listing(self._keys_under(f"{topic}-")) if k.topic == topic]

    def read_manifest(self, key: keys.SegmentObjectKey | str) -> dict[str, Any]:
        name = key.key if isinstance(key, keys.SegmentObjectKey) else key
        if keys.parse_segment_key(name).suffix != keys.MANIFEST_SUFFIX:
            raise keys.InvalidKeyError(f"{name!r} is not a manifest key")
        with self._open(self.root / name) as f:
            # one byte more than a manifest may have: a huge file is refused, not read whole
            return parse_manifest(f.read(MAX_MANIFEST_BYTES + 1))

    def write_log_start_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        self._write_small(_checked(keys.log_start_offset_key, "", topic_id_partition), topic_id_partition,
                          None if offset is None else encode_log_start_offset(offset))

    def read_log_start_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        name = _checked(keys.log_start_offset_key, "", topic_id_partition)
        data = self._read_small(name)
        return None if data is None else decode_log_start_offset(data, name)

    def write_cleaner_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        self._write_small(_checked(keys.cleaner_offset_key, "", topic_id_partition), topic_id_partition,
                          None if offset is None else encode_cleaner_offset(offset))

    def read_cleaner_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        name = _checked(keys.cleaner_offset_key, "", topic_id_partition)
        data = self._read_small(name)
        return None if data is None else decode_cleaner_offset(data, name)

    def _write_small(self, name: str, topic_id_partition: TopicIdPartition, body: bytes | None) -> None:
        path = self.root / name
        try:
            if body is None:
                _unlink(path)
                for folder in (path.parent, path.parent.parent):  # as the last segment's delete does
                    if folder == self.root:
                        break
                    try:
                        folder.rmdir()
                    except OSError:
                        break
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, body)
        except OSError as exc:
            raise RemoteStorageException(f"cannot write {path.name} of {topic_id_partition}: {exc}") from exc

    def _read_small(self, name: str) -> bytes | None:
        try:
            with self._open(self.root / name) as f:
                return f.read(MAX_LOG_START_BYTES + 1)
        except RemoteResourceNotFoundException:
            return None

    def _keys_under(self, prefix: str) -> Iterator[str]:
        """The keys (paths under the root, ``/``-separated) of the segment files whose key starts with
        ``prefix``; temporary files of copies in progress are not segment files. Only folders the
        prefix can still match are entered."""
        root = self.root
        for folder, dirs, files in os.walk(root):
            rel = Path(folder).relative_to(root).as_posix()
            rel = "" if rel == "." else rel + "/"
            dirs[:] = [d for d in dirs if (rel + d + "/").startswith(prefix) or prefix.startswith(rel + d + "/")]
            for name in files:
                if keys.is_segment_file_name(name) and (rel + name).startswith(prefix):
                    yield rel + name

    def list_manifests(self, tp: TopicIdPartition) -> list[dict[str, Any]]:
        """The committed segments of a partition (those with a manifest), by start offset."""
        pdir = self.partition_dir(tp)
        out = []
        for path in sorted(pdir.glob("*" + MANIFEST_SUFFIX)) if pdir.is_dir() else ():
            if not keys.is_segment_file_name(path.name):
                continue
            try:
                if path.stat().st_size > MAX_MANIFEST_BYTES:  # never read a huge file to refuse it
                    raise RemoteStorageException(f"segment manifest is over {MAX_MANIFEST_BYTES} bytes")
                body = parse_manifest(path.read_bytes())
            except (OSError, RemoteStorageException) as exc:
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
                if keys.is_segment_file_name(name):
                    yield Path(folder) / name

    # -- helpers -------------------------------------------------------------------------------

    def _open(self, path: Path) -> io.BufferedReader:
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
                src = open(source, "rb", buffering=0)
            except FileNotFoundError:
                raise RemoteStorageException(f"local file {source} does not exist") from None
            with src:
                return atomic_copy_file(dest, src, sync_dir=False, unique_tmp=True)
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
