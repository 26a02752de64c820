"""Opening the remote tier from a reader's ``path`` and options, with the broker's own RSMs, loaded by
their registered names (``s3``, ``fsspec``) as the broker loads them; any of them that can list
(:class:`tieredlog.rsm.ListableRemoteStorageManager`) serves the reader.

- ``s3://bucket/prefix`` (or ``s3a://``): the ``s3`` backend, configured
  with the option names of the broker's S3 backend (``storage.s3.endpoint.url``, ``storage.s3.region``,
  ``storage.s3.path.style.access.enabled``, ``storage.aws.access.key.id``,
  ``storage.aws.secret.access.key``, ``storage.aws.session.token``; without keys, the AWS chain).
  The path's ``prefix`` becomes ``key.prefix`` with a ``/`` appended; a broker whose ``key.prefix`` is
  not a folder (``cluster1-``) is read with ``path=s3://bucket`` and ``key.prefix=cluster1-``.
- ``file:///dir`` and every other fsspec URL: the ``fsspec`` backend (``storage.fsspec.options.*``
  passed through). LocalTieredStorage writes the same layout under its
  ``dir`` with no prefix, so ``file://<dir>`` reads the broker's default remote folder too.

A :class:`StorageSpec` holds only strings, so it pickles to the executors, which open their own RSM
once per Python worker (:func:`open_storage` caches by spec).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from fsspec.core import url_to_fs

from tieredlog.rsm.api import RemoteStorageException
from tieredlog.rsm.keys import InvalidKeyError, validate_key_prefix
from tieredlog.rsm.listing import ListableRemoteStorageManager
from tieredlog.rsm.registry import resolve_class

S3_OPTIONS = (
    "storage.s3.endpoint.url", "storage.s3.region", "storage.s3.path.style.access.enabled",
    "storage.aws.access.key.id", "storage.aws.secret.access.key", "storage.aws.session.token",
    "storage.s3.retry.max.attempts", "storage.s3.api.call.timeout.ms", "storage.s3.max.connections",
)
# The fsspec backend's options for the filesystem itself, passed through as the broker's are.
FSSPEC_OPTIONS_PREFIX = "storage.fsspec.options."
_S3_SCHEMES = ("s3", "s3a")


class StorageError(Exception):
    """The store cannot be opened. The message names options, never their secret values."""


@dataclass(frozen=True, slots=True)
class StorageSpec:
    backend: str  # the registered name of the RSM: "s3" or "fsspec"
    configs: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:  # plans and logs print partitions and readers: keep the keys out
        return f"StorageSpec({self.backend}, {sorted(k for k, _ in self.configs)})"


def storage_spec(path: str, options: Mapping[str, str]) -> StorageSpec:
    """``options`` with lower-case names, as Spark hands them over."""
    if not path:
        raise StorageError("option path is required (s3://bucket/prefix, file:///dir or any fsspec URL)")
    parts = urlsplit(path)
    explicit_prefix = options.get("key.prefix")
    if parts.scheme in _S3_SCHEMES:
        if not parts.netloc:
            raise StorageError(f"path {path!r} names no bucket")
        folder = parts.path.strip("/")
        prefix = explicit_prefix if explicit_prefix is not None else (f"{folder}/" if folder else "")
        configs = {"storage.s3.bucket.name": parts.netloc, "key.prefix": _checked_prefix(prefix)}
        configs.update({k: options[k] for k in S3_OPTIONS if options.get(k)})
        return StorageSpec("s3", tuple(sorted(configs.items())))
    configs = {"storage.fsspec.url": path, "key.prefix": _checked_prefix(explicit_prefix or "")}
    configs.update({k: v for k, v in options.items() if k.startswith(FSSPEC_OPTIONS_PREFIX)})
    return StorageSpec("fsspec", tuple(sorted(configs.items())))


def _checked_prefix(prefix: str) -> str:
    try:
        return validate_key_prefix(prefix)
    except InvalidKeyError as exc:
        raise StorageError(str(exc)) from None


_opened: dict[StorageSpec, ListableRemoteStorageManager] = {}
_lock = threading.Lock()


def open_storage(spec: StorageSpec) -> ListableRemoteStorageManager:
    """The configured RSM for ``spec``, opened once per process (S3's configure() costs a HeadBucket)."""
    with _lock:
        rsm = _opened.get(spec)
        if rsm is None:
            rsm = _configure(spec)
            _opened[spec] = rsm
        return rsm


def _configure(spec: StorageSpec) -> ListableRemoteStorageManager:
    configs = dict(spec.configs)
    if spec.backend != "s3":
        _require_local_folder(configs["storage.fsspec.url"])
    try:
        rsm = resolve_class(spec.backend)()
    except Exception as exc:
        raise StorageError(f"cannot load the {spec.backend} remote storage manager: {exc}") from None
    if not isinstance(rsm, ListableRemoteStorageManager):
        raise StorageError(f"the {spec.backend} remote storage manager cannot list segments")
    try:
        rsm.configure(configs)
    except RemoteStorageException as exc:
        # The RSM's messages name the broker's rsm.config.* keys; a reader's options have no prefix.
        raise StorageError(str(exc).replace("rsm.config.", "")) from None
    return rsm


def _require_local_folder(url: str) -> None:
    """The fsspec RSM creates a missing local root (it is a broker's store); a reader must not."""
    scheme = urlsplit(url).scheme
    if scheme not in ("", "file", "local"):
        return
    fs, root = url_to_fs(url)
    if not fs.isdir(root):
        raise StorageError(f"path {url!r} is not a folder")
