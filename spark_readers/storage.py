"""Opening the remote tier from a reader's options, with the broker's own loader
(:func:`tieredlog.rsm.registry.load_remote_storage_manager`); any RSM that can list
(:class:`tieredlog.rsm.ListableRemoteStorageManager`) serves the reader, built-in or plugin, and with
``metadataSource=brokers`` any RSM at all (:mod:`spark_readers.remote_log_metadata`).

In the broker's words: ``remote.log.storage.manager.class.name`` (a registered name such as ``s3`` or
``chunked``, or ``module:Class``), ``remote.log.storage.manager.class.path`` and every ``rsm.config.*``
key, exactly as in the broker's properties, so the file that configures the broker configures the
reader. The values of keys that look secret are masked in every message.

The short form for the built-in backends is ``path``:

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

import re
import threading
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from fsspec.core import url_to_fs

from tieredlog.rsm.api import RemoteStorageManager
from tieredlog.rsm.keys import InvalidKeyError, validate_key_prefix
from tieredlog.rsm.registry import (
    CLASS_NAME_CONFIG,
    CLASS_PATH_CONFIG,
    DEFAULT_IMPL_PREFIX,
    PluginLoadError,
    load_remote_storage_manager,
)

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


# Keys whose values are never shown: credentials and encryption keys of any backend or plugin.
_SECRET_KEY = re.compile(r"secret|password|passwd|token|credential|private|jaas|(^|\.)keys?\.", re.IGNORECASE)
_NOT_SECRET = ("key.prefix",)


@dataclass(frozen=True, slots=True)
class StorageSpec:
    backend: str  # remote.log.storage.manager.class.name: "s3", "fsspec", a plugin's name or module:Class
    configs: tuple[tuple[str, str], ...]
    class_path: str | None = None
    # the options were the broker's rsm.config.* keys (messages name them so), not the short form's
    broker_words: bool = False

    def __repr__(self) -> str:  # plans and logs print partitions and readers: keep the keys out
        return f"StorageSpec({self.backend}, {sorted(k for k, _ in self.configs)})"


def is_secret(key: str) -> bool:
    return key not in _NOT_SECRET and bool(_SECRET_KEY.search(key))


def mask_secrets(text: str, configs: Mapping[str, object]) -> str:
    """``text`` with the value of every secret-looking config replaced by ``[hidden]``."""
    for key, value in configs.items():
        value = str(value)
        if is_secret(key) and len(value) >= 4:
            text = text.replace(value, "[hidden]")
    return text


def storage_spec(path: str, options: Mapping[str, str]) -> StorageSpec:
    """``options`` with lower-case names, as Spark hands them over, except ``rsm.config.*`` keys, which
    keep the case they were given in (Python callers; Spark lower-cases every option name)."""
    class_name = (options.get(CLASS_NAME_CONFIG) or "").strip()
    if class_name:
        if path:
            raise StorageError(f"set either path or {CLASS_NAME_CONFIG} with rsm.config.* options, not both")
        configs = {k[len(DEFAULT_IMPL_PREFIX):]: v for k, v in options.items()
                   if k.startswith(DEFAULT_IMPL_PREFIX) and len(k) > len(DEFAULT_IMPL_PREFIX)}
        return StorageSpec(class_name, tuple(sorted(configs.items())), options.get(CLASS_PATH_CONFIG) or None,
                           broker_words=True)
    if not path:
        raise StorageError(f"option path (s3://bucket/prefix, file:///dir or any fsspec URL) or {CLASS_NAME_CONFIG} "
                           "with the broker's rsm.config.* options is required")
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


_opened: dict[StorageSpec, RemoteStorageManager] = {}
_lock = threading.Lock()


def open_storage(spec: StorageSpec) -> RemoteStorageManager:
    """The configured RSM for ``spec``, opened once per process (S3's configure() costs a HeadBucket)."""
    with _lock:
        rsm = _opened.get(spec)
        if rsm is None:
            rsm = _configure(spec)
            _opened[spec] = rsm
        return rsm


def _configure(spec: StorageSpec) -> RemoteStorageManager:
    configs = dict(spec.configs)
    if not spec.broker_words and spec.backend == "fsspec":
        _require_local_folder(configs["storage.fsspec.url"])
    try:
        rsm = load_remote_storage_manager(spec.backend, spec.class_path, configs)
    except PluginLoadError as exc:
        text = mask_secrets(str(exc), configs)
        # The RSM's messages name the broker's rsm.config.* keys; the short form's options have no prefix.
        raise StorageError(text if spec.broker_words else text.replace("rsm.config.", "")) from None
    return rsm


def _require_local_folder(url: str) -> None:
    """The fsspec RSM creates a missing local root (it is a broker's store); a reader must not."""
    scheme = urlsplit(url).scheme
    if scheme not in ("", "file", "local"):
        return
    fs, root = url_to_fs(url)
    if not fs.isdir(root):
        raise StorageError(f"path {url!r} is not a folder")
