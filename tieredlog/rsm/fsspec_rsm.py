"""RemoteStorageManager over any fsspec file system, with the same key layout as the S3 backend.

Configs (given here without the broker's ``rsm.config.`` prefix):

- ``storage.fsspec.url`` (required): the root, e.g. ``file:///var/lib/tiered``, ``memory://tiered``,
  ``s3://bucket/prefix`` (s3fs), ``gs://bucket/p`` (gcsfs), ``abfs://container/p`` (adlfs),
  ``hdfs://namenode:8020/tiered`` (pyarrow's HadoopFileSystem), ``webhdfs://namenode:9870/tiered``.
- ``storage.fsspec.options.<name>``: storage options handed to the file system. A dot nests:
  ``storage.fsspec.options.client_kwargs.region_name=us-east-1`` gives
  ``client_kwargs={"region_name": "us-east-1"}``. Strings ``true``/``false`` become booleans and
  integer strings become ints. Option values are never logged.
- ``key.prefix``: prepended to every key below the root, as for S3.

HDFS and webHDFS go through this generic path (fsspec + pyarrow / webhdfs); they cannot run in our
test environment, so they are supported but not tested here. gs:// and abfs:// need ``gcsfs`` /
``adlfs`` installed. What is tested: ``file://``, ``memory://`` and ``s3://`` (s3fs against moto).
"""

from __future__ import annotations

import io
import logging
import posixpath
import threading
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping

import fsspec
from fsspec.core import url_to_fs

from tieredlog.rsm.api import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tieredlog.rsm.config import ConfigReader, RemoteStorageConfigError, validated_prefix
from tieredlog.rsm.objectstore import LimitedReader, ObjectStoreRemoteStorageManager

log = logging.getLogger(__name__)

OPTIONS_PREFIX = "storage.fsspec.options."
_OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"}
# Bounded ranges up to this size are read with one request into memory instead of a stream.
MAX_RANGE_IN_MEMORY = 64 * 1024 * 1024
_RETRIABLE_ERRNOS = {104, 110, 111, 113}  # ECONNRESET, ETIMEDOUT, ECONNREFUSED, EHOSTUNREACH


def map_fs_error(exc: BaseException, what: str) -> RemoteStorageException:
    if isinstance(exc, RemoteStorageException):
        return exc
    text = f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())}"
    if isinstance(exc, FileNotFoundError):
        return RemoteResourceNotFoundException(text)
    if isinstance(exc, (ConnectionError, TimeoutError)) or (
            isinstance(exc, OSError) and exc.errno in _RETRIABLE_ERRNOS):
        return RetriableRemoteStorageException(text)
    return RemoteStorageException(text)


def _coerce(value: object) -> object:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered.lstrip("-").isdigit():
            return int(lowered)
    return value


def storage_options(configs: Mapping[str, object]) -> dict[str, object]:
    """``storage.fsspec.options.*`` as a nested dict (dots nest)."""
    options: dict[str, object] = {}
    for name, value in sorted(ConfigReader(configs).with_prefix(OPTIONS_PREFIX).items()):
        target = options
        *parents, leaf = name.split(".")
        for parent in parents:
            child = target.setdefault(parent, {})
            if not isinstance(child, dict):
                raise RemoteStorageConfigError(
                    f"invalid config rsm.config.{OPTIONS_PREFIX}{name}: {parent!r} is both a value and a group")
            target = child
        target[leaf] = _coerce(value)
    return options


class FsspecRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """Thread safe as far as the file system is; fsspec's local, memory and s3fs ones are."""

    def __init__(self) -> None:
        self.fs: fsspec.AbstractFileSystem | None = None
        self.root = ""
        self.key_prefix = ""
        self.url = ""
        self._mkdir_lock = threading.Lock()

    def configure(self, configs: Mapping[str, object]) -> None:
        reader = ConfigReader(configs)
        self.url = reader.string("storage.fsspec.url")
        self.key_prefix = validated_prefix(reader)
        options = storage_options(configs)
        protocol = self.url.split("://", 1)[0] if "://" in self.url else "file"
        if protocol in ("file", "local"):
            options.setdefault("auto_mkdir", True)
        try:
            self.fs, root = url_to_fs(self.url, **options)
        except (ImportError, ValueError) as exc:
            raise RemoteStorageConfigError(
                f"invalid config rsm.config.storage.fsspec.url={self.url!r}: {' '.join(str(exc).split())}") from None
        except Exception as exc:
            raise RemoteStorageConfigError(
                f"cannot open rsm.config.storage.fsspec.url={self.url!r}: {type(exc).__name__}") from None
        self.root = root.rstrip("/")
        try:
            if protocol in _OBJECT_STORES:
                # Object stores have no folders, but the bucket or container must exist.
                bucket = self.root.split("/", 1)[0]
                if not bucket or not self.fs.exists(bucket):
                    raise RemoteStorageConfigError(
                        f"rsm.config.storage.fsspec.url={self.url!r}: bucket {bucket!r} does not exist")
            else:
                self.fs.makedirs(self.root or "/", exist_ok=True)
        except RemoteStorageException:
            raise
        except Exception as exc:
            raise RemoteStorageConfigError(
                f"cannot reach rsm.config.storage.fsspec.url={self.url!r}: {map_fs_error(exc, 'exists')}") from None
        log.info("fsspec remote storage at %s (protocol %s), prefix %r", self.url, protocol, self.key_prefix)

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    def _require_fs(self) -> fsspec.AbstractFileSystem:
        if self.fs is None:
            raise RemoteStorageException("FsspecRemoteStorageManager used before configure()")
        return self.fs

    def _put_bytes(self, key: str, data: bytes) -> None:
        fs = self._require_fs()
        try:
            fs.pipe_file(self._path(key), data)
        except Exception as exc:
            raise map_fs_error(exc, f"write {key}") from exc

    def _put_file(self, key: str, path: Path) -> None:
        fs = self._require_fs()
        try:
            # put_file streams (s3fs goes multipart for large files); it never loads the file at once.
            fs.put_file(str(path), self._path(key))
        except Exception as exc:
            raise map_fs_error(exc, f"write {key}") from exc

    def _get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        fs = self._require_fs()
        if end is not None and end - start < MAX_RANGE_IN_MEMORY:
            try:
                return io.BytesIO(fs.cat_file(self._path(key), start=start, end=end + 1))
            except Exception as exc:
                raise map_fs_error(exc, f"read {key} bytes {start}-{end}") from exc
        try:
            f = fs.open(self._path(key), "rb")
        except Exception as exc:
            raise map_fs_error(exc, f"open {key}") from exc
        try:
            f.seek(start)
        except Exception as exc:
            f.close()
            raise map_fs_error(exc, f"seek {key} to {start}") from exc
        limit = None if end is None else end - start + 1
        return io.BufferedReader(LimitedReader(f, limit, lambda e: map_fs_error(e, f"read {key}")),
                                 buffer_size=256 * 1024)

    def _delete_keys(self, keys: list[str]) -> None:
        fs = self._require_fs()
        for key in keys:
            try:
                fs.rm_file(self._path(key))
            except FileNotFoundError:
                continue  # delete is idempotent
            except Exception as exc:
                raise map_fs_error(exc, f"delete {key}") from exc

    def _list_keys(self, prefix: str) -> Iterator[str]:
        fs = self._require_fs()
        base = self._path("")
        # find() wants a folder; list the deepest folder of the prefix and filter the rest.
        folder = posixpath.dirname(prefix.rstrip("/")) if not prefix.endswith("/") else prefix.rstrip("/")
        start = self._path(folder) if folder else (self.root or "")
        try:
            paths = fs.find(start) if (not folder or fs.exists(start)) else []
        except FileNotFoundError:
            return
        except Exception as exc:
            raise map_fs_error(exc, f"list {prefix}") from exc
        root = fs._strip_protocol(base).rstrip("/")
        for path in paths:
            path = fs._strip_protocol(path)
            key = path[len(root) + 1:] if root else path.lstrip("/")
            if key.startswith(prefix):
                yield key

    def close(self) -> None:
        self.fs = None
